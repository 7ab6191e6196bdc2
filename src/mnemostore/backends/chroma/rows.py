"""Records as Chroma rows: a lossless document plus a metadata projection for filters.

Chroma metadata holds only scalars and no None, so a record travels whole in the row's
document (`codec.encode_document`'s JSON) and the fields filters and orderings use are
projected into metadata:

- every filterable field under its own name, datetimes as integer microseconds (instants);
- `n:<field>` = True/False for fields that may be None: a missing value is explicit,
  never a 0 or an empty string;
- each top-level metadata scalar under a key that names its type (`m:s:`, `m:i:`,
  `m:f:`, `m:b:`), so a comparison never crosses types inside Chroma; lists and
  objects leave `m:o:<key>` (they equal nothing); None values are left out (as missing).

The embedding: Chroma keeps l2 and inner-product vectors exactly, so those are read back
from Chroma; for cosine it stores a normalised copy, so the exact float32 vector also
travels as base64 in metadata key `v` (not in the document: Chroma full-text indexes
documents, which makes base64 there ~4x the cost of the whole write).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ...core import codec
from ...core.base64text import from_text, to_text
from ...core.errors import BackendError
from ...core.records import Record

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

VECTOR_KEY = "v"
NULL_PREFIX = "n:"
META_PREFIXES = {"s": "m:s:", "i": "m:i:", "f": "m:f:", "b": "m:b:", "o": "m:o:"}
OPAQUE: list[Any] = []
"""What a filter sees for a list or object metadata value: no scalar equals it."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NULLABLE: dict[type[Record], frozenset[str]] = {}


def nullable_fields(cls: type[Record]) -> frozenset[str]:
    """Filterable fields whose value may be None (they carry an `n:` flag)."""
    found = _NULLABLE.get(cls)
    if found is None:
        found = frozenset(name for name in cls.filterable
                          if name in cls.model_fields and not cls.model_fields[name].is_required()
                          and cls.model_fields[name].default is None)
        _NULLABLE[cls] = found
    return found


def metadata_of(record: Record, exact_vector: bool) -> dict[str, Any]:
    """The metadata projection of a record (see the module docstring); with `exact_vector`,
    the embedding too (under `v`)."""
    cls = type(record)
    data = record.__dict__
    nullable = nullable_fields(cls)
    projected: dict[str, Any] = {}
    if exact_vector and record.embedding is not None:
        projected[VECTOR_KEY] = to_text(record.embedding.tobytes())
    for name, kind in cls.filterable.items():
        value = data[name]
        if name in nullable:
            projected[NULL_PREFIX + name] = value is None
        if value is None:
            continue
        if kind is datetime:
            projected[name] = codec.instant_micros(value)
        elif kind is float:
            projected[name] = float(value)
        elif kind is int:
            projected[name] = int(value)
        else:
            projected[name] = value
    for key, value in record.metadata.items():
        kind = type(value)
        if kind is str:
            projected[META_PREFIXES["s"] + key] = value
        elif kind is bool:
            projected[META_PREFIXES["b"] + key] = value
        elif kind is int:
            projected[META_PREFIXES["i"] + key] = value
        elif kind is float:
            projected[META_PREFIXES["f"] + key] = value
        elif value is not None:
            projected[META_PREFIXES["o"] + key] = True
    return projected


def view_of(cls: type[Record], projected: dict[str, Any]) -> SimpleNamespace:
    """What filters and orderings see of a record, rebuilt from its metadata alone.

    `core.filters.matches` evaluated on a view equals its value on the record itself.
    """
    values: dict[str, Any] = {}
    nullable = nullable_fields(cls)
    for name, kind in cls.filterable.items():
        if name in nullable and projected.get(NULL_PREFIX + name, True):
            values[name] = None
            continue
        value = projected.get(name)
        if kind is datetime and value is not None:
            value = _EPOCH + timedelta(microseconds=value)
        values[name] = value
    metadata: dict[str, Any] = {}
    for key, value in projected.items():
        if key.startswith("m:") and len(key) > 3 and key[3] == ":":
            metadata[key[4:]] = OPAQUE if key[2] == "o" else value
    values["metadata"] = metadata
    return SimpleNamespace(**values)


def document_of(record: Record) -> str:
    """The whole record but its embedding, as JSON."""
    return codec.encode_document(record).decode("utf-8")


def record_of(kind: str, document: str, vector: bytes | None) -> Record:
    return codec.decode(kind, document, vector)


def metadata_vector(projected: Any) -> bytes | None:
    """The exact embedding kept in metadata (cosine stores), as float32 bytes."""
    encoded = projected.get(VECTOR_KEY) if projected is not None else None
    return from_text(encoded) if encoded else None


def stored_vector(metadata: Any, embedding: Any, cosine: bool) -> bytes:
    """A search candidate's exact float32 vector: metadata `v` for cosine, else Chroma's own copy."""
    found = metadata_vector(metadata) if cosine else chroma_vector(embedding)
    if found is None:
        raise BackendError("a Chroma search returned a row without its stored vector; was it written by mnemostore?")
    return found


def vector_matrix(rows: Sequence[bytes]) -> npt.NDArray[np.float32]:
    """Float32 vectors as one matrix, a row each: one buffer, not a stack of arrays."""
    import numpy as np

    return np.frombuffer(b"".join(rows), dtype=np.float32).reshape(len(rows), -1)


def chroma_vector(embedding: Any) -> bytes | None:
    """An embedding as Chroma returns it (float64 values of float32s) as float32 bytes."""
    import numpy as np

    return None if embedding is None else np.asarray(embedding, dtype=np.float32).tobytes()


def placeholders(n: int) -> npt.NDArray[np.float32]:
    """The vectors of rows in a `-novec` collection and the meta collection: never searched."""
    import numpy as np

    return np.ones((n, 1), dtype=np.float32)


def index_vector(record_vector: npt.NDArray[np.float32], metric: str) -> npt.NDArray[np.float32]:
    """The vector Chroma indexes: unit length for cosine (computed in float64, so huge
    vectors do not overflow float32 inside Chroma), the vector itself otherwise."""
    import numpy as np

    if metric != "cosine":
        return record_vector
    wide = record_vector.astype(np.float64)
    norm = float(np.linalg.norm(wide))
    return (wide / norm).astype(np.float32) if norm else record_vector
