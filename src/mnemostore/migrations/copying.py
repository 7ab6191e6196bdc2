"""Copy a whole store to another one, on any pair of backends, resumably and verified.

Every record of every kind and tenant is streamed from the source in id order (keyset pages)
and written to the destination as it is: ids, timestamps with their offsets, metadata,
embeddings and checkpoint lineage, state and hash. The destination must be empty (or hold an
unfinished copy of the same source, which is resumed, or be overwritten on request; see
`destination.py`). At the end each kind is verified: the destination's count and checksum,
streamed back, must equal the source's, else MigrationError names the kind.

The source is opened like any store (`mnemostore.open`, so an embedded one is migrated on open)
and should not be written to during the copy: records changed meanwhile fail verification.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError, MigrationError
from .destination import Destination, Origin, opened, same_store
from .progress import Progress, Silent
from .streams import Digest, Position, batches, chosen_kinds, digest_kind, every_kind_of, kind_count

if TYPE_CHECKING:
    from ..core.store import Store


@dataclass(frozen=True)
class KindReport:
    """What happened to one kind: records written in this run, the verified total, timings."""

    kind: str
    copied: int
    """Records written by this run (fewer than `count` when the run resumed an earlier one)."""
    count: int
    """Records of this kind in the destination, verified equal to the source."""
    checksum: str
    """SHA-256 over the kind's records in (tenant, id) order (see `streams.record_bytes`)."""
    seconds: float
    """Time spent copying this kind (verification excluded)."""
    verify_seconds: float = 0.0

    @property
    def records_per_second(self) -> float:
        return self.copied / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "copied": self.copied, "count": self.count, "checksum": self.checksum,
                "seconds": round(self.seconds, 6), "verify_seconds": round(self.verify_seconds, 6),
                "records_per_second": round(self.records_per_second, 1)}


@dataclass(frozen=True)
class CopyReport:
    """The outcome of `copy`, `export_archive` or `import_archive`."""

    source: str
    destination: str
    kinds: dict[str, KindReport] = field(default_factory=dict)
    seconds: float = 0.0
    resumed: bool = False

    @property
    def copied(self) -> int:
        return sum(report.copied for report in self.kinds.values())

    @property
    def count(self) -> int:
        return sum(report.count for report in self.kinds.values())

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "destination": self.destination, "resumed": self.resumed,
                "seconds": round(self.seconds, 6), "copied": self.copied, "count": self.count,
                "kinds": {kind: report.to_json() for kind, report in self.kinds.items()}}


def check_batch_size(batch_size: int) -> None:
    if type(batch_size) is not int or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")


def verify(kind: str, expected: tuple[int, str], actual: tuple[int, str], source: str, destination: str) -> None:
    """Raise MigrationError naming `kind` unless the (count, checksum) pairs agree."""
    if expected != actual:
        raise MigrationError(
            f"verification failed for {kind}: {source} has {expected[0]} records (checksum "
            f"{expected[1][:16]}), {destination} has {actual[0]} (checksum {actual[1][:16]}). "
            "Was either store written to during the copy? Copy again with overwrite=True (--overwrite)")


def copy(source: str | Store, destination: str | Store, *, kinds: Sequence[str] | None = None,
         batch_size: int = 1000, progress: Progress | None = None, resume: bool = True,
         overwrite: bool = False, lock_wait: float = 60.0) -> CopyReport:
    """Copy every record of `kinds` (default: all) from `source` to `destination` and verify it.

    Both may be URLs (opened and closed here) or open Stores. The destination takes the source's
    parameters (a store with other ones raises SchemaMismatch before anything is written) and must
    hold none of the copied kinds' records, unless it holds an unfinished copy of this source
    (continued when `resume`) or `overwrite` is set (its records of those kinds are deleted first).
    """
    check_batch_size(batch_size)
    chosen = chosen_kinds(kinds)
    report_to: Progress = progress or Silent()
    started = time.perf_counter()
    with ExitStack() as stack:
        src = stack.enter_context(opened(source, create=False))
        if kinds is None:
            chosen = every_kind_of(src.backend, "a copy")
        origin = Origin("store", src.backend.url.masked, src.backend.url.masked, chosen, src.params)
        dst = stack.enter_context(opened(destination, src.params))
        if same_store(src.backend, dst.backend):
            raise MigrationError(f"the source and the destination are the same store ({origin.name})")
        target = stack.enter_context(Destination(dst, origin, resume=resume, overwrite=overwrite,
                                                 lock_wait=lock_wait))
        reports = {kind: _copy_kind(src, target, kind, batch_size, report_to) for kind in chosen}
        target.finish()
        return CopyReport(origin.name, target.name, reports, time.perf_counter() - started, target.resumed)


def _copy_kind(src: Store, target: Destination, kind: str, batch_size: int, progress: Progress) -> KindReport:
    position = target.position
    skipped = position is not None and position.finished(kind)
    start: Position | None = position if position is not None and position.kind == kind else None
    digest: Digest | None = Digest() if not skipped and start is None else None
    copied = 0
    began = time.perf_counter()
    if not skipped:
        progress.begin(f"copy {kind}", kind_count(src.backend, kind))
        for tenant, page in batches(src.backend, kind, batch_size, start):
            target.write(kind, tenant, page)
            if digest is not None:
                digest.update(page)
            copied += len(page)
            progress.advance(len(page))
        progress.end()
    seconds = time.perf_counter() - began
    began = time.perf_counter()
    progress.begin(f"verify {kind}", None if digest is None else digest.count)
    if digest is None:  # resumed: what earlier runs copied was not seen by this one
        digest = digest_kind(src.backend, kind, batch_size, progress.advance)
    written = digest_kind(target.backend, kind, batch_size, progress.advance)
    progress.end()
    verify(kind, digest.totals, written.totals, src.backend.url.masked, target.name)
    return KindReport(kind, copied, written.count, written.hexdigest, seconds, time.perf_counter() - began)
