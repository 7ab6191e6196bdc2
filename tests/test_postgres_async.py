"""The postgres backend's native async side (async_side.py) against a real server: `open_async`
awaits it for the hot calls, a put cancelled anywhere is whole or absent with its connection back
in the async pool, and the conformance suite holds the side to its sync side's results."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import psycopg
import pytest
from psycopg import sql
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore import AsyncStore, F, registry
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.backends.postgres.async_side import AsyncPostgresSide
from mnemostore.core.executor import NativeCalls
from mnemostore.core.records import Record
from mnemostore.testing import validate
from mnemostore.testing.factories import batch, make

__all__ = ["postgres_server"]

HOT_CALLS = {"put", "put_missing", "put_keeping_created", "get", "query", "query_values", "count", "delete", "update",
             "search", "append_checkpoint", "read_meta", "write_meta"}
METADATA_CLAUSE = "test_nested_metadata_round_trips_with_exact_types"


@pytest.fixture
def url(postgres_server: PostgresTestServer) -> str:
    return postgres_server.url()


def _with_vectors(start: int, n: int) -> list[Any]:
    """n heuristics with unit vectors of 8 dimensions."""
    vectors = np.random.default_rng(start).standard_normal((n, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [make("heuristic", start + i, embedding=vectors[i]) for i in range(n)]


def _side(store: AsyncStore) -> AsyncPostgresSide:
    calls = store._calls
    assert isinstance(calls, NativeCalls) and isinstance(calls.side, AsyncPostgresSide)
    return calls.side


def _requests(pool: Any) -> int:
    return int(pool.get_stats().get("requests_num", 0))


def test_open_async_awaits_the_native_side_for_the_hot_calls(url: str) -> None:
    """After the first write (which types the vector columns through the sync pool, once), every
    hot call of the facade takes its connection from the async pool, none from the sync one."""

    async def use() -> None:
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            assert side.native_calls() >= HOT_CALLS
            await store.heuristics.put(_with_vectors(0, 1))
            sync_pool, before = side.backend._pool, _requests(side.pool)
            sync_before = _requests(sync_pool)
            records = _with_vectors(1, 100)
            await store.heuristics.put(records)  # COPY
            await store.heuristics.put(records[:5])  # pipelined upserts
            assert (await store.heuristics.get(records[3].id)).model_dump(exclude={"embedding"}) == \
                records[3].model_dump(exclude={"embedding"})
            assert [r.id for r in await store.heuristics.get_many([records[1].id, records[2].id])] == \
                [records[1].id, records[2].id]
            assert len([r async for r in store.heuristics.iterate(batch_size=30)]) == 101
            assert await store.heuristics.count(where=F.agent == records[0].agent) >= 1
            reinforced = await store.heuristics.reinforce(records[0].id, True)
            assert reinforced.occurrence_count == records[0].occurrence_count + 1
            hits = await store.search("heuristic", np.asarray(records[7].embedding), k=3,
                                      where=F.agent == records[7].agent)
            assert hits[0].record.id == records[7].id
            saved = [await store.checkpoints.save("run", {"step": step}) for step in range(3)]
            assert await store.checkpoints.latest("run") == saved[-1]
            assert await store.checkpoints.history("run") == saved
            assert await store.heuristics.delete(where=F.id == records[0].id) == 1
            assert _requests(sync_pool) == sync_before, "a hot call took a connection of the sync pool"
            assert _requests(side.pool) > before
        assert side.pool is None  # closed with the store

    asyncio.run(use())


@pytest.mark.parametrize("size", [10, 300], ids=["pipelined", "copy"])
def test_a_put_cancelled_while_the_server_runs_it_leaves_nothing_and_its_connection_in_the_pool(
        url: str, size: int) -> None:
    """The batch's statement waits on a lock another session holds; the task is cancelled there:
    psycopg cancels the statement, the transaction is rolled back, the connection is back in the
    async pool (none checked out, none lost), and the store serves the next call."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            await store.heuristics.put(batch("heuristic", 1))
            await store.heuristics.delete(where={})
            table = side.backend.statements.table(side.backend._layout("heuristic"))
            async with await psycopg.AsyncConnection.connect(side.backend.conninfo()) as blocker:
                await blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
                task = asyncio.create_task(store.heuristics.put(batch("heuristic", size)))
                await _until_waiting_on_a_lock(blocker)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await blocker.rollback()
            assert await store.heuristics.count() == 0
            await _assert_all_back(side)
            await store.heuristics.put(batch("heuristic", size))
            assert await store.heuristics.count() == size

    asyncio.run(scenario())


def test_a_call_cancelled_while_its_connection_waits_to_go_back_still_returns_it(url: str) -> None:
    """A connection is given back without a task of its own unless the pool makes it wait (its lock
    held): cancelled right there, the call still returns the connection once the lock is free."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            await store.heuristics.put(batch("heuristic", 1))
            assert side.pool is not None
            pool_lock = side.pool._lock
            table = side.backend.statements.table(side.backend._layout("heuristic"))
            async with await psycopg.AsyncConnection.connect(side.backend.conninfo()) as blocker:
                await blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
                task = asyncio.create_task(store.heuristics.count())
                await _until_waiting_on_a_lock(blocker)
                await pool_lock.acquire()
                try:
                    await blocker.rollback()  # the count ends, and its connection waits for the pool's lock
                    deadline = time.monotonic() + 20
                    while not pool_lock._waiters and time.monotonic() < deadline:
                        await asyncio.sleep(0.001)
                    assert pool_lock._waiters, "the connection never waited to go back"
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                finally:
                    pool_lock.release()
            await _assert_all_back(side)
            assert await store.heuristics.count() == 1

    asyncio.run(scenario())


async def _until_waiting_on_a_lock(conn: psycopg.AsyncConnection[Any]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        cursor = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND datname = current_database()")
        found = await cursor.fetchone()
        if found and found[0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the put never waited on the lock")


async def _assert_all_back(side: AsyncPostgresSide) -> None:
    """Every connection of the async pool is in it. A call cancelled while it waited for a connection
    the pool was opening has it returned by the pool's worker, so this waits for the worker (~ms)."""
    assert side.pool is not None
    deadline = time.monotonic() + 5
    while True:
        stats = side.pool.get_stats()
        if stats["pool_available"] == stats["pool_size"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.01)
    assert stats["pool_available"] == stats["pool_size"], f"a connection is still checked out: {stats}"
    assert stats.get("requests_waiting", 0) == 0, stats


def test_a_batch_put_cancelled_at_any_point_is_whole_or_absent(url: str) -> None:
    """Cancelled from before it starts to after it ends, a 2,000-record put leaves all or none of
    its records, and every connection is back in the async pool."""

    async def scenario() -> list[int]:
        counts = []
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            await store.heuristics.put(batch("heuristic", 1))
            await store.heuristics.delete(where={})
            for delay in (0.0, 0.001, 0.003, 0.006, 0.01, 0.02, 0.04, 0.08, 0.16, 0.5):
                records = batch("heuristic", 2000)
                task = asyncio.create_task(store.heuristics.put(records))
                await asyncio.sleep(delay)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                count = await store.heuristics.count()
                assert count in (0, len(records)), f"a cancelled batch left {count} of {len(records)} records"
                counts.append(count)
                await store.heuristics.delete(where={})
                await _assert_all_back(side)
        return counts

    counts = asyncio.run(scenario())
    assert counts[0] == 0  # cancelled before it began


class MetadataLosingSide(AsyncPostgresSide):
    """A native side that drops metadata its sync side keeps."""

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        found = await super().get(kind, tenant, ids, vectors)
        return [record.model_copy(update={"metadata": {}}) for record in found]


class BrokenAsyncPostgres(PostgresBackend):
    name: ClassVar[str] = "broken-async-postgres"
    schemes: ClassVar[tuple[str, ...]] = ("broken-async-postgres",)
    async_backend = MetadataLosingSide


@pytest.fixture
def broken() -> Iterator[None]:
    registry.register(BrokenAsyncPostgres, replace=True)
    yield
    registry.unregister(BrokenAsyncPostgres.name)


def test_the_suite_holds_the_postgres_async_side_to_its_sync_side(
        postgres_server: PostgresTestServer, broken: None) -> None:
    """The suite's async runs on postgres go through the native side: a clause fails there only."""
    url = "broken-async-postgres:" + postgres_server.base_url.partition(":")[2]
    report = validate(url, keyword=METADATA_CLAUSE)
    failed = {r.nodeid.rpartition("[")[2] for r in report.results if r.outcome == "failed"}
    passed = {r.nodeid.rpartition("[")[2] for r in report.results if r.outcome == "passed"}
    assert failed and all(n.startswith("async-") for n in failed), failed
    assert passed and all(n.startswith("sync-") for n in passed), passed


def test_with_a_borrowed_pool_the_async_side_runs_on_its_connections(url: str) -> None:
    """`pool=` (a sync ConnectionPool the application owns): no async pool is made; the calls run on
    the borrowed connections in threads, and the pool stays open after the store closes."""
    from psycopg_pool import ConnectionPool

    conninfo = PostgresBackend(*_parsed(url)).conninfo()
    with ConnectionPool(conninfo, min_size=1, max_size=2) as pool:
        async def use() -> None:
            async with await mnemostore.open_async(url, pool=pool) as store:
                side = _side(store)
                records = _with_vectors(0, 70)
                await store.heuristics.put(records)
                assert side.pool is None and _requests(pool) > 0
                assert await store.heuristics.count() == 70
                hits = await store.search("heuristic", np.asarray(records[3].embedding), k=1)
                assert hits[0].record.id == records[3].id

        asyncio.run(use())
        assert not pool.closed


def _parsed(url: str) -> tuple[Any, Any]:
    from mnemostore.core.url import StoreURL

    parsed = StoreURL.parse(url)
    return parsed, PostgresBackend.options_model(**parsed.query)
