"""A connection of the store's own pool keeps a cursor per kind of statement (own_connections.py):
lone statements reuse it and still get their own results, a failed one leaves it usable, statements
read row by row get cursors of their own, and a borrowed pool's connections keep nothing."""

from __future__ import annotations

import asyncio

import pytest
from psycopg_pool import ConnectionPool
from tests.postgres_one_connection import pooled_connection, store
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.backends.postgres.own_connections import OwnAsyncConnection
from mnemostore.core.errors import ValidationError
from mnemostore.core.filters import F
from mnemostore.core.store import Store
from mnemostore.testing.factories import make

__all__ = ["postgres_server", "store"]


def test_lone_statements_reuse_their_kind_of_cursor_and_each_gets_its_own_result(store: Store) -> None:
    records = [store.heuristics.add(make("heuristic", i, agent=f"agent-{i % 2}")) for i in range(6)]  # upserts
    conn = pooled_connection(store)
    text_cursor = conn.kept_cursors[False, False]
    assert [store.heuristics.count(where=F.agent == f"agent-{n}") for n in (0, 1, 0)] == [3, 3, 3]
    reinforced = store.heuristics.reinforce(records[2].id, True)  # UPDATE ... RETURNING, binary: one row
    assert reinforced.occurrence_count == records[2].occurrence_count + 1
    assert store.heuristics.get_many([r.id for r in records[3:]]) == records[3:]  # rows read: a cursor of their own
    assert store.heuristics.count() == 6
    assert conn.kept_cursors[False, False] is text_cursor
    assert set(conn.kept_cursors) == {(False, False), (False, True)}
    result = conn.kept_cursors[False, True].pgresult
    assert result is not None and result.ntuples == 1, "a kept cursor holds the rows a read asked for"
    assert pooled_connection(store) is conn


def test_a_failed_statement_leaves_the_kept_cursor_usable(store: Store) -> None:
    record = store.heuristics.add(make("heuristic", 1))
    store.heuristics.update(record.id, set={"occurrence_count": 2**63 - 1})
    with pytest.raises(ValidationError, match=r"past 2\*\*63"):
        store.heuristics.update(record.id, inc={"occurrence_count": 1})  # the server refuses: out of range
    assert store.heuristics.update(record.id, inc={"success_count": 1}).success_count == record.success_count + 1
    assert store.heuristics.count() == 1
    assert pooled_connection(store).kept_cursors


def test_a_borrowed_pools_connections_keep_no_cursors(store: Store, postgres_server: PostgresTestServer) -> None:
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    with ConnectionPool(backend.conninfo(), min_size=1, max_size=1, open=True) as pool, \
            mnemostore.open(postgres_server.url(), pool=pool) as borrowed:
        record = borrowed.heuristics.add(make("heuristic", 2))
        assert borrowed.heuristics.count() == 1 and borrowed.heuristics.get(record.id) == record
        with pool.connection() as conn:
            assert not hasattr(conn, "kept_cursors")


def test_the_async_sides_connections_keep_their_cursors(postgres_server: PostgresTestServer) -> None:
    async def use() -> None:
        async with await mnemostore.open_async(postgres_server.url(pool_max_size="1")) as store:
            records = [await store.heuristics.add(make("heuristic", i)) for i in range(3)]
            assert await store.heuristics.count() == 3
            assert await store.heuristics.get(records[1].id) == records[1]
            pool = store._calls.side.pool  # type: ignore[attr-defined]
            async with pool.connection() as conn:
                assert isinstance(conn, OwnAsyncConnection) and (False, False) in conn.kept_cursors

    asyncio.run(use())
