"""Record <-> bytes, for backends that store a record as a JSON document.

The document holds every field but the embedding, which travels as float32 bytes so
a backend can keep it in a vector column or matrix. Decoding trusts what it wrote and
skips re-validation (it is a hot path).
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

import orjson

from .compression import inflate
from .records import Record, record_type

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
@cache
def _datetime_fields(cls: type[Record]) -> tuple[str, ...]:
    return tuple(name for name, t in cls.filterable.items() if t is datetime)


def parse_datetimes(cls: type[Record], data: dict[str, Any]) -> dict[str, Any]:
    """Turn the RFC 3339 strings of a decoded document's datetime fields back into datetimes."""
    for name in _datetime_fields(cls):
        value = data.get(name)
        if value is not None:
            data[name] = datetime.fromisoformat(value)
    return data


def encode_document(record: Record) -> bytes:
    """Every field except `embedding`, as JSON (datetimes as RFC 3339 with their offset)."""
    data = dict(record.__dict__)
    del data["embedding"]
    return orjson.dumps(data)


def encode_vector(record: Record) -> bytes | None:
    return None if record.embedding is None else record.embedding.tobytes()


def decode(kind: str, document: bytes | str, vector: bytes | None = None) -> Record:
    """Rebuild a record written by `encode_document` (+ `encode_vector`); a document stored
    compressed (`compression.deflate`) is inflated first."""
    cls = record_type(kind)
    if not isinstance(document, str) and document[:1] != b"{":
        document = inflate(document)
    data = parse_datetimes(cls, orjson.loads(document))
    data["embedding"] = decode_vector(vector) if vector is not None else None
    return trusted_record(cls, data)


@cache
def _field_names(cls: type[Record]) -> frozenset[str]:
    """The model's field names, cached: `model_fields` is a descriptor that costs ~1 us a read."""
    return frozenset(cls.model_fields)


def trusted_record(cls: type[Record], data: dict[str, Any]) -> Record:
    """A record from fields that were validated when written (5x cheaper than model_construct).

    `data` becomes the record's field dict. A document from an older layout (fields
    missing or extra) goes through `model_construct`, which fills in defaults.
    """
    if data.keys() != _field_names(cls):
        return cls.model_construct(**data)
    record = cls.__new__(cls)
    object.__setattr__(record, "__dict__", data)
    object.__setattr__(record, "__pydantic_fields_set__", set(data))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


def decode_vector(data: bytes) -> Any:
    import numpy as np

    array = np.frombuffer(data, dtype=np.float32)
    return array  # frombuffer over bytes is read-only already


def instant_micros(value: datetime) -> int:
    """A datetime as integer microseconds since the epoch: sortable, offset-independent."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
