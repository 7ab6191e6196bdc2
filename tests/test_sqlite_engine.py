"""SQLite engine behaviour beyond the suite: the connection pool across a fork."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import mnemostore


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
