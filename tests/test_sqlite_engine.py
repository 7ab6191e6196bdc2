"""SQLite engine behaviour beyond the suite: saves with the default parent serialised by the
write lock, and the connection pool across a fork."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from tests.checkpoint_chains import assert_one_chain, save_concurrently

import mnemostore

PROCESSES = 3
SAVES = 30


def _save_steps(url: str, worker: int, saves: int, start: Any) -> None:
    with mnemostore.open(url) as store:
        start.wait()  # every process opened: the saves race
        for step in range(saves):
            store.checkpoints.save("shared", {"worker": worker, "step": step})


def test_threads_saving_to_one_run_form_one_chain(tmp_path: Path) -> None:
    with mnemostore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        saved = save_concurrently(store, lambda worker: "shared", savers=6, saves=SAVES)
        assert_one_chain(saved)
        assert store.checkpoints.history("shared") == sorted(saved, key=lambda c: c.sequence)


def test_processes_saving_to_one_run_form_one_chain(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url):  # laid out before the writers race
        pass
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    workers = [context.Process(target=_save_steps, args=(url, worker, SAVES, start)) for worker in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    with mnemostore.open(url) as store:
        history = store.checkpoints.history("shared")
    assert len(history) == PROCESSES * SAVES
    assert_one_chain(history)


def _use_inherited_store(store: mnemostore.Store, parent_connections: set[int], result: multiprocessing.Queue) -> None:
    pool = store.backend.db  # type: ignore[attr-defined]
    conn = pool._checkout()
    try:
        reused = id(conn) in parent_connections
    finally:
        pool._checkin(conn)
    store.outcomes.record("child", success=True, id="from-child")
    result.put((reused, store.outcomes.count()))


def test_a_forked_child_never_reuses_the_parents_connections(tmp_path: Path) -> None:
    with mnemostore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.outcomes.record("parent", success=True, id="from-parent")
        parent_connections = {id(conn) for conn in store.backend.db._idle}  # type: ignore[attr-defined]
        assert parent_connections  # the pool keeps the connection it used
        context = multiprocessing.get_context("fork")
        result = context.Queue()
        child = context.Process(target=_use_inherited_store, args=(store, parent_connections, result))
        child.start()
        reused, count = result.get(timeout=60)
        child.join(60)
        assert child.exitcode == 0
        assert (reused, count) == (False, 2)
        assert {o.id for o in store.outcomes.all()} == {"from-parent", "from-child"}  # the parent's pool still works
