"""psycopg adapters for pgvector's binary format and pre-serialised JSONB.

Vectors travel in binary (pgvector's text form costs 5-6x to parse): a uint16 dimension,
a uint16 zero, then big-endian float32 values. JSON is serialised by orjson, not psycopg. A list
column's ids go as a binary one-dimensional `text[]`.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Dumper
from psycopg.pq import Format

from .layout import JsonbBytes, TextArray
from .statements import TEXT_ARRAY_OID, TYPE_OIDS

JSONB_OID = 3802
TEXT_OID = TYPE_OIDS[str]
_HEADER = struct.Struct(">HH")
_ARRAY = struct.Struct(">iiIii")
"""A one-dimensional array's header: dimensions (1), has NULLs (0), element type, length, lower bound (1)."""
_EMPTY_ARRAY = struct.pack(">iiI", 0, 0, TEXT_OID)
_LENGTH = struct.Struct(">i")


class _JsonbBytesDumper(Dumper):
    format = Format.BINARY
    oid = JSONB_OID

    def dump(self, obj: Any) -> Buffer:
        return b"\x01" + bytes(obj)


class _TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = TEXT_ARRAY_OID

    def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
        super().__init__(cls, context)
        self._encoding = self.connection.info.encoding if self.connection is not None else "utf-8"

    def dump(self, obj: Any) -> Buffer:
        if not obj:
            return _EMPTY_ARRAY
        encoding, pack = self._encoding, _LENGTH.pack
        parts = [_ARRAY.pack(1, 0, TEXT_OID, len(obj), 1)]
        for item in obj:
            data = item.encode(encoding)
            parts += (pack(len(data)), data)
        return b"".join(parts)


class _VectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> Buffer:
        array = np.asarray(obj, dtype=">f4")
        return _HEADER.pack(array.shape[0], 0) + array.tobytes()


def decode_vector(data: Buffer) -> Any:
    """A read-only float32 array from pgvector's binary form."""
    array = np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)
    array.setflags(write=False)
    return array


def decode_matrix(rows: list[Buffer]) -> Any:
    """Vectors of one dimension in pgvector's binary form as one read-only float32 matrix."""
    body = b"".join(memoryview(row)[4:] for row in rows)
    matrix = np.frombuffer(body, dtype=">f4").reshape(len(rows), -1).astype(np.float32)
    matrix.setflags(write=False)
    return matrix


def register(context: AdaptContext, vector_oid: int) -> None:
    """Teach a connection (or adapters map) to send numpy arrays as `vector`, JsonbBytes as JSONB and
    TextArray as `text[]`."""
    dumper = type("VectorDumper", (_VectorDumper,), {"oid": vector_oid})
    context.adapters.register_dumper(np.ndarray, dumper)
    context.adapters.register_dumper(JsonbBytes, _JsonbBytesDumper)
    context.adapters.register_dumper(TextArray, _TextArrayDumper)
