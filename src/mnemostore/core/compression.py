"""Compressed JSON documents, for backends that store a record's document as bytes.

A stored document is plain orjson (it starts with `{`), a zstd frame (zstd's magic
number), or, in Postgres stores written by layout 3, a zlib stream (0x78): `inflate`
reads all three, so a store's old rows stay readable as new ones are written compressed.
zstd at `LEVEL` shrinks a 50 KB agent state of varied text ~3.4x in ~0.14 ms (a
repetitive one ~32x in ~0.03 ms), and inflating is ~3x faster than compressing. Postgres
compresses every document from `threshold` (not measured again here).
SQLite passes `pays_at`: measured in CPU time per save (SQLite, WAL), a varied 50 KB state
costs ~90 us to compress and its INSERT saves less than that, and its read pays ~30 us to
inflate, so a document is compressed only when its sample shrinks `PAYS_AT`-fold, as a payload.

Opaque bytes kept in a binary column (a checkpoint's `payload`) are stored by `pack_payload`:
a format byte, then the bytes as they are or a zstd frame. Measured at level 1 on LangGraph's 46 KB
msgpack checkpoints (SQLite, WAL): the repeated-text one shrinks 32x in 19 µs and its INSERT
drops from ~140 to ~24 µs, its read from ~18 to ~10 µs with inflating; the varied-text one
shrinks only 4x in 79 µs, which its INSERT wins back (~121 to ~51 µs) but its read loses
(~17 to ~39 µs). So a payload is compressed only when a 2 KB sample from its middle shrinks
`PAYS_AT`-fold or more (~4 µs to find out). SQLite (layout 6) stores a payload bare instead
(`pack_bare_payload`): the format byte cost a 47 KB copy on every write and every read.
The sample itself costs ~10-15 us; a writer that passes `Verdicts` (SQLite's row encoder, one per kind's
document and bytes field; Postgres's `KindLayout`, one per bytes field) keeps its answer per size class
and samples again only every `RESAMPLE`th payload, so a stream of varied text stops paying for it (see `Verdicts`).

Frames that inflate `MEMO_RATIO`-fold or more go through a memo of their inflated bytes (`Inflated`), filled
when a write compresses and when a read inflates a frame it missed before: an agent reads back the checkpoint
it just wrote at every step, and inflating a 46 KB repeated-text payload costs ~125k instructions where finding
it costs ~1k. A read's first miss keeps nothing, so a scan (a history, reads by id of a thread's checkpoints)
does not evict the hot frames for cold ones nor pay for filling fresh memory (`Inflated.keep`).
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import OrderedDict
from typing import Any

COMPRESS_AT = 4096
"""Documents this large or larger are compressed (about one database page)."""
LEVEL = -1
"""zstd's level: -1, the first of its fast levels, against 1 on LangGraph's 46 KB repeated-text checkpoint
(callgrind): compressing 225k instructions instead of 248k, inflating 106k instead of 130k, at 31.8x instead
of 32.5x; a facade save 1,265k instead of 1,321k, a read that inflates 935k instead of 969k. Varied text
shrinks 3.4x instead of 3.9x (no SQLite write compresses it: it does not shrink `PAYS_AT`-fold either way).
Any level's frames inflate alike: stored rows need nothing."""
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


def deflate(document: bytes, threshold: int = COMPRESS_AT, pays_at: float = 0.0,
            verdicts: Verdicts | None = None) -> bytes:
    """`document` (orjson bytes) as stored: zstd-compressed if it is `threshold` bytes or larger
    and, given `pays_at`, if a sample of it shrinks that many times (`_pays`; kept in `verdicts`)."""
    if len(document) < threshold:
        return document
    compressor = _codecs()[0]
    if not pays_at:
        return _compressed(compressor, document)
    if verdicts is None:
        return _compressed(compressor, document) if _pays(compressor, document, pays_at) else document
    return verdicts.packed(compressor, document, pays_at) or document


def inflate(stored: bytes | memoryview) -> bytes:
    """The bytes `deflate` was given for a stored document (orjson, or a framed document: `FRAMED`),
    whichever form it (or zlib) gave them."""
    if stored[:1] in _UNCOMPRESSED:
        return stored if isinstance(stored, bytes) else bytes(stored)
    if stored[:4] == _ZSTD_MAGIC:
        return _inflated(stored)
    return zlib.decompress(stored)


FRAMED = b"\x01"
"""The first byte of a framed document (`codec.encode_framed_document`): never JSON's `{` nor a zstd or
zlib stream's first byte, so every stored form is told apart by it."""
_UNCOMPRESSED = (b"{", FRAMED)
"""The first bytes of documents stored as they are: plain JSON, and framed ones."""


def _compressed(compressor: Any, data: bytes) -> bytes:
    """`data` as a zstd frame, remembered in the memo (`Inflated`) when it shrank enough."""
    frame = bytes(compressor.compress(data))
    INFLATED.keep(frame, data)
    return frame


def _inflated(frame: bytes | memoryview) -> bytes:
    """The bytes a zstd frame holds: from the memo (`Inflated`) when there, else inflated (and kept)."""
    memo = INFLATED
    if len(frame) <= memo.longest:  # no frame this long was ever kept: no key to hash
        found = memo.kept.get(frame if type(frame) is bytes else bytes(frame))
        if found is not None:
            return found
    inflated = bytes(_codecs()[1].decompress(frame))
    memo.keep(frame, inflated, read=True)
    return inflated


MEMO_RATIO = 8
"""Only frames that inflate this many times their size or more are memoized: hashing and comparing such
a key costs ~1% of inflating it, so a miss costs next to nothing."""
MEMO_BYTES = 16 << 20
"""The memo holds at most this many inflated bytes (16 MiB), plus their frames (at most 1/`MEMO_RATIO`
of that, 2 MiB); one value holds at most 1/16 of it."""
MEMO_ENTRIES = 1024
"""... and at most this many frames."""


class Inflated:
    """A bounded memo frame -> inflated bytes, a pure function of the frame's exact bytes: a hit is what
    inflating would give (keys compare equal byte for byte; values are immutable `bytes`). The oldest
    entry goes first. Threads share it: reads take no lock (one dict get), changes take `_lock`."""

    __slots__ = ("_held", "_lock", "_missed", "kept", "longest")

    def __init__(self) -> None:
        self.kept: OrderedDict[bytes, bytes] = OrderedDict()
        """Frame -> its inflated bytes, oldest first (an `OrderedDict`: a plain dict's first key is found by
        walking past the slots its evictions emptied)."""
        self.longest = 0
        """The longest frame ever kept: a longer one is not looked up."""
        self._held = 0
        """The inflated bytes `kept` holds."""
        self._missed: set[int] = set()
        """Hashes of frames a read inflated and did not keep (at most `MEMO_ENTRIES`, then forgotten at once)."""
        self._lock = threading.Lock()

    def keep(self, frame: bytes | memoryview, inflated: bytes, read: bool = False) -> None:
        """Remember `inflated` as `frame`'s bytes if it is `MEMO_RATIO` times longer or more (and plain
        `bytes`, so immutable), evicting the oldest entries to stay within the bounds. A `read`'s frame is
        kept the second time a read inflates it: reading 1,000 repeated-text checkpoints by id in turns
        with raw sqlite3, keeping each one's 46 KB cost ~15 us a read more than inflating it into the
        memory the last read freed (91 against 100-112 us a read, raw sqlite3's 99-107)."""
        size = len(inflated)
        if size < MEMO_RATIO * len(frame) or size > MEMO_BYTES // 16 or type(inflated) is not bytes:
            return
        key = bytes(frame) if isinstance(frame, memoryview) else frame
        with self._lock:  # `_missed` changes under it too, as every change here does
            if read and not self._missed_before(key):
                return
            kept = self.kept
            if key in kept:
                return
            held = self._held + size
            while kept and (len(kept) >= MEMO_ENTRIES or held > MEMO_BYTES):
                held -= len(kept.popitem(last=False)[1])
            kept[key] = inflated
            self._held = held
            if len(key) > self.longest:
                self.longest = len(key)

    def _missed_before(self, key: bytes) -> bool:
        """Whether a read inflated `key` before (forgetting it then), else noting it (under `_lock`). A hash
        standing for another frame only keeps a frame sooner: what a key reads back as is its bytes' (`kept`)."""
        missed, code = self._missed, hash(key)
        if code in missed:
            missed.discard(code)
            return True
        if len(missed) >= MEMO_ENTRIES:
            missed.clear()
        missed.add(code)
        return False

    def clear(self) -> None:
        """Forget every entry (tests, and a process that wants its memory back)."""
        with self._lock:
            self.kept.clear()
            self._missed.clear()
            self._held = self.longest = 0


INFLATED = Inflated()
"""The process's memo of inflated frames (`Inflated`)."""


def _after_fork() -> None:
    """A forked child has only the forking thread: a lock another thread held stays held, so renew it."""
    INFLATED._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


PAYLOAD_PLAIN = 0
PAYLOAD_ZSTD = 1
"""The format byte `pack_payload` puts before a payload's bytes."""
PAYS_AT = 5.0
"""A payload whose sample shrinks this many times or more is stored compressed."""
_SAMPLE = 2048


def pack_payload(payload: bytes, verdicts: Verdicts | None = None) -> bytes:
    """Opaque bytes as stored: a format byte, then the bytes, zstd-compressed if that pays (see above;
    `verdicts`: see `Verdicts`)."""
    if len(payload) >= COMPRESS_AT:
        compressor = _codecs()[0]
        if verdicts is not None:
            compressed = verdicts.packed(compressor, payload, PAYS_AT)
            if compressed is not None:
                return bytes((PAYLOAD_ZSTD,)) + compressed
        elif _pays(compressor, payload, PAYS_AT):
            return bytes((PAYLOAD_ZSTD,)) + _compressed(compressor, payload)
    return bytes((PAYLOAD_PLAIN,)) + payload


def _pays(compressor: Any, data: bytes, pays_at: float) -> bool:
    """Whether a 2 KB sample from the middle of `data` shrinks `pays_at`-fold or more (~10-15 us)."""
    middle = len(data) // 2
    sample = data[middle:middle + _SAMPLE]
    return len(sample) >= pays_at * len(compressor.compress(sample))


RESAMPLE = 64
"""One payload in this many of a size class is sampled while compressing does not pay; the others
take the kept verdict. A sample costs ~140k instructions (2 KB through zstd): once in 16 it was ~9k of a
LangGraph `put`'s ~500k, whose varied-text checkpoints never compress 5-fold (`PAYS_AT`); a stream that
turns compressible is found within this many payloads of a size."""


class Verdicts:
    """Whether compressing pays, kept per size class (a power of two) of one stream of payloads (a
    kind's documents, or one of its bytes fields): a stream of varied text is sampled once in
    `RESAMPLE` payloads, not each time. A "pays" verdict is checked on every payload by the
    compressed size itself, which costs nothing more; a payload that does not shrink `pays_at`-fold
    is then stored plain and the verdict turns. So a payload is stored compressed only when it shrank
    that much, and a compressible one after incompressible ones of its size may be stored plain (up
    to `RESAMPLE` - 1 of them): either form reads back the same. Threads may share one: a race
    only miscounts a countdown."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[int, list[Any]] = {}
        """Size class -> [pays, payloads the verdict answers before one is sampled again]."""

    def packed(self, compressor: Any, data: bytes, pays_at: float) -> bytes | None:
        """`data` compressed if that pays, else None (the caller stores it plain)."""
        size_class = len(data).bit_length()
        kept = self._kept.get(size_class)
        if kept is None or kept[1] <= 0:
            pays = _pays(compressor, data, pays_at)
            self._kept[size_class] = kept = [pays, RESAMPLE - 1]
        elif not kept[0]:
            kept[1] -= 1
            return None
        if not kept[0]:
            return None
        compressed = _compressed(compressor, data)
        if len(data) >= pays_at * len(compressed):
            return compressed
        kept[0], kept[1] = False, RESAMPLE - 1
        return None


def pack_bare_payload(payload: bytes, verdicts: Verdicts | None = None) -> bytes:
    """Opaque bytes as SQLite stores them since its layout 6: a bare zstd frame when compressing pays,
    else the bytes themselves, so a read hands them over without a 47 KB copy. Only bytes that begin
    as another form does (a format byte 0 or 1, zstd's magic number), or none, keep `pack_payload`'s
    form: `unpack_payload` tells every form apart by its first bytes. `verdicts`: see `Verdicts`."""
    if len(payload) >= COMPRESS_AT:
        compressor = _codecs()[0]
        if verdicts is not None:
            compressed = verdicts.packed(compressor, payload, PAYS_AT)
            if compressed is not None:
                return compressed
        elif _pays(compressor, payload, PAYS_AT):
            return _compressed(compressor, payload)
    if payload[:1] in _BARE_NEVER or payload[:4] == _ZSTD_MAGIC:
        return bytes((PAYLOAD_PLAIN,)) + payload
    return payload


_BARE_NEVER = (b"", bytes((PAYLOAD_PLAIN,)), bytes((PAYLOAD_ZSTD,)))
"""First bytes a bare payload never has (`pack_bare_payload`): those of `pack_payload`'s forms."""


def unpack_payload(stored: bytes | memoryview) -> bytes:
    """The bytes `pack_payload` or `pack_bare_payload` stored."""
    first = stored[0]
    if first == PAYLOAD_PLAIN:
        return bytes(memoryview(stored)[1:])
    if first == PAYLOAD_ZSTD:
        return _inflated(memoryview(stored)[1:])
    if stored[:4] == _ZSTD_MAGIC:
        return _inflated(stored)
    return stored if type(stored) is bytes else bytes(stored)


def prefixed_payload(stored: bytes) -> bytes:
    """A stored payload in `pack_payload`'s form (a format byte first), as SQLite layouts 4 and 5 read it."""
    if stored[0] in (PAYLOAD_PLAIN, PAYLOAD_ZSTD):
        return stored
    return bytes((PAYLOAD_ZSTD if stored[:4] == _ZSTD_MAGIC else PAYLOAD_PLAIN,)) + stored


def is_compressed(stored: bytes | memoryview) -> bool:
    """Whether a stored document is compressed: a zstd frame or a zlib stream, not plain JSON (`{`) nor a
    framed document (`FRAMED`)."""
    return stored[:1] not in _UNCOMPRESSED
