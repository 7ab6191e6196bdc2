"""Records to and from the JSON objects of the log, and detached copies.

A record in the log is its field dict as JSON: datetimes in RFC 3339 with their
offset, the embedding as a plain list of numbers (float32 values printed shortest,
so they read back bit-exact; bytes fields are base64 text, `codec.json_default`) or, with `vector_encoding="base64"`, as
`{"f32le_base64": "..."}`: little-endian float32 bytes, half the size and ~3x faster
to load, for stores too big to care about reading vectors by eye. Reading accepts both.
The index never shares a mutable value with a caller: what goes in and out are copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from ...core.base64text import from_text, to_text
from ...core.codec import parse_fields, trusted_record
from ...core.records import Record

BASE64_KEY = "f32le_base64"
_MUTABLE = (dict, list)


def frozen_vector(value: Any) -> Any:
    """A float32 vector over its own immutable buffer: read-only for good, shareable."""
    return np.frombuffer(np.asarray(value, dtype=np.float32).tobytes(), dtype=np.float32)


def _is_frozen(vector: Any) -> bool:
    return not vector.flags.writeable and isinstance(vector.base, bytes)


def from_json(cls: type[Record], data: dict[str, Any]) -> Record:
    """Rebuild a record from its log object (trusted: written by `to_json`)."""
    parse_fields(cls, data)
    vector = data.get("embedding")
    if type(vector) is dict:
        data["embedding"] = np.frombuffer(from_text(vector[BASE64_KEY]), dtype="<f4")
    elif vector is not None:
        data["embedding"] = frozen_vector(vector)
    return trusted_record(cls, data)


def to_json(record: Record, vector_encoding: str = "list") -> dict[str, Any]:
    """The record's fields for the log line (a list embedding stays an array; orjson prints it)."""
    vector = record.__dict__.get("embedding")
    if vector is None or vector_encoding == "list":
        return record.__dict__
    encoded = to_text(np.asarray(vector, dtype="<f4").tobytes())
    return {**record.__dict__, "embedding": {BASE64_KEY: encoded}}


def detached(record: Record, vectors: bool = True) -> Record:
    """A copy sharing nothing mutable with `record` (JSON containers are copied deeply)."""
    changes: dict[str, Any] = {}
    for name, value in record.__dict__.items():
        if type(value) in _MUTABLE:
            changes[name] = orjson.loads(orjson.dumps(value))
    vector = record.__dict__.get("embedding")
    if not vectors:
        changes["embedding"] = None
    elif vector is not None and not _is_frozen(vector):
        changes["embedding"] = frozen_vector(vector)
    return record.model_copy(update=changes)
