"""The on-disk form of one cached vector matrix: a file that maps straight into numpy arrays.

Two 4 KB header slots come first, then one page-aligned section per array, each sized for
`capacity` rows (the unused tail is a sparse hole): vectors (float32, prepared for the
metric), seqs (int64), norms (float32), id hashes (uint32), id end offsets (int64) and id
bytes (UTF-8), and the positions of dead rows (int64). A file is append-only for its life:
rows and dead positions are written past every published count, synced, and then a header
naming the new counts goes into the older slot, so a reader always finds one whole header
(the newer slot whose CRC holds) describing data that never changes under it. Anything
else writes a new file (temporary name, fsync, rename). A header is trusted only with its
CRC, and its data only if every section's checksum matches: a torn or edited file is
simply not used.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.private_files import FILE_MODE

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

SUPPORTED = hasattr(os, "pread") and hasattr(os, "pwrite") and hasattr(os, "fdatasync")
"""Positional I/O is needed (POSIX); elsewhere matrices are rebuilt from rows, as before files."""
MAGIC = b"mnemovec"
FORMAT = 1
PAGE = 4096
SLOTS = 2
_FIELDS = struct.Struct("<8sIQ16s32s64s32s8sIQQQQQQqqqQIIIIII")
_CRC = struct.Struct("<I")


@dataclass(frozen=True)
class Header:
    """What one slot says: whose matrix this is, at which database version, and its checksums."""

    generation: int
    """Bumped by every header written to the file; the valid slot with the highest wins."""
    nonce: bytes
    """Random, fixed for the file's life: names this file's row order."""
    token: str
    """The database's own id (`vector_files.TOKEN_KEY`): a file beside another database is foreign."""
    kind: str
    tenant: bytes
    """SHA-256 of the tenant key."""
    metric: str
    dim: int
    capacity: int
    id_capacity: int
    dead_capacity: int
    n: int
    id_bytes: int
    dead_n: int
    epoch: int
    seq: int
    check_pos: int
    """A live row the reader compares with the database (-1 for none)."""
    vec_sum: int
    seq_crc: int
    norm_crc: int
    hash_crc: int
    offset_crc: int
    id_crc: int
    dead_crc: int

    def pack(self) -> bytes:
        body = _FIELDS.pack(
            MAGIC, FORMAT, self.generation, self.nonce, self.token.encode(), self.kind.encode(), self.tenant,
            self.metric.encode(), self.dim, self.capacity, self.id_capacity, self.dead_capacity, self.n,
            self.id_bytes, self.dead_n, self.epoch, self.seq, self.check_pos, self.vec_sum, self.seq_crc,
            self.norm_crc, self.hash_crc, self.offset_crc, self.id_crc, self.dead_crc)
        return (body + _CRC.pack(zlib.crc32(body))).ljust(PAGE, b"\0")

    @classmethod
    def unpack(cls, raw: bytes) -> Header | None:
        """The header in one slot, or None if the slot is empty, torn or of another format."""
        if len(raw) < _FIELDS.size + _CRC.size:
            return None
        body = raw[: _FIELDS.size]
        if _CRC.unpack_from(raw, _FIELDS.size)[0] != zlib.crc32(body):
            return None
        magic, version, generation, nonce, token, kind, tenant, metric, *rest = _FIELDS.unpack(body)
        if magic != MAGIC or version != FORMAT:
            return None
        try:
            return cls(generation, nonce, token.rstrip(b"\0").decode(), kind.rstrip(b"\0").decode(), tenant,
                       metric.rstrip(b"\0").decode(), *rest)
        except UnicodeDecodeError:
            return None

    @property
    def layout(self) -> Layout:
        return Layout(self.dim, self.capacity, self.id_capacity, self.dead_capacity)


@dataclass(frozen=True)
class Layout:
    """Where each section starts, for a file sized for `capacity` rows."""

    dim: int
    capacity: int
    id_capacity: int
    dead_capacity: int

    def _sections(self) -> list[int]:
        sizes = [self.capacity * self.dim * 4, self.capacity * 8, self.capacity * 4, self.capacity * 4,
                 self.capacity * 8, self.id_capacity, self.dead_capacity * 8]
        starts, at = [], SLOTS * PAGE
        for size in sizes:
            starts.append(at)
            at += -(-size // PAGE) * PAGE
        return [*starts, at]

    @property
    def offsets(self) -> tuple[int, int, int, int, int, int, int]:
        """Starts of vectors, seqs, norms, hashes, id offsets, id bytes, dead."""
        s = self._sections()
        return s[0], s[1], s[2], s[3], s[4], s[5], s[6]

    @property
    def size(self) -> int:
        return self._sections()[-1]


@dataclass(frozen=True)
class Rows:
    """Rows to write: the arrays of rows [start, start + k) and dead positions [dead_start, ...)."""

    vectors: npt.NDArray[np.float32]
    seqs: npt.NDArray[np.int64]
    norms: npt.NDArray[np.float32]
    hashes: npt.NDArray[np.uint32]
    id_ends: npt.NDArray[np.int64]
    """Each row's id end offset in the file's id bytes (absolute)."""
    id_bytes: bytes
    dead: npt.NDArray[np.int64]


@dataclass(frozen=True)
class Mapped:
    """A validated file mapped copy-on-write: appends into the spare capacity stay in this process."""

    header: Header
    vectors: npt.NDArray[np.float32]
    seqs: npt.NDArray[np.int64]
    norms: npt.NDArray[np.float32]
    hashes: npt.NDArray[np.uint32]
    offsets: npt.NDArray[np.int64]
    """Id start offsets: row i's id is id_bytes[offsets[i]:offsets[i + 1]] (capacity + 1)."""
    id_bytes: npt.NDArray[np.uint8]
    dead: npt.NDArray[np.int64]


def vector_sum(rows: npt.NDArray[np.float32]) -> int:
    """A checksum of float32 rows that adds up row by row: the wrapping sum of their 64-bit words."""
    import numpy as np

    if rows.size == 0:
        return 0
    block = np.ascontiguousarray(rows)
    words = block.view(np.uint64) if block.shape[-1] % 2 == 0 else block.view(np.uint32)
    return int(words.sum(dtype=np.uint64))


def crc(data: object, previous: int = 0) -> int:
    """CRC-32 of an array's or buffer's bytes, continuing `previous`."""
    return zlib.crc32(_bytes(data), previous)


def _bytes(data: object) -> memoryview:
    """A contiguous array's or buffer's bytes, without copying."""
    view = memoryview(data)  # type: ignore[arg-type]
    return view.cast("B") if view.nbytes else memoryview(b"")


def read_header(path: Path) -> Header | None:
    """The newest whole header of the file at `path`, or None (missing, torn, another format)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _newest(os.pread(fd, SLOTS * PAGE, 0))
    except OSError:
        return None
    finally:
        os.close(fd)


def _newest(raw: bytes) -> Header | None:
    headers = [h for h in (Header.unpack(raw[i * PAGE:(i + 1) * PAGE]) for i in range(SLOTS)) if h is not None]
    return max(headers, key=lambda h: h.generation, default=None)


def load(path: Path, wanted: Callable[[Header], bool]) -> Mapped | Header | None:
    """The file at `path` mapped if its newest header is `wanted` and every checksum holds; just the
    header if a checksum fails (the file is damaged); None if there is no such file or header."""
    import numpy as np

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        header = _newest(os.pread(fd, SLOTS * PAGE, 0))
        if header is None or not wanted(header):
            return None
        if header.n > header.capacity or header.id_bytes > header.id_capacity \
                or header.dead_n > header.dead_capacity or os.fstat(fd).st_size != header.layout.size:
            return header
        memory = mmap.mmap(fd, header.layout.size, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    cap, dim = header.capacity, header.dim
    v, s, nr, h, o, i, d = header.layout.offsets
    mapped = Mapped(
        header,
        np.frombuffer(memory, np.float32, cap * dim, v).reshape(cap, dim),
        np.frombuffer(memory, np.int64, cap, s), np.frombuffer(memory, np.float32, cap, nr),
        np.frombuffer(memory, np.uint32, cap, h), np.frombuffer(memory, np.int64, cap + 1, o),
        np.frombuffer(memory, np.uint8, header.id_capacity, i),
        np.frombuffer(memory, np.int64, header.dead_capacity, d)[: header.dead_n])
    n = header.n
    intact = (crc(mapped.seqs[:n]) == header.seq_crc and crc(mapped.norms[:n]) == header.norm_crc
              and crc(mapped.hashes[:n]) == header.hash_crc and crc(mapped.offsets[: n + 1]) == header.offset_crc
              and int(mapped.offsets[n]) == header.id_bytes and crc(mapped.id_bytes[: header.id_bytes]) == header.id_crc
              and crc(mapped.dead) == header.dead_crc and vector_sum(mapped.vectors[:n]) == header.vec_sum)
    return mapped if intact else header


def write_new(path: Path, header: Header, rows: Rows) -> Header:
    """Write a new file holding `rows` (from row 0) under `header`'s identity, and rename it over `path`."""
    header = _extended(replace(header, nonce=secrets.token_bytes(16), generation=1, n=0, id_bytes=0, dead_n=0,
                               vec_sum=0, seq_crc=0, norm_crc=0, hash_crc=0, offset_crc=crc(_ZERO),
                               id_crc=0, dead_crc=0), rows)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            os.ftruncate(fd, header.layout.size)
            _write_rows(fd, header.layout, 0, 0, 0, rows, first=True)
            _pwrite(fd, header.pack(), _slot(header))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)
    return header


def append(path: Path, expected: Header, rows: Rows, version: tuple[int, int], check_pos: int) -> Header | None:
    """Append `rows` to the file, now valid for `version`, if its newest header is still `expected`
    and they fit; the new header.

    None if another process changed or replaced the file meanwhile, holds its lock, or the
    rows do not fit (the caller then writes a new file).
    """
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if _newest(os.pread(fd, SLOTS * PAGE, 0)) != expected:
            return None
        header = _extended(replace(expected, generation=expected.generation + 1, epoch=version[0], seq=version[1],
                                   check_pos=check_pos), rows)
        if header.n > header.capacity or header.id_bytes > header.id_capacity \
                or header.dead_n > header.dead_capacity:
            return None
        _write_rows(fd, header.layout, expected.n, expected.id_bytes, expected.dead_n, rows, first=False)
        os.fdatasync(fd)  # the rows are on disk before any header names them
        _pwrite(fd, header.pack(), _slot(header))
        os.fdatasync(fd)
        return header
    finally:
        os.close(fd)  # also releases the lock


def _slot(header: Header) -> int:
    """Where a header goes: generations alternate between the slots, so the newest whole one survives a torn write."""
    return (header.generation % SLOTS) * PAGE


def _extended(header: Header, rows: Rows) -> Header:
    """`header` with `rows` appended: counts and checksums continued."""
    import numpy as np

    k = len(rows.seqs)
    return replace(
        header, n=header.n + k, id_bytes=header.id_bytes + len(rows.id_bytes), dead_n=header.dead_n + len(rows.dead),
        vec_sum=(header.vec_sum + vector_sum(rows.vectors)) % 2**64, seq_crc=crc(rows.seqs, header.seq_crc),
        norm_crc=crc(rows.norms, header.norm_crc), hash_crc=crc(rows.hashes, header.hash_crc),
        offset_crc=crc(np.ascontiguousarray(rows.id_ends, dtype=np.int64), header.offset_crc),
        id_crc=zlib.crc32(rows.id_bytes, header.id_crc), dead_crc=crc(rows.dead, header.dead_crc))


_ZERO = b"\0" * 8
"""The first id offset (0), present in a file before any row."""


def _write_rows(fd: int, layout: Layout, n: int, id_bytes: int, dead_n: int, rows: Rows, first: bool) -> None:
    import numpy as np

    v, s, nr, h, o, i, d = layout.offsets
    row = layout.dim * 4
    _pwrite(fd, rows.vectors, v + n * row)
    _pwrite(fd, rows.seqs, s + n * 8)
    _pwrite(fd, rows.norms, nr + n * 4)
    _pwrite(fd, rows.hashes, h + n * 4)
    if first:
        _pwrite(fd, _ZERO, o)
    _pwrite(fd, np.ascontiguousarray(rows.id_ends, dtype=np.int64), o + (n + 1) * 8)
    _pwrite(fd, rows.id_bytes, i + id_bytes)
    _pwrite(fd, rows.dead, d + dead_n * 8)


def _pwrite(fd: int, data: object, offset: int) -> None:
    view = _bytes(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _sync_directory(directory: Path) -> None:
    """Make a rename durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
