"""The kinds mnemostore ships (`mnemostore.kinds.workflow`, `.alma`): declared through the public
mechanism only, their values checked naming the field, and stored, filtered, incremented and
searched on every built-in backend and the LMDB example, which know nothing about them; copies,
archives, re-embedding and `info` carry them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.copy_data import BACKENDS, DIMENSION, fresh_url
from tests.postgres_server import postgres_server
from tests.seed_kinds import lmdb_backend, seed_kinds

import mnemostore
from mnemostore import ValidationError
from mnemostore.core.capabilities import Capability
from mnemostore.kinds.alma import DomainKnowledge, SessionHandoff, UserPreference
from mnemostore.kinds.workflow import RESULTS, ArtifactRef, WorkflowOutcome
from mnemostore.migrations import reembed
from mnemostore.migrations.archive import export_archive, import_archive
from mnemostore.migrations.copying import copy
from mnemostore.testing.factories import vectors

__all__ = ["postgres_server"]

SEED_KINDS = ("workflow_outcome", "artifact_ref", "user_preference", "domain_knowledge", "session_handoff")
SHA = "sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def seeds() -> Iterator[None]:
    with seed_kinds():
        yield


@pytest.fixture
def url_of(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], str]]:
    """A function: backend name -> the URL of a fresh, empty store of it (the LMDB example too)."""
    with ExitStack() as stack:
        registered: list[str] = []

        def url(backend: str) -> str:
            if backend != "lmdb":
                return fresh_url(backend, tmp_path, request)
            if not registered:
                registered.append(stack.enter_context(lmdb_backend()))
            return f"lmdb://{tmp_path / f'lmdb-{uuid.uuid4().hex[:8]}'}"

        yield url


def test_the_shipped_kinds_are_ordinary_registered_kinds() -> None:
    from mnemostore.core.kinds import kind_names

    assert set(SEED_KINDS) <= set(kind_names())
    assert WorkflowOutcome.filterable["workflow_id"] is str and WorkflowOutcome.filterable["node_count"] is int
    assert WorkflowOutcome.incrementable == {"node_count"}
    assert DomainKnowledge.filterable["last_verified"] is datetime


@pytest.mark.parametrize(("cls", "values", "message"), [
    (WorkflowOutcome, {"result": "sucess"}, "result: must be one of success, failure, partial, cancelled, timeout"),
    (WorkflowOutcome, {"workflow_id": ""}, "workflow_id: String should have at least 1 character"),
    (WorkflowOutcome, {"duration_seconds": -1.0}, "duration_seconds: Input should be greater than or equal to 0"),
    (WorkflowOutcome, {"duration_seconds": float("inf")}, "duration_seconds: inf is not a finite number"),
    (WorkflowOutcome, {"summary": "a\x00b"}, "summary: string contains a NUL"),
    (WorkflowOutcome, {"strategies_used": "retry"}, "strategies_used: Input should be a valid list"),
    (ArtifactRef, {"uri": "report.pdf"}, "uri: must be an absolute URI"),
    (ArtifactRef, {"uri": "s3://bucket/my report.pdf"}, "uri: must not contain whitespace"),
    (ArtifactRef, {"checksum": "sha256:abc"}, "checksum: must be 'algorithm:hexdigest'"),
    (ArtifactRef, {"checksum": "crc32:" + "0" * 8}, "checksum: must be 'algorithm:hexdigest'"),
    (ArtifactRef, {"size_bytes": -1}, "size_bytes: Input should be greater than or equal to 0"),
    (ArtifactRef, {"artifact_type": "video"}, "artifact_type: must be one of file, screenshot"),
    (UserPreference, {"confidence": 1.5}, "confidence: Input should be less than or equal to 1"),
    (DomainKnowledge, {"last_verified": datetime(2025, 1, 1)}, "last_verified: Input should have timezone info"),
    (SessionHandoff, {"last_outcome": "done"}, "last_outcome: must be one of success, failure, interrupted"),
])
def test_a_bad_value_is_refused_naming_the_field_and_the_rule(cls: type[Any], values: dict[str, Any],
                                                              message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cls(**{**_valid(cls), **values})


def test_a_checksum_is_kept_lowercase_and_a_refused_update_writes_nothing() -> None:
    assert ArtifactRef(**_valid(ArtifactRef), checksum="SHA256:" + "AB" * 32).checksum == SHA
    with mnemostore.open("memory://") as store:
        outcome = store.collection(WorkflowOutcome).add(**_valid(WorkflowOutcome))
        with pytest.raises(ValidationError, match=r"set\.result: must be one of"):
            store.collection(WorkflowOutcome).update(outcome.id, set={"result": "won"})
        assert store.collection(WorkflowOutcome)[outcome.id].result == "success"


def _valid(cls: type[Any]) -> dict[str, Any]:
    return {WorkflowOutcome: {"workflow_id": "deploy", "run_id": "r-1", "result": "success"},
            ArtifactRef: {"run_id": "r-1", "uri": "s3://bucket/report.pdf"},
            UserPreference: {"user_id": "u-1", "category": "style", "preference": "short answers"},
            DomainKnowledge: {"domain": "billing", "fact": "invoices close on the 1st"},
            SessionHandoff: {"session_id": "s-1"}}[cls]


def write_seeds(store: mnemostore.Store, n: int = 6) -> dict[str, int]:
    """A few records of each shipped kind (outcomes of two workflows, embedded); the count per kind."""
    vs = vectors(n, DIMENSION)
    store.collection(WorkflowOutcome).put([
        WorkflowOutcome(id=f"wo-{i}", workflow_id=("deploy", "review")[i % 2], run_id=f"r-{i}",
                        result=RESULTS[i % 3], duration_seconds=10.0 * i, agent="helena", project_id="p",
                        summary=f"run {i}", strategies_used=["canary"], extracted_heuristic_ids=[f"h-{i}"],
                        embedding=vs[i]) for i in range(n)])
    store.collection(ArtifactRef).put([
        ArtifactRef(id=f"ar-{i}", run_id=f"r-{i % 2}", node_id=f"n-{i}", artifact_type=("log", "report")[i % 2],
                    uri=f"s3://runs/r-{i % 2}/{i}.txt", size_bytes=100 * i, checksum=SHA,
                    metadata={"i": i}) for i in range(n)])
    store.collection(UserPreference).add(user_id="u-1", category="style", preference="short answers",
                                         confidence=0.75)
    store.collection(DomainKnowledge).add(
        domain="billing", fact="invoices close on the 1st", agent="helena",
        last_verified=datetime(2026, 3, 1, 9, 30, tzinfo=timezone(timedelta(hours=2))))
    store.collection(SessionHandoff).add(session_id="s-1", last_action="ran the tests", last_outcome="failure",
                                         current_goal="fix the flaky test", blockers=["CI is red"],
                                         next_steps=["rerun with a fixed seed"])
    return {"workflow_outcome": n, "artifact_ref": n, "user_preference": 1, "domain_knowledge": 1,
            "session_handoff": 1}


ALL_BACKENDS = (*BACKENDS, "lmdb")


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_every_backend_stores_filters_increments_and_searches_the_shipped_kinds(
        backend: str, url_of: Callable[[str], str]) -> None:
    url = url_of(backend)
    with mnemostore.open(url, dimension=DIMENSION) as store:
        write_seeds(store)
        outcomes = store.collection(WorkflowOutcome)
        deploys = outcomes.query({"workflow_id": "deploy", "result": {"$ne": "partial"}}, order_by="-duration_seconds")
        assert [o.run_id for o in deploys] == ["r-4", "r-0"]  # r-2 is partial
        assert outcomes.count(mnemostore.F.duration_seconds >= 30.0) == 3
        assert outcomes.update("wo-3", inc={"node_count": 2}).node_count == 2
        artifacts = store.collection(ArtifactRef).query({"run_id": "r-1", "artifact_type": "report"},
                                                        order_by="-size_bytes")
        assert [a.node_id for a in artifacts] == ["n-5", "n-3", "n-1"]
        assert store.collection(UserPreference).first({"user_id": "u-1", "category": "style"}) is not None
        assert store.collection("domain_knowledge").count(
            {"last_verified": {"$gt": datetime(2026, 3, 1, 7, 0, tzinfo=UTC)}}) == 1  # 07:30 UTC
        assert store.collection(SessionHandoff).first({"last_outcome": "failure"}) is not None
        if Capability.VECTOR_FILTERED in store.capabilities:
            query = outcomes["wo-4"].embedding
            hits = store.search(WorkflowOutcome, query, 2, where={"workflow_id": "deploy"}, vectors=False)
            assert hits[0].record.id == "wo-4"
            assert {hit.record.workflow_id for hit in hits} == {"deploy"}
    with mnemostore.open(url) as store:  # another open reads what the first wrote
        outcome = store.collection("workflow_outcome")["wo-3"]
        assert (outcome.node_count, outcome.extracted_heuristic_ids, outcome.agent) == (2, ["h-3"], "helena")
        known = store.collection(DomainKnowledge).first({"domain": "billing"})
        assert known is not None and known.last_verified is not None
        assert known.last_verified.utcoffset() == timedelta(hours=2)
        assert store.collection(SessionHandoff).first({"session_id": "s-1"}).next_steps == ["rerun with a fixed seed"]


RING = [("memory", "sqlite"), ("sqlite", "postgres"), ("postgres", "qdrant-memory"),
        ("qdrant-memory", "chroma-memory"), ("chroma-memory", "file"), ("file", "lmdb"), ("lmdb", "memory")]
"""Each backend once as the source and once as the destination of a copy."""


def _records(url: str) -> dict[str, list[Any]]:
    with mnemostore.open(url) as store:
        return {kind: store.collection(kind).query(order_by="id") for kind in SEED_KINDS}


@pytest.mark.parametrize(("source_backend", "destination_backend"), RING, ids=[f"{a}-to-{b}" for a, b in RING])
def test_a_copy_carries_the_shipped_kinds(source_backend: str, destination_backend: str,
                                          url_of: Callable[[str], str]) -> None:
    source, destination = url_of(source_backend), url_of(destination_backend)
    with mnemostore.open(source, dimension=DIMENSION) as store:
        counts = write_seeds(store, 4)
    report = copy(source, destination, batch_size=3)
    assert {kind: report.kinds[kind].count for kind in SEED_KINDS} == counts
    assert _records(destination) == _records(source)


def test_an_archive_carries_the_shipped_kinds(tmp_path: Path) -> None:
    source, destination = f"sqlite:///{tmp_path / 'source.db'}", "memory://seed-archive"
    with mnemostore.open(source, dimension=DIMENSION) as store:
        counts = write_seeds(store)
    export_archive(source, tmp_path / "seeds.jsonl.gz")
    report = import_archive(tmp_path / "seeds.jsonl.gz", destination)
    assert {kind: report.kinds[kind].count for kind in SEED_KINDS} == counts
    assert _records(destination) == _records(source)


def test_reembedding_recomputes_a_shipped_kinds_vectors_from_its_own_text(tmp_path: Path) -> None:
    source, staging = f"sqlite:///{tmp_path / 'source.db'}", f"sqlite:///{tmp_path / 'staging.db'}"
    with mnemostore.open(source, dimension=DIMENSION) as store:
        write_seeds(store)
    texts: list[str] = []

    def embed(batch: list[str]) -> list[list[float]]:
        texts.extend(batch)
        return [[float(len(text)), 1.0, 0.5] for text in batch]

    reembed(source, staging, embed, model="fake-3", dimension=3)
    assert sorted(texts) == [f"run {i}" for i in range(6)]  # a workflow outcome's summary
    before, after = _records(source), _records(staging)
    for old, new in zip(before["workflow_outcome"], after["workflow_outcome"], strict=True):
        assert old.model_dump(exclude={"embedding"}) == new.model_dump(exclude={"embedding"})
        assert new.embedding.tolist() == [float(len(old.summary)), 1.0, 0.5]


def test_info_lists_the_shipped_kinds_with_their_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mnemostore.cli import main

    url = f"sqlite:///{tmp_path / 'info.db'}"
    with mnemostore.open(url, dimension=DIMENSION) as store:
        counts = write_seeds(store)
    assert main(["info", "--json", url]) == 0
    shown = json.loads(capsys.readouterr().out)["counts"]
    assert {kind: shown[kind] for kind in SEED_KINDS} == counts
    assert np.all([shown[kind] == 0 for kind in mnemostore.KINDS])


def test_the_declaration_in_the_docs_is_the_shipped_one() -> None:
    """docs/kinds.md writes `WorkflowOutcome` out as an application would: it must declare what the module does."""
    from tests.docs_snippets import ROOT, parse

    from mnemostore.core.kinds import kinds

    block = next(b for b in parse(ROOT / "docs" / "kinds.md")[0] if "class WorkflowOutcome" in b.code)
    kinds.unregister("workflow_outcome")  # the page's class takes the name for this test (`seeds` forgets it)
    namespace: dict[str, Any] = {"__name__": "docs_kinds"}
    exec(compile(block.code, "docs/kinds.md", "exec", dont_inherit=True), namespace)
    documented = namespace["WorkflowOutcome"]
    assert documented.model_json_schema()["properties"] == WorkflowOutcome.model_json_schema()["properties"]
    assert (documented.filterable, documented.incrementable, documented.indexes) == \
        (WorkflowOutcome.filterable, WorkflowOutcome.incrementable, WorkflowOutcome.indexes)
    outcome = {"workflow_id": "deploy", "run_id": "r-1", "result": "partial", "summary": "s"}
    assert documented(**outcome).embedding_text() == WorkflowOutcome(**outcome).embedding_text() == "s"
    with pytest.raises(ValidationError, match="result: must be one of success"):
        documented(**{**outcome, "result": "won"})
