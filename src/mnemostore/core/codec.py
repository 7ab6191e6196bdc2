"""Record <-> bytes, for backends that store a record as a JSON document.

The document holds every field but the embedding, which travels as float32 bytes so
a backend can keep it in a vector column or matrix. Bytes fields (`binary_fields`: a
checkpoint's `payload`) travel as base64 text inside the document (`dumps_fields`,
`parse_fields` turns them back); a backend with a binary column keeps them out of the
document instead (`encode_document(record, without=...)`, `decode(..., binary=...)`).
A backend storing documents as bytes may frame a checkpoint's state as msgpack after the other
fields' JSON (`encode_framed_document`); `decode` reads every form. Decoding trusts what it wrote
and skips re-validation (it is a hot path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any, get_args

import orjson
import ormsgpack
from pydantic import BaseModel

from . import compression
from .base64text import from_text, to_text
from .compression import FRAMED, inflate
from .jsonvalues import take_proven, take_proven_msgpack
from .kinds import record_type, scalar_type
from .records import Record

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@cache
def _datetime_fields(cls: type[Record]) -> tuple[str, ...]:
    """Every datetime field, filterable or not (an application's kind may keep one in its document)."""
    return tuple(name for name, info in cls.model_fields.items() if scalar_type(info.annotation) is datetime)


@cache
def binary_fields(cls: type[Record]) -> tuple[str, ...]:
    """The fields holding bytes (typed `bytes` or `bytes | None`), in declaration order."""
    return tuple(name for name, info in cls.model_fields.items()
                 if info.annotation is bytes or bytes in get_args(info.annotation))


def json_default(value: Any) -> Any:
    """orjson's `default` for a record's fields: bytes become base64 text (nothing else is allowed)."""
    if type(value) is bytes:
        return to_text(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps_fields(data: dict[str, Any], option: int = 0) -> bytes:
    """A record's field dict as JSON: datetimes as RFC 3339 with their offset, bytes as base64."""
    return orjson.dumps(data, default=json_default, option=option)


def parse_fields(cls: type[Record], data: dict[str, Any]) -> dict[str, Any]:
    """Undo `dumps_fields` on a decoded document: RFC 3339 strings back into datetimes, base64
    text back into bytes (a bytes field already holding bytes is left as it is)."""
    for name in _datetime_fields(cls):
        value = data.get(name)
        if value is not None:
            data[name] = datetime.fromisoformat(value)
    for name in binary_fields(cls):
        value = data.get(name)
        if type(value) is str:
            data[name] = from_text(value)
    return data


def encode_document(record: Record, without: tuple[str, ...] = ()) -> bytes:
    """Every field except `embedding` (and `without`: fields a backend stores in columns of
    their own), as JSON (`dumps_fields`)."""
    data = _document_data(record, without)
    state = data.get("state")
    if state is not None and (proven := take_proven(state)) is not None:
        # A checkpoint's state, dumped by its validation just before: spliced in after the other fields,
        # one copy of its JSON (through orjson, its bytes were copied into a growing buffer, then out again).
        del data["state"]
        return with_state(dumps_fields(data), proven)
    return dumps_fields(data)


def plain_document(fields: dict[str, Any], without: tuple[str, ...] = ()) -> bytes:
    """`encode_document` of a record whose field dict is `fields`, when no state of it waits proven (a trusted
    or rebuilt record: `jsonvalues.is_proven`), given the dict alone: a backend's encoder saves the calls."""
    data = fields.copy()
    del data["embedding"]
    for name in without:
        del data[name]
    return dumps_fields(data)


def _document_data(record: Record, without: tuple[str, ...]) -> dict[str, Any]:
    """A copy of the record's fields less the embedding and `without`: what its document holds."""
    data = dict(record.__dict__)
    del data["embedding"]
    for name in without:
        del data[name]
    return data


def with_state(head: bytes, state: bytes) -> bytes:
    """A JSON object's bytes with a `state` field of JSON `state` added last: one copy of the state."""
    return b"".join((head[:-1], b',"state":' if len(head) > 2 else b'"state":', state, b"}"))


_FRAME_HEAD = 5
"""`FRAMED` and the JSON's length (4 bytes, little-endian): where a framed document's JSON starts."""


def encode_framed_document(record: Record, without: tuple[str, ...] = ()) -> bytes:
    """`encode_document` with the record's `state` as msgpack after the other fields' JSON: `FRAMED`, the
    JSON's length, the JSON, then the msgpack its validation packed to prove it (`jsonvalues.
    take_proven_msgpack`), so the state is encoded once and a read decodes it ~18% faster than its JSON.
    A state without that pack at hand (a record rebuilt from a store, or trusted) is not packed here:
    its document is `encode_document`'s. For a kind with a proven `state`, in a backend storing documents
    as bytes (SQLite, layout 7)."""
    state = take_proven_msgpack(record.__dict__.get("state"))
    if state is None:
        return encode_document(record, without)
    data = _document_data(record, without)
    del data["state"]
    return _framed(dumps_fields(data), state)


def _framed(head: bytes, state: bytes | memoryview) -> bytes:
    """A framed document of the fields' JSON `head` and the state's msgpack (`encode_framed_document`)."""
    return b"".join((FRAMED, len(head).to_bytes(4, "little"), head, state))


def _frame_parts(framed: bytes) -> tuple[memoryview, memoryview]:
    """A framed document's JSON and its state's msgpack, as views (no copy)."""
    view = memoryview(framed)
    end = _FRAME_HEAD + int.from_bytes(view[1:_FRAME_HEAD], "little")
    return view[_FRAME_HEAD:end], view[end:]


def stored_fields(document: bytes) -> dict[str, Any]:
    """The fields of a stored document that is not plain JSON: framed, or compressed (inflated first,
    then framed or JSON)."""
    if document[:1] != FRAMED:
        document = inflate(document)
        if document[:1] != FRAMED:
            return orjson.loads(document)  # type: ignore[no-any-return]
    head, state = _frame_parts(document)
    data: dict[str, Any] = orjson.loads(head)
    data["state"] = ormsgpack.unpackb(state)
    return data


def with_created_at_of(document: bytes, stored: bytes) -> bytes:
    """`document` holding the `created_at` that `stored` holds, in the form `document` came in (plain,
    framed, compressed): a replace keeping a record's first time, without its record rebuilt. The time is
    moved as the text it was stored as (its offset kept); a framed state is moved as it is."""
    stored = inflate(stored)
    at = orjson.loads(_frame_parts(stored)[0] if stored[:1] == FRAMED else stored)["created_at"]
    plain = inflate(document)
    head, state = _frame_parts(plain) if plain[:1] == FRAMED else (plain, None)
    fields = orjson.loads(head)
    fields["created_at"] = at
    patched = orjson.dumps(fields) if state is None else _framed(orjson.dumps(fields), state)
    return patched if plain is document else compression.deflate(patched, threshold=0)


def encode_vector(record: Record) -> bytes | None:
    return None if record.embedding is None else record.embedding.tobytes()


def decode(kind: str, document: bytes | str, vector: bytes | None = None,
           binary: dict[str, bytes | None] | None = None) -> Record:
    """Rebuild a record written by `encode_document` (+ `encode_vector`); a document stored
    compressed (`compression.deflate`) is inflated first. `binary` holds the bytes fields a
    backend read from columns of their own; None there leaves what the document holds (a row
    written before the column existed keeps its value in the document)."""
    if not binary:
        return record_decoder(record_type(kind), ())(document, vector, ())
    return record_decoder(record_type(kind), tuple(binary))(document, vector, tuple(binary.values()))


RecordDecoder = Callable[[bytes | str, bytes | None, Sequence[bytes | None]], Record]
"""(document, vector bytes or None, the column bytes fields' values) -> the record (`decode`)."""


@cache
def record_decoder(cls: type[Record], columns: tuple[str, ...]) -> RecordDecoder:
    """`decode` for one kind whose bytes fields `columns` a backend reads from columns of their own
    (their values passed in that order), made once: a read's hot path looks nothing up per record."""
    datetimes = _datetime_fields(cls)
    in_document = tuple(name for name in binary_fields(cls) if name not in columns)
    loads, parse_datetime, stored = orjson.loads, datetime.fromisoformat, stored_fields

    def decode_record(document: bytes | str, vector: bytes | None, values: Sequence[bytes | None]) -> Record:
        # `document_fields`, inlined: a plain JSON document (most records) costs no call
        data = loads(document) if isinstance(document, str) or document[:1] == b"{" else stored(document)
        for name in datetimes:
            value = data.get(name)
            if value is not None:
                data[name] = parse_datetime(value)
        for name in in_document:
            value = data.get(name)
            if type(value) is str:
                data[name] = from_text(value)
        for name, value in zip(columns, values, strict=True):
            if value is not None:
                data[name] = value if type(value) is bytes else bytes(value)
            else:  # a row from before the column: the document's base64 text, or None
                held = data.get(name)
                data[name] = from_text(held) if type(held) is str else held
        data["embedding"] = None if vector is None else decode_vector(vector)
        return trusted_record(cls, data)

    return decode_record


def document_fields(document: bytes | str) -> dict[str, Any]:
    """The fields a document written by `encode_document` (or `encode_framed_document`) holds, inflated
    first if stored compressed, as JSON gives them: datetimes as text, bytes fields kept in it as base64 text."""
    if not isinstance(document, str) and document[:1] != b"{":
        return stored_fields(document)
    return orjson.loads(document)  # type: ignore[no-any-return]


def fill_binary(data: dict[str, Any], binary: dict[str, Any]) -> None:
    """Put bytes fields read from their own columns into a decoded document's `data`: a value
    replaces the document's, None keeps the document's (base64 text from before the column
    existed, turned into bytes) or is the field's value."""
    for name, value in binary.items():
        if value is not None:
            data[name] = value if type(value) is bytes else bytes(value)
        else:
            held = data.get(name)
            data[name] = from_text(held) if type(held) is str else held


@cache
def _field_names(cls: type[Record]) -> frozenset[str]:
    """The model's field names, cached: `model_fields` is a descriptor that costs ~1 us a read."""
    return frozenset(cls.model_fields)


@cache
def _every_field(cls: type[Record]) -> set[str]:
    """Every field name of the model, as the one fields set of the complete records `trusted_record`
    makes (a set per record cost ~1 us and a GC traversal): pydantic only ever adds a name to a
    record's fields set (assignment), and every name is in this one already; copies get their own."""
    return set(cls.model_fields)


def _slot_setter(name: str) -> Callable[[Any, Any], None]:
    """The setter of a pydantic model's instance slot: its descriptor's `__set__` (half the cost of
    `object.__setattr__`, which looks the name up first), or `object.__setattr__` if there is none."""
    descriptor = vars(BaseModel).get(name)
    if descriptor is None or not hasattr(descriptor, "__set__"):
        return lambda record, value: object.__setattr__(record, name, value)
    setter: Callable[[Any, Any], None] = descriptor.__set__
    return setter


_new_instance = object.__new__
_set_dict = _slot_setter("__dict__")
_set_fields_set = _slot_setter("__pydantic_fields_set__")
_set_extra = _slot_setter("__pydantic_extra__")
_set_private = _slot_setter("__pydantic_private__")


def trusted_record(cls: type[Record], data: dict[str, Any], complete: bool = False) -> Record:
    """A record from fields that were validated when written (10x cheaper than model_construct).

    `data` becomes the record's field dict. A document from an older layout (fields
    missing or extra) goes through `model_construct`, which fills in defaults; with
    `complete`, the caller knows `data` holds exactly the model's fields.
    """
    if not complete and data.keys() != _field_names(cls):
        return cls.model_construct(**data)
    record = _new_instance(cls)
    _set_dict(record, data)
    _set_fields_set(record, _every_field(cls))
    _set_extra(record, None)
    _set_private(record, None)
    return record


def trusted_records(cls: type[Record]) -> Callable[[dict[str, Any]], Record]:
    """`trusted_record(cls, data, complete=True)` as a function of `data` alone, its helpers bound once,
    for a loop that makes many records of one kind."""
    fields = _every_field(cls)
    new, set_dict, set_fields_set, set_extra, set_private = (_new_instance, _set_dict, _set_fields_set, _set_extra,
                                                             _set_private)

    def make(data: dict[str, Any]) -> Record:
        record = new(cls)
        set_dict(record, data)
        set_fields_set(record, fields)
        set_extra(record, None)
        set_private(record, None)
        return record

    return make


def decode_vector(data: bytes) -> Any:
    import numpy as np

    array = np.frombuffer(data, dtype=np.float32)
    return array  # frombuffer over bytes is read-only already


def instant_micros(value: datetime) -> int:
    """A datetime as integer microseconds since the epoch: sortable, offset-independent."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
