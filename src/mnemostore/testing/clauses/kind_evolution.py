"""A kind a store holds, grown by the application: a filterable field added (a layout change the
migration runner plans and applies) is exact in filters and orderings for records written before it
existed (its value from their documents, else its default) and after. Sync only: the runner has no
async form."""

from __future__ import annotations

from ...core.capabilities import Capability
from ...core.declarations import Declaration, stored_declarations
from ...core.filters import F
from ...core.store import Store
from ...migrations.runner import Runner
from ..factories import BASE_TIME, make
from ..oracle import assert_same_records, expected_ids, expected_order
from ..requirements import requires, since
from ..specimen import SPECIMEN, grown
from ..strategies import INSTANTS
from . import SpecimenFixtures


class KindEvolutionClauses(SpecimenFixtures):
    @since("1.6")
    @requires(Capability.FILTER_RANGE)
    def test_a_filterable_field_added_to_a_stored_kind_is_exact_after_migrating(
            self, store: Store, specimen: str) -> None:
        old = [make(specimen, i, seen_at=None if i % 4 == 0 else INSTANTS[i % len(INSTANTS)]) for i in range(8)]
        store.collection(specimen).put(old)
        with grown() as cls:
            runner = Runner(store.backend)
            steps = runner.plan()
            assert [step.migration.layer for step in steps] == ["kinds"], [step.describe() for step in steps]
            assert "filterable field 'grade' (int) added" in steps[0].migration.description
            assert runner.up() == [steps[0].migration.id] and runner.plan() == []
            assert stored_declarations(store.backend)[SPECIMEN] == Declaration.of(cls)
            collection = store.collection(SPECIMEN)
            new = [make(SPECIMEN, i, grade=i % 3 + 2, seen_at=INSTANTS[i % len(INSTANTS)]) for i in range(8, 14)]
            collection.put(new)
            written = [*(cls(**record.model_dump()) for record in old), *new]  # the old ones at grade's default
            assert_same_records(collection.all(order_by="id"), written)
            for where in (F.grade == 3, F.grade >= 3, F.grade != 3, F.grade.in_([2, 4]), F.seen_at == None,  # noqa: E711
                          F.seen_at > BASE_TIME, (F.grade == 3) & (F.seen_at != None),  # noqa: E711
                          F.seen_at <= INSTANTS[2]):
                assert {r.id for r in collection.all(where)} == expected_ids(SPECIMEN, written, where), repr(where)
                assert collection.count(where) == len(expected_ids(SPECIMEN, written, where)), repr(where)
            for order in (["grade", "-seen_at"], ["-grade", "label"]):
                got = [r.id for r in collection.all(order_by=order)]
                assert got == expected_order(SPECIMEN, written, None, order), order
            assert collection.update(old[1].id, inc={"count": 1}).grade == 3
