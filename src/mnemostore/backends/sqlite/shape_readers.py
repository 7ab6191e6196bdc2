"""Readers of fixed shapes' documents (`SQLiteBackend.shapes_reader`) and records (`records_reader`): a hot read's
statement, the template of its arguments and its decoders made once, so a call binds its values, runs one
statement and decodes.

A reader is made for (kind, shape, limit, fields) reads a program repeats (the LangGraph saver's); it compiles them
through the backend's shape cache and again whenever the backend forgets its compiled shapes (a kind
evolved, a layout migrated, `SHAPES_KEPT` reached, the store reopened). A read whose kind has no table yet,
or whose values its statement was not compiled for, is answered as `query_shapes_documents` answers it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from operator import is_
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson

from ...core.errors import MnemostoreError
from ...core.protocol import backend_error
from ...core.records import Record
from ...core.shapes import QueryShape
from .connections import Connections
from .schema import Layout, tenant_key
from .selects import Select
from .sql_filters import INLINE_LIMIT, Binder

if TYPE_CHECKING:
    from .backend import SQLiteBackend

ShapeRead = tuple[str, QueryShape, int | None, tuple[str, ...] | None]
"""(kind, shape, limit, fields) of one read a `ShapesReader` makes, its values given with each call: each
record's document, or with `fields` a dict of those fields alone (plain ones read from their columns, so a
read that needs a record's id decodes no document)."""
Decoder = Callable[[Sequence[Any]], dict[str, Any]]


class ShapesReader:
    """`SQLiteBackend.query_shapes_documents` of fixed reads and tenant, their values given per call (one
    mapping per read): each read's documents (or their `fields`), in its order, or None where
    `query_shapes_documents` gives None."""

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
                return self._unplanned(values)
        try:
            return plan.read(values)
        except MnemostoreError:
            raise
        except Exception as exc:  # as `raising_backend_errors` gives them
            raise backend_error(self._backend, "shapes_reader", exc) from exc

    def _unplanned(self, values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        """`query_shapes_documents`' answer (each read's `fields` picked from its documents)."""
        reads = self._reads
        found: list[list[dict[str, Any]]] | None = self._backend.query_shapes_documents(
            self._tenant, [(kind, shape, part, limit)
                           for (kind, shape, limit, _), part in zip(reads, values, strict=True)])
        if found is None:
            return None
        return [documents if fields is None else [{name: document[name] for name in fields} for document in documents]
                for documents, (*_, fields) in zip(found, reads, strict=True)]

    def _planned(self) -> _Plan | None:
        """The plan under the backend's compiled shapes now (kept); None while a read's kind has no table."""
        backend = self._backend
        parts: list[_Part] = []
        for kind, shape, limit, fields in self._reads:
            prepared = backend._kind(kind)
            if prepared is None:
                return None
            select, binder = backend._compiled_shape(prepared.layout, shape, limit == 1, limit is None, False)
            parts.append((prepared.layout, select, binder, limit, fields))
        # the token after compiling: one that reached `SHAPES_KEPT` forgot the others, which are still right
        self._plan, self._token = _Plan.of(backend.db, tenant_key(self._tenant), parts), backend._shapes_token
        return self._plan


class RecordsReader:
    """`SQLiteBackend.query_shape` of a fixed kind, tenant, shape, limit and `vectors`, its values given per call:
    it binds them and reads its compiled `Select` as `query_shape` does (`_compiled_records`), without looking the
    kind and the shape up each time. Planned as `ShapesReader` plans (again when the backend forgets its
    compiled shapes; not while the kind has no table); a value the statement was not compiled for takes
    `query_shape`."""

    __slots__ = ("_args", "_backend", "_read", "_token")

    def __init__(self, backend: SQLiteBackend, kind: str, tenant: str | None, shape: QueryShape, limit: int | None,
                 vectors: bool) -> None:
        self._backend = backend
        self._args = (kind, tenant, shape, limit, vectors)
        self._read: Callable[[Mapping[str, Any]], list[Record] | None] | None = None
        self._token: object = None
        """The backend's `_shapes_token` the plan was made under (`ShapesReader._token`)."""

    def __call__(self, values: Mapping[str, Any]) -> list[Record]:
        try:  # planning too: it may read the kind's table and compile its statement, as `query_shape` does
            read = self._read
            if read is None or self._token is not self._backend._shapes_token:
                read = self._planned(values)
            found = None if read is None else read(values)
        except MnemostoreError:
            raise
        except Exception as exc:  # as `raising_backend_errors` gives them
            raise backend_error(self._backend, "records_reader", exc) from exc
        if found is None:
            kind, tenant, shape, limit, vectors = self._args
            return self._backend.query_shape(kind, tenant, shape, values, limit, vectors)
        return found

    def _planned(self, values: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], list[Record] | None] | None:
        """The read under the backend's compiled shapes now (kept); None while the kind has no table, or where
        the shape is not compiled yet and `values` are ones it would not bind (nothing is compiled for a call
        that would not use it, as `SQLiteBackend._shape_select`)."""
        backend = self._backend
        kind, tenant, shape, limit, vectors = self._args
        prepared = backend._kind(kind)
        if prepared is None:
            return None
        layout = prepared.layout
        compiled = backend._shape_for(layout, shape, limit, vectors, values)
        if compiled is None:
            return None
        select, binder = compiled
        if select.mode == "first":  # a run's latest checkpoint: its one row read and decoded straight
            read = partial(_first_record, backend.db.one_row, layout.row_decoder, select.sql, binder,
                           tenant_key(tenant), select.repeat)
        else:
            read = partial(_records, backend._compiled_records, layout, select, binder, tenant_key(tenant), limit,
                           vectors)
        self._read, self._token = read, backend._shapes_token
        return read


def _records(read: Callable[..., list[Record]], layout: Layout, select: Select, binder: Binder, tenant: str,
             limit: int | None, vectors: bool, values: Mapping[str, Any]) -> list[Record] | None:
    """A compiled shape's records with `values` bound (`SQLiteBackend._compiled_records`); None for values the
    statement was not compiled for."""
    args = binder(tenant, values)
    return None if args is None else read(layout, select, args, limit, vectors)


def _first_record(one_row: Callable[[str, Sequence[Any]], Any], decode: Callable[[Sequence[Any]], Record], sql: str,
                  binder: Binder, tenant: str, repeat: int, values: Mapping[str, Any]) -> list[Record] | None:
    """`_records` of a "first" select (`SQLiteBackend._compiled_records`' first branch, without its lookups)."""
    args = binder(tenant, values)
    if args is None:
        return None
    row = one_row(sql, args * repeat if repeat > 1 else args)
    return [] if row is None else [decode(row)]


_Part = tuple[Layout, Select, Binder, int | None, tuple[str, ...] | None]
"""A read's layout, compiled select and binder, its limit and its fields (None: the documents)."""
_Bind = tuple[Callable[[str, Mapping[str, Any]], list[Any] | None], str, int, list[Any]]
"""A part's `Binder`, the tenant's key, how many times the statement takes its arguments, and the limit
appended (if any)."""


class _Plan:
    """A reader's statement and how a call's values become its arguments and its rows documents."""

    __slots__ = ("_binds", "_by_seq", "_db", "_decoders", "_last", "_refused", "_single", "_sql")

    def __init__(self, db: Connections, sql: str, binds: tuple[_Bind, ...], decoders: tuple[tuple[Decoder, int], ...],
                 by_seq: str | None = None, refused: bool = False) -> None:
        self._db, self._sql, self._binds, self._decoders = db, sql, binds, decoders
        self._single = decoders[0][0] if len(decoders) == 1 else None
        self._by_seq = by_seq
        """For one part that selects seqs: the head of the statement reading their rows (then `seq IN ...`)."""
        self._refused = refused
        self._last: tuple[tuple[Mapping[str, Any], ...], list[Any]] = ((), [])
        """The values of the last call given as read-only mappings (`MappingProxyType`, which no caller changes),
        and their arguments: a call given those very mappings again (a saver's latest read of one thread, its
        values kept) binds nothing. Plain dicts are bound each time: a caller may change one between calls."""

    @classmethod
    def of(cls, db: Connections, tenant: str, parts: Sequence[_Part]) -> _Plan:
        """One part's select (one that selects seqs, with the statement reading their rows); several joined by
        UNION ALL, each row led by its part's place and padded with NULLs to the widest part's columns
        (`backend._Union`), refused (None for every call) if one of them selects seqs."""
        binds = tuple((binder, tenant, select.repeat, [limit] if select.mode != "first" and limit is not None else [])
                      for _, select, binder, limit, _ in parts)
        read = [_columns(layout, fields) for layout, *_, fields in parts]
        sqls = [_selecting(select, layout, columns)
                for (layout, select, *_), (columns, _, _) in zip(parts, read, strict=True)]
        if len(parts) == 1:
            (layout, select, *_), ((columns, _, decode),) = parts[0], read
            by_seq = f"SELECT seq, {columns} FROM {layout.table} WHERE seq IN "
            return cls(db, sqls[0], binds, ((decode, 0),), by_seq if select.mode == "seqs" else None)
        width = max(count for _, count, _ in read)
        sql = " UNION ALL ".join(f"SELECT {place}, *{', NULL' * (width - count)} FROM ({part})"
                                 for place, (part, (_, count, _)) in enumerate(zip(sqls, read, strict=True)))
        decoders = tuple((decode, 1 + count) for _, count, decode in read)
        return cls(db, sql, binds, decoders, refused=any(select.mode == "seqs" for _, select, *_ in parts))

    def read(self, values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        if self._refused:
            return None
        last, args = self._last
        if len(last) != len(values) or not all(map(is_, last, values)):
            args = []
            for (binder, tenant, repeat, tail), part in zip(self._binds, values, strict=True):
                bound = binder(tenant, part)
                if bound is None:  # a value the statement was not compiled for (None, an int beyond 64 bits)
                    return None
                args += bound * repeat if repeat > 1 else bound
                args += tail
            if all(type(part) is MappingProxyType for part in values):
                self._last = (tuple(values), args)
        found: list[list[dict[str, Any]]] = [[] for _ in values]
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


def _columns(layout: Layout, fields: tuple[str, ...] | None) -> tuple[str, int, Decoder]:
    """What a read selects (its columns and how many) and how a row of them becomes its dict: the document
    (`Layout.document_decoder`), or the `fields`' own columns where they are all stored as they are (str, int,
    float: as `SQLiteBackend.query_values` reads them), else the document's `fields`."""
    if fields is not None and all(layout.fields.get(name) in (str, int, float) for name in fields):
        return ", ".join(map(layout.column, fields)), len(fields), partial(_zipped, fields)
    decode = layout.document_decoder
    if fields is not None:
        decode = partial(_picked_one, decode, fields)
    return layout.read_columns(False), 2 + len(layout.binary), decode


def _selecting(select: Select, layout: Layout, columns: str) -> str:
    """A one-statement `select`'s SQL reading `columns` instead of the documents' (`Layout.read_columns`),
    or its own where those are what it reads (and where it selects seqs)."""
    read = f"SELECT {layout.read_columns(False)} "
    if select.mode == "seqs" or columns == layout.read_columns(False):
        return select.sql
    assert select.sql.startswith(read), select.sql  # `Select.of` reads them first
    return f"SELECT {columns} {select.sql[len(read):]}"


def _zipped(fields: tuple[str, ...], row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(fields, row, strict=True))


def _picked_one(decode: Decoder, fields: tuple[str, ...], row: Sequence[Any]) -> dict[str, Any]:
    document = decode(row)
    return {name: document[name] for name in fields}


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
