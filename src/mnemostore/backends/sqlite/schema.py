"""The SQLite layout: one table per kind, projected filter columns, and row encoding.

Each record is stored as its JSON document (`codec.encode_document`, zstd-compressed from
4 KB since layout 3 when a sample shows it pays, the verdict kept per kind and size class:
`core.compression`) plus its float32 vector blob, with one column per
`filterable` field so filters and orderings run in SQL. Since layout 4 a bytes field (a
checkpoint's `payload`) is a BLOB column of its own (`compression.pack_payload`), not base64
in the document: a read hands it to the caller without parsing it; since layout 6 without a format
byte before it (`compression.pack_bare_payload`), so a read hands over the column's bytes as they are.
Since layout 7 a checkpoint's document is framed (`codec.encode_framed_document`): its state is the
msgpack its proof made, after the other fields' JSON; rows written before stay JSON and read as they are.
Datetimes are projected as integer microseconds (ordering by instant), bools as 0/1,
the default tenant as ''. `seq` is the rowid: every insert, and every replace of or by a row
with a vector, takes a new, higher one, which lets the vector cache find what changed since it was
built (a replace keeping `created_at` rewrites a row without a vector in place: `Layout._conflict_tails`).
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, cached_property
from typing import Any, Literal, get_args

import orjson

from ...core import codec
from ...core.compression import COMPRESS_AT, PAYS_AT, Verdicts, deflate, pack_bare_payload, unpack_payload
from ...core.field_puts import UNSET, unfit_fields
from ...core.jsonvalues import is_proven
from ...core.kinds import record_type, secondary_indexes
from ...core.protocol import LATEST_CHECKPOINT_ORDER
from ...core.records import KINDS, Checkpoint, Record
from .sql_functions import CREATED_KEPT

META_TABLE = "mnemo_meta"
EPOCH_TABLE = "mnemo_vector_epoch"
"""Per kind, a counter bumped whenever a vector is removed or changed in place."""

CHANGED_INDEXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "checkpoint": (("run_id", "sequence", "created_at", "id", "branch_id"),)}
"""Built-in kinds whose indexes layout steps changed, as the newest layout has them. Checkpoints lost their
(created_at, id) index in layout 5; in layout 8 their run index became (run_id, sequence, created_at, id DESC,
branch_id), which gives a run's checkpoints in `LATEST_CHECKPOINT_ORDER` (read backwards): its latest is the
first entry, with no sort of the ties (a run of 1,000 roots took ~370 us, now ~4), and a branch's is read
from the index alone."""

SPARSE_FIELDS = ("project_id", "agent")
"""Fields most records leave empty: since layout 5 their indexes keep only the records that set
them (`WHERE field IS NOT NULL`; a filter on a value still uses the index)."""

Conflict = Literal["replace", "keep", "keep_created", "keep_created_in_place"]
"""What an INSERT does with a row of a stored (tenant, id): replaces it (`put`), leaves it (`put_missing`),
replaces it keeping its `created_at` (`put_keeping_created`), or does so in place where the stored row holds
no vector, else leaves it (`Layout._conflict_tails`)."""
CONFLICTS: tuple[Conflict, ...] = get_args(Conflict)

_SQL_TYPES: dict[type, str] = {str: "TEXT", int: "INTEGER", float: "REAL", bool: "INTEGER", datetime: "INTEGER"}


def quote(name: str) -> str:
    """An identifier from a fixed allow-list, double-quoted."""
    if not name.replace("_", "").isalnum() or not name.isascii():
        raise ValueError(f"not an identifier: {name!r}")
    return f'"{name}"'


def sql_value(field_type: type, value: Any) -> Any:
    """A filterable field's value as stored in its column (None stays NULL)."""
    if value is None:
        return None
    if field_type is datetime:
        return codec.instant_micros(value)
    if field_type is bool:
        return int(value)
    return value


BOUND_COPY = 4096
"""Bytes shorter than this are bound as a bytearray (`bound`)."""


def bound(value: bytes) -> bytes | bytearray:
    """A BLOB value as sqlite3 binds it cheapest, the same BLOB either way: it binds a bytearray as it is
    but first tries to adapt bytes (two failed attribute lookups), so a short value goes as a copy (a
    LangGraph `put_writes` binds two: 302k -> 284k instructions); a long one as it is, where the copy would
    cost more time. A vector goes as `bytearray(array)`: one copy, where `tobytes()` also made one."""
    return bytearray(value) if len(value) < BOUND_COPY else value


@dataclass(frozen=True)
class Layout:
    """The table of one kind and how a record maps onto a row."""

    kind: str
    table: str
    """Quoted table name."""
    fields: dict[str, type]
    """Projected column name -> the field's Python type (the kind's `filterable`)."""
    columns: dict[str, str]
    """Field name -> its quoted column name: the allow-list SQL identifiers come from."""
    binary: tuple[str, ...] = ()
    """Bytes fields (`codec.binary_fields`), each in a BLOB column of its name (layout 4)."""

    indexes: tuple[tuple[str, ...], ...] = ()
    """Secondary indexes (field tuples, each led by the tenant) as the newest layout has them: the default
    order's (unless the kind turns it off), then the kind's (each costs ~1.7 us per inserted record, ~6%
    of a bulk put); a built-in kind's as layout steps changed them (`CHANGED_INDEXES`)."""

    @classmethod
    def of(cls, kind: str) -> Layout:
        """The layout of a kind from its declaration (`core.kinds`): columns, bytes columns, indexes."""
        record_cls = record_type(kind)
        fields = dict(record_cls.filterable)
        binary = codec.binary_fields(record_cls)
        return cls(kind, quote(f"mnemo_{kind}"), fields, {name: quote(name) for name in fields}, binary,
                   CHANGED_INDEXES.get(kind, secondary_indexes(record_cls)))

    def column(self, field: str) -> str:
        """The quoted column of a filterable field; anything else is refused."""
        try:
            return self.columns[field]
        except KeyError:
            raise KeyError(f"{field!r} is not a filterable field of {self.kind}") from None

    def ddl(self) -> list[str]:
        """The table and its indexes as layout 1 created them for the built-in kinds, from their declarations
        (frozen by that step's checksum: bytes columns and the project index came in later steps)."""
        return [self._table_sql(()), *(self.index_sql(f"mnemo_{self.kind}_{'_'.join(index)}", index, newest=False)
                                       for index in secondary_indexes(record_type(self.kind)))]

    def create_sql(self) -> list[str]:
        """An application's kind at the newest layout, in one go: what layout steps 1 to 4 give a
        built-in kind. Its index names hold `__` (which no kind name does), so none can be a table's."""
        return [self._table_sql(self.binary),
                *(self.index_sql(self.kind_index_name(index), index)
                  for index in (*self.indexes, ("project_id",))),  # sparse ones partial, as layout 5 made them
                f"INSERT OR IGNORE INTO {EPOCH_TABLE} (kind, epoch) VALUES ('{self.kind}', 0)"]

    def kind_index_name(self, fields: Sequence[str]) -> str:
        """The name of an application kind's index (`__` in it: no kind name holds that)."""
        return f"mnemo_{self.kind}__{'_'.join(fields)}"

    def add_column_sql(self, field: str) -> str:
        """A column for a filterable or bytes field the kind's declaration gained (`Backend.evolve_kind`)."""
        column_type = _SQL_TYPES[self.fields[field]] if field in self.fields else "BLOB"
        return f"ALTER TABLE {self.table} ADD COLUMN {quote(field)} {column_type}"

    def _table_sql(self, binary: Sequence[str]) -> str:
        columns = "".join(f", {quote(name)} {_SQL_TYPES[t]}" for name, t in self.fields.items())
        blobs = "".join(f", {quote(name)} BLOB" for name in binary)
        return (f"CREATE TABLE IF NOT EXISTS {self.table} (seq INTEGER PRIMARY KEY, tenant TEXT NOT NULL"
                f"{columns}, vec BLOB, meta TEXT, doc BLOB NOT NULL{blobs}, UNIQUE (tenant, id))")

    def index_sql(self, name: str, fields: Sequence[str], newest: bool = True) -> str:
        """An index led by the tenant; at the newest layout one on a sparse field is partial."""
        keys = ", ".join(["tenant", *(quote(f) for f in fields)])
        sparse = newest and len(fields) == 1 and fields[0] in SPARSE_FIELDS
        where = f" WHERE {quote(fields[0])} IS NOT NULL" if sparse else ""
        return f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {self.table} ({keys}){where}"

    @cached_property
    def plain_documents(self) -> bool:
        """Whether a record's document is its fields as orjson dumps them (no bytes field kept apart, no
        checkpoint `state` proven by its validation): `_plain_encoder`'s kinds."""
        return not self.binary and "state" not in record_type(self.kind).model_fields

    @property
    def plain_fields(self) -> list[str]:
        """Fields stored as they are (in column order before `converted_fields`)."""
        return [name for name, t in self.fields.items() if t not in (datetime, bool)]

    @property
    def converted_fields(self) -> list[str]:
        """Datetime and bool fields, stored as integers."""
        return [name for name, t in self.fields.items() if t in (datetime, bool)]

    def _written(self) -> list[str]:
        return [*(quote(f) for f in self.plain_fields + self.converted_fields), "vec", "meta", "doc",
                *(quote(f) for f in self.binary)]

    def read_columns(self, vectors: bool = True) -> str:
        """What a read selects to rebuild a record (`decode_rows`): the document, the vector (NULL
        without `vectors`), then the bytes fields' columns."""
        return self._read_columns[vectors]

    @cached_property
    def _read_columns(self) -> dict[bool, str]:
        return {vectors: ", ".join(["doc", "vec" if vectors else "NULL", *(quote(f) for f in self.binary)])
                for vectors in (False, True)}

    def insert_sql(self, conflict: Conflict = "replace", rows: int = 1, nulls: Sequence[int] = (),
                   columns: Sequence[str] | None = None) -> str:
        """INSERT of `rows` rows in `row_encoder` order, doing `conflict` with a stored (tenant, id); the columns at
        positions `nulls` get NULL written into the statement, not a parameter. Given `columns` (quoted, of
        `tenant` and `_written`), only those, in that order: the others are NULL."""
        names = ["tenant", *self._written()] if columns is None else list(columns)
        marks = ", ".join([f"({', '.join('NULL' if i in nulls else '?' for i in range(len(names)))})"] * rows)
        verb = "INSERT OR REPLACE" if conflict == "replace" else "INSERT"
        return f"{verb} INTO {self.table} ({', '.join(names)}) VALUES {marks}{self._conflict_tails[conflict]}"

    @cached_property
    def _conflict_tails(self) -> dict[Conflict, str]:
        """`insert_sql`'s clause for each `Conflict`. A replace keeping `created_at` sets every other column as
        INSERT OR REPLACE would (`excluded`: NULL for a column the INSERT leaves out), the document's
        `created_at` the stored one (`sql_functions.CREATED_KEPT`), and gives the row a new, higher `seq`, as
        a replace does (the vector cache finds the changed rows by it): one statement, atomic on its own. The
        highest `seq` is read by a subquery tied to the row (SQLite runs an untied one once a statement, which
        would give two rows of one INSERT the same), from the end of the rowid order: no scan. In place, the
        row keeps its seq (a new one rewrites it in the table and in every index), which only a row without a
        vector may (the vector cache never held it): a stored row with one is left as it is."""
        table = self.table
        kept = {quote("id"), quote("created_at"), "doc"}
        sets = ", ".join(f"{name} = excluded.{name}" for name in self._written() if name not in kept)
        highest = (f"(SELECT newest.seq FROM {table} AS newest WHERE newest.seq >= {table}.seq "
                   f"ORDER BY newest.seq DESC LIMIT 1)")
        update = " ON CONFLICT (tenant, id) DO UPDATE SET"
        doc = f"doc = {CREATED_KEPT}(excluded.doc, doc)"
        return {"replace": "", "keep": " ON CONFLICT (tenant, id) DO NOTHING",
                "keep_created": f"{update} seq = {highest} + 1, {sets}, {doc}",
                "keep_created_in_place": f"{update} {sets}, {doc} WHERE {table}.vec IS NULL"}

    def rewrite_sql(self) -> str:
        """Replace a row's content in place, keeping its `seq` (for updates)."""
        return f"UPDATE {self.table} SET {', '.join(n + ' = ?' for n in self._written())} WHERE seq = ?"

    @cached_property
    def row_decoder(self) -> Callable[[Sequence[Any]], Record]:
        """A fast function row -> record, for rows selected with `read_columns` (`codec.record_decoder`;
        a bytes column's value is unpacked first, `unpack_payload`)."""
        decode = codec.record_decoder(record_type(self.kind), self.binary)
        if not self.binary:
            return lambda row: decode(row[0], row[1], ())
        if len(self.binary) == 1:
            return lambda row: decode(row[0], row[1], (None if (stored := row[2]) is None else unpack_payload(stored),))
        return lambda row: decode(row[0], row[1], [None if stored is None else unpack_payload(stored)
                                                   for stored in row[2:]])

    @cached_property
    def document_decoder(self) -> Callable[[Sequence[Any]], dict[str, Any]]:
        """A function row -> the record's stored fields, unvalidated (`codec.document_fields`; bytes fields
        unpacked, as `row_decoder` gives them), for rows selected with `read_columns(False)`."""
        names = self.binary
        document_fields, fill = codec.document_fields, codec.fill_binary

        def decode(row: Sequence[Any]) -> dict[str, Any]:
            data = document_fields(row[0])
            fill(data, {name: None if stored is None else unpack_payload(stored)
                        for name, stored in zip(names, row[2:], strict=True)})
            return data

        if len(names) != 1:
            return decode
        (name,) = names

        loads = orjson.loads

        def decode_one(row: Sequence[Any]) -> dict[str, Any]:  # a checkpoint's payload: no dict or loop to make
            document = row[0]  # plain JSON read here, the rest by `document_fields`
            data = loads(document) if document[:1] == b"{" else document_fields(document)
            if (stored := row[2]) is not None:
                data[name] = unpack_payload(stored)
            else:
                fill(data, {name: None})
            return data

        return decode_one

    def row_encoder(self, documents: Verdicts | None = None,
                    payloads: Sequence[Verdicts] | None = None) -> Callable[[Record], tuple[Any, ...]]:
        """A fast function record -> row values, in `insert_sql` order (tenant first); `documents` and
        `payloads` keep whether compressing the kind's documents and bytes fields pays (`KindSQL`'s:
        `field_rows` shares them)."""
        plain = self.plain_fields
        get_plain: Callable[[dict[str, Any]], tuple[Any, ...]]
        if len(plain) == 1:
            single = plain[0]

            def get_plain(data: dict[str, Any]) -> tuple[Any, ...]:
                return (data[single],)
        else:
            get_plain = operator.itemgetter(*plain)
        converters = [(name, codec.instant_micros if self.fields[name] is datetime else int)
                      for name in self.converted_fields]
        dumps = orjson.dumps
        framed = issubclass(record_type(self.kind), Checkpoint)  # its state as msgpack (layout 7)
        encode_document = codec.encode_framed_document if framed else codec.encode_document
        binary = self.binary
        documents = Verdicts() if documents is None else documents  # whether compressing pays
        fields = list(zip(binary, payloads or [Verdicts() for _ in binary], strict=True))
        packed = _binary_packer(fields)

        if self.plain_documents:
            return _plain_encoder(get_plain, converters, documents)

        micros, plain_document = codec.instant_micros, codec.plain_document
        times = [name for name, _ in converters] == ["created_at", "updated_at"]

        def encode(record: Record) -> tuple[Any, ...]:
            data = record.__dict__
            if times:  # a new record's update time is its creation time: converted once
                created, updated = data["created_at"], data["updated_at"]
                at = None if created is None else micros(created)
                later = at if updated is created else None if updated is None else micros(updated)
                converted: Sequence[Any] = (at, later)
            else:
                converted = [None if (value := data[name]) is None else conv(value) for name, conv in converters]
            embedding = data["embedding"]
            metadata = data["metadata"]
            state = data.get("state")
            if state is None or not is_proven(state):  # `encode_document`'s JSON, fewer calls (~4k instructions)
                stored = plain_document(data, binary)
            else:
                stored = encode_document(record, binary)
            if len(stored) >= COMPRESS_AT:
                stored = deflate(stored, pays_at=PAYS_AT, verdicts=documents)
            return (data["tenant_id"] or "", *get_plain(data), *converted,
                    None if embedding is None else bytearray(embedding),
                    dumps(metadata).decode() if metadata else None, bound(stored), *packed(data))

        return encode


def _plain_encoder(get_plain: Callable[[dict[str, Any]], tuple[Any, ...]],
                   converters: Sequence[tuple[str, Callable[[Any], int]]],
                   documents: Verdicts) -> Callable[[Record], tuple[Any, ...]]:
    """`row_encoder` for a kind with no bytes fields and no checkpoint `state` (items, heuristics, an
    application's kinds): the same row, its document dumped here as `codec.encode_document` dumps it,
    without the calls that look for what such a record never holds (~1 us of ~3 a record)."""
    dumps, default = orjson.dumps, codec.json_default
    names = [name for name, _ in converters]
    if names != ["created_at", "updated_at"]:
        def encode_times(data: dict[str, Any]) -> tuple[Any, ...]:
            return tuple(None if (value := data[name]) is None else conv(value) for name, conv in converters)

        def encode(record: Record) -> tuple[Any, ...]:
            data = record.__dict__
            embedding = data["embedding"]
            metadata = data["metadata"]
            document = data.copy()
            del document["embedding"]
            return (data["tenant_id"] or "", *get_plain(data), *encode_times(data),
                    None if embedding is None else bytearray(embedding),
                    dumps(metadata).decode() if metadata else None,
                    bound(deflate(dumps(document, default=default), pays_at=PAYS_AT, verdicts=documents)))

        return encode
    micros = codec.instant_micros
    last: list[tuple[Any, Any, Any]] = [(None, None, None)]
    """The last creation time converted, its microseconds and its JSON text (as orjson writes it): a batch's
    records share one, and a new record's update time is it (orjson looks up ~4 missing attributes of
    each datetime's tzinfo, ~1.7k instructions a datetime)."""

    def encode_shared(record: Record) -> tuple[Any, ...]:  # the shared datetimes only: no loop or call
        data = record.__dict__
        created, updated = data["created_at"], data["updated_at"]
        document = data.copy()
        del document["embedding"]
        seen = last[0]
        if created is not seen[0]:
            seen = last[0] = (created, None, None) if created is None else \
                (created, micros(created), dumps(created)[1:-1].decode())
        at = seen[1]
        if created is not None:
            document["created_at"] = seen[2]
            if updated is created:
                document["updated_at"] = seen[2]
        embedding = data["embedding"]
        metadata = data["metadata"]
        stored = dumps(document, default=default)
        if len(stored) >= COMPRESS_AT:
            stored = deflate(stored, pays_at=PAYS_AT, verdicts=documents)
        return (data["tenant_id"] or "", *get_plain(data), at,
                at if updated is created else None if updated is None else micros(updated),  # a new record's
                None if embedding is None else bytearray(embedding), dumps(metadata).decode() if metadata else None,
                bound(stored))

    return encode_shared


Rows = Callable[[dict[str, Any], Sequence[dict[str, Any]]], list[tuple[Any, ...]]]
"""(common, each) -> the rows of the records they stand for (`core.field_puts`), in `FieldRows` column order."""


@dataclass(frozen=True)
class FieldRows:
    """How records given as fields (`core.field_puts`: `common` shared, `each` their own) are written when
    `common` has one pattern (its names, which of them are None) and `each` one set of names: INSERTs that
    name only the columns some record sets (a column `common` leaves None is NULL, no parameter: what
    `KindSQL.batch_insert` makes of such rows), and the rows, made without a record: each is the row
    `row_encoder` gives that record, less those columns, the columns `common` sets first and the bytes
    fields' last. For records without a vector; a checkpoint's `state` is written as given (as
    `row_encoder` writes a record whose state no validation proved: fields never are)."""

    rows: Rows
    inserts: Callable[[Conflict, int], str]
    """(conflict, n) -> the INSERT of n rows in one statement (`insert_rows`), doing `conflict` with a stored
    (tenant, id) (`Layout.insert_sql`)."""
    row_of: Callable[[dict[str, Any]], Callable[[dict[str, Any]], tuple[Any, ...]]]
    """common -> a function of one record's own fields -> its row (`rows` of one, `common` taken once:
    `SQLiteBackend.field_writer`'s)."""

    @classmethod
    def of(cls, layout: Layout, documents: Verdicts, payloads: Sequence[Verdicts], common: dict[str, Any],
           own: Sequence[str]) -> FieldRows:
        fields = layout.fields
        set_here = [(name, fields[name]) for name in [*layout.plain_fields, *layout.converted_fields]
                    if name in common and common[name] is not None]
        per_row = [name for name in [*layout.plain_fields, *layout.converted_fields] if name in own]
        shared_meta = "metadata" in common
        no_meta = shared_meta and not common["metadata"]  # none shared: NULL in the statement, no None to bind
        columns = ["tenant", *(layout.columns[name] for name, _ in set_here)]
        columns += [*(["meta"] if shared_meta and not no_meta else []), *(layout.columns[name] for name in per_row),
                    *([] if shared_meta else ["meta"]), "doc", *map(quote, layout.binary)]
        get_own = _own_columns(per_row, fields)
        kept_apart = {"embedding", *layout.binary}
        blank = dict.fromkeys((name for name in record_type(layout.kind).model_fields if name not in kept_apart), UNSET)
        """A record's own fields hold `UNSET` until its fields fill them: one left out fails its document's dump."""
        size = len(own)
        dumps, default, fragment = orjson.dumps, codec.json_default, orjson.Fragment
        bytes_columns = _bytes_columns(list(zip(layout.binary, payloads, strict=True)), own)

        micros = codec.instant_micros
        in_document = [name for name in common if name not in kept_apart]

        def shared(common: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            """The values of the columns `common` sets, and the document's fields before a record's own
            (a datetime column's as the text orjson writes for it: dumped once a call, not once a record;
            a datetime `common` gives twice, converted once)."""
            head: list[Any] = [tenant_key(common["tenant_id"])]
            template = blank.copy()  # no key deleted from it: `template | data` copies it whole (a deleted
            for name in in_document:  # key makes that a slow copy, key by key)
                template[name] = common[name]
            seen: tuple[Any, Any, Any] = (None, None, None)
            for name, kind in set_here:
                value = common[name]
                if kind is datetime:
                    if value is not seen[0]:
                        seen = (value, micros(value), dumps(value)[1:-1].decode())
                    head.append(seen[1])
                    template[name] = seen[2]
                else:
                    head.append(sql_value(kind, value))
            if shared_meta and not no_meta:
                head.append(dumps(common["metadata"]).decode())
            return tuple(head), template

        def row(head: tuple[Any, ...], template: dict[str, Any], common: dict[str, Any],
                data: dict[str, Any]) -> tuple[Any, ...]:
            """One record's row (TypeError or KeyError for fields not named as `own`). Its own metadata is
            dumped once: its `meta` column, and in its document as that JSON (an `orjson.Fragment`), the
            bytes a dump of the whole document writes there."""
            if len(data) != size:
                raise TypeError
            document = template | data
            stored_bytes = bytes_columns(document, common)  # its bytes fields taken out of it
            if shared_meta:
                meta: tuple[Any, ...] = ()
            else:
                document["metadata"] = fragment(dumped := dumps(data["metadata"]))
                meta = (None if dumped == b"{}" else dumped.decode(),)  # none: NULL, as `encode` writes it
            stored = dumps(document, default=default)
            if len(stored) >= COMPRESS_AT:
                stored = deflate(stored, pays_at=PAYS_AT, verdicts=documents)
            return (*head, *get_own(data), *meta, bound(stored), *stored_bytes)

        def rows(common: dict[str, Any], each: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
            """Each record's row; a record whose own fields are not the first's names (one more: its length;
            one left out: `UNSET` in its document) is refused (`unfit_fields`), before anything is written."""
            head, template = shared(common)
            try:
                return [row(head, template, common, data) for data in each]
            except (TypeError, KeyError):
                raise unfit_fields(each, own) from None

        def row_of(common: dict[str, Any]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
            head, template = shared(common)

            def one(data: dict[str, Any]) -> tuple[Any, ...]:
                try:
                    return row(head, template, common, data)
                except (TypeError, KeyError):
                    raise unfit_fields([data], own) from None

            return one

        return cls(rows, cache(lambda conflict, n: layout.insert_sql(conflict, n, columns=columns)), row_of)


def _own_columns(names: Sequence[str], types: dict[str, type]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A function of a record's own fields -> the values of their columns (`names`' order: the plain ones,
    then the converted ones, as `Layout` orders them); `created_at` and `updated_at` converted once if they
    are the same datetime (a new record's), as `row_encoder` does."""
    converted = [(name, codec.instant_micros if types[name] is datetime else int)
                 for name in names if types[name] in (datetime, bool)]
    get_plain = _getter([name for name in names if types[name] not in (datetime, bool)])
    if not converted:
        return get_plain
    if [name for name, _ in converted] == ["created_at", "updated_at"]:
        micros = codec.instant_micros

        def with_times(data: dict[str, Any]) -> tuple[Any, ...]:
            created, updated = data["created_at"], data["updated_at"]
            at = None if created is None else micros(created)
            return (*get_plain(data), at, at if updated is created else None if updated is None else micros(updated))

        return with_times

    def with_converted(data: dict[str, Any]) -> tuple[Any, ...]:
        return (*get_plain(data), *[None if (value := data[name]) is None else conv(value) for name, conv in converted])

    return with_converted


def _bytes_columns(binary: Sequence[tuple[str, Verdicts]],
                   own: Sequence[str]) -> Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...]]:
    """A function (a record's document, `common`) -> its bytes fields' column values (`_binary_packer`'s),
    each taken out of the document if the record gives it, else `common`'s; for one field a record gives
    (a checkpoint's or a pending write's payload) without a loop."""
    if not binary:
        return lambda document, common: ()
    if len(binary) == 1 and binary[0][0] in own:
        ((name, verdicts),) = binary

        def one(document: dict[str, Any], common: dict[str, Any]) -> tuple[Any, ...]:
            value = document.pop(name)
            return (None if value is None else bound(pack_bare_payload(_bytes(value), verdicts)),)

        return one
    mine = [(name, verdicts, name in own) for name, verdicts in binary]
    return lambda document, common: tuple(
        None if (value := document.pop(name) if given else common.get(name)) is None
        else bound(pack_bare_payload(_bytes(value), verdicts)) for name, verdicts, given in mine)


def _bytes(value: Any) -> bytes:
    """A bytes field's value: bytes, as validation keeps it (anything else: the fields are unfit)."""
    if type(value) is not bytes:
        raise TypeError("a bytes field holds bytes")
    return value


ROWS_A_STATEMENT = 500
"""Rows `insert_rows` writes by one statement, at most."""


def insert_rows(conn: sqlite3.Connection, inserts: Callable[[Conflict, int], str], rows: Sequence[tuple[Any, ...]],
                conflict: Conflict) -> int:
    """Insert `rows` by multi-row INSERTs (`FieldRows.inserts`) of up to `ROWS_A_STATEMENT` rows, as many as
    SQLite's variable limit allows; how many rows they inserted or changed. One statement runs its rows through one set
    of open cursors where `executemany` runs the statement once a row: a LangGraph store batch's write
    measured ~30% cheaper (`bench/profile_store_rows.py`), as `SqliteStore` writes a batch."""
    size = max(1, min(ROWS_A_STATEMENT, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(rows[0])))
    written = 0
    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        cursor = conn.execute(inserts(conflict, len(chunk)), list(itertools.chain.from_iterable(chunk)))
        written += cursor.rowcount
        cursor.close()
    return written


def _getter(names: Sequence[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A function mapping -> the values of `names`, as a tuple (one or none too)."""
    if len(names) == 1:
        (name,) = names
        return lambda data: (data[name],)
    if not names:
        return lambda data: ()
    return operator.itemgetter(*names)


def _binary_packer(fields: list[tuple[str, Verdicts]]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A record's bytes fields' column values (`pack_bare_payload`, NULL for None), from its field dict;
    for one field (a checkpoint's payload) without a generator to run."""
    if len(fields) == 1:
        ((name, verdicts),) = fields

        def one(data: dict[str, Any]) -> tuple[Any, ...]:
            value = data[name]
            return (None if value is None else bound(pack_bare_payload(value, verdicts)),)

        return one
    return lambda data: tuple(None if (value := data[name]) is None else bound(pack_bare_payload(value, verdicts))
                              for name, verdicts in fields)


@dataclass(frozen=True)
class KindSQL:
    """A kind's layout with its hot statements, made once per open store."""

    layout: Layout
    encode: Callable[[Record], tuple[Any, ...]]
    inserts: dict[Conflict, str]
    """conflict -> the INSERT of one row (`Layout.insert_sql`)."""
    get_one: dict[bool, str]
    """SELECT of one record by tenant and id, with and without its vector."""
    small_inserts: dict[tuple[Conflict, int], str]
    """(conflict, rows) -> INSERT of that many rows in one statement, for batches of 2 to
    `SMALL_BATCH`: one statement is atomic without BEGIN and COMMIT around it."""

    nullable: tuple[int, ...] = ()
    """Positions in a row of the columns that may hold NULL (all but the tenant and the document)."""
    documents: Verdicts = field(default_factory=Verdicts)
    """Whether compressing the kind's documents pays (`encode`'s and `field_rows`')."""
    payloads: tuple[Verdicts, ...] = ()
    """Whether compressing each bytes field pays (`Layout.binary`'s order; `encode`'s and `field_rows`')."""
    _field_rows: dict[tuple[Any, ...], FieldRows] = field(default_factory=dict)
    _batch_inserts: dict[tuple[Conflict, tuple[int, ...]], str] = field(default_factory=dict)
    _one_inserts: dict[tuple[Any, ...], tuple[str, Callable[[Any], Any] | None]] = field(default_factory=dict)

    @property
    def insert(self) -> str:
        """The INSERT OR REPLACE of one row."""
        return self.inserts["replace"]

    @cached_property
    def vec_position(self) -> int:
        """Where a row (`encode`'s) holds its vector."""
        return ["tenant", *self.layout._written()].index("vec")

    def batch_insert(self, rows: list[tuple[Any, ...]], conflict: Conflict) -> tuple[str, list[tuple[Any, ...]]]:
        """The INSERT for an `executemany` of `rows`, with NULL written into it for the columns that are
        None in every row, and the rows without them. sqlite3 binds a None parameter by first trying to
        adapt it (~3.5k instructions, a formatted AttributeError); an item row holds three. Checked and
        cut in C (`map` of item getters): ~0.1 us a row against ~1 us saved."""
        plain = self.inserts[conflict]
        if not rows:
            return plain, rows
        first = rows[0]
        count = len(rows)
        nulls = tuple([i for i in self.nullable if first[i] is None and  # a None of the first row's: in all?
                       list(map(operator.itemgetter(i), rows)).count(None) == count])  # (a bytearray: unhashable)
        if not nulls:
            return plain, rows
        key = (conflict, nulls)
        sql = self._batch_inserts.get(key)
        if sql is None:
            sql = self._batch_inserts[key] = self.layout.insert_sql(conflict, 1, nulls)
        keep = operator.itemgetter(*[i for i in range(len(first)) if i not in nulls])  # tenant, document: 2+
        return sql, list(map(keep, rows))

    def field_rows(self, common: dict[str, Any], own: Iterable[str]) -> FieldRows:
        """`FieldRows` for records given as `common` and fields named as `own` (the first record's), made
        once per pattern."""
        key = (*common, *map(operator.is_, common.values(), _NONES), not common.get("metadata", 0), *own)
        found = self._field_rows.get(key)
        if found is None:
            found = self._field_rows[key] = FieldRows.of(self.layout, self.documents, self.payloads, common,
                                                         list(own))
        return found

    def one_insert(self, row: tuple[Any, ...], conflict: Conflict) -> tuple[str, Sequence[Any]]:
        """The INSERT of one row with NULL written into it for the row's None columns, and the row
        without them: `batch_insert`'s saving (~3.5k instructions a None) for a lone row, its statement
        found by the row's None pattern (made in C: no Python loop per row)."""
        key = (conflict, *map(operator.is_, row, _NONES))
        found = self._one_inserts.get(key)
        if found is None:
            found = self._one_inserts[key] = self._one_insert(row, conflict)
        sql, keep = found
        return sql, row if keep is None else keep(row)

    def _one_insert(self, row: tuple[Any, ...], conflict: Conflict) -> tuple[str, Callable[[Any], Any] | None]:
        nulls = [i for i in self.nullable if row[i] is None]
        if not nulls:
            return self.inserts[conflict], None
        return (self.layout.insert_sql(conflict, 1, nulls),
                operator.itemgetter(*[i for i in range(len(row)) if i not in nulls]))  # tenant, document: 2+

    @cached_property
    def latest_parent(self) -> str:
        """SELECT of the id and sequence of a run and branch's latest checkpoint, given the tenant,
        run_id and branch_id: `LATEST_CHECKPOINT_ORDER`, the run index's first entry (`CHANGED_INDEXES`)."""
        from .sql_filters import order_sql

        layout = self.layout
        return (f"SELECT {layout.column('id')}, {layout.column('sequence')} FROM {layout.table} "
                f"WHERE tenant = ? AND {layout.column('run_id')} = ? AND {layout.column('branch_id')} = ? "
                f"ORDER BY {order_sql(layout, LATEST_CHECKPOINT_ORDER)} LIMIT 1")

    @cached_property
    def append_after(self) -> str:
        """`insert` of a checkpoint row that holds only while the checkpoint it names as its parent is
        still its run and branch's latest and has no tie: its arguments are the parent's seq (rowid),
        (tenant, run_id, branch_id), id and sequence, then (tenant, run_id, sequence, branch_id, seq) for
        the check that nothing else there has that sequence or more, then the row. Otherwise the row's
        tenant is NULL, which its NOT NULL refuses (IntegrityError): nothing is written. One autocommit
        statement, led by the rowid and the run index: no sort."""
        layout = self.layout
        table, run, branch = layout.table, layout.column("run_id"), layout.column("branch_id")
        sequence = layout.column("sequence")
        parent = (f"EXISTS (SELECT 1 FROM {table} WHERE seq = ? AND tenant = ? AND {run} = ? AND {branch} = ? "
                  f"AND {layout.column('id')} = ? AND {sequence} = ?)")
        later = (f"NOT EXISTS (SELECT 1 FROM {table} WHERE tenant = ? AND {run} = ? AND {sequence} >= ? "
                 f"AND {branch} = ? AND seq != ?)")
        head, values = self.insert.split(" VALUES (", 1)
        return f"{head} VALUES (CASE WHEN {parent} AND {later} THEN ? END, {values.removeprefix('?, ')}"

    @classmethod
    def of(cls, layout: Layout) -> KindSQL:
        documents = Verdicts()
        payloads = tuple(Verdicts() for _ in layout.binary)
        return cls(layout, layout.row_encoder(documents, payloads),
                   {conflict: layout.insert_sql(conflict) for conflict in CONFLICTS},
                   {vectors: f"SELECT {layout.read_columns(vectors)} FROM {layout.table} WHERE tenant = ? AND id = ?"
                    for vectors in (True, False)},
                   {(conflict, rows): layout.insert_sql(conflict, rows) for conflict in CONFLICTS
                    for rows in range(2, SMALL_BATCH + 1)},
                   tuple(i for i, name in enumerate(["tenant", *layout._written()]) if name not in ("tenant", "doc")),
                   documents, payloads)


_NONES = itertools.repeat(None)

SMALL_BATCH = 8
"""Batches up to this many records are inserted by one multi-row statement (`KindSQL.small_inserts`)."""

LAYOUTS: dict[str, Layout] = {kind: Layout.of(kind) for kind in KINDS}
"""The built-in kinds' layouts, which the layout history creates and migrates."""


META_DDL = f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
"""The one table `open()` creates itself: it holds the ledger; everything else is a migration."""


def tenant_key(tenant: str | None) -> str:
    """The tenant column's value ('' is the default tenant; real tenant ids are non-empty)."""
    return tenant or ""


def decode_row(layout: Layout, row: Sequence[Any]) -> Record:
    """A record from a row selected with `Layout.read_columns` (doc, vec, then the bytes fields)."""
    return layout.row_decoder(row)


def decode_rows(layout: Layout, rows: Sequence[Sequence[Any]]) -> list[Record]:
    decode = layout.row_decoder
    return [decode(row) for row in rows]
