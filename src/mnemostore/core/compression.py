"""Compressed JSON documents, for backends that store a record's document as bytes.

A stored document is plain orjson (it starts with `{`), a zstd frame (zstd's magic
number), or, in Postgres stores written by layout 3, a zlib stream (0x78): `inflate`
reads all three, so a store's old rows stay readable as new ones are written compressed.
zstd's fastest level shrinks a 50 KB agent state of varied text ~4x in ~0.1 ms (a
repetitive one ~30x in ~0.03 ms): less than writing the bytes it saves costs SQLite or
Postgres, and inflating is ~3x faster than compressing.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

COMPRESS_AT = 4096
"""Documents this large or larger are compressed (about one database page)."""
LEVEL = 1
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_local = threading.local()


def _codecs() -> tuple[Any, Any]:
    """This thread's zstd compressor and decompressor (zstandard's objects are not thread-safe)."""
    try:
        return _local.codecs  # type: ignore[no-any-return]
    except AttributeError:
        import zstandard

        _local.codecs = (zstandard.ZstdCompressor(level=LEVEL), zstandard.ZstdDecompressor())
        return _local.codecs  # type: ignore[no-any-return]


def deflate(document: bytes, threshold: int = COMPRESS_AT) -> bytes:
    """`document` (orjson bytes) as stored: zstd-compressed if it is `threshold` bytes or larger."""
    if len(document) < threshold:
        return document
    return bytes(_codecs()[0].compress(document))


def inflate(stored: bytes | memoryview) -> bytes:
    """The orjson bytes of a stored document, whichever form `deflate` (or zlib) gave it."""
    if stored[:1] == b"{":
        return stored if isinstance(stored, bytes) else bytes(stored)
    if stored[:4] == _ZSTD_MAGIC:
        return bytes(_codecs()[1].decompress(stored))
    return zlib.decompress(stored)


def is_compressed(stored: bytes | memoryview) -> bool:
    """Whether a stored document is compressed (anything but plain JSON, which starts with `{`)."""
    return stored[:1] != b"{"
