"""The ledger: which migrations a store has applied, kept in the store's own metadata.

It lives under the meta key `ledger` (a row of the meta table on SQL backends, the meta
record or file elsewhere), beside the store's parameters (`params`: dimension, metric,
embedding model). A backend writes it in the same transaction as a layout step where the
engine allows (`Backend.run_layout`).
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.errors import MigrationError
from .model import Migration

if TYPE_CHECKING:
    from ..core.protocol import Backend

LEDGER_KEY = "ledger"
PROGRESS_KEY = "migration_progress"
"""Where a record migration keeps its position (kind, tenant, last id) between batches."""
FORMAT = 1


def runner_version() -> str:
    from .. import __version__

    return __version__


def whoami() -> str:
    """This process, as named in the ledger and in lock records."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class LedgerEntry:
    """One applied migration."""

    id: str
    layer: str
    checksum: str
    applied_at: str
    runner_version: str
    applied_by: str
    transactional: bool
    how: str = "applied"
    """"applied", "stamped" (recorded without running) or "adopted" (a pre-ledger store)."""

    @classmethod
    def of(cls, migration: Migration, how: str = "applied") -> LedgerEntry:
        return cls(migration.id, migration.ledger_layer, migration.checksum, datetime.now(UTC).isoformat(),
                   runner_version(), whoami(), migration.transactional, how)


@dataclass(frozen=True)
class Ledger:
    """The applied migrations, in the order they were applied."""

    entries: tuple[LedgerEntry, ...] = ()
    exists: bool = True

    @classmethod
    def read(cls, backend: Backend) -> Ledger:
        value = backend.read_meta(LEDGER_KEY)
        if value is None:
            return cls((), exists=False)
        if not isinstance(value, dict) or value.get("format") != FORMAT or not isinstance(value.get("entries"), list):
            found = value.get("format") if isinstance(value, dict) else None
            raise MigrationError(f"the migration ledger of this store is unreadable (format {found!r}, expected "
                                 f"{FORMAT}); it was written by a newer mnemostore, or damaged")
        try:
            entries = tuple(LedgerEntry(**entry) for entry in value["entries"])
        except TypeError as exc:
            raise MigrationError(f"the migration ledger of this store has a malformed entry: {exc}") from None
        return cls(entries)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "entries": [asdict(entry) for entry in self.entries]}

    @property
    def ids(self) -> list[str]:
        return [entry.id for entry in self.entries]

    def get(self, id: str) -> LedgerEntry | None:
        return next((entry for entry in self.entries if entry.id == id), None)

    def adding(self, entry: LedgerEntry) -> Ledger:
        return Ledger((*(e for e in self.entries if e.id != entry.id), entry))

    def removing(self, id: str) -> Ledger:
        return Ledger(tuple(e for e in self.entries if e.id != id))

    def replacing(self, entry: LedgerEntry) -> Ledger:
        return Ledger(tuple(entry if e.id == entry.id else e for e in self.entries))
