"""A portable archive of a store: JSON lines, gzip-compressed when the name ends in `.gz`.

Line 1 is a header (format name and version, the store's parameters, the source's masked
URL, the time of export, the kinds); then one line per record,
`{"kind": ..., "record": {...}}`, the record as the codec's JSON document with its embedding as
base64 of float32 little-endian bytes, kinds in canonical order (`streams.kind_key`) and each kind's records in
(tenant, id) order; the last line is a footer with each kind's count and checksum (the same
checksum `copy` reports). An archive is written to `NAME.partial` and renamed when complete.

Import reads the archive twice: first to validate every record and check the footer (a
truncated or edited archive is refused before anything is written), then to write. Writing
follows the rules of `copy` (empty destination, resume, overwrite; see `destination.py`). Records
of an archive from an older mnemostore are written as mnemostore's own record migrations leave
them (`records.brought_up_to_date`: a SHA-256 `state_hash` becomes xxh3-128), so the destination
never mixes them; verification compares the destination with those records.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..core.base64text import from_text, to_text
from ..core.codec import json_default, parse_fields
from ..core.errors import MigrationError, ValidationError
from ..core.kinds import record_type
from ..core.protocol import StoreParams
from ..core.records import Record
from .copying import CopyReport, KindReport, check_batch_size, verify
from .destination import Destination, Origin, opened
from .progress import Progress, Silent
from .records import brought_up_to_date
from .streams import Digest, batches, chosen_kinds, digest_kind, every_kind_of, kind_count, kind_key, tenant_key

if TYPE_CHECKING:
    from ..core.store import Store

FORMAT_NAME = "mnemostore-archive"
FORMAT_VERSION = 1
_GZIP_MAGIC = b"\x1f\x8b"
_CHECK_STEP = 1000
"""Records checked between two progress reports."""


@dataclass(frozen=True)
class ArchiveInfo:
    """An archive's header and footer, read and checked against every record line."""

    path: Path
    params: StoreParams
    kinds: tuple[str, ...]
    source: str
    created_at: str
    counts: dict[str, int]
    checksums: dict[str, str]

    @property
    def identity(self) -> str:
        """What a resumed import must match: the footer's checksums (not the file's name)."""
        return orjson.dumps({"counts": self.counts, "checksums": self.checksums},
                            option=orjson.OPT_SORT_KEYS).decode()


def encode_line(record: Record) -> bytes:
    """One record line: the document as the codec writes it (bytes fields as base64), the embedding
    as base64."""
    data = dict(record.__dict__)
    vector = data["embedding"]
    if vector is not None:
        data["embedding"] = to_text(vector.astype("<f4", copy=False).tobytes())
    return orjson.dumps({"kind": record.kind, "record": data}, default=json_default) + b"\n"


@contextmanager
def _writing(path: Path) -> Iterator[io.BufferedIOBase]:
    """A file that appears at `path` only when the block completes (gzip if it ends in .gz)."""
    partial = path.with_name(path.name + ".partial")
    handle: io.BufferedIOBase
    try:
        opened = partial.open("wb")
    except OSError as exc:
        raise MigrationError(f"cannot write the archive {path}: {exc.strerror or exc}") from None
    with opened as raw:
        handle = gzip.GzipFile(filename=path.name.removesuffix(".gz"), mode="wb", fileobj=raw,
                               compresslevel=6, mtime=0) if path.name.endswith(".gz") else raw
        try:
            yield handle
            if handle is not raw:
                handle.close()
            raw.flush()
            os.fsync(raw.fileno())
        except BaseException:
            if handle is not raw:
                with contextlib.suppress(Exception):
                    handle.close()
            raw.close()
            partial.unlink(missing_ok=True)
            raise
    os.replace(partial, path)


def export_archive(source: str | Store, path: str | os.PathLike[str], *, kinds: Sequence[str] | None = None,
                   batch_size: int = 1000, progress: Progress | None = None, overwrite: bool = False) -> CopyReport:
    """Write every record of `kinds` (default: all) of `source` to the archive file `path`."""
    check_batch_size(batch_size)
    chosen = chosen_kinds(kinds)
    target = Path(path)
    if target.exists() and not overwrite:
        raise MigrationError(f"{target} exists; choose another file or pass overwrite=True (--overwrite)")
    report_to: Progress = progress or Silent()
    started = time.perf_counter()
    with ExitStack() as stack:
        src = stack.enter_context(opened(source, create=False))
        if kinds is None:
            chosen = every_kind_of(src.backend, "an export")
        out = stack.enter_context(_writing(target))
        out.write(orjson.dumps({
            "format": FORMAT_NAME, "version": FORMAT_VERSION, "source": src.backend.url.masked,
            "created_at": datetime.now(UTC).isoformat(), "params": asdict(src.params), "kinds": list(chosen),
            "mnemostore": _version()}) + b"\n")
        reports: dict[str, KindReport] = {}
        for kind in chosen:
            began = time.perf_counter()
            digest = Digest()
            report_to.begin(f"export {kind}", kind_count(src.backend, kind))
            for _, page in batches(src.backend, kind, batch_size):
                out.write(b"".join(encode_line(record) for record in page))
                digest.update(page)
                report_to.advance(len(page))
            report_to.end()
            reports[kind] = KindReport(kind, digest.count, digest.count, digest.hexdigest,
                                       time.perf_counter() - began)
        out.write(orjson.dumps({"footer": {
            "counts": {kind: r.count for kind, r in reports.items()},
            "checksums": {kind: r.checksum for kind, r in reports.items()}}}) + b"\n")
        name = src.backend.url.masked
    return CopyReport(name, str(target), reports, time.perf_counter() - started)


def _version() -> str:
    from .. import __version__

    return __version__


@contextmanager
def _lines(path: Path) -> Iterator[Iterator[bytes]]:
    """The archive's lines, decompressed if it is gzip (recognised by content, not name)."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise MigrationError(f"cannot read the archive {path}: {exc.strerror or exc}") from None
    with raw:
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        handle: io.BufferedIOBase = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw

        def lines() -> Iterator[bytes]:
            try:
                yield from handle
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                raise MigrationError(f"the archive {path} is damaged or truncated (gzip: {exc}); export it "
                                     "again. Nothing was written to the destination") from None

        yield lines()


class _Reader:
    """Parses and checks an archive line by line: header, records in order, footer."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, number: int | None, problem: str) -> MigrationError:
        where = f"{self.path}, line {number}" if number else str(self.path)
        return MigrationError(f"{where}: {problem}. The archive is damaged, truncated or was edited; "
                              "nothing was written to the destination")

    def records(self, lines: Iterator[bytes]) -> Iterator[tuple[str, Record]]:
        """Every (kind, record), validated; sets `self.info` once the footer checked out."""
        number = 1
        first = next(lines, None)
        if first is None:
            raise self.fail(None, "the file is empty, not a mnemostore archive")
        header = self._json(first, 1)
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise MigrationError(f"{self.path} is not a mnemostore archive (its first line has no "
                                 f"\"format\": {FORMAT_NAME!r})")
        if header.get("version") != FORMAT_VERSION:
            raise MigrationError(f"{self.path} is a mnemostore archive of format version {header.get('version')!r}; "
                                 f"this mnemostore reads version {FORMAT_VERSION} (upgrade mnemostore)")
        try:
            params = StoreParams(**header["params"])
            kinds = chosen_kinds(header["kinds"])
        except (KeyError, TypeError, MigrationError) as exc:
            raise self.fail(1, f"the header is malformed ({exc})") from None
        digests = {kind: Digest() for kind in kinds}
        last: tuple[tuple[int, str], tuple[bool, str], str] | None = None
        footer: Any = None
        for number, line in enumerate(lines, start=2):
            if footer is not None:
                raise self.fail(number, "there are lines after the footer")
            item = self._json(line, number)
            if isinstance(item, dict) and "footer" in item:
                footer = item["footer"]
                continue
            kind, record = self._record(item, number, kinds, params)
            here = (kind_key(kind), tenant_key(record.tenant_id), record.id)
            if last is not None and here <= last:
                raise self.fail(number, f"{kind} {record.id!r} is out of order (records go by kind, tenant, id)")
            last = here
            digests[kind].update((record,))
            yield kind, record
        if footer is None:
            raise self.fail(number, "the archive ends without its footer line (the export did not finish, or "
                                    "the file was cut short)")
        counts, checksums = self._footer(footer, number, kinds)
        for kind, digest in digests.items():
            if digest.count != counts[kind] or digest.hexdigest != checksums[kind]:
                raise self.fail(None, f"its {kind} records do not match the footer ({digest.count} records, "
                                      f"checksum {digest.hexdigest[:16]}; the footer says {counts[kind]}, "
                                      f"{checksums[kind][:16]})")
        self.info = ArchiveInfo(self.path, params, kinds, str(header.get("source", "?")),
                                str(header.get("created_at", "?")), counts, checksums)

    def _json(self, line: bytes, number: int) -> Any:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise self.fail(number, f"not valid JSON ({exc})") from None

    def _record(self, item: Any, number: int, kinds: tuple[str, ...], params: StoreParams) -> tuple[str, Record]:
        if not isinstance(item, dict) or not isinstance(item.get("record"), dict):
            raise self.fail(number, 'expected {"kind": ..., "record": {...}}')
        kind = item.get("kind")
        if kind not in kinds:
            raise self.fail(number, f"record kind {kind!r} is not one of the header's kinds ({', '.join(kinds)})")
        data = dict(item["record"])
        try:
            data["embedding"] = _vector(data.get("embedding"))
            cls = record_type(kind)
            record = cls.model_validate(parse_fields(cls, data))
        except (ValueError, TypeError, ValidationError) as exc:
            raise self.fail(number, f"invalid {kind} record {data.get('id')!r}: {exc}") from None
        if record.embedding is not None and record.embedding.shape[0] != params.dimension:
            raise self.fail(number, f"{kind} {record.id!r} has a {record.embedding.shape[0]}-dimensional embedding; "
                                    f"the header says {params.dimension}")
        return kind, record

    def _footer(self, footer: Any, number: int, kinds: tuple[str, ...]) -> tuple[dict[str, int], dict[str, str]]:
        counts = footer.get("counts") if isinstance(footer, dict) else None
        checksums = footer.get("checksums") if isinstance(footer, dict) else None
        if (not isinstance(counts, dict) or not isinstance(checksums, dict)
                or any(not isinstance(counts.get(k), int) or not isinstance(checksums.get(k), str) for k in kinds)):
            raise self.fail(number, "the footer is malformed (it needs a count and a checksum per kind)")
        return counts, checksums


def _vector(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("embedding: expected base64 of float32 little-endian bytes")
    import numpy as np

    raw = from_text(value)
    if len(raw) % 4:
        raise ValueError("embedding: its bytes are not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)  # a writable copy: validated in full


def check_archive(path: str | os.PathLike[str], progress: Progress | None = None) -> ArchiveInfo:
    """Read the whole archive, validating every record and the footer; raise MigrationError if
    it is damaged, truncated or edited. Returns its header and footer."""
    report_to: Progress = progress or Silent()
    reader = _Reader(Path(path))
    report_to.begin("check archive", None)
    seen = 0
    with _lines(reader.path) as lines:
        for seen, _ in enumerate(reader.records(lines), start=1):
            if seen % _CHECK_STEP == 0:
                report_to.advance(_CHECK_STEP)
    if seen % _CHECK_STEP:
        report_to.advance(seen % _CHECK_STEP)
    report_to.end()
    return reader.info


def import_archive(path: str | os.PathLike[str], destination: str | Store, *, batch_size: int = 1000,
                   progress: Progress | None = None, resume: bool = True, overwrite: bool = False,
                   lock_wait: float = 60.0) -> CopyReport:
    """Load an archive written by `export_archive` into `destination`, then verify it.

    The archive is checked in full first; the destination rules are those of `copy`.
    """
    check_batch_size(batch_size)
    report_to: Progress = progress or Silent()
    started = time.perf_counter()
    info = check_archive(path, report_to)
    origin = Origin("archive", str(info.path), info.identity, info.kinds, info.params)
    with opened(destination, info.params) as store, \
            Destination(store, origin, resume=resume, overwrite=overwrite, lock_wait=lock_wait) as target:
        copied = dict.fromkeys(info.kinds, 0)
        seconds = dict.fromkeys(info.kinds, 0.0)
        pending: list[Record] = []
        current: tuple[str, str | None] | None = None
        began = time.perf_counter()

        def flush() -> None:
            if current is not None and pending:
                target.write(current[0], current[1], pending)
                copied[current[0]] += len(pending)
                report_to.advance(len(pending))
                pending.clear()

        def switch(kind: str | None) -> None:
            nonlocal began
            if current is not None:
                seconds[current[0]] = time.perf_counter() - began
                report_to.end()
            if kind is not None:
                report_to.begin(f"import {kind}", info.counts[kind])
                began = time.perf_counter()

        expected = {kind: Digest() for kind in info.kinds}
        with _lines(info.path) as lines:
            for kind, archived in _Reader(info.path).records(lines):
                record = brought_up_to_date(archived)
                expected[kind].update((record,))
                if target.position is not None and target.position.passed(kind, record.tenant_id, record.id):
                    continue
                if (kind, record.tenant_id) != current or len(pending) >= batch_size:
                    flush()
                    if current is None or current[0] != kind:
                        switch(kind)
                    current = (kind, record.tenant_id)
                pending.append(record)
            flush()
            switch(None)
        reports: dict[str, KindReport] = {}
        for kind in info.kinds:
            checked = time.perf_counter()
            report_to.begin(f"verify {kind}", info.counts[kind])
            written = digest_kind(target.backend, kind, batch_size, report_to.advance)
            report_to.end()
            verify(kind, expected[kind].totals, written.totals, str(info.path), target.name)
            reports[kind] = KindReport(kind, copied[kind], written.count, written.hexdigest, seconds[kind],
                                       time.perf_counter() - checked)
        target.finish()
        return CopyReport(str(info.path), target.name, reports, time.perf_counter() - started, target.resumed)
