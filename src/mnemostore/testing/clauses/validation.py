"""Bad input is rejected at the boundary, names the field, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from ...core.capabilities import Capability
from ...core.errors import ConfigError, SchemaMismatch, ValidationError
from ...core.jsonvalues import MAX_DEPTH
from ...core.records import KINDS
from ...core.store import Store
from ..factories import fields, make, vectors
from ..oracle import assert_same_records
from ..requirements import since
from . import each_kind

NAIVE = datetime(2025, 1, 1, 12, 0)
NAN = float("nan")
INF = float("inf")

INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("embedding", {"embedding": [1.0, NAN, 0.0, 0.0]}, "embedding"),
    ("embedding", {"embedding": [INF, 0.0, 0.0, 0.0]}, "embedding"),
    ("embedding", {"embedding": "text"}, "embedding"),
    ("embedding", {"embedding": [[1.0, 2.0], [3.0, 4.0]]}, "embedding"),
    ("embedding", {"embedding": []}, "embedding"),
    ("embedding", {"embedding": [1.0, 2.0, 3.0]}, "embedding"),
    ("outcome", {"created_at": NAIVE}, "created_at"),
    ("heuristic", {"last_validated": NAIVE}, "last_validated"),
    ("anti_pattern", {"last_seen": "yesterday"}, "last_seen"),
    ("outcome", {"metadata": {"when": datetime(2025, 1, 1)}}, "metadata"),
    ("outcome", {"metadata": {"set": {1, 2}}}, "metadata"),
    ("outcome", {"metadata": {"nested": [{"x": NAN}]}}, "metadata"),
    ("outcome", {"metadata": {"big": 2**64}}, "metadata"),
    ("outcome", {"metadata": {1: "int key"}}, "metadata"),
    ("outcome", {"metadata": {"bytes": b"raw"}}, "metadata"),
    ("outcome", {"metadata": {"tuple": (1, 2)}}, "metadata"),
    ("outcome", {"metadata": "not an object"}, "metadata"),
    ("outcome", {"metadata": {"nul\x00key": 1}}, "metadata"),
    ("outcome", {"agent": "a\x00b"}, "agent"),
    ("heuristic", {"strategy": "lone \ud800 surrogate"}, "strategy"),
    ("outcome", {"id": ""}, "id"),
    ("outcome", {"id": "nul\x00id"}, "id"),
    ("outcome", {"success": "maybe"}, "success"),
    ("outcome", {"duration_ms": -5}, "duration_ms"),
    ("outcome", {"task_type": None}, "task_type"),
    ("heuristic", {"confidence": 1.5}, "confidence"),
    ("heuristic", {"confidence": "high"}, "confidence"),
    ("heuristic", {"occurrence_count": 2**63}, "occurrence_count"),
    ("checkpoint", {"state": {"x": NAN}}, "state"),
    ("checkpoint", {"state": {"x": {1, 2}}}, "state"),
    ("checkpoint", {"sequence": -1}, "sequence"),
    ("checkpoint", {"parent_ids": [""]}, "parent_ids"),
    ("checkpoint", {"run_id": ""}, "run_id"),
    ("embedding", {"namespace": ""}, "namespace"),
    ("embedding", {"bogus": 1}, "bogus"),
    ("outcome", {"tenant_id": "someone-else"}, "tenant_id"),
]


class ValidationClauses:
    @pytest.mark.parametrize(("kind", "overrides", "field"), INVALID,
                             ids=[f"{kind}-{field}-{n}" for n, (kind, _, field) in enumerate(INVALID)])
    def test_invalid_records_name_the_field_and_write_nothing(
            self, store: Store, kind: str, overrides: dict[str, Any], field: str) -> None:
        collection = store.collection(kind)
        matrix = vectors(4, 4)
        good = [fields(kind, i, embedding=matrix[i]) for i in range(4)]
        bad = {**good[2], **overrides}
        with pytest.raises(ValidationError) as caught:
            collection.put([good[0], good[1], bad, good[3]])
        named = [name for name, _ in caught.value.errors]
        assert any(name == f"records[2].{field}" or name.startswith((f"records[2].{field}.", f"records[2].{field}["))
                   for name in named), caught.value.errors
        assert f"records[2].{field}" in str(caught.value)
        assert collection.count() == 0
        assert collection.get(good[0]["id"]) is None

    @each_kind
    def test_a_batch_whose_third_record_has_another_dimension_writes_nothing(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        wide, narrow = vectors(5, 16), vectors(1, 8)
        records = [make(kind, i, embedding=wide[i]) for i in range(5)]
        records[2] = make(kind, 2, embedding=narrow[0])
        with pytest.raises(ValidationError) as caught:
            collection.put(records)
        assert [name for name, _ in caught.value.errors] == ["records[2].embedding"]
        assert collection.count() == 0
        collection.put([make(kind, i, embedding=wide[i]) for i in range(2)])  # a clean batch still goes in
        records = [make(kind, i, embedding=wide[i]) for i in range(2, 5)] + [make(kind, 5, embedding=narrow[0])]
        with pytest.raises(ValidationError) as caught:
            collection.put(records)
        assert [name for name, _ in caught.value.errors] == ["records[3].embedding"]
        assert collection.count() == 2

    @each_kind
    def test_every_error_of_a_batch_is_reported(self, store: Store, kind: str) -> None:
        records = [fields(kind, 0, agent="x\x00"), fields(kind, 1), fields(kind, 2, created_at=NAIVE)]
        with pytest.raises(ValidationError) as caught:
            store.collection(kind).put(records)
        named = {name for name, _ in caught.value.errors}
        assert {"records[0].agent", "records[2].created_at"} <= named
        assert store.collection(kind).count() == 0

    @each_kind
    def test_duplicate_ids_in_one_batch_are_rejected(self, store: Store, kind: str) -> None:
        with pytest.raises(ValidationError):
            store.collection(kind).put([make(kind, 1), make(kind, 2), make(kind, 1, agent="again")])
        assert store.collection(kind).count() == 0

    def test_records_of_another_kind_or_type_are_rejected(self, store: Store) -> None:
        items: list[Any] = [make("heuristic", 1), 42, "outcome", None]
        for item in items:
            with pytest.raises(ValidationError):
                store.outcomes.put([make("outcome", 1), item])
        assert store.outcomes.count() == 0

    def test_configured_dimension_must_match_the_stored_one(self, open_store: Callable[..., Store]) -> None:
        first = open_store(dimension=16)
        first.embeddings.put([make("embedding", 1, embedding=vectors(1, 16)[0])])
        with pytest.raises(SchemaMismatch):
            open_store(dimension=8)
        assert open_store().params.dimension == 16
        assert open_store(dimension=16).embeddings.count() == 1
        with pytest.raises(ValidationError):
            first.embeddings.put([make("embedding", 2, embedding=vectors(1, 8)[0])])
        assert first.embeddings.count() == 1

    def test_configured_metric_must_match_the_stored_one(self, open_store: Callable[..., Store]) -> None:
        assert open_store(metric="l2").params.metric == "l2"
        with pytest.raises(SchemaMismatch):
            open_store(metric="dot")
        assert open_store().params.metric == "l2"

    def test_the_first_embedding_fixes_the_dimension_for_every_kind(self, open_store: Callable[..., Store]) -> None:
        store = open_store()
        store.outcomes.put([make("outcome", 1, embedding=vectors(1, 6)[0])])
        assert store.params.dimension == 6
        for kind in KINDS:
            with pytest.raises(ValidationError):
                store.collection(kind).put([make(kind, 2, embedding=vectors(1, 7)[0])])
        assert open_store().params.dimension == 6

    def test_rejected_updates_and_puts_leave_existing_records_alone(self, store: Store) -> None:
        original = make("outcome", 1, embedding=[1.0, 2.0])
        store.outcomes.put([original])
        with pytest.raises(ValidationError):
            store.outcomes.put([make("outcome", 1, agent="changed"), fields("outcome", 2, created_at=NAIVE)])
        assert_same_records([store.outcomes.get(original.id)], [original])

    @since("1.3")
    def test_values_nested_too_deep_are_refused_naming_the_field(self, store: Store) -> None:
        """A state, metadata or update value nesting past MAX_DEPTH is a ValidationError naming the
        field and the limit (never a RecursionError or a driver error); nothing is written."""
        kept = store.checkpoints.save("run", {"step": 1})
        outcome = store.outcomes.add(make("outcome", 1))
        attempts: list[tuple[str, Callable[[Any], object]]] = [
            ("records[0].state", lambda v: store.checkpoints.save("run", v)),
            ("records[0].metadata", lambda v: store.outcomes.add(task_type="t", success=True, metadata=v)),
            ("set.metadata", lambda v: store.outcomes.update(outcome.id, set={"metadata": v})),
            ("set.state", lambda v: store.checkpoints.update(kept.id, set={"state": v})),
        ]
        for depth in (MAX_DEPTH + 1, 300, 3_000):
            for field, attempt in attempts:
                with pytest.raises(ValidationError, match=f"deeper than {MAX_DEPTH} levels") as caught:
                    attempt(_nested(depth))
                assert caught.value.errors[0][0].startswith(field)
        assert_same_records(store.checkpoints.all(), [kept])
        assert_same_records(store.outcomes.all(), [outcome])
        deepest = _nested(MAX_DEPTH)
        saved = store.checkpoints.save("run", deepest)
        store.outcomes.update(outcome.id, set={"metadata": deepest})
        assert store.checkpoints.get(saved.id).state == deepest  # type: ignore[union-attr]
        assert store.outcomes.get(outcome.id).metadata == deepest  # type: ignore[union-attr]

    @since("1.3")
    def test_embeddings_of_strings_or_booleans_are_refused_not_converted(self, store: Store) -> None:
        searches = Capability.VECTOR_COSINE in store.capabilities
        for bad in (["1", "0.5", "0"], [True, False, True], [0.5, "1", 0.25]):
            with pytest.raises(ValidationError, match="embedding"):
                store.embeddings.add(text="x", embedding=bad)
            if searches:
                with pytest.raises(ValidationError, match="vector"):
                    store.search("embedding", bad, 1)
        assert store.embeddings.count() == 0

    @since("1.4")
    def test_a_checkpoint_payload_that_is_not_bytes_is_refused_naming_it(self, store: Store) -> None:
        """`payload` takes bytes (a bytearray or memoryview is copied into bytes) or None; a str,
        a list of ints or a number is a ValidationError naming `payload`, and nothing is written."""
        kept = store.checkpoints.save("run", {"step": 1}, payload=b"kept")
        for bad in ("text", [1, 2, 3], 7):
            with pytest.raises(ValidationError) as caught:
                store.checkpoints.put([make("checkpoint", 1), fields("checkpoint", 2, payload=bad)])
            assert [name for name, _ in caught.value.errors] == ["records[1].payload"]
            with pytest.raises(ValidationError, match="payload"):
                store.checkpoints.update(kept.id, set={"payload": bad})
        assert_same_records(store.checkpoints.all(), [kept])
        converted = store.checkpoints.save("run", {"step": 2}, payload=bytearray(b"\x00\xff"))
        assert type(converted.payload) is bytes
        assert store.checkpoints[converted.id].payload == b"\x00\xff"

    @since("1.3")
    def test_a_tenant_no_record_could_hold_is_refused_on_open(self, open_store: Callable[..., Store]) -> None:
        for bad in ("team\x00a", "t" * 513, ""):
            with pytest.raises(ConfigError, match="tenant"):
                open_store(tenant=bad)


def _nested(depth: int) -> dict[str, Any]:
    """A JSON object `depth` levels deep (the innermost holds a number)."""
    value: Any = 1
    for _ in range(depth - 1):
        value = {"k": value}
    return {"k": value}
