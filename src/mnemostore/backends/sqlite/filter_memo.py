"""The matrix rows a search filter selected, kept per connection while that connection sees the database
unchanged, so a filter repeated between writes skips its SQL and its gather of rows.

Unchanged is read in the search's own snapshot: `PRAGMA data_version` moves when any other connection,
in any process, commits (SQLite's own change detection); `total_changes` moves with this connection's
own writes, which data_version leaves out. A connection is used by one thread at a time, so its memo is
too; an entry also names the matrix object it was taken from, and is used only with that matrix.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .vector_cache import Matrix

Token = tuple[int, int]
"""(data_version, total_changes) of one connection, read in one snapshot."""

BUDGET_BYTES = 16 << 20
"""Gathered rows kept per connection: the oldest entries go first past it, and a larger one is not kept."""
ENTRIES = 8
"""Filters kept per connection."""
CONNECTIONS = 16
"""Connections remembered (a pool that replaced its connections leaves their memos behind)."""


@dataclass(frozen=True)
class Picked:
    """What a filter selected in one matrix: its rows, and their vectors gathered (or None)."""

    matrix: weakref.ref[Matrix]
    """The matrix it was picked from (weakly: an old matrix is not kept alive by its memo)."""
    rows: npt.NDArray[np.intp]
    gathered: npt.NDArray[np.float32] | None

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + (0 if self.gathered is None else self.gathered.nbytes))


@dataclass(eq=False)
class _Memo:
    conn: sqlite3.Connection
    token: Token
    entries: dict[Hashable, Picked] = field(default_factory=dict)


class FilterMemo:
    """Per-connection memos of `Picked` rows; thread-safe."""

    def __init__(self) -> None:
        self._memos: dict[int, _Memo] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._memos.clear()

    def picked(self, conn: sqlite3.Connection, key: tuple[Any, ...], matrix: Matrix,
               pick: Callable[[], Picked]) -> Picked:
        """The rows `key`'s filter selects in `matrix`, from the memo if the database is unchanged for
        `conn` since they were picked, else from `pick` (the caller holds a read transaction)."""
        try:
            hash(key)
        except TypeError:  # a filter value that cannot be a key: not kept
            return pick()
        token: Token = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)
        memo = self._memo(conn, token)
        found = memo.entries.get(key)
        if found is not None and found.matrix() is matrix:
            return found
        picked = pick()
        memo.entries.pop(key, None)
        if picked.nbytes > BUDGET_BYTES:
            return picked
        memo.entries[key] = picked
        spent = sum(entry.nbytes for entry in memo.entries.values())
        while len(memo.entries) > ENTRIES or spent > BUDGET_BYTES:
            oldest = next(iter(memo.entries))
            spent -= memo.entries.pop(oldest).nbytes
        return picked

    def _memo(self, conn: sqlite3.Connection, token: Token) -> _Memo:
        """`conn`'s memo, emptied if the database changed for it since."""
        with self._lock:
            memo = self._memos.get(id(conn))
            if memo is None or memo.conn is not conn:
                memo = self._memos[id(conn)] = _Memo(conn, token)
                while len(self._memos) > CONNECTIONS:
                    del self._memos[next(iter(self._memos))]
            elif memo.token != token:
                memo.token, memo.entries = token, {}
            return memo
