"""The Postgres layout history, as statement templates with the store's names left open.

A store's schema and table prefix are options, so a step is written once as templates
naming `{schema}`, `{vector_schema}` (where pgvector lives) and `{name[outcome]}` (the
prefixed object name); `PostgresBackend.run_layout` fills them in with quoted identifiers
(`Names.render`). The checksum covers the templates, so it is the same for every store,
whatever its options, and `plan --sql` shows the text that runs. The steps are frozen
text, not generated from the record classes, so a new field cannot silently change them.

Every step also sets the meta value `layout_version` to its number: mnemostore versions
from before the ledger read only that, and refuse a store laid out by a newer one.

Not here, on purpose: typing the `embedding` columns `vector(dim)` and their HNSW indexes
depend on the store's dimension and metric (set by its first writer, not by code) and on
the `index` option, so `schema.ensure_vectors` still does that on first use.
"""

from __future__ import annotations

from ...migrations.model import LayoutMigration

_TEXT = 'text COLLATE "C"'
LAYOUT1_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "outcome": (
        ("agent", _TEXT), ("project_id", _TEXT), ("created_at", "bigint"), ("updated_at", "bigint"),
        ("task_type", _TEXT), ("success", "boolean"), ("strategy_used", _TEXT), ("duration_ms", "bigint"),
        ("created_at_utcoffset_us", "bigint"), ("updated_at_utcoffset_us", "bigint"),
    ),
    "heuristic": (
        ("agent", _TEXT), ("project_id", _TEXT), ("created_at", "bigint"), ("updated_at", "bigint"),
        ("condition", _TEXT), ("strategy", _TEXT), ("confidence", "double precision"),
        ("occurrence_count", "bigint"), ("success_count", "bigint"), ("last_validated", "bigint"),
        ("created_at_utcoffset_us", "bigint"), ("updated_at_utcoffset_us", "bigint"),
        ("last_validated_utcoffset_us", "bigint"),
    ),
    "anti_pattern": (
        ("agent", _TEXT), ("project_id", _TEXT), ("created_at", "bigint"), ("updated_at", "bigint"),
        ("pattern", _TEXT), ("occurrence_count", "bigint"), ("last_seen", "bigint"),
        ("created_at_utcoffset_us", "bigint"), ("updated_at_utcoffset_us", "bigint"),
        ("last_seen_utcoffset_us", "bigint"),
    ),
    "checkpoint": (
        ("agent", _TEXT), ("project_id", _TEXT), ("created_at", "bigint"), ("updated_at", "bigint"),
        ("run_id", _TEXT), ("node_id", _TEXT), ("sequence", "bigint"), ("branch_id", _TEXT),
        ("state_hash", _TEXT), ("created_at_utcoffset_us", "bigint"), ("updated_at_utcoffset_us", "bigint"),
    ),
    "embedding": (
        ("agent", _TEXT), ("project_id", _TEXT), ("created_at", "bigint"), ("updated_at", "bigint"),
        ("namespace", _TEXT), ("model", _TEXT), ("text", _TEXT),
        ("created_at_utcoffset_us", "bigint"), ("updated_at_utcoffset_us", "bigint"),
    ),
}
"""Each kind's record columns at layout 1, between (tenant, id) and (doc, metadata, embedding)."""
_KINDS = tuple(LAYOUT1_COLUMNS)
"""The kinds at layout 1; a kind added later gets its table from a later step."""


def _create_table(kind: str) -> str:
    columns = ", ".join(f'"{name}" {type}' for name, type in LAYOUT1_COLUMNS[kind])
    return (f'CREATE TABLE IF NOT EXISTS {{schema}}.{{name[{kind}]}} (tenant {_TEXT} NOT NULL, id {_TEXT} NOT NULL, '
            f"{columns}, doc bytea NOT NULL, metadata jsonb NOT NULL, embedding {{vector_schema}}.vector, "
            "PRIMARY KEY (tenant, id))")


def _set_layout_version(version: int) -> str:
    return ("INSERT INTO {schema}.{name[meta]} (key, value) VALUES ('layout_version', "
            f"'{version}') ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")


_TABLES = LayoutMigration(
    "postgres.0001_tables",
    backend="postgres",
    description="a table per kind (typed filter columns, document, JSONB metadata, untyped vector) and its indexes",
    up=(
        *(statement for kind in _KINDS for statement in (
            _create_table(kind),
            f"CREATE INDEX IF NOT EXISTS {{name[{kind}_created]}} ON {{schema}}.{{name[{kind}]}} "
            "(tenant, created_at, id)",
        )),
        "CREATE INDEX IF NOT EXISTS {name[checkpoint_run]} ON {schema}.{name[checkpoint]} "
        "(tenant, run_id, branch_id, sequence)",
        _set_layout_version(1),
    ),
    down=(
        "DROP TABLE IF EXISTS " + ", ".join(f"{{schema}}.{{name[{kind}]}}" for kind in _KINDS),
        "DELETE FROM {schema}.{name[meta]} WHERE key = 'layout_version'",
    ),
)

_FILTER_INDEXES = (("agent", "agent"), ("project", "project_id"))
"""(index name suffix, column): agents scope most reads to themselves or to a project."""

_SCOPE_INDEXES = LayoutMigration(
    "postgres.0002_scope_indexes",
    backend="postgres",
    description="btree indexes on (tenant, agent) and (tenant, project_id) prefixes on every kind, built "
                "CONCURRENTLY so writers are not blocked on a live store",
    # A btree key must fit in a third of a page and agent/project_id are unbounded text, so
    # the key is the first 64 characters (`sql_filters.SCOPE_PREFIX`); filters on these
    # columns also compare that prefix, which lets the planner use the index.
    # CREATE INDEX CONCURRENTLY cannot run in a transaction: each statement commits on its
    # own and the ledger is written after the last. Dropping first makes a retry after a
    # failure rebuild an index a failed build left INVALID, instead of keeping it.
    atomic=False,
    up=(
        *(statement for kind in _KINDS for suffix, column in _FILTER_INDEXES for statement in (
            f"DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name[{kind}_{suffix}]}}",
            f"CREATE INDEX CONCURRENTLY {{name[{kind}_{suffix}]}} ON {{schema}}.{{name[{kind}]}} "
            f"(tenant, left({column}, 64))",
        )),
        _set_layout_version(2),
    ),
    down=(
        *(f"DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name[{kind}_{suffix}]}}"
          for kind in _KINDS for suffix, _ in _FILTER_INDEXES),
        _set_layout_version(1),
    ),
)

HISTORY: tuple[LayoutMigration, ...] = (_TABLES, _SCOPE_INDEXES)
NEWEST_LAYOUT_VERSION = len(HISTORY)
"""The `layout_version` the newest step sets; a store with a larger one is refused."""
