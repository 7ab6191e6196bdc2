"""The async side's driver: a plan's steps (steps.py) awaited on a connection of its async pool.

What sync_driver.py does, awaited. A task cancelled at any await stops there: psycopg cancels
the statement on the server, an open transaction is rolled back (a batch is written whole or not
at all), and the connection goes back to its pool even if the task is cancelled again meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from contextlib import nullcontext
from time import monotonic
from typing import TYPE_CHECKING, Any, TypeVar

from .steps import Connect, Copy, Pipelined, Plan, Prepare, Run, RunMany, cursor_for

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from .backend import PostgresBackend

    AsyncConnection = psycopg.AsyncConnection[tuple[Any, ...]]

T = TypeVar("T")


async def run(backend: PostgresBackend, pool: AsyncConnectionPool[Any], plan: Plan[T]) -> T:
    """`plan`'s result: its preparations called in a thread (once per store each: a table looked
    up, vector columns typed), then its statements on one connection of `pool`."""
    try:
        step = next(plan)
        while type(step) is Prepare:
            step = plan.send(await asyncio.to_thread(step.call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    if type(step) is not Connect:
        raise TypeError(f"a plan ran {step!r} before connecting")
    return await _connected(backend, pool, step, plan)


async def _connected(backend: PostgresBackend, pool: AsyncConnectionPool[Any], connect: Connect,
                     plan: Plan[T]) -> T:
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        conn = await pool.getconn()
    except PoolTimeout as exc:
        raise backend._no_connection(exc) from None
    try:
        if connect.session_tenant is not None and backend._tenant_named.get(conn) != connect.session_tenant:
            await _name_tenant(backend, conn, connect.session_tenant)
        if not connect.transaction:
            return await _steps(conn, plan)
        async with conn.transaction():
            return await _steps(conn, plan)
    except psycopg.Error as exc:
        raise backend._driver_error(connect.action, exc) from exc
    finally:
        plan.close()
        backend._last_used[conn] = monotonic()
        await _give_back(pool, conn)


async def _give_back(pool: AsyncConnectionPool[Any], conn: AsyncConnection) -> None:
    """`pool.putconn(conn)`, run to its end even if the task is cancelled meanwhile. It is started
    here and handed to a shielded task only if it has to wait: it rarely does (the connection is
    idle, the pool's lock free), and the task would cost three turns of the event loop per call."""
    returning = pool.putconn(conn)
    try:
        waiting_on = returning.send(None)
    except StopIteration:
        return
    await asyncio.shield(_Rest(returning, waiting_on))


class _Rest:
    """The rest of a coroutine suspended at `waiting_on` (what it yielded to the event loop), awaitable."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self.coroutine = coroutine
        self.waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        waiting_on, send = self.waiting_on, self.coroutine.send
        while True:
            try:
                value, send = (yield waiting_on), self.coroutine.send
            except BaseException as exc:  # thrown into the task: passed on to the coroutine
                value, send = exc, self.coroutine.throw
            try:
                waiting_on = send(value)
            except StopIteration as done:
                return done.value


async def _name_tenant(backend: PostgresBackend, conn: AsyncConnection, value: str) -> None:
    """`PostgresBackend._name_tenant` on an async connection."""
    from .row_security import SET_TENANT_SESSION

    backend._tenant_named.pop(conn, None)  # unknown if the statement fails
    await conn.execute(SET_TENANT_SESSION, (value,))
    backend._tenant_named[conn] = value


async def _steps(conn: AsyncConnection, plan: Plan[T]) -> T:
    """Each step the plan yields, executed, its result sent back (its driver error thrown in)."""
    import psycopg

    send, value = plan.send, None
    while True:
        try:
            step = send(value)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            value, send = await _execute(conn, step), plan.send
        except psycopg.Error as exc:
            value, send = exc, plan.throw


async def _execute(conn: AsyncConnection, step: Any) -> Any:
    kind = type(step)
    if kind is Run:
        cursor = _cursor(conn, step)
        await cursor.execute(step.statement, step.params)
        return await _result(cursor, step)
    if kind is RunMany:
        await _cursor(conn, step).executemany(step.statement, step.rows)
        return None
    if kind is Pipelined:
        cursors = []
        async with conn.pipeline(), conn.transaction() if step.transaction else nullcontext():
            for part in step.steps:
                cursor = _cursor(conn, part, alone=False)
                if type(part) is Run:
                    await cursor.execute(part.statement, part.params)
                else:
                    await cursor.executemany(part.statement, part.rows)
                cursors.append(cursor)
        return [await _result(cursor, part) for cursor, part in zip(cursors, step.steps, strict=True)]
    if kind is Copy:
        async with conn.transaction() if step.savepoint else nullcontext(), \
                conn.cursor().copy(step.statement) as copy:
            copy.set_types(step.types)
            for row in step.rows:
                await copy.write_row(row)
        return None
    raise TypeError(f"a plan yielded {step!r} after connecting")


def _cursor(conn: AsyncConnection, step: Run | RunMany, alone: bool = True) -> psycopg.AsyncCursor[Any]:
    import psycopg

    found: psycopg.AsyncCursor[Any] = cursor_for(conn, step, psycopg.AsyncRawCursor, alone)
    return found


async def _result(cursor: psycopg.AsyncCursor[Any], step: Run | RunMany) -> Any:
    if step.result == "none":
        return None
    if step.result == "all":
        return await cursor.fetchall()
    if step.result == "one":
        return await cursor.fetchone()
    return cursor.rowcount
