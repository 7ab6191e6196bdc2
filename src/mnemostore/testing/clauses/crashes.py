"""A writer killed with SIGKILL mid-batch: every batch is whole or absent, nothing acknowledged is lost.

A worker process puts numbered batches and prints each number once its put returned;
the parent kills it at a seeded random moment after the first acknowledgement, reopens
the store and checks it, for a few rounds, then writes and reopens once more.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...core.capabilities import Capability
from ...core.records import Record
from ...core.store import Store
from ..factories import vectors
from ..oracle import assert_same_records, reference_search
from ..requirements import requires, since
from ..subprocesses import workers_running
from ..workers import CRASH_DIMENSION, crash_batch
from .vectors import assert_hits

ROUNDS = 3
BATCH_SIZE = 200
LARGE_STATE_MB = 5.5
SEARCH_BATCH = 40
WRITER_SECONDS = 30.0
"""A writer stops by itself after this long, should the parent fail to kill it."""

Acknowledged = dict[int, set[int]]
"""Round -> the batch numbers its writer acknowledged."""


def kill_a_writer(store_url: str, store_options: dict[str, Any], params: dict[str, Any],
                  pause: float, job: str = "crash-writer") -> set[int]:
    """Run a crash writer, SIGKILL it `pause` seconds after its first acknowledgement; return what it acknowledged."""
    with workers_running(job, store_url, store_options, [params]) as (writer,):
        writer.ready()
        first = writer.line()
        assert first is not None, writer.stderr()
        time.sleep(pause)
        return {int(line) for line in [first, *writer.kill()] if line != "done"}


def check_batches(store: Store, kind: str, acknowledged: Acknowledged, params: dict[str, Any]) -> None:
    """Every batch in the store is whole, every acknowledged batch is there, and the records read back intact."""
    collection = store.collection(kind)
    counts = Counter((r.metadata["round"], r.metadata["batch"]) for r in collection.iterate(vectors=False))
    size = 1 if kind == "checkpoint" else params["size"]
    partial = {key: n for key, n in counts.items() if n != size}
    assert not partial, f"batches cut short by the kill ((round, batch): records, of {size}): {partial}"
    assert collection.count() == sum(counts.values())
    for round, batches in acknowledged.items():
        present = {batch for (r, batch) in counts if r == round}
        lost = batches - present
        assert not lost, f"round {round}: acknowledged batches {sorted(lost)} are missing"
        newest = max(batches)
        unexplained = present - batches - {newest + 1}  # only the batch in flight may be there unacknowledged
        assert not unexplained, f"round {round}: batches {sorted(unexplained)} were never written by the writer"
        for batch in sorted(present & {newest, newest + 1}):  # the batches written nearest the kill
            expected: list[Record] = crash_batch(kind, round, batch, params)
            assert_same_records(collection.get_many([r.id for r in expected]), expected)


def crash_rounds(open_store: Callable[..., Store], store_url: str, store_options: dict[str, Any],
                 kind: str, params: dict[str, Any], seed: str, longest_pause: float) -> None:
    """Kill a writer `ROUNDS` times, checking the store after each; then write, reopen and check again."""
    pauses = random.Random(seed)
    acknowledged: Acknowledged = {}
    for round in range(ROUNDS):
        writer = {**params, "kind": kind, "round": round, "seconds": WRITER_SECONDS, "max_batches": 10_000}
        acknowledged[round] = kill_a_writer(store_url, store_options, writer, pauses.uniform(0.0, longest_pause))
        store = open_store()
        check_batches(store, kind, acknowledged, params)
        store.close()
    store = open_store()
    after = crash_batch(kind, ROUNDS, 0, params)
    store.collection(kind).put(after)
    store.close()
    acknowledged[ROUNDS] = {0}
    check_batches(open_store(), kind, acknowledged, params)


class CrashClauses:
    @requires(Capability.CRASH_SAFE, Capability.PERSISTENT)
    def test_crash_of_a_writer_leaves_each_batch_whole_or_absent(
            self, open_store: Callable[..., Store], store_url: str, store_options: dict[str, Any]) -> None:
        crash_rounds(open_store, store_url, store_options, "heuristic", {"size": BATCH_SIZE},
                     seed="crash-batches", longest_pause=0.3)

    @requires(Capability.CRASH_SAFE, Capability.PERSISTENT, Capability.LARGE_STATE)
    def test_crash_while_writing_large_checkpoints_leaves_each_whole_or_absent(
            self, open_store: Callable[..., Store], store_url: str, store_options: dict[str, Any]) -> None:
        crash_rounds(open_store, store_url, store_options, "checkpoint", {"megabytes": LARGE_STATE_MB},
                     seed="crash-checkpoints", longest_pause=0.4)

    @since("1.3")
    @requires(Capability.CRASH_SAFE, Capability.PERSISTENT, Capability.VECTOR_COSINE)
    def test_a_searching_writer_killed_at_any_moment_leaves_exact_search(
            self, open_store: Callable[..., Store], store_url: str, store_options: dict[str, Any]) -> None:
        """A writer that upserts and searches between writes keeps whatever caches or side files its
        backend has warm and changing; killed at a random moment, it leaves searches exact."""
        pauses = random.Random("crash-search")
        for round in range(ROUNDS):
            writer = {"round": round, "size": SEARCH_BATCH, "seconds": WRITER_SECONDS, "max_batches": 16}
            kill_a_writer(store_url, store_options, writer, pauses.uniform(0.0, 0.4), job="searching-writer")
            store = open_store()
            stored = list(store.heuristics.iterate())
            for query in vectors(3, CRASH_DIMENSION, seed=round):
                expected = reference_search(stored, query, 10, store.params.metric)
                assert_hits(store.heuristics.search(query, k=10), expected, stored)
            store.close()
