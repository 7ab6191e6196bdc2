"""Tenant isolation: two tenants of one store never see or touch each other's records."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ...core.capabilities import Capability
from ...core.errors import NotFound, ValidationError
from ...core.filters import F
from ...core.store import Store
from ..factories import make, vectors
from ..oracle import assert_same_records
from ..requirements import requires
from . import SpecimenFixtures, each_kind, each_kind_and_specimen


class TenancyClauses(SpecimenFixtures):
    @each_kind_and_specimen
    def test_tenants_cannot_read_each_others_records(self, open_store: Callable[..., Store], kind: str) -> None:
        a, b, default = open_store(tenant="a"), open_store(tenant="b"), open_store()
        mine = a.collection(kind).put([make(kind, i) for i in range(4)])
        shared_id = mine[0].id
        theirs = b.collection(kind).put([make(kind, 10, id=shared_id, agent="b's own"), make(kind, 11)])
        assert all(r.tenant_id == "a" for r in mine) and all(r.tenant_id == "b" for r in theirs)
        assert_same_records([a.collection(kind).get(shared_id)], [mine[0]])
        assert_same_records([b.collection(kind).get(shared_id)], [theirs[0]])
        assert b.collection(kind).get(mine[1].id) is None
        assert b.collection(kind).get_many([r.id for r in mine]) == [theirs[0]]
        assert {r.id for r in b.collection(kind).all()} == {r.id for r in theirs}
        assert a.collection(kind).count() == 4 and b.collection(kind).count() == 2
        assert b.collection(kind).count(F.agent == "coder") == 0
        assert default.collection(kind).count() == 0 and default.collection(kind).get(shared_id) is None
        page = b.collection(kind).query(limit=1)
        assert page.next_cursor is not None
        rest = b.collection(kind).query(limit=10, cursor=page.next_cursor)
        assert {r.id for r in [*page, *rest]} == {r.id for r in theirs}

    @each_kind
    def test_tenants_cannot_change_each_others_records(self, open_store: Callable[..., Store], kind: str) -> None:
        a, b = open_store(tenant="a"), open_store(tenant="b")
        mine = a.collection(kind).put([make(kind, i) for i in range(4)])
        with pytest.raises(NotFound):
            b.collection(kind).update(mine[1].id, set={"agent": "intruder"})
        assert b.collection(kind).delete([r.id for r in mine]) == 0
        assert b.collection(kind).delete(where=F.agent == "coder") == 0
        assert b.collection(kind).delete(where={}) == 0
        assert_same_records(a.collection(kind).get_many([r.id for r in mine]), mine)
        b.collection(kind).put([make(kind, 1, agent="b's copy")])  # same id, other tenant: a new record
        b.collection(kind).update(mine[1].id, set={"agent": "b's update"})
        b.collection(kind).delete([mine[1].id])
        assert_same_records(a.collection(kind).get_many([r.id for r in mine]), mine)

    @each_kind
    def test_a_record_for_another_tenant_is_rejected(self, open_store: Callable[..., Store], kind: str) -> None:
        a = open_store(tenant="a")
        with pytest.raises(ValidationError):
            a.collection(kind).put([make(kind, 1, tenant_id="b")])
        assert a.collection(kind).count() == 0
        assert open_store(tenant="b").collection(kind).count() == 0

    def test_counters_are_per_tenant(self, open_store: Callable[..., Store]) -> None:
        a, b = open_store(tenant="a"), open_store(tenant="b")
        a.heuristics.put([make("heuristic", 1, occurrence_count=0, success_count=0)])
        b.heuristics.put([make("heuristic", 1, occurrence_count=0, success_count=0)])
        for _ in range(3):
            a.heuristics.reinforce(make("heuristic", 1).id)
        b.anti_patterns.put([make("anti_pattern", 1, occurrence_count=1)])
        with pytest.raises(NotFound):
            a.anti_patterns.seen(make("anti_pattern", 1).id)
        assert a.heuristics[make("heuristic", 1).id].occurrence_count == 3
        assert b.heuristics[make("heuristic", 1).id].occurrence_count == 0

    @requires(Capability.VECTOR_COSINE)
    def test_search_sees_only_the_tenants_records(self, open_store: Callable[..., Store]) -> None:
        a, b = open_store(tenant="a"), open_store(tenant="b")
        matrix = vectors(10, 8)
        a.embeddings.put([make("embedding", i, embedding=matrix[i]) for i in range(10)])
        b.embeddings.put([make("embedding", i, id=f"b-{i}", embedding=matrix[i]) for i in range(3)])
        hits = b.embeddings.search(matrix[5], k=10)
        assert sorted(h.record.id for h in hits) == ["b-0", "b-1", "b-2"]
        assert all(h.record.tenant_id == "b" for h in hits)
        assert len(a.embeddings.search(matrix[5], k=10)) == 10
        assert open_store().embeddings.search(matrix[5], k=10) == []

    @requires(Capability.VECTOR_COSINE, Capability.VECTOR_FILTERED)
    def test_filtered_search_sees_only_the_tenants_records(self, open_store: Callable[..., Store]) -> None:
        a, b = open_store(tenant="a"), open_store(tenant="b")
        matrix = vectors(20, 8)
        a.embeddings.put([make("embedding", i, embedding=matrix[i]) for i in range(20)])
        b.embeddings.put([make("embedding", i, embedding=matrix[i]) for i in range(0, 20, 5)])
        hits = b.embeddings.search(matrix[0], k=10, where=F.namespace == "docs")
        assert sorted(h.record.id for h in hits) == sorted(make("embedding", i).id for i in (0, 10))
        assert all(h.record.tenant_id == "b" for h in hits)

    def test_checkpoint_lineage_is_per_tenant(self, open_store: Callable[..., Store]) -> None:
        a, b = open_store(tenant="a"), open_store(tenant="b")
        first = a.checkpoints.save("run", {"n": 1})
        a.checkpoints.save("run", {"n": 2})
        mine = b.checkpoints.save("run", {"n": 100})
        assert mine.parent_ids == [] and mine.sequence == 0
        assert b.checkpoints.latest("run") == mine
        assert [c.state["n"] for c in a.checkpoints.history("run")] == [1, 2]
        assert b.checkpoints.prune("run", keep=0) == 1
        assert len(a.checkpoints.history("run")) == 2
        with pytest.raises(ValidationError):
            b.checkpoints.save("run", {"n": 3}, parent=first.id)
