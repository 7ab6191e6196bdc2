"""SQLite engine behaviour beyond the suite: the connection pool across a fork, the writes' connection."""

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
    reused = reused or id(pool._writer) in parent_connections  # the writes' kept connection: the child's own
    result.put((reused, store.outcomes.count()))


def test_a_forked_child_never_reuses_the_parents_connections(tmp_path: Path) -> None:
    with mnemostore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.outcomes.record("parent", success=True, id="from-parent")
        pool = store.backend.db  # type: ignore[attr-defined]
        parent_connections = {id(conn) for conn in [*pool._idle, pool._writer]}
        assert pool._writer is not None  # the pool keeps the connection its writes used
        context = multiprocessing.get_context("fork")
        result = context.Queue()
        child = context.Process(target=_use_inherited_store, args=(store, parent_connections, result))
        child.start()
        reused, count = result.get(timeout=60)
        child.join(60)
        assert child.exitcode == 0
        assert (reused, count) == (False, 2)
        assert {o.id for o in store.outcomes.all()} == {"from-parent", "from-child"}  # the parent's pool still works


def test_writes_keep_one_connection_a_nested_write_takes_another_and_close_closes_it(tmp_path: Path) -> None:
    """Writes run on the pool's writer connection under the file's writer lock; a write inside a write
    gets a pooled one (the outer one is in use), and closing the store closes the kept one."""
    import sqlite3

    import pytest

    with mnemostore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        pool = store.backend.db  # type: ignore[attr-defined]
        store.outcomes.record("a", success=True, id="a")
        writer = pool._writer
        store.outcomes.record("b", success=True, id="b")
        assert writer is not None and pool._writer is writer
        seen: list[sqlite3.Connection] = []

        def outer(conn: sqlite3.Connection) -> None:
            seen.append(conn)
            pool.one_write(lambda inner: seen.append(inner))

        pool.write(outer)
        assert seen[0] is writer and seen[1] is not writer
        writer = pool._writer
        assert writer in seen and {id(conn) for conn in seen} <= {id(writer), *map(id, pool._idle)}  # both kept
        assert store.outcomes.count() == 2
    with pytest.raises(sqlite3.ProgrammingError):
        writer.execute("SELECT 1")
