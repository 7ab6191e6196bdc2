"""Helpers for tests of checkpoints saved concurrently with the default parent."""

from __future__ import annotations

import threading
from collections.abc import Callable

from mnemostore.core.records import Checkpoint
from mnemostore.core.store import Store


def assert_one_chain(checkpoints: list[Checkpoint]) -> None:
    """Sequences 0..n-1, each checkpoint the child of the one before it."""
    ordered = sorted(checkpoints, key=lambda c: c.sequence)
    assert [c.sequence for c in ordered] == list(range(len(ordered)))
    assert [c.parent_ids for c in ordered] == [[], *[[c.id] for c in ordered[:-1]]]


def save_concurrently(store: Store, run_of: Callable[[int], str], savers: int, saves: int) -> list[Checkpoint]:
    """`savers` threads, started together, each saving `saves` checkpoints with the default parent."""
    saved: list[Checkpoint] = []
    barrier = threading.Barrier(savers)

    def saver(worker: int) -> None:
        barrier.wait()
        for step in range(saves):
            saved.append(store.checkpoints.save(run_of(worker), {"worker": worker, "step": step}))

    threads = [threading.Thread(target=saver, args=(worker,)) for worker in range(savers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return saved
