"""Migrations: a ledger in every store, a locked runner, layout and record migrations, copies.

Names resolve lazily, like `mnemostore`'s own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

_EXPORTS: dict[str, str] = {
    "reembed": "mnemostore.migrations.reembedding",
    "LayoutMigration": "mnemostore.migrations.model",
    "RecordMigration": "mnemostore.migrations.model",
    "Migration": "mnemostore.migrations.model",
    "Runner": "mnemostore.migrations.runner",
    "Step": "mnemostore.migrations.runner",
    "Status": "mnemostore.migrations.plan",
    "Ledger": "mnemostore.migrations.ledger",
    "LedgerEntry": "mnemostore.migrations.ledger",
    "LockInfo": "mnemostore.migrations.locking",
    "MigrationLock": "mnemostore.migrations.locking",
    "FileLock": "mnemostore.migrations.locking",
    "MetaLock": "mnemostore.migrations.locking",
    "ProcessLock": "mnemostore.migrations.locking",
    "add_metadata_default": "mnemostore.migrations.records",
    "rename_metadata_key": "mnemostore.migrations.records",
    "recompute": "mnemostore.migrations.records",
    "Progress": "mnemostore.migrations.progress",
    "copy": "mnemostore.migrations.copying",
    "CopyReport": "mnemostore.migrations.copying",
    "KindReport": "mnemostore.migrations.copying",
    "export_archive": "mnemostore.migrations.archive",
    "import_archive": "mnemostore.migrations.archive",
    "check_archive": "mnemostore.migrations.archive",
    "ArchiveInfo": "mnemostore.migrations.archive",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # `X as X`: explicit re-exports for type checkers (mypy --strict)
    from .archive import ArchiveInfo as ArchiveInfo
    from .archive import check_archive as check_archive
    from .archive import export_archive as export_archive
    from .archive import import_archive as import_archive
    from .copying import CopyReport as CopyReport
    from .copying import KindReport as KindReport
    from .copying import copy as copy
    from .ledger import Ledger as Ledger
    from .ledger import LedgerEntry as LedgerEntry
    from .locking import FileLock as FileLock
    from .locking import LockInfo as LockInfo
    from .locking import MetaLock as MetaLock
    from .locking import MigrationLock as MigrationLock
    from .locking import ProcessLock as ProcessLock
    from .model import LayoutMigration as LayoutMigration
    from .model import Migration as Migration
    from .model import RecordMigration as RecordMigration
    from .plan import Status as Status
    from .progress import Progress as Progress
    from .records import add_metadata_default as add_metadata_default
    from .records import recompute as recompute
    from .records import rename_metadata_key as rename_metadata_key
    from .reembedding import reembed as reembed
    from .runner import Runner as Runner
    from .runner import Step as Step
