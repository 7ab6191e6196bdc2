"""Where each field of a record lives in a row: typed columns, the document, the vector.

Every filterable field (but `id`) is a typed column and the only copy of its value, so a
single `UPDATE … SET n = n + 1` keeps a row consistent. A datetime is two bigint columns:
the instant in microseconds since the epoch (compares and sorts as an instant) and the
original UTC offset in microseconds (so it reads back with its offset). The other fields
(metadata included) are an orjson document in `doc` (bytea: stored and read back byte
for byte); metadata is also kept as JSONB for filtering. `tenant` is '' for no tenant.

Since layout 3: a document of `COMPRESS_AT` bytes or more is stored compressed by the client
(`core.compression`: zlib in layout 3, zstd since layout 4, which compresses a 50 KB state of
varied text ~4x in ~0.1 ms where zlib took ~0.4 ms; both read back), and the column's storage is
EXTERNAL, so the server does not try pglz on it again. A checkpoint's `parent_ids` is its own `text[]`
column (`LIST_COLUMNS`), so a save can fill it in on the server (`append_checkpoint`); rows
written before hold it in the document, with NULL in the column.

Since layout 5 a bytes field (`codec.binary_fields`: a checkpoint's `payload`) is a bytea column of
its own (`compression.pack_payload`; EXTERNAL storage), so a read hands the bytes over without base64
or JSON; rows from before keep it as base64 text in the document, with NULL in the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import cache, cached_property
from types import NoneType
from typing import Any, get_args

import orjson

from ...core.codec import binary_fields, fill_binary, instant_micros, parse_fields, trusted_record
from ...core.compression import Verdicts, deflate, inflate, pack_payload, unpack_payload
from ...core.jsonvalues import take_proven
from ...core.kinds import record_type, scalar_type
from ...core.records import KINDS, Record

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)

COLUMN_TYPES: dict[type, str] = {
    str: 'text COLLATE "C"',
    int: "bigint",
    float: "double precision",
    bool: "boolean",
    datetime: "bigint",
}
NO_TENANT = ""
SCOPE_PREFIX = 64
"""Layout 2 indexes (tenant, left(column, 64)) for the scope columns (unbounded text would not
fit a btree key); an equality filter on one also compares that prefix, so it can use it."""
SCOPE_COLUMNS = frozenset({"agent", "project_id"})
COMPRESS_AT = 2048
"""Documents this large or larger are stored compressed (where TOAST starts at PostgreSQL's default; since
layout 8 a row stays whole up to `INLINE_ROW_BYTES`, and a compressed document still writes less WAL)."""
INLINE_ROW_BYTES = 8160
"""A kind's table's `toast_tuple_target` (layout 8; PostgreSQL's largest): a row up to this size stays in
its page whole. At the default (~2 KB) a row of a few KB, such as a LangGraph task's writes, had its
EXTERNAL bytes moved to the TOAST table: one more heap and index insert per write, a TOAST read per read."""
LIST_COLUMNS: dict[str, tuple[str, ...]] = {"checkpoint": ("parent_ids",)}
"""Fields that are lists of ids kept in a `text[]` column of their own (not filterable)."""


class JsonbBytes(bytes):
    """A JSON document already serialised by orjson, sent as JSONB (see adapters.py)."""


class TextArray(list[str]):
    """A list column's ids, sent as a binary `text[]` (see adapters.py): psycopg's own list dumper
    costs ~8 us a list (a regex per element to decide its quoting)."""


def offset_column(name: str) -> str:
    return f"{name}_utcoffset_us"


def encode_datetime(value: datetime) -> tuple[int, int]:
    """(instant µs since the epoch, UTC offset µs)."""
    offset = value.utcoffset()
    assert offset is not None
    return instant_micros(value), offset // _MICRO


def decode_datetime(instant: int, offset: int) -> datetime:
    if offset == 0:  # timedelta(0, 0, µs): positional arguments cost 2/3 of the keyword's
        return _EPOCH_UTC + timedelta(0, 0, instant)
    return (_EPOCH + timedelta(0, 0, instant + offset)).replace(tzinfo=_zone(offset))


@cache
def _zone(offset: int) -> timezone:
    return timezone(timedelta(microseconds=offset))


def tenant_key(tenant: str | None) -> str:
    return NO_TENANT if tenant is None else tenant


@dataclass(frozen=True)
class KindLayout:
    """The row layout of one record kind."""

    kind: str
    cls: type[Record]
    table: str
    fields: tuple[str, ...]
    """Column fields: the kind's filterable fields except `id`."""
    types: dict[str, type]
    doc_fields: frozenset[str]
    nullable: frozenset[str] = frozenset()
    """Column fields whose value may be None (the model allows it)."""
    lists: tuple[str, ...] = ()
    """Fields in `text[]` columns of their own (`LIST_COLUMNS`); NULL there: in the document."""
    binary: tuple[str, ...] = ()
    """Bytes fields, in bytea columns of their own (`pack_payload`); NULL there: None, or (from
    before layout 5) base64 text in the document."""
    indexes: tuple[tuple[str, ...], ...] = ()
    """The kind's declared indexes, built with an application's kind's table (`schema.create_kind`);
    a built-in kind's indexes are the layout history's."""
    doc_datetimes: bool = False
    """Whether a datetime field lives in the document (an application's kind may keep one there)."""

    @cached_property
    def prefixed(self) -> frozenset[str]:
        """Text columns indexed by their first `SCOPE_PREFIX` characters (unbounded text would not
        fit a btree key): an equality filter on one also compares that prefix, to use the index."""
        return SCOPE_COLUMNS | {name for index in self.indexes for name in index if self.types.get(name) is str}

    @cached_property
    def datetimes(self) -> tuple[str, ...]:
        return tuple(name for name in self.fields if self.types[name] is datetime)

    def column_of(self, field: str) -> str:
        """The column a filter or an ordering on `field` reads."""
        return "id" if field == "id" else field

    @cached_property
    def _read_plan(self) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int, int], ...]]:
        """(field, its column's index) of the fields but datetimes, and (field, its column's
        index, its offset column's index) of the datetimes, in a row read in `data_columns` order."""
        offsets = {name: 2 + len(self.fields) + i for i, name in enumerate(self.datetimes)}
        columns = [(name, 2 + i) for i, name in enumerate(self.fields)]
        return (tuple(column for column in columns if column[0] not in offsets),
                tuple((name, index, offsets[name]) for name, index in columns if name in offsets))

    @cached_property
    def data_columns(self) -> tuple[str, ...]:
        """Columns read to rebuild a record (without the embedding)."""
        return ("id", "tenant", *self.fields, *(offset_column(n) for n in self.datetimes), *self.lists,
                *self.binary, "doc")

    @property
    def write_columns(self) -> tuple[str, ...]:
        return (*self.data_columns, "metadata", "embedding")

    def field_values(self, name: str, value: Any) -> list[tuple[str, Any]]:
        """(column, value) pairs that store `value` for the column field `name`."""
        if self.types[name] is datetime:
            if value is None:
                return [(name, None), (offset_column(name), None)]
            instant, offset = encode_datetime(value)
            return [(name, instant), (offset_column(name), offset)]
        return [(name, value)]

    def encode(self, record: Record) -> tuple[Any, ...]:
        """A row in `write_columns` order; the embedding stays a numpy array."""
        return self.encode_fields(record.__dict__)

    def encode_fields(self, data: dict[str, Any]) -> tuple[Any, ...]:
        """`encode` of a record given as its fields (every one of the model's, by name), unvalidated: a
        prepared field write's row (`PostgresBackend.field_writer`)."""
        row: list[Any] = [data["id"], tenant_key(data["tenant_id"])]
        offsets: list[Any] = []
        for name in self.fields:
            value = data[name]
            if self.types[name] is datetime:
                if value is None:
                    row.append(None)
                    offsets.append(None)
                else:
                    instant, offset = encode_datetime(value)
                    row.append(instant)
                    offsets.append(offset)
            else:
                row.append(value)
        row.extend(offsets)
        row.extend(None if data[name] is None else TextArray(data[name]) for name in self.lists)
        row.extend(self.encode_binary(name, data[name]) for name in self.binary)
        row.append(self.encode_doc(data))
        row.append(JsonbBytes(orjson.dumps(data["metadata"])))
        row.append(data["embedding"])
        return tuple(row)

    def encode_doc(self, data: dict[str, Any]) -> bytes:
        """The document fields as orjson, zstd-compressed from `COMPRESS_AT` bytes. A checkpoint's
        state goes in as the JSON its validation made just before (`take_proven`), not dumped again."""
        doc = {name: data[name] for name in self.doc_fields}
        state = doc.get("state")
        if state is not None and (proven := take_proven(state)) is not None:
            doc["state"] = orjson.Fragment(proven)
        return deflate(orjson.dumps(doc), COMPRESS_AT)

    def encode_binary(self, name: str, value: bytes | None) -> bytes | None:
        """Bytes field `name`'s column value; whether compressing pays is kept per field (`Verdicts`)."""
        return None if value is None else pack_payload(value, self.payload_verdicts[name])

    @cached_property
    def payload_verdicts(self) -> dict[str, Verdicts]:
        """Each bytes field's stream of payloads: sampled for compressibility once in `RESAMPLE`, not on
        every write (a stream of varied text paid ~10-15 us a write for it)."""
        return {name: Verdicts() for name in self.binary}

    @cached_property
    def _list_and_binary_columns(self) -> tuple[int, tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
        """The document's index, and (field, its column's index) of the list and the bytes fields,
        in a row read in `data_columns` order."""
        doc_index = len(self.data_columns) - 1
        first_binary = doc_index - len(self.binary)
        first_list = first_binary - len(self.lists)
        return (doc_index, tuple((name, first_list + i) for i, name in enumerate(self.lists)),
                tuple((name, first_binary + i) for i, name in enumerate(self.binary)))

    def decode(self, row: tuple[Any, ...], vector: Any = None) -> Record:
        """Rebuild a record from a row read in `data_columns` order. A document holding exactly
        `doc_fields` (this layout's) makes a complete record with the columns: its fields are not
        compared with the model's (a search builds ten records per call)."""
        data, complete = self._stored(row)
        if self.doc_datetimes:
            parse_fields(self.cls, data)
        for name, index, offset_index in self._read_plan[1]:
            value = row[index]
            data[name] = None if value is None else decode_datetime(value, row[offset_index])
        data["embedding"] = vector
        return trusted_record(self.cls, data, complete)

    def document(self, row: tuple[Any, ...]) -> dict[str, Any]:
        """A row's stored fields (read in `data_columns` order), unvalidated, as the sqlite backend's documents
        give them: datetimes as RFC 3339 text, bytes fields as bytes, no embedding (`query_shape_documents`)."""
        data = self._stored(row)[0]
        for name, index, offset_index in self._read_plan[1]:
            value = row[index]
            data[name] = None if value is None else decode_datetime(value, row[offset_index]).isoformat()
        return data

    def _stored(self, row: tuple[Any, ...]) -> tuple[dict[str, Any], bool]:
        """A row's fields but those of its datetime columns (`decode` and `document` add them, each its way), and
        whether the record is complete: its document holds exactly `doc_fields` and its list columns are filled."""
        doc_index, lists, binary = self._list_and_binary_columns
        data = decode_doc(row[doc_index])
        complete = data.keys() == self.doc_fields
        for name, index in lists:
            if row[index] is not None:
                data[name] = row[index]
            else:  # from before layout 3: in the document, if anywhere
                complete = False
        if binary:
            fill_binary(data, {name: None if row[index] is None else unpack_payload(row[index])
                               for name, index in binary})
        data["id"] = row[0]
        data["tenant_id"] = row[1] or None
        for name, index in self._read_plan[0]:
            data[name] = row[index]
        return data, complete


def decode_doc(doc: bytes) -> dict[str, Any]:
    """A stored document: orjson, or compressed (zstd, or zlib from layout 3) if it does not start with `{`."""
    data: dict[str, Any] = orjson.loads(doc if doc[:1] == b"{" else inflate(doc))
    return data


def layout(kind: str, prefix: str) -> KindLayout:
    """The row layout of a kind, from its declaration (`core.kinds`)."""
    return _layout(record_type(kind), prefix)


@cache
def _layout(cls: type[Record], prefix: str) -> KindLayout:
    kind = cls.kind
    fields = tuple(name for name in cls.filterable if name != "id")
    lists = LIST_COLUMNS.get(kind, ())
    binary = binary_fields(cls)
    doc_fields = (frozenset(cls.model_fields) - set(fields) - set(lists) - set(binary)
                  - {"id", "tenant_id", "embedding"})
    nullable = frozenset(name for name in fields if NoneType in get_args(cls.model_fields[name].annotation))
    return KindLayout(kind, cls, prefix + kind, fields, dict(cls.filterable), doc_fields, nullable, lists, binary,
                      () if kind in KINDS else cls.indexes,
                      any(scalar_type(cls.model_fields[name].annotation) is datetime for name in doc_fields))
