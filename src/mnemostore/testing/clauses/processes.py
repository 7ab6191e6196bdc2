"""Several processes writing one store at once: no lost increment, no lost or mixed record.

A record upserted by several processes must read back, during the race and after it,
as one whole version that some process wrote, never fields of one and the vector of another.

Workers are separate interpreters (`testing/workers.py`) opening the store by URL, so
these clauses need a backend a fresh process can find through its entry point.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...core.capabilities import Capability
from ...core.records import Record
from ...core.store import Store
from ..factories import make
from ..oracle import assert_same_records, record_difference
from ..requirements import requires
from ..subprocesses import run_together
from ..workers import CONTENDED_ID, contended_version, own_heuristic

PROCESSES = 3
TIMES = 40


def assert_one_of(got: Record | None, versions: list[Record]) -> None:
    """`got` equals one of `versions` in every field (not a mix of several)."""
    differences = [record_difference(got, version) for version in versions]
    assert None in differences, "the record equals none of the versions written:\n" + "\n".join(
        f"  worker {worker}'s: {difference}" for worker, difference in enumerate(differences))


class ProcessClauses:
    @requires(Capability.MULTI_PROCESS, Capability.ATOMIC_UPDATE)
    def test_processes_reinforcing_one_heuristic_lose_no_increment_and_no_put(
            self, store: Store, open_store: Callable[..., Store], store_url: str,
            store_options: dict[str, Any]) -> None:
        shared = make("heuristic", 1, occurrence_count=0, success_count=0)
        store.heuristics.put([shared])
        run_together("increments", store_url, store_options,
                     [{"worker": w, "times": TIMES, "id": shared.id} for w in range(PROCESSES)])
        expected = [own_heuristic(w, i) for w in range(PROCESSES) for i in range(TIMES)]
        for reader in (store, open_store()):  # the instance open all along, and a fresh one
            got = reader.heuristics.get(shared.id)
            assert got is not None
            assert got.occurrence_count == PROCESSES * TIMES, "increments were lost"
            assert got.success_count == PROCESSES * ((TIMES + 1) // 2), "increments were lost"
            assert_same_records(reader.heuristics.get_many([r.id for r in expected]), expected)
            assert reader.heuristics.count() == len(expected) + 1

    @requires(Capability.MULTI_PROCESS)
    def test_processes_upserting_one_id_leave_one_whole_version(
            self, store: Store, open_store: Callable[..., Store], store_url: str, store_options: dict[str, Any],
            declared: frozenset[Capability]) -> None:
        versions: list[Record] = [contended_version(w) for w in range(PROCESSES)]
        outputs = run_together("upserts", store_url, store_options,
                               [{"worker": w, "times": TIMES, "workers": PROCESSES} for w in range(PROCESSES)])
        for worker, lines in enumerate(outputs):
            word, _, payload = lines[-1].partition(" ")
            seen = json.loads(payload)
            assert word == "mixed", lines
            assert seen["mixed"] == 0, (
                f"worker {worker} read the record back as none of the versions written in {seen['mixed']} of "
                f"{seen['reads']} reads; the fields differing from each version, first time: {seen['first']}")
        for reader in (store, open_store()):
            assert reader.heuristics.count() == 1
            assert_one_of(reader.heuristics.get(CONTENDED_ID), versions)
            listed = reader.heuristics.all()
            assert len(listed) == 1
            assert_one_of(listed[0], versions)
            if Capability.VECTOR_COSINE in declared and reader.params.metric == "cosine":
                hits = reader.heuristics.search(versions[0].embedding, k=5)
                assert [hit.record.id for hit in hits] == [CONTENDED_ID]
                assert_one_of(hits[0].record, versions)
