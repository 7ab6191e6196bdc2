"""The sync backend's driver: a plan's steps (steps.py) on a connection of its psycopg pool.

The backend imports it at its first call (`backend._load_sync_driver`), so psycopg is imported here at the top."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from .own_connections import OwnConnection
from .steps import Connect, Copy, Pipelined, Plan, Prepare, Run, RunMany, cursor_for

if TYPE_CHECKING:
    from .backend import PostgresBackend

    Connection = psycopg.Connection[tuple[Any, ...]]

T = TypeVar("T")
_LONE = ("none", "rowcount")
"""Results of the statements `LoneWrites` can run: none or a row count (lone_writes.py)."""


def run(backend: PostgresBackend, plan: Plan[T]) -> T:
    """`plan`'s result: its preparations called, then its statements on one pooled connection,
    given back to the pool however the plan ends. Driver errors the plan lets out become
    `BackendError`s naming its action."""
    try:
        step = next(plan)
        while type(step) is Prepare:
            step = plan.send(step.call())
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    if type(step) is not Connect:
        raise TypeError(f"a plan ran {step!r} before connecting")
    return _connected(backend, step, plan)


def _connected(backend: PostgresBackend, connect: Connect, plan: Plan[T]) -> T:
    """The plan's statements on a pooled connection (`PostgresBackend._take`): our own pool's is
    in autocommit (see `PostgresBackend._configure`); a borrowed pool's is in a transaction,
    committed on success."""
    conn = backend._take()
    try:
        if backend._own_pool:
            return _scoped(backend, conn, connect, plan)
        backend._configure(conn)
        with conn:
            return _scoped(backend, conn, connect, plan)
    except psycopg.Error as exc:
        raise backend._driver_error(connect.action, exc) from exc
    finally:
        plan.close()
        backend._give(conn)


def _scoped(backend: PostgresBackend, conn: Connection, connect: Connect, plan: Plan[T]) -> T:
    if connect.session_tenant is not None:
        backend._name_tenant(conn, connect.session_tenant)
    if not connect.transaction:
        return _steps(conn, plan)
    with conn.transaction():
        return _steps(conn, plan)


def _steps(conn: Connection, plan: Plan[T]) -> T:
    """Each step the plan yields, executed, its result sent back (its driver error thrown in)."""
    send, value = plan.send, None
    while True:
        try:
            step = send(value)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            value, send = _execute(conn, step), plan.send
        except psycopg.Error as exc:
            value, send = exc, plan.throw


def _execute(conn: Connection, step: Any) -> Any:
    kind = type(step)
    if kind is Run:
        if step.result in _LONE and type(conn) is OwnConnection:  # a write alone: at the libpq level
            lone = conn.lone_writes()
            if lone.usable():
                count = lone.run(step)
                return count if step.result == "rowcount" else None
        cursor = _cursor(conn, step)
        cursor.execute(step.statement, step.params)
        return _result(cursor, step)
    if kind is RunMany:
        _cursor(conn, step).executemany(step.statement, step.rows)
        return None
    if kind is Pipelined:
        cursors = []
        with conn.pipeline(), conn.transaction() if step.transaction else nullcontext():
            for part in step.steps:
                cursor = _cursor(conn, part, alone=False)
                if type(part) is Run:
                    cursor.execute(part.statement, part.params)
                else:
                    cursor.executemany(part.statement, part.rows)
                cursors.append(cursor)
        return [_result(cursor, part) for cursor, part in zip(cursors, step.steps, strict=True)]
    if kind is Copy:
        with conn.transaction() if step.savepoint else nullcontext(), \
                conn.cursor().copy(step.statement) as copy:
            copy.set_types(step.types)
            for row in step.rows:
                copy.write_row(row)
        return None
    raise TypeError(f"a plan yielded {step!r} after connecting")


def _cursor(conn: Connection, step: Run | RunMany, alone: bool = True) -> psycopg.Cursor[Any]:
    found: psycopg.Cursor[Any] = cursor_for(conn, step, psycopg.RawCursor, alone)
    return found


def _result(cursor: psycopg.Cursor[Any], step: Run | RunMany) -> Any:
    if step.result == "none":
        return None
    if step.result == "all":
        return cursor.fetchall()
    if step.result == "one":
        return cursor.fetchone()
    return cursor.rowcount
