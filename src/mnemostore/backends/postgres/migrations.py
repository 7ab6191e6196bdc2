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

from typing import Any

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
    # the key is the first 64 characters (`layout.SCOPE_PREFIX`); filters on these
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


def _uncompress_documents(backend: Any) -> None:
    """Down from layout 3 (a function: SQL cannot inflate zlib): every compressed document (one
    not starting with `{`, byte 123) is rewritten as plain orjson, a checkpoint's `parent_ids`
    column is moved back into its document, then the layout 2 columns and storage are restored,
    all in one transaction. (The checksum covers this source: the statements are all here.)"""
    import orjson

    from .layout import decode_doc

    names = backend.names
    with backend._transaction() as conn:
        conn.execute("SET LOCAL statement_timeout = 0")
        for kind in _KINDS:
            lists = kind == "checkpoint"
            columns, where = ("doc, parent_ids", " OR parent_ids IS NOT NULL") if lists else ("doc", "")
            table = f"{{schema}}.{{name[{kind}]}}"
            select = f"SELECT tenant, id, {columns} FROM {table} WHERE get_byte(doc, 0) <> 123{where}"
            update = names.render(f"UPDATE {table} SET doc = %s WHERE tenant = %s AND id = %s")
            for row in conn.execute(names.render(select)).fetchall():
                data = decode_doc(row[2])
                if lists and row[3] is not None:
                    data["parent_ids"] = row[3]
                conn.execute(update, (orjson.dumps(data), row[0], row[1]))
            conn.execute(names.render(f"ALTER TABLE {table} ALTER COLUMN doc SET STORAGE EXTENDED"))
        conn.execute(names.render("ALTER TABLE {schema}.{name[checkpoint]} DROP COLUMN parent_ids"))
        conn.execute(names.render("DROP FUNCTION {schema}.{name[checkpoint_latest]}(text, text, text, bigint)"))
        conn.execute(names.render(_set_layout_version(2)))


_COMPRESSED_DOCS = LayoutMigration(
    "postgres.0003_compressed_docs",
    backend="postgres",
    description="documents of 2 KB or more are stored zlib-compressed by the client, in columns whose storage "
                "is EXTERNAL (no pglz on top); a checkpoint's parent_ids gets a text[] column and a function "
                "reads a run's latest checkpoint under a lock, so a save with the default parent is one INSERT "
                "that fills both in (rows from before keep parent_ids in the document)",
    up=(
        "ALTER TABLE {schema}.{name[checkpoint]} ADD COLUMN IF NOT EXISTS parent_ids text[]",
        *(f"ALTER TABLE {{schema}}.{{name[{kind}]}} ALTER COLUMN doc SET STORAGE EXTERNAL" for kind in _KINDS),
        # The latest checkpoint of a run and branch (core's LATEST_CHECKPOINT_ORDER), read after
        # an advisory lock taken for the caller's transaction: a VOLATILE function's queries take
        # a new snapshot (READ COMMITTED), so it sees a racing save that held the lock before it.
        "CREATE OR REPLACE FUNCTION {schema}.{name[checkpoint_latest]}(tenant_ text, run_ text, branch_ text, "
        "lock_ bigint) RETURNS TABLE (id text, sequence bigint) LANGUAGE plpgsql VOLATILE AS $$ BEGIN "
        "PERFORM pg_advisory_xact_lock(lock_); "
        "RETURN QUERY SELECT c.id, c.sequence FROM {schema}.{name[checkpoint]} c "
        "WHERE c.tenant = tenant_ AND c.run_id = run_ AND c.branch_id = branch_ "
        "ORDER BY c.sequence DESC, c.created_at DESC, c.id ASC LIMIT 1; END $$",
        _set_layout_version(3),
    ),
    down=_uncompress_documents,
)



def _zlib_documents(backend: Any) -> None:
    """Down from layout 4 (a function: SQL cannot recompress): every zstd document (magic bytes
    28 b5 2f fd) is rewritten zlib-compressed as layout 3 wrote it, in one transaction.
    (The checksum covers this source: the statements are all here.)"""
    import zlib

    from ...core.compression import inflate

    names = backend.names
    with backend._transaction() as conn:
        conn.execute("SET LOCAL statement_timeout = 0")
        for kind in _KINDS:
            table = f"{{schema}}.{{name[{kind}]}}"
            select = f"SELECT tenant, id, doc FROM {table} WHERE substring(doc from 1 for 4) = '\\x28b52ffd'"
            update = names.render(f"UPDATE {table} SET doc = %s WHERE tenant = %s AND id = %s")
            for tenant, id, doc in conn.execute(names.render(select)).fetchall():
                conn.execute(update, (zlib.compress(inflate(doc), 1), tenant, id))
        conn.execute(names.render(_set_layout_version(3)))


_ZSTD_DOCS = LayoutMigration(
    "postgres.0004_zstd_docs",
    backend="postgres",
    description="documents are compressed with zstd instead of zlib (4x faster for the same size: a checkpoint "
                "save is mostly its document); zlib documents from layout 3 stay readable as they are",
    up=(_set_layout_version(4),),
    down=_zlib_documents,
)

def _fold_payloads(backend: Any) -> None:
    """Down from layout 5 (a function: SQL cannot write base64 into a compressed document): each
    checkpoint's `payload` column is folded back into its document as base64 text (the form an
    older release reads: it keeps the value in the document), then the column is dropped, all in
    one transaction. (The checksum covers this source: the statements are all here.)"""
    import orjson

    from ...core.base64text import to_text
    from ...core.compression import deflate, unpack_payload
    from .layout import COMPRESS_AT, decode_doc

    names = backend.names
    table = "{schema}.{name[checkpoint]}"
    with backend._transaction() as conn:
        conn.execute("SET LOCAL statement_timeout = 0")
        update = names.render(f"UPDATE {table} SET doc = %s WHERE tenant = %s AND id = %s")
        select = f"SELECT tenant, id, doc, payload FROM {table} WHERE payload IS NOT NULL"
        for tenant, id, doc, payload in conn.execute(names.render(select)).fetchall():
            data = decode_doc(doc)
            data["payload"] = to_text(unpack_payload(payload))
            conn.execute(update, (deflate(orjson.dumps(data), COMPRESS_AT), tenant, id))
        conn.execute(names.render(f"ALTER TABLE {table} DROP COLUMN payload"))
        conn.execute(names.render(_set_layout_version(4)))


_PAYLOAD_COLUMN = LayoutMigration(
    "postgres.0005_payload_column",
    backend="postgres",
    description="a checkpoint's payload (opaque bytes beside its state: LangGraph's serialized checkpoint) gets "
                "a bytea column of its own (EXTERNAL: compressed by the client only where that pays), so reads "
                "hand the bytes over without base64 or JSON",
    up=(
        "ALTER TABLE {schema}.{name[checkpoint]} ADD COLUMN IF NOT EXISTS payload bytea",
        "ALTER TABLE {schema}.{name[checkpoint]} ALTER COLUMN payload SET STORAGE EXTERNAL",
        _set_layout_version(5),
    ),
    down=_fold_payloads,
)


def _scope_index(kind: str, suffix: str, column: str, *, partial: bool) -> str:
    return (f"CREATE INDEX CONCURRENTLY {{name[{kind}_{suffix}]}} ON {{schema}}.{{name[{kind}]}} "
            f"(tenant, left({column}, 64))" + (f" WHERE {column} IS NOT NULL" if partial else ""))


_LEANER_INDEXES = LayoutMigration(
    "postgres.0006_leaner_indexes",
    backend="postgres",
    description="the agent and project_id indexes become partial (WHERE ... IS NOT NULL: a record without "
                "them, such as every LangGraph checkpoint, write and store item, updates neither), and the "
                "checkpoint kind drops its (created_at, id) index (its reads go by run or id); built "
                "CONCURRENTLY as layout 2's",
    # A filter on a value (`agent = x`) implies the index's predicate, so it still uses it; an IS NULL
    # filter scans. Each statement commits on its own, as in layout 2.
    atomic=False,
    up=(
        *(statement for kind in _KINDS for suffix, column in _FILTER_INDEXES for statement in (
            f"DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name[{kind}_{suffix}]}}",
            _scope_index(kind, suffix, column, partial=True),
        )),
        "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name[checkpoint_created]}",
        _set_layout_version(6),
    ),
    down=(
        *(statement for kind in _KINDS for suffix, column in _FILTER_INDEXES for statement in (
            f"DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name[{kind}_{suffix}]}}",
            _scope_index(kind, suffix, column, partial=False),
        )),
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name[checkpoint_created]} ON {schema}.{name[checkpoint]} "
        "(tenant, created_at, id)",
        _set_layout_version(5),
    ),
)

_LATEST_INDEX = LayoutMigration(
    "postgres.0007_latest_index",
    backend="postgres",
    description="a checkpoint's run index orders a run's checkpoints as latest() does (run_id, sequence DESC, "
                "created_at DESC, id, then branch_id): a run's latest checkpoint is the index's first entry, where "
                "the (run_id, branch_id, sequence) index sorted the whole run, and a branch's is the first entry "
                "of that branch, read in the index; built CONCURRENTLY as layout 2's",
    # The new index is built before the old one is dropped, so reads keep an index between the two
    # statements; each commits on its own, as in layout 2.
    atomic=False,
    up=(
        "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name[checkpoint_run_latest]}",
        "CREATE INDEX CONCURRENTLY {name[checkpoint_run_latest]} ON {schema}.{name[checkpoint]} "
        "(tenant, run_id, sequence DESC, created_at DESC, id, branch_id)",
        "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name[checkpoint_run]}",
        _set_layout_version(7),
    ),
    down=(
        "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name[checkpoint_run]}",
        "CREATE INDEX CONCURRENTLY {name[checkpoint_run]} ON {schema}.{name[checkpoint]} "
        "(tenant, run_id, branch_id, sequence)",
        "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name[checkpoint_run_latest]}",
        _set_layout_version(6),
    ),
)


def _inline_rows(backend: Any) -> None:
    """Up to layout 8 (a function: an application's kinds' tables are named by the store's recorded
    kinds, not by these templates): every kind's table keeps rows up to 8160 bytes whole in its pages
    (`layout.INLINE_ROW_BYTES`, written out here: a step is frozen). A storage parameter: rows written
    before stay where they are; no table is rewritten."""
    _set_toast_target(backend, "SET (toast_tuple_target = 8160)", 8)


def _toasted_rows(backend: Any) -> None:
    """Down from layout 8: every kind's table back at PostgreSQL's default `toast_tuple_target`."""
    _set_toast_target(backend, "RESET (toast_tuple_target)", 7)


def _set_toast_target(backend: Any, change: str, version: int) -> None:
    """`ALTER TABLE ... <change>` on each kind's table this store has (the built-in kinds' and those
    of the application kinds it recorded), then `layout_version`, in one transaction. (The checksum
    covers this source: the statements are all here.)"""
    from psycopg import sql

    from ...core.declarations import stored_declarations

    names = backend.names
    kinds = sorted({*_KINDS, *stored_declarations(backend)})
    with backend._transaction() as conn:
        conn.execute("SET LOCAL statement_timeout = 0")
        for kind in kinds:
            table = names.table(names.prefix + kind)
            if conn.execute("SELECT to_regclass(%s)", (table.as_string(conn),)).fetchone() != (None,):
                conn.execute(sql.SQL("ALTER TABLE {} {}").format(table, sql.SQL(change)))
        conn.execute(names.render(_set_layout_version(version)))


_INLINE_ROWS = LayoutMigration(
    "postgres.0008_inline_rows",
    backend="postgres",
    description="every kind's table keeps a row of up to 8160 bytes whole in its page (toast_tuple_target): at "
                "PostgreSQL's 2 KB a row such as a LangGraph task's writes (2-3 KB) had its bytes moved to the "
                "TOAST table, one more insert per write and one more read per read; rows written before stay",
    up=_inline_rows,
    down=_toasted_rows,
)

HISTORY: tuple[LayoutMigration, ...] = (_TABLES, _SCOPE_INDEXES, _COMPRESSED_DOCS, _ZSTD_DOCS, _PAYLOAD_COLUMN,
                                        _LEANER_INDEXES, _LATEST_INDEX, _INLINE_ROWS)
NEWEST_LAYOUT_VERSION = len(HISTORY)
"""The `layout_version` the newest step sets; a store with a larger one is refused."""
