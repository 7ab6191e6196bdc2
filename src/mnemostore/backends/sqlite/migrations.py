"""The SQLite layout history. Each step also sets `PRAGMA user_version` to its number, so an
older mnemostore (which reads only that) refuses a store laid out by a newer one."""

from __future__ import annotations

from ...core.records import KINDS
from ...migrations.model import LayoutMigration
from .schema import EPOCH_TABLE, LAYOUTS, quote

_TABLES = LayoutMigration(
    "sqlite.0001_tables",
    backend="sqlite",
    description="a table per kind with projected filter columns, its indexes, and the vector epochs",
    up=(
        f"CREATE TABLE IF NOT EXISTS {EPOCH_TABLE} (kind TEXT PRIMARY KEY, epoch INTEGER NOT NULL)",
        *(f"INSERT OR IGNORE INTO {EPOCH_TABLE} (kind, epoch) VALUES ('{kind}', 0)" for kind in KINDS),
        *(statement for layout in LAYOUTS.values() for statement in layout.ddl()),
        "PRAGMA user_version = 1",
    ),
    down=(
        *(f"DROP TABLE IF EXISTS {layout.table}" for layout in LAYOUTS.values()),
        f"DROP TABLE IF EXISTS {EPOCH_TABLE}",
        "PRAGMA user_version = 0",
    ),
)

_PROJECT_INDEXES = LayoutMigration(
    "sqlite.0002_project_indexes",
    backend="sqlite",
    description="index (tenant, project_id) on every kind: agents scope most reads to a project",
    up=(
        *(f"CREATE INDEX IF NOT EXISTS {quote(f'mnemo_{kind}_project_id')} ON {LAYOUTS[kind].table} "
          "(tenant, project_id)" for kind in KINDS),
        "PRAGMA user_version = 2",
    ),
    down=(
        *(f"DROP INDEX IF EXISTS {quote(f'mnemo_{kind}_project_id')}" for kind in KINDS),
        "PRAGMA user_version = 1",
    ),
)

HISTORY: tuple[LayoutMigration, ...] = (_TABLES, _PROJECT_INDEXES)
NEWEST_USER_VERSION = len(HISTORY)
