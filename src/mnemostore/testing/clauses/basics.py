"""Round trips, upserts, missing ids, counts and deletes for every kind."""

from __future__ import annotations

import pytest

from ...core.filters import F
from ...core.records import KINDS
from ...core.store import Store
from ..factories import make


@pytest.mark.parametrize("kind", KINDS)
class BasicClauses:
    def test_put_then_get_returns_equal_record(self, store: Store, kind: str) -> None:
        record = make(kind, 1)
        store.collection(kind).put([record])
        assert store.collection(kind).get(record.id) == record

    def test_get_of_missing_id_returns_none(self, store: Store, kind: str) -> None:
        store.collection(kind).put([make(kind, 1)])
        assert store.collection(kind).get("no-such-id") is None
        assert store.collection(kind).get_many(["no-such-id", make(kind, 1).id]) == [make(kind, 1)]

    def test_upsert_replaces_by_id(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put([make(kind, 1)])
        changed = make(kind, 1, agent="someone else")
        collection.put([changed])
        assert collection.count() == 1
        assert collection.get(changed.id) == changed

    def test_count_and_delete_by_filter(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put([make(kind, i) for i in range(9)])
        assert collection.count() == 9
        assert collection.count(F.agent == "coder") == 3
        assert collection.delete(where=F.agent == "coder") == 3
        assert collection.count() == 6
        assert collection.count(F.agent == "coder") == 0
