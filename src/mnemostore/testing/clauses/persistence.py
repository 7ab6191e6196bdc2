"""Reopen persistence: close the store, open it again, and everything is still there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ...core.capabilities import Capability
from ...core.errors import StoreNotFound
from ...core.records import KINDS, Record
from ...core.store import Store, open
from ..factories import make, nested_metadata, offset_time, vectors
from ..oracle import assert_same_records
from ..requirements import requires, since

DIMENSION = 8


def populate(store: Store) -> dict[str, list[Record]]:
    """Records of every kind, half with embeddings, with awkward values; returns them by kind."""
    matrix = vectors(12, DIMENSION, seed=31)
    written: dict[str, list[Record]] = {}
    for kind in KINDS:
        records = [make(kind, i, embedding=matrix[i] if i % 2 else None, metadata=nested_metadata(),
                        created_at=offset_time(i), agent="🧠 e\u0301" if i == 3 else None if i == 4 else "coder")
                   for i in range(6)]
        store.collection(kind).put(records)
        written[kind] = records
    return written


class PersistenceClauses:
    @requires(Capability.PERSISTENT)
    def test_everything_survives_close_and_reopen(self, open_store: Callable[..., Store]) -> None:
        first = open_store(dimension=DIMENSION, metric="l2")
        written = populate(first)
        root = first.checkpoints.save("run", {"step": 1})
        child = first.checkpoints.save("run", {"step": 2})
        side = first.checkpoints.save("run", {"step": 3}, branch="side", parent=root.id)
        merged = first.checkpoints.merge("run", [child.id, side.id], reducers={"step": "sum"})
        first.heuristics.update(written["heuristic"][0].id, inc={"occurrence_count": 5})
        first.outcomes.delete([written["outcome"][5].id])
        query = vectors(1, DIMENSION, seed=2)[0]
        hits_before = first.heuristics.search(query, k=3)
        heuristic_before = first.heuristics.get(written["heuristic"][0].id)
        first.close()

        again = open_store()
        assert again.params.dimension == DIMENSION and again.params.metric == "l2"
        expected = {kind: list(records) for kind, records in written.items()}
        expected["heuristic"][0] = heuristic_before  # type: ignore[assignment]
        expected["outcome"] = expected["outcome"][:5]
        for kind, records in written.items():
            assert_same_records(again.collection(kind).get_many([r.id for r in records]), expected[kind])
        assert again.outcomes.count() == 5
        assert [(h.record.id, h.score) for h in again.heuristics.search(query, k=3)] == \
            [(h.record.id, h.score) for h in hits_before]
        assert again.checkpoints.latest("run") == merged
        assert [c.id for c in again.checkpoints.lineage(merged.id)] == [merged.id, child.id, root.id]
        assert again.checkpoints.get(merged.id).parent_ids == [child.id, side.id]  # type: ignore[union-attr]
        assert again.checkpoints.latest("run", branch="side") == side
        assert again.checkpoints.save("run", {"step": 9}).parent_ids == [merged.id]

    @requires(Capability.PERSISTENT)
    def test_writes_after_reopen_persist_too(self, open_store: Callable[..., Store]) -> None:
        first = open_store()
        first.outcomes.put([make("outcome", 1)])
        first.close()
        second = open_store()
        second.outcomes.put([make("outcome", 2)])
        second.heuristics.put([make("heuristic", 1)])
        second.close()
        third = open_store()
        assert third.outcomes.count() == 2
        assert_same_records([third.heuristics.get(make("heuristic", 1).id)], [make("heuristic", 1)])

    @requires(Capability.PERSISTENT)
    def test_tenants_survive_reopen(self, open_store: Callable[..., Store]) -> None:
        a = open_store(tenant="a")
        a.outcomes.put([make("outcome", 1)])
        a.close()
        assert open_store(tenant="a").outcomes.count() == 1
        assert open_store(tenant="b").outcomes.count() == 0
        assert open_store().outcomes.count() == 0

    def test_a_second_instance_sees_the_first_ones_writes(self, open_store: Callable[..., Store]) -> None:
        first, second = open_store(), open_store()
        first.outcomes.put([make("outcome", 1)])
        assert_same_records([second.outcomes.get(make("outcome", 1).id)], [make("outcome", 1).model_copy()])
        second.outcomes.delete(where={})
        assert first.outcomes.count() == 0

    @since("1.3")
    def test_opening_to_read_a_store_never_created_raises_and_creates_nothing(
            self, store_url: str, store_options: dict[str, Any], open_store: Callable[..., Store]) -> None:
        """`open(url, create=False)` (what `info`, `export` and `copy`'s source use) refuses a store
        that does not exist, naming the URL, and leaves nothing behind; an existing one opens."""
        for _ in range(2):  # the second refusal proves the first created nothing
            with pytest.raises(StoreNotFound, match="no mnemostore store at"):
                open(store_url, create=False, **store_options)
        created = open_store()
        assert [created.collection(kind).count() for kind in KINDS] == [0] * len(KINDS)
        created.outcomes.add(make("outcome", 1))
        reader = open_store(create=False)
        assert reader.outcomes.count() == 1
