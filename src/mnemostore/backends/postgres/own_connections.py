"""Connections of the store's own pools (sync and async), which keep a cursor per kind of statement.

Making a psycopg cursor copies the connection's adapters map, and its transformer's dumper lookups
are lost with it: ~20 us of client CPU per statement here, where a `put_writes`' whole statement
costs ~50. A lone statement (`steps.cursor_for`) reuses its connection's cursor instead. A cursor
holds its last result until its next statement, so statements read row by row ("all") and the
parts of a pipeline (each read after the last is sent) still get cursors of their own. A borrowed
pool's connections are psycopg's own classes: they keep nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .lone_writes import LoneWrites

CursorKey = tuple[bool, bool]
"""(raw: the server's $n placeholders, binary results)."""


class OwnConnection(psycopg.Connection[tuple[Any, ...]]):
    """A connection of the sync backend's own pool (`connection_class`), with its kept cursors and
    its lone writes (made at the first, once the pool's `configure` has registered the adapters)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept_cursors: dict[CursorKey, psycopg.Cursor[Any]] = {}
        self.lone: LoneWrites | None = None

    def lone_writes(self) -> LoneWrites:
        lone = self.lone
        if lone is None:
            lone = self.lone = LoneWrites(self)
        return lone


class OwnAsyncConnection(psycopg.AsyncConnection[tuple[Any, ...]]):
    """A connection of the async side's own pool (`connection_class`), with its kept cursors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept_cursors: dict[CursorKey, psycopg.AsyncCursor[Any]] = {}
