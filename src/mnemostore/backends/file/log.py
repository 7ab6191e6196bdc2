"""The append log of one kind: one checksummed JSON line per batch.

A line is a JSON object whose first member is `"crc":"<8 hex digits>"`, the CRC-32 of
every byte after that member. A batch is one line, so it is all-or-nothing: a writer
killed mid-line leaves a tail that fails its checksum (or lacks its newline); readers
ignore it and the next writer, holding the exclusive lock, truncates it away. An
invalid line followed by valid ones is not a torn write but damage, and is reported.
The first line of every log is a header naming the kind, format and generation;
compaction writes a new file with the next generation and renames it into place.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from ...core.codec import json_default
from ...core.errors import BackendError
from .files import replace_atomically, write_all

FORMAT = "mnemostore-file"
FORMAT_VERSION = 1
HEADER_OP = "header"
_PREFIX = b'{"crc":"'
_BODY_START = len(_PREFIX) + 8 + 2  # after `{"crc":"xxxxxxxx",`
_CHUNK = 4 << 20


def _default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    return json_default(value)


def encode_line(entry: Mapping[str, Any]) -> list[bytes | memoryview]:
    """The parts of one log line (write them with `os.writev`; no copy of the body)."""
    if not entry:
        raise ValueError("a log entry needs at least one member")
    body = orjson.dumps(entry, default=_default, option=orjson.OPT_SERIALIZE_NUMPY)
    rest = memoryview(body)[1:]
    return [b'{"crc":"%08x",' % zlib.crc32(rest), rest, b"\n"]


def line_length(parts: Iterable[bytes | memoryview]) -> int:
    return sum(len(p) for p in parts)


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The entry of a complete line (without its newline), or None if it fails its checksum."""
    if len(line) <= _BODY_START or not line.startswith(_PREFIX) or line[_BODY_START - 2:_BODY_START] != b'",':
        return None
    try:
        expected = int(line[len(_PREFIX):_BODY_START - 2], 16)
    except ValueError:
        return None
    if zlib.crc32(memoryview(line)[_BODY_START:]) != expected:
        return None
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) else None


def header(kind: str, generation: int) -> dict[str, Any]:
    return {"op": HEADER_OP, "format": FORMAT, "version": FORMAT_VERSION, "kind": kind, "generation": generation}


class LogFile:
    """An open log: the descriptor, which file it is, and how far it has been read.

    `end` is the offset just past the last valid line read; bytes beyond it are either
    not read yet or a torn tail (`torn` says which was seen last).
    """

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind
        self.fd: int | None = None
        self.identity: tuple[int, int] | None = None
        self.end = 0
        self.header_size = 0
        self.generation = 0
        self.torn = False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
        self.identity = None
        self.end = 0
        self.torn = False

    def status(self) -> str:
        """"missing", "current" (nothing new), "grown" (read on from `end`) or "replaced" (reload)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "missing" if self.fd is None else "replaced"
        if st.st_size == 0:
            return "missing" if self.fd is None else "replaced"
        if self.fd is None or (st.st_dev, st.st_ino) != self.identity or st.st_size < self.end:
            return "replaced"
        return "grown" if st.st_size > self.end else "current"

    def open(self) -> bool:
        """Open the file on disk (closing any previous one); False if there is none yet."""
        self.close()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        if st.st_size == 0:
            os.close(fd)
            return False
        self.fd = fd
        self.identity = (st.st_dev, st.st_ino)
        return True

    def read_new(self) -> Iterator[tuple[dict[str, Any], int]]:
        """Yield (entry, line length) for each valid line after `end`, advancing `end`.

        The header is consumed here. A torn tail is skipped and flagged; an invalid line
        followed by a valid one raises BackendError.
        """
        assert self.fd is not None
        size = os.fstat(self.fd).st_size
        bad_at: int | None = None
        for start, line, complete in _lines(self.fd, self.end, size):
            entry = decode_line(line) if complete else None
            if entry is None:
                if bad_at is None:
                    bad_at = start
                continue
            if bad_at is not None:
                raise BackendError(
                    f"{self.path} is damaged at byte {bad_at}: a line there fails its checksum but later "
                    "lines are valid. This is not a torn write; restore the file from a backup, or cut "
                    "the bad line out by hand if you accept losing that batch")
            self.end = start + len(line) + 1
            if start == 0:
                self._read_header(entry, len(line) + 1)
                continue
            yield entry, len(line) + 1
        if self.end == 0:
            raise BackendError(f"{self.path} has no valid header line; it was not written by mnemostore")
        self.torn = self.end < size

    def _read_header(self, entry: dict[str, Any], size: int) -> None:
        if entry.get("op") != HEADER_OP or entry.get("format") != FORMAT or entry.get("kind") != self.kind:
            raise BackendError(f"{self.path} does not start with a mnemostore {self.kind} log header")
        if entry.get("version") != FORMAT_VERSION:
            raise BackendError(f"{self.path} has log format version {entry.get('version')}; this mnemostore "
                               f"reads version {FORMAT_VERSION} (upgrade mnemostore)")
        self.generation = int(entry.get("generation", 0))
        self.header_size = size

    def truncate_torn(self, durable: bool) -> None:
        """Cut a torn tail off (caller holds the exclusive lock)."""
        assert self.fd is not None
        if self.torn:
            os.ftruncate(self.fd, self.end)
            if durable:
                os.fsync(self.fd)
            self.torn = False

    def append(self, parts: list[bytes | memoryview], durable: bool) -> None:
        """Append one encoded line and make it durable; on failure nothing of it remains."""
        assert self.fd is not None and not self.torn
        try:
            write_all(self.fd, parts)
            if durable:
                os.fdatasync(self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # if this fails too, readers skip the torn tail
                os.ftruncate(self.fd, self.end)
            raise BackendError(f"cannot append to {self.path}: {exc}") from exc
        self.end += line_length(parts)

    def rewrite(self, lines: Iterable[list[bytes | memoryview]], generation: int, durable: bool) -> None:
        """Atomically replace the file with a header of `generation` and `lines`, then reopen it."""
        first = encode_line(header(self.kind, generation))
        total = line_length(first)

        def chunks() -> Iterator[list[bytes | memoryview]]:
            nonlocal total
            yield first
            for parts in lines:
                total += line_length(parts)
                yield parts

        try:
            replace_atomically(self.path, chunks(), durable)
        except OSError as exc:
            raise BackendError(f"cannot write {self.path}: {exc}") from exc
        if not self.open():
            raise BackendError(f"{self.path} vanished right after it was written")
        self.end, self.header_size, self.generation = total, line_length(first), generation


def _lines(fd: int, start: int, stop: int) -> Iterator[tuple[int, bytes, bool]]:
    """(offset, line without newline, complete) for every line in [start, stop); a last line
    without its newline comes with complete=False (it is torn, whatever its checksum says)."""
    buffer = bytearray()
    buffer_start = start
    position = start
    while position < stop:
        chunk = os.pread(fd, min(_CHUNK, stop - position), position)
        if not chunk:
            break
        position += len(chunk)
        buffer += chunk
        cut = 0
        while True:
            newline = buffer.find(b"\n", cut)
            if newline < 0:
                break
            yield buffer_start + cut, bytes(buffer[cut:newline]), True
            cut = newline + 1
        del buffer[:cut]
        buffer_start += cut
    if buffer:
        yield buffer_start, bytes(buffer), False
