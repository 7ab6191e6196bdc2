"""Atomic updates: set and increment in one step, on an allow-list of fields, losing nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from ...core.capabilities import Capability
from ...core.errors import NotFound, ValidationError
from ...core.filters import F
from ...core.store import Store
from ..async_facade import concurrently
from ..factories import BASE_TIME, make, offset_time
from ..oracle import assert_same_records
from ..requirements import requires, since
from . import SpecimenFixtures, each_kind, each_kind_and_specimen

INJECTION_NAMES = (
    "x; DROP TABLE heuristic; --",
    "confidence = 1, strategy",
    'strategy" = 1 --',
    "occurrence_count`",
    "metadata->>'x'",
    "__class__",
    "",
)


class UpdateClauses(SpecimenFixtures):
    def test_set_and_increment_in_one_call(self, store: Store) -> None:
        original = make("heuristic", 3, occurrence_count=4, success_count=2, embedding=[1.0, 0.5])
        store.heuristics.put([original, make("heuristic", 4)])
        stamp = offset_time(5)
        updated = store.heuristics.update(
            original.id, set={"confidence": 0.75, "strategy": "new 🧠", "last_validated": stamp,
                              "metadata": {"k": [1, None]}},
            inc={"occurrence_count": 3, "success_count": 1})
        expected = original.model_copy(update={
            "confidence": 0.75, "strategy": "new 🧠", "last_validated": stamp, "metadata": {"k": [1, None]},
            "occurrence_count": 7, "success_count": 3, "updated_at": updated.updated_at})
        assert_same_records([updated], [expected])
        assert_same_records([store.heuristics.get(original.id)], [expected])  # embedding kept too
        assert updated.updated_at > original.updated_at
        assert_same_records([store.heuristics.get(make("heuristic", 4).id)], [make("heuristic", 4)])

    @each_kind_and_specimen
    def test_set_on_every_kind_keeps_other_fields_and_the_embedding(self, store: Store, kind: str) -> None:
        original = make(kind, 2, embedding=[0.25, -1.0, 3.0])
        store.collection(kind).put([original])
        updated = store.collection(kind).update(
            original.id, set={"agent": "reviser", "metadata": {"nested": {"x": True}}, "project_id": None})
        expected = original.model_copy(update={"agent": "reviser", "metadata": {"nested": {"x": True}},
                                               "project_id": None, "updated_at": updated.updated_at})
        assert_same_records([store.collection(kind).get(original.id)], [expected])
        assert store.collection(kind).count(F.agent == "reviser") == 1

    @each_kind
    def test_set_replaces_the_embedding(self, store: Store, kind: str) -> None:
        original = make(kind, 2, embedding=[0.25, -1.0, 3.0])
        store.collection(kind).put([original, make(kind, 3)])
        store.collection(kind).update(original.id, set={"embedding": [1.0, 2.0, 3.0]})
        got = store.collection(kind).get(original.id)
        assert got is not None and got.embedding is not None
        assert got.embedding.tolist() == [1.0, 2.0, 3.0]
        store.collection(kind).update(make(kind, 3).id, set={"embedding": [0.0, 0.0, 1.0]})
        with pytest.raises(ValidationError):
            store.collection(kind).update(original.id, set={"embedding": [1.0, 2.0]})

    @each_kind_and_specimen
    def test_update_of_a_missing_id_raises_not_found(self, store: Store, kind: str) -> None:
        store.collection(kind).put([make(kind, 1)])
        with pytest.raises(NotFound):
            store.collection(kind).update("no-such-id", set={"agent": "x"})
        if store.collection(kind).record_cls.incrementable:
            counter = sorted(store.collection(kind).record_cls.incrementable)[0]
            with pytest.raises(NotFound):
                store.collection(kind).update("no-such-id", inc={counter: 1})
        assert store.collection(kind).count() == 1
        assert store.collection(kind).get("no-such-id") is None

    def test_increments_on_a_missing_id_raise_not_found(self, store: Store) -> None:
        with pytest.raises(NotFound):
            store.heuristics.update("missing", inc={"occurrence_count": 1})
        with pytest.raises(NotFound):
            store.heuristics.reinforce("missing")
        with pytest.raises(NotFound):
            store.anti_patterns.seen("missing")
        assert store.heuristics.count() == 0 and store.anti_patterns.count() == 0

    @pytest.mark.parametrize("name", INJECTION_NAMES)
    def test_updates_of_fields_outside_the_allow_list_are_rejected(self, store: Store, name: str) -> None:
        original = make("heuristic", 1)
        store.heuristics.put([original])
        with pytest.raises(ValidationError):
            store.heuristics.update(original.id, set={name: 1})
        with pytest.raises(ValidationError):
            store.heuristics.update(original.id, inc={name: 1})
        assert_same_records([store.heuristics.get(original.id)], [original])
        assert store.heuristics.count() == 1

    @pytest.mark.parametrize(("set_", "inc"), [
        ({"id": "other"}, {}), ({"tenant_id": "other"}, {}), ({"created_at": BASE_TIME}, {}),
        ({}, {"confidence": 1}), ({}, {"strategy": 1}), ({}, {"id": 1}), ({}, {"occurrence_count": -1}),
        ({}, {"occurrence_count": 1.5}), ({}, {"occurrence_count": True}), ({"confidence": 1.5}, {}),
        ({"confidence": float("nan")}, {}), ({"strategy": None}, {}),
        ({"last_validated": BASE_TIME.replace(tzinfo=None)}, {}),
        ({"metadata": {"x": {1, 2}}}, {}), ({"metadata": [1]}, {}), ({"agent": "a\x00"}, {}),
        ({"occurrence_count": 3}, {"occurrence_count": 1}), ({}, {}), ({"embedding": [float("inf")]}, {}),
    ])
    def test_invalid_updates_are_rejected_and_change_nothing(self, store: Store, set_: dict[str, object],
                                                             inc: dict[str, object]) -> None:
        original = make("heuristic", 1)
        store.heuristics.put([original])
        with pytest.raises(ValidationError):
            store.heuristics.update(original.id, set=set_, inc=inc)  # type: ignore[arg-type]
        assert_same_records([store.heuristics.get(original.id)], [original])

    def test_reinforce_counts_and_refreshes_confidence(self, store: Store) -> None:
        original = make("heuristic", 1, occurrence_count=0, success_count=0, confidence=0.5)
        store.heuristics.put([original])
        store.heuristics.reinforce(original.id)
        store.heuristics.reinforce(original.id, success=True)
        final = store.heuristics.reinforce(original.id, success=False)
        assert (final.occurrence_count, final.success_count) == (3, 2)
        assert final.confidence == pytest.approx((0.5 * 2 + 2) / (2 + 3))  # the 0.5 counts as two uses
        assert final.last_validated is not None and final.last_validated > BASE_TIME
        got = store.heuristics.get(original.id)
        assert got is not None
        assert (got.occurrence_count, got.success_count, got.confidence) == (3, 2, final.confidence)

    @since("1.3")
    def test_reinforce_keeps_a_confidence_the_application_set_as_a_prior(self, store: Store) -> None:
        trusted = make("heuristic", 1, occurrence_count=0, success_count=0, confidence=0.95)
        store.heuristics.put([trusted])
        after_failure = store.heuristics.reinforce(trusted.id, success=False)
        assert after_failure.confidence == pytest.approx(0.95 * 2 / 3)  # not 0.0
        for _ in range(4):
            final = store.heuristics.reinforce(trusted.id, success=True)
        assert final.confidence == pytest.approx((0.95 * 2 + 4) / (2 + 5))
        assert store.heuristics[trusted.id].prior_confidence == 0.95  # kept, and read back
        counted = make("heuristic", 2, occurrence_count=4, success_count=10, confidence=0.5)
        store.heuristics.put([counted])  # counters written with more successes than uses
        assert 0.0 <= store.heuristics.reinforce(counted.id).confidence <= 1.0

    def test_seen_counts_and_stamps_last_seen(self, store: Store) -> None:
        original = make("anti_pattern", 1, occurrence_count=1)
        other = make("anti_pattern", 2, occurrence_count=1)
        store.anti_patterns.put([original, other])
        store.anti_patterns.seen(original.id)
        final = store.anti_patterns.seen(original.id)
        assert final.occurrence_count == 3
        assert final.last_seen is not None and final.last_seen > BASE_TIME - timedelta(days=1)
        got = store.anti_patterns.get(original.id)
        assert got is not None and got.occurrence_count == 3 and got.last_seen == final.last_seen
        assert_same_records([store.anti_patterns.get(other.id)], [other])

    @requires(Capability.ATOMIC_UPDATE)
    def test_concurrent_increments_from_two_store_instances_lose_nothing(
            self, store: Store, open_store: Callable[..., Store]) -> None:
        heuristic = make("heuristic", 1, occurrence_count=0, success_count=0)
        pattern = make("anti_pattern", 1, occurrence_count=0)
        store.heuristics.put([heuristic])
        store.anti_patterns.put([pattern])
        instances = [open_store(), open_store()]
        per_thread = 50
        start = threading.Barrier(len(instances))
        failures: list[BaseException] = []

        def work(instance: Store) -> None:
            try:
                start.wait(timeout=30)
                for n in range(per_thread):
                    instance.heuristics.update(heuristic.id, inc={"occurrence_count": 1, "success_count": n % 2})
                    instance.anti_patterns.seen(pattern.id)
            except BaseException as exc:  # reported below, with the thread's traceback
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(instance,)) for instance in instances]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not failures, failures
        got = store.heuristics.get(heuristic.id)
        assert got is not None
        assert got.occurrence_count == len(instances) * per_thread
        assert got.success_count == len(instances) * (per_thread // 2)
        seen = store.anti_patterns.get(pattern.id)
        assert seen is not None and seen.occurrence_count == len(instances) * per_thread

    @since("1.5")
    @requires(Capability.ATOMIC_UPDATE)
    def test_concurrent_reinforces_on_one_store_count_exactly(self, store: Store) -> None:
        """200 reinforces of one heuristic at once on one store instance (200 tasks on an AsyncStore,
        threads on a Store) lose no increment, and each returns a confidence the counters allow."""
        heuristic = make("heuristic", 1, occurrence_count=0, success_count=0)
        store.heuristics.put([heuristic])
        results = concurrently(store, 200, lambda facade, i: facade.heuristics.reinforce(heuristic.id, i % 2 == 0))
        got = store.heuristics[heuristic.id]
        assert (got.occurrence_count, got.success_count) == (200, 100)
        assert all(0.0 <= r.confidence <= 1.0 and r.occurrence_count >= 1 for r in results)
