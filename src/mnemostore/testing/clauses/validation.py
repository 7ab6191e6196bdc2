"""Bad input is rejected at the boundary, names the field, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from ...core.errors import SchemaMismatch, ValidationError
from ...core.records import KINDS
from ...core.store import Store
from ..factories import fields, make, vectors
from ..oracle import assert_same_records
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
