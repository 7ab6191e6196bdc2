"""The steps a postgres operation asks its driver to take: the one vocabulary of the sync and async sides.

An operation is a plan (plans.py): a generator that yields these steps, is sent each one's result,
and returns the call's result. It builds statements and decodes rows but does no I/O; the sync
backend's driver (sync_driver.py) and the async side's (async_side.py) execute the steps, so the
two sides share every statement and decoding and differ only in how they wait. A driver error
raised by a step is thrown into the plan at its `yield` (to turn it into a clearer error, or to
carry on after a `Copy` with `savepoint`); escaping it, it becomes a `BackendError`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

Result = Literal["none", "one", "all", "rowcount"]


@dataclass(frozen=True, slots=True)
class Prepare:
    """Call a sync preparation of the backend (a table looked up or created, vector columns typed)
    before any connection is taken; the async side runs it in a thread. Sent back: its result."""

    call: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class Connect:
    """Take a pooled connection for the plan's statements (errors then name `action`); first name
    `session_tenant` to the row-level security policies for the connection's session unless it
    holds that value already, then begin a transaction if `transaction`. Sent back: None."""

    action: str
    transaction: bool = False
    session_tenant: str | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One statement. Sent back by `result`: None, the first row (or None), every row, the row count.
    With `raw` its placeholders are the server's own ($1, $2, ...), sent as they are: psycopg parses
    a statement's %s anew on every execution once it is over 4 KB or 50 parameters (a group's)."""

    statement: bytes | str
    params: Sequence[Any] | None = None
    result: Result = "none"
    binary: bool = False
    raw: bool = False


@dataclass(frozen=True, slots=True)
class RunMany:
    """One statement once per row of `rows` (executemany). Sent back: None."""

    statement: bytes
    rows: Sequence[Sequence[Any]]
    result: Literal["none"] = "none"


@dataclass(frozen=True, slots=True)
class Pipelined:
    """Statements sent together in pipeline mode (one round trip), in a transaction of their own if
    `transaction`; results are read after the last. Sent back: one result per step, in order."""

    steps: tuple[Run | RunMany, ...]
    transaction: bool = True


@dataclass(frozen=True, slots=True)
class Copy:
    """Binary COPY of `rows` (`types` their OIDs) by `statement`; with `savepoint`, in a nested
    transaction, so a failure (thrown into the plan) leaves the plan's transaction usable. Sent back: None."""

    statement: bytes
    types: Sequence[int]
    rows: Sequence[Sequence[Any]]
    savepoint: bool = False


Step = Prepare | Connect | Run | RunMany | Pipelined | Copy
Plan = Generator[Step, Any, T]


def cursor_for(conn: Any, step: Run | RunMany, raw_cursor: Callable[[Any], Any], alone: bool = True) -> Any:
    """A driver's cursor for `step` on `conn`: binary results if it asks for them; made by
    `raw_cursor` (psycopg's RawCursor or AsyncRawCursor) for a `raw` statement. A statement `alone`
    (not a pipeline's part) whose rows are not all read reuses the cursor a connection of the store's
    own pool keeps for its kind (own_connections.py)."""
    raw = binary = False
    if type(step) is Run:
        raw, binary = step.raw, step.binary
    kept: dict[tuple[bool, bool], Any] | None = getattr(conn, "kept_cursors", None)
    if kept is None or not alone or step.result == "all":
        return _new_cursor(conn, raw, binary, raw_cursor)
    cursor = kept.get((raw, binary))
    if cursor is None:
        cursor = kept[raw, binary] = _new_cursor(conn, raw, binary, raw_cursor)
    return cursor


def _new_cursor(conn: Any, raw: bool, binary: bool, raw_cursor: Callable[[Any], Any]) -> Any:
    if raw:
        from psycopg.pq import Format

        cursor = raw_cursor(conn)
        cursor.format = Format.BINARY if binary else Format.TEXT
        return cursor
    return conn.cursor(binary=binary)
