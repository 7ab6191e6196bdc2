"""Readers of fixed shapes' documents (`SQLiteBackend.shapes_reader`): a hot read's statement, the template of
its arguments and its decoders made once, so a call binds its values, runs one statement and decodes.

A reader is made for (kind, shape, limit) reads a program repeats (the LangGraph saver's); it compiles them
through the backend's shape cache and again whenever the backend forgets its compiled shapes (a kind
evolved, a layout migrated, `SHAPES_KEPT` reached, the store reopened). A read whose kind has no table yet,
or whose values its statement was not compiled for, is answered as `query_shapes_documents` answers it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from ...core.errors import MnemostoreError
from ...core.protocol import backend_error
from ...core.shapes import QueryShape
from .connections import Connections
from .schema import Layout, tenant_key
from .selects import Select
from .sql_filters import INLINE_LIMIT, Binder

if TYPE_CHECKING:
    from .backend import SQLiteBackend

ShapeRead = tuple[str, QueryShape, int | None]
"""(kind, shape, limit) of one read a `ShapesReader` makes; its values come with each call."""
Decoder = Callable[[Sequence[Any]], dict[str, Any]]


class ShapesReader:
    """`SQLiteBackend.query_shapes_documents` of fixed reads and tenant, their values given per call (one
    mapping per read): each read's documents, in its order, or None where `query_shapes_documents` gives None."""

    __slots__ = ("_backend", "_plan", "_reads", "_tenant", "_token")

    def __init__(self, backend: SQLiteBackend, tenant: str | None, reads: Sequence[ShapeRead]) -> None:
        self._backend = backend
        self._tenant = tenant
        self._reads = tuple(reads)
        self._plan: _Plan | None = None
        self._token: object = None
        """The backend's `_shapes_token` the plan was made under: another one means the plan is made again."""

    def __call__(self, values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        plan = self._plan
        if plan is None or self._token is not self._backend._shapes_token:
            plan = self._planned()
            if plan is None:  # a kind with no table yet: asked every time, as a read of it is
                found: list[list[dict[str, Any]]] | None = self._backend.query_shapes_documents(
                    self._tenant, [(kind, shape, part, limit)
                                   for (kind, shape, limit), part in zip(self._reads, values, strict=True)])
                return found
        try:
            return plan.read(values)
        except MnemostoreError:
            raise
        except Exception as exc:  # as `raising_backend_errors` gives them
            raise backend_error(self._backend, "shapes_reader", exc) from exc

    def _planned(self) -> _Plan | None:
        """The plan under the backend's compiled shapes now (kept); None while a read's kind has no table."""
        backend = self._backend
        parts: list[tuple[Layout, Select, Binder, int | None]] = []
        for kind, shape, limit in self._reads:
            prepared = backend._kind(kind)
            if prepared is None:
                return None
            select, binder = backend._compiled_shape(prepared.layout, shape, limit == 1, limit is None, False)
            parts.append((prepared.layout, select, binder, limit))
        # the token after compiling: one that reached `SHAPES_KEPT` forgot the others, which are still right
        self._plan, self._token = _Plan.of(backend.db, tenant_key(self._tenant), parts), backend._shapes_token
        return self._plan


_Bind = tuple[Callable[[str, Mapping[str, Any]], list[Any] | None], str, int, list[Any]]
"""A part's `Binder`, the tenant's key, how many times the statement takes its arguments, and the limit
appended (if any)."""


class _Plan:
    """A reader's statement and how a call's values become its arguments and its rows documents."""

    __slots__ = ("_binds", "_by_seq", "_db", "_decoders", "_refused", "_single", "_sql")

    def __init__(self, db: Connections, sql: str, binds: tuple[_Bind, ...], decoders: tuple[tuple[Decoder, int], ...],
                 by_seq: str | None = None, refused: bool = False) -> None:
        self._db, self._sql, self._binds, self._decoders = db, sql, binds, decoders
        self._single = decoders[0][0] if len(decoders) == 1 else None
        self._by_seq = by_seq
        """For one part that selects seqs: the head of the statement reading their rows (then `seq IN ...`)."""
        self._refused = refused

    @classmethod
    def of(cls, db: Connections, tenant: str, parts: Sequence[tuple[Layout, Select, Binder, int | None]]) -> _Plan:
        """One part's select as it is (one that selects seqs, with the statement reading their rows); several
        joined by UNION ALL, each row led by its part's place and padded with NULLs to the widest part's bytes
        columns (`backend._Union`), refused (None for every call) if one of them selects seqs."""
        binds = tuple((binder, tenant, select.repeat, [limit] if select.mode != "first" and limit is not None else [])
                      for _, select, binder, limit in parts)
        if len(parts) == 1:
            layout, select, _, _ = parts[0]
            by_seq = f"SELECT seq, {layout.read_columns(False)} FROM {layout.table} WHERE seq IN "
            return cls(db, select.sql, binds, ((layout.document_decoder, 0),),
                       by_seq if select.mode == "seqs" else None)
        width = max(len(layout.binary) for layout, _, _, _ in parts)
        sql = " UNION ALL ".join(f"SELECT {place}, *{', NULL' * (width - len(layout.binary))} FROM ({select.sql})"
                                 for place, (layout, select, _, _) in enumerate(parts))
        decoders = tuple((layout.document_decoder, 3 + len(layout.binary)) for layout, _, _, _ in parts)
        return cls(db, sql, binds, decoders, refused=any(select.mode == "seqs" for _, select, _, _ in parts))

    def read(self, values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        if self._refused:
            return None
        args: list[Any] = []
        found: list[list[dict[str, Any]]] = []
        for (binder, tenant, repeat, tail), part in zip(self._binds, values, strict=True):
            bound = binder(tenant, part)
            if bound is None:  # a value the statement was not compiled for (None, an int beyond 64 bits)
                return None
            args += bound * repeat if repeat > 1 else bound
            args += tail
            found.append([])
        decode = self._single
        if decode is None:
            decoders = self._decoders
            for row in self._db.one_read(partial(_all_rows, self._sql, args)):
                place = row[0]
                decode, end = decoders[place]
                found[place].append(decode(row[1:end]))
        elif self._by_seq is None:
            found[0] = list(map(decode, self._db.one_read(partial(_all_rows, self._sql, args))))
        else:  # two statements, one snapshot
            found[0] = list(map(decode, self._db.read(partial(_rows_by_seq, self._sql, args, self._by_seq))))
        return found


def _all_rows(sql: str, args: Sequence[Any], conn: sqlite3.Connection) -> list[Any]:
    return conn.execute(sql, args).fetchall()


def _rows_by_seq(sql: str, args: Sequence[Any], by_seq: str, conn: sqlite3.Connection) -> list[Any]:
    """The rows (without their seq) of the seqs `sql` selects, in its order (`backend._records_by_seq`)."""
    seqs = [seq for seq, in conn.execute(sql, args)]
    if not seqs:
        return []
    if len(seqs) <= INLINE_LIMIT:
        rows = conn.execute(f"{by_seq}({', '.join('?' * len(seqs))})", seqs)
    else:
        rows = conn.execute(f"{by_seq}(SELECT value FROM json_each(?))", [orjson.dumps(seqs).decode()])
    found = {row[0]: row[1:] for row in rows}
    return [found[seq] for seq in seqs]
