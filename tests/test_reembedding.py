"""Re-embedding into a staging store: new vectors from the new model, every other field unchanged,
the source untouched, resumable after an interruption, refused cleanly on unusable output."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.copy_data import TENANTS, Interrupted, StopAfter, fill, fresh_url, snapshot

import mnemostore
from mnemostore.core.errors import MigrationError
from mnemostore.core.records import KINDS
from mnemostore.migrations import reembed
from mnemostore.migrations.reembedding import default_text

NEW_DIMENSION = 5


class FakeModel:
    """A deterministic embedding 'model': each text hashes to a unit vector; counts what it embedded."""

    def __init__(self, dimension: int = NEW_DIMENSION) -> None:
        self.dimension = dimension
        self.texts: list[str] = []

    def vector(self, text: str) -> np.ndarray[Any, Any]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).normal(size=self.dimension).astype(np.float32)
        return v / np.linalg.norm(v)

    def __call__(self, texts: list[str]) -> list[Any]:
        self.texts.extend(texts)
        return [self.vector(t) for t in texts]


def text_of(record: Any) -> str | None:
    return default_text(record) if record.kind != "checkpoint" else f"checkpoint {record.node_id}"


def test_every_embedded_record_gets_the_new_models_vector_and_nothing_else_changes(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    source, staging = fresh_url("sqlite", tmp_path, request), fresh_url("sqlite", tmp_path, request)
    counts = fill(source)
    before = snapshot(source)
    model = FakeModel()
    report = reembed(source, staging, model, model="fake-5", dimension=NEW_DIMENSION, text=text_of, batch_size=7)
    assert {kind: r.count for kind, r in report.kinds.items()} == counts
    assert snapshot(source) == before  # the old store is never touched
    after = snapshot(staging)
    for kind in KINDS:
        for tenant, records in before[kind].items():
            assert [r.id for r in after[kind][tenant]] == [r.id for r in records]
            for old, new in zip(records, after[kind][tenant], strict=True):
                assert old.model_dump(exclude={"embedding"}) == new.model_dump(exclude={"embedding"})
                if old.embedding is None:
                    assert new.embedding is None
                else:
                    assert np.array_equal(new.embedding, model.vector(text_of(old) or ""))
    with mnemostore.open(staging) as store:
        assert (store.params.dimension, store.params.embedding_model) == (NEW_DIMENSION, "fake-5")
        target = next(r for r in after["heuristic"][None] if r.embedding is not None)
        assert store.heuristics.search(model.vector(text_of(target) or ""), k=1)[0].record.id == target.id
    with pytest.raises(mnemostore.SchemaMismatch):
        mnemostore.open(staging, embedding_model="another-model")


def test_an_interrupted_job_resumes_and_embeds_each_text_once(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    source, staging = fresh_url("memory", tmp_path, request), fresh_url("sqlite", tmp_path, request)
    counts = fill(source)
    model = FakeModel()
    with pytest.raises(Interrupted):
        reembed(source, staging, model, model="fake-5", dimension=NEW_DIMENSION, text=text_of, batch_size=4,
                progress=StopAfter(12))
    first_run = len(model.texts)
    assert first_run > 0
    report = reembed(source, staging, model, model="fake-5", dimension=NEW_DIMENSION, text=text_of, batch_size=4)
    assert report.resumed and {kind: r.count for kind, r in report.kinds.items()} == counts
    embedded = sum(1 for kind in KINDS for records in snapshot(source)[kind].values()
                   for r in records if r.embedding is not None)
    assert len(model.texts) == embedded  # nothing embedded twice, nothing skipped


def test_a_record_without_text_or_a_bad_vector_is_refused_naming_it(tmp_path: Path,
                                                                    request: pytest.FixtureRequest) -> None:
    source = fresh_url("memory", tmp_path, request)
    fill(source, per_kind=3)
    with pytest.raises(MigrationError, match="no text to re-embed checkpoint"):
        reembed(source, fresh_url("sqlite", tmp_path, request), FakeModel(), model="m", dimension=NEW_DIMENSION)
    for broken, message in ((lambda texts: [[1.0, 2.0]] * len(texts), "has dimension 2"),
                            (lambda texts: [[float("nan")] * NEW_DIMENSION] * len(texts), "finite"),
                            (lambda texts: [], "returned 0 vectors")):
        staging = fresh_url("sqlite", tmp_path, request)
        with pytest.raises(MigrationError, match=message):
            reembed(source, staging, broken, model="m", dimension=NEW_DIMENSION, text=text_of)
        with mnemostore.open(staging) as store:
            assert all(store.collection(kind).count() == 0 for kind in KINDS)


def test_tenants_are_all_reembedded(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    source, staging = fresh_url("memory", tmp_path, request), fresh_url("memory", tmp_path, request)
    fill(source, per_kind=3)
    reembed(source, staging, FakeModel(), model="fake-5", dimension=NEW_DIMENSION, text=text_of)
    for tenant in TENANTS:
        with mnemostore.open(staging, tenant=tenant) as store:
            dims = {r.embedding.shape[0] for r in store.heuristics.all() if r.embedding is not None}
            assert dims == {NEW_DIMENSION}


def fake_embed(texts: list[str]) -> list[Any]:
    """`--embedder tests.test_reembedding:fake_embed` for the command-line test."""
    return FakeModel()(texts)


def test_the_command_line_reembeds_into_staging(tmp_path: Path, request: pytest.FixtureRequest,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from mnemostore.cli import main

    source, staging = fresh_url("sqlite", tmp_path, request), fresh_url("sqlite", tmp_path, request)
    counts = fill(source, per_kind=3)
    code = main(["reembed", source, staging, "--embedder", "tests.test_reembedding:fake_embed", "--model", "fake-5",
                 "--dimension", str(NEW_DIMENSION), "--text", "tests.test_reembedding:text_of", "--kinds",
                 "heuristic,checkpoint", "--quiet"])
    assert code == 0, capsys.readouterr().err
    with mnemostore.open(staging) as store:
        assert store.heuristics.count() == counts["heuristic"] // len(TENANTS)
        assert store.params.embedding_model == "fake-5" and store.outcomes.count() == 0
    assert main(["reembed", source, staging, "--embedder", "nowhere:embed", "--model", "m", "--dimension", "5"]) == 1
    assert "--embedder 'nowhere:embed'" in capsys.readouterr().err
