"""The SQLite layout history. Each step also sets `PRAGMA user_version` to its number, so an
older mnemostore (which reads only that) refuses a store laid out by a newer one."""

from __future__ import annotations

from typing import Any

import orjson

from ...core.records import KINDS
from ...migrations.model import LayoutMigration
from .schema import EPOCH_TABLE, LAYOUTS, SPARSE_FIELDS, quote

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



def _inflate_documents(backend: Any) -> None:
    """Down from layout 3 (a function: SQL cannot inflate zstd): every compressed document is
    rewritten as plain orjson in one transaction, then `user_version` goes back to 2. A crash
    before the commit leaves layout 3, which reads both forms. (The checksum covers this source.)"""
    from ...core.compression import inflate, is_compressed

    def work(conn: Any) -> None:
        for layout in LAYOUTS.values():
            rows = conn.execute(f"SELECT seq, doc FROM {layout.table}").fetchall()
            changed = [(inflate(doc), seq) for seq, doc in rows if is_compressed(doc)]
            conn.executemany(f"UPDATE {layout.table} SET doc = ? WHERE seq = ?", changed)
        conn.execute("PRAGMA user_version = 2")

    backend.db.write(work)


_COMPRESSED_DOCS = LayoutMigration(
    "sqlite.0003_compressed_docs",
    backend="sqlite",
    description="documents of 4 KB or more are stored zstd-compressed (a checkpoint's state is most of "
                "what a save writes); rows written before stay plain JSON and read as they are",
    up=("PRAGMA user_version = 3",),
    down=_inflate_documents,
)

def _fold_payloads(backend: Any) -> None:
    """Down from layout 4 (a function: SQL cannot write base64 into a zstd document): each
    checkpoint's `payload` column is folded back into its document as base64 text (the form an
    older release reads: it keeps the value in the document), then the column is dropped and
    `user_version` goes back to 3, all in one transaction. (The checksum covers this source.)"""
    import orjson

    from ...core.base64text import to_text
    from ...core.compression import deflate, inflate, unpack_payload

    table = LAYOUTS["checkpoint"].table

    def work(conn: Any) -> None:
        rows = conn.execute(f"SELECT seq, doc, payload FROM {table} WHERE payload IS NOT NULL").fetchall()
        changed = []
        for seq, doc, payload in rows:
            data = orjson.loads(inflate(doc))
            data["payload"] = to_text(unpack_payload(payload))
            changed.append((deflate(orjson.dumps(data)), seq))
        conn.executemany(f"UPDATE {table} SET doc = ? WHERE seq = ?", changed)
        conn.execute(f"ALTER TABLE {table} DROP COLUMN payload")
        conn.execute("PRAGMA user_version = 3")

    backend.db.write(work)


_PAYLOAD_COLUMN = LayoutMigration(
    "sqlite.0004_payload_column",
    backend="sqlite",
    description="a checkpoint's payload (opaque bytes beside its state: LangGraph's serialized checkpoint) gets "
                "a BLOB column of its own, so reads hand the bytes over without base64 or JSON",
    up=(
        f"ALTER TABLE {LAYOUTS['checkpoint'].table} ADD COLUMN payload BLOB",
        "PRAGMA user_version = 4",
    ),
    down=_fold_payloads,
)

_SPARSE_INDEXES = tuple((kind, field) for kind in KINDS for field in SPARSE_FIELDS
                        if field == "project_id" or (field,) in LAYOUTS[kind].indexes)
"""The built-in kinds' indexes on sparse fields: every kind's project index (layout 2), the agent ones."""


def _sparse_index(kind: str, field: str, partial: bool) -> tuple[str, str]:
    """Drop the index and make it again, partial (layout 5) or whole (before)."""
    name = f"mnemo_{kind}_{field}"
    return f"DROP INDEX IF EXISTS {quote(name)}", LAYOUTS[kind].index_sql(name, (field,), newest=partial)


_LEANER_INDEXES = LayoutMigration(
    "sqlite.0005_leaner_indexes",
    backend="sqlite",
    description="the project and agent indexes leave out records without one (a filter on the field still "
                "uses them), and checkpoints lose their (created_at, id) index (their reads go by run or id): "
                "a LangGraph checkpoint, write or store item updates 2 or 3 fewer b-trees per insert",
    up=(
        *(statement for kind, field in _SPARSE_INDEXES for statement in _sparse_index(kind, field, True)),
        f"DROP INDEX IF EXISTS {quote('mnemo_checkpoint_created_at_id')}",
        "PRAGMA user_version = 5",
    ),
    down=(
        *(statement for kind, field in _SPARSE_INDEXES for statement in _sparse_index(kind, field, False)),
        LAYOUTS["checkpoint"].index_sql("mnemo_checkpoint_created_at_id", ("created_at", "id")),
        "PRAGMA user_version = 4",
    ),
)


def _prefix_payloads(backend: Any) -> None:
    """Down from layout 6 (a function: the stored forms are told apart by their first bytes): every
    bare payload, in any kind's bytes columns, gets `pack_payload`'s format byte back, then
    `user_version` goes back to 5, in one transaction. (The checksum covers this source.)"""
    from ...core.compression import prefixed_payload

    def work(conn: Any) -> None:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'mnemo^_%' ESCAPE '^'")]
        for table in tables:
            for column in [row[1] for row in conn.execute(f"PRAGMA table_info({quote(table)})")
                           if row[2].upper() == "BLOB" and row[1] not in ("vec", "doc")]:
                rows = conn.execute(f"SELECT seq, {quote(column)} FROM {quote(table)} WHERE {quote(column)} IS NOT "
                                    f"NULL AND substr({quote(column)}, 1, 1) NOT IN (x'00', x'01')").fetchall()
                conn.executemany(f"UPDATE {quote(table)} SET {quote(column)} = ? WHERE seq = ?",
                                 [(prefixed_payload(stored), seq) for seq, stored in rows])
        conn.execute("PRAGMA user_version = 5")

    backend.db.write(work)


_BARE_PAYLOADS = LayoutMigration(
    "sqlite.0006_bare_payloads",
    backend="sqlite",
    description="bytes columns (a checkpoint's payload) hold the bytes bare, or a bare zstd frame, without a "
                "format byte before them: a read hands the column's bytes over without a copy (the forms are "
                "told apart by their first bytes, so rows written before stay as they are and read as before)",
    up=("PRAGMA user_version = 6",),
    down=_prefix_payloads,
)


def _unframe_states(backend: Any) -> None:
    """Down from layout 7 (a function: SQL cannot read msgpack): every framed checkpoint document is
    rewritten as the JSON document layout 6 wrote (the state's sorted JSON last; compressed again if it
    was), then `user_version` goes back to 6, in one transaction. (The checksum covers this source.)"""
    from ...core.codec import stored_fields, with_state
    from ...core.compression import COMPRESS_AT, FRAMED, deflate, inflate, is_compressed

    def work(conn: Any) -> None:
        table = LAYOUTS["checkpoint"].table
        rewritten = []
        for seq, doc in conn.execute(f"SELECT seq, doc FROM {table}").fetchall():
            compressed = is_compressed(doc)
            if (inflate(doc) if compressed else doc)[:1] != FRAMED:
                continue
            data = stored_fields(doc)
            state = orjson.dumps(data.pop("state"), option=orjson.OPT_SORT_KEYS)
            plain = with_state(orjson.dumps(data), state)
            rewritten.append((deflate(plain, COMPRESS_AT) if compressed else plain, seq))
        conn.executemany(f"UPDATE {table} SET doc = ? WHERE seq = ?", rewritten)
        conn.execute("PRAGMA user_version = 6")

    backend.db.write(work)


_FRAMED_STATES = LayoutMigration(
    "sqlite.0007_framed_states",
    backend="sqlite",
    description="a checkpoint's document holds its state as msgpack (the pack its validation proved it with) "
                "after the other fields' JSON: a save encodes the state once, a read decodes it ~18% faster "
                "(rows written before stay JSON and read as they are)",
    up=("PRAGMA user_version = 7",),
    down=_unframe_states,
)

_LATEST_INDEX = LayoutMigration(
    "sqlite.0008_latest_index",
    backend="sqlite",
    description="a checkpoint's run index orders a run's checkpoints as latest() does (run_id, sequence, created_at, "
                "id DESC, then branch_id): a run's or a branch's latest checkpoint is the index's first entry, with no "
                "sort of the checkpoints that tie on sequence (a run of saves with parent=None)",
    up=(
        'DROP INDEX IF EXISTS "mnemo_checkpoint_run_id_sequence_branch_id"',
        'CREATE INDEX IF NOT EXISTS "mnemo_checkpoint_run_latest" ON "mnemo_checkpoint" '
        '(tenant, "run_id", "sequence", "created_at", "id" DESC, "branch_id")',
        "PRAGMA user_version = 8",
    ),
    down=(
        'DROP INDEX IF EXISTS "mnemo_checkpoint_run_latest"',
        'CREATE INDEX IF NOT EXISTS "mnemo_checkpoint_run_id_sequence_branch_id" ON "mnemo_checkpoint" '
        '(tenant, "run_id", "sequence", "branch_id")',
        "PRAGMA user_version = 7",
    ),
)

HISTORY: tuple[LayoutMigration, ...] = (
    _TABLES, _PROJECT_INDEXES, _COMPRESSED_DOCS, _PAYLOAD_COLUMN, _LEANER_INDEXES, _BARE_PAYLOADS, _FRAMED_STATES,
    _LATEST_INDEX)
NEWEST_USER_VERSION = len(HISTORY)
