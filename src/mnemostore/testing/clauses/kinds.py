"""An application's kind on a backend that has no code for it: its own typed fields set, counted and
searched (the clauses marked `each_kind_and_specimen` run the rest of the suite on it too)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ...core.capabilities import Capability
from ...core.declarations import Declaration, stored_declarations
from ...core.errors import KindChanged, ValidationError
from ...core.filters import F
from ...core.store import Store
from ..factories import BASE_TIME, batch, make, offset_time, vectors
from ..oracle import assert_same_records, reference_search
from ..requirements import requires, since
from ..specimen import SPECIMEN, Specimen, grown
from . import SpecimenFixtures
from .vectors import DIMENSION, assert_hits, scored_batch


class KindClauses(SpecimenFixtures):
    @since("1.5")
    @requires(Capability.ATOMIC_UPDATE)
    def test_an_application_kind_sets_and_increments_its_own_fields(self, store: Store, specimen: str) -> None:
        collection = store.collection(specimen)
        original, other = make(specimen, 1, count=5), make(specimen, 2)
        collection.put([original, other])
        changes = {"label": "renamed é", "score": -2.5, "flag": True, "due": offset_time(3), "notes": ["x"],
                   "seen_at": None, "blob": b"\x00\xff"}
        updated = collection.update(original.id, set=changes, inc={"count": 4})
        expected = original.model_copy(update={**changes, "count": 9, "updated_at": updated.updated_at})
        assert_same_records([updated], [expected])
        assert_same_records([collection.get(original.id)], [expected])
        assert_same_records([collection.get(other.id)], [other])
        assert collection.count((F.count == 9) & (F.flag == True) & (F.due == offset_time(3))) == 1  # noqa: E712
        assert collection.count(F.label == "renamed é") == 1
        for bad in ({"inc": {"score": 1}}, {"inc": {"label": 1}}, {"set": {"due": BASE_TIME.replace(tzinfo=None)}},
                    {"set": {"count": 2**63}}, {"set": {"label": "a\x00"}}):
            with pytest.raises(ValidationError):
                collection.update(original.id, **bad)
        assert_same_records([collection.get(original.id)], [expected])

    @since("1.5")
    @requires(Capability.VECTOR_COSINE, Capability.VECTOR_FILTERED, Capability.FILTER_RANGE)
    def test_filtered_search_on_an_application_kinds_typed_fields(self, store: Store, specimen: str) -> None:
        written = scored_batch(specimen, 40)
        store.collection(specimen).put([*written, *batch(specimen, 5, start=40)])  # some without embeddings
        query = vectors(1, DIMENSION, seed=5)[0]
        for where in (F.label == "green", F.count >= 3, F.score < 2.0, F.flag == False,  # noqa: E712
                      F.due > BASE_TIME + timedelta(hours=10), F.due == None,  # noqa: E711
                      (F.label.in_(["red", "blue"])) & (F.count != 0)):
            hits = store.search(specimen, query, 7, where=where)
            assert_hits(hits, reference_search(written, query, 7, "cosine", where), written)

    @since("1.5")
    def test_an_application_kind_leaves_the_built_in_kinds_alone(self, store: Store, specimen: str) -> None:
        store.collection(specimen).put(batch(specimen, 3))
        assert [store.collection(kind).count() for kind in ("outcome", "heuristic", "embedding")] == [0, 0, 0]
        store.embeddings.put(batch("embedding", 2))
        assert store.collection(specimen).count() == 3
        assert store.collection(specimen).delete(where={}) == 3 and store.embeddings.count() == 2

    @since("1.6")
    def test_a_store_records_an_application_kinds_declaration_at_its_first_write(
            self, store: Store, specimen: str) -> None:
        collection = store.collection(specimen)
        assert collection.count() == 0 and collection.get("x") is None and collection.all(F.count == 1) == []
        assert specimen not in stored_declarations(store.backend)  # reading records nothing
        collection.put(batch(specimen, 2))
        recorded = stored_declarations(store.backend)[specimen]
        assert recorded == Declaration.of(Specimen)
        assert (recorded.filterable, recorded.incrementable, recorded.indexes, recorded.binary) == (
            {"label": "str", "count": "int", "score": "float", "flag": "bool", "due": "datetime"}, ("count",),
            (("label", "count"),), ("blob",))
        assert [kind for kind in stored_declarations(store.backend)] == [specimen]  # built-in kinds are not recorded

    @since("1.6")
    def test_a_kind_declared_otherwise_than_its_store_recorded_is_refused_naming_the_command(
            self, store: Store, specimen: str) -> None:
        written = batch(specimen, 3)
        store.collection(specimen).put(written)
        with grown():
            calls = (lambda: store.collection(SPECIMEN).count(), lambda: store.collection(SPECIMEN).all(),
                     lambda: store.collection(SPECIMEN).put([make(SPECIMEN, 9)]))
            for call in calls:
                with pytest.raises(KindChanged) as caught:
                    call()
                message = str(caught.value)
                assert f"kind {SPECIMEN!r}" in message and "filterable field 'grade' (int) added" in message
                assert "filterable field 'seen_at' (datetime) added" in message and "index ('grade',) added" in message
                assert "mnemostore migrate plan" in message and "mnemostore migrate up" in message
            assert stored_declarations(store.backend)[SPECIMEN] == Declaration.of(Specimen)
        assert_same_records(store.collection(specimen).all(order_by="id"), written)  # nothing was written
