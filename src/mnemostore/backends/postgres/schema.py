"""DDL the backend runs itself: the meta table on open, the extension, the typed vector columns.

The tables and their indexes are the layout history (migrations.py), run by the migration
runner. What stays here is what opening needs before the runner can read its ledger (the
schema and the meta table), and what depends on the store's parameters rather than on code:
the `embedding` columns are created as untyped `vector`; core fixes the store's dimension
before the first embedding is written, and `ensure_vectors` then types the columns
`vector(dim)` (cheap: no vector is stored yet) and builds the HNSW index for the store's
metric. An index over rows that already exist is built `CONCURRENTLY`, outside any transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from ...core.codec import parse_fields
from ...core.declarations import backfill_value
from ...core.errors import BackendError, MigrationError, SchemaMismatch, StoreTooNew
from ...core.kinds import kind_names, secondary_indexes
from .layout import (
    COLUMN_TYPES,
    INLINE_ROW_BYTES,
    SCOPE_COLUMNS,
    SCOPE_PREFIX,
    KindLayout,
    decode_doc,
    layout,
    offset_column,
)

if TYPE_CHECKING:
    from ...core.declarations import KindChange

OPCLASSES = {"cosine": "vector_cosine_ops", "dot": "vector_ip_ops", "l2": "vector_l2_ops"}
LAYOUT_VERSION_KEY = "layout_version"
"""The meta key every layout step sets to its number: the only thing a pre-ledger mnemostore
reads, so it refuses a store laid out by a newer one."""


def quote_ident(name: str) -> str:
    """`name` as a quoted SQL identifier (PostgreSQL's rule: double quotes, doubled inside)."""
    if "\x00" in name:
        raise ValueError("an identifier cannot contain NUL")
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Names:
    """Quoted names of one store's objects."""

    schema: str
    prefix: str
    vector_schema: str = "public"

    def table(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name)

    @property
    def meta(self) -> sql.Identifier:
        return self.table(self.prefix + "meta")

    def layouts(self) -> list[KindLayout]:
        """Every registered kind's layout (an application's kind's table may not exist yet)."""
        return [layout(kind, self.prefix) for kind in kind_names()]

    def _key(self, purpose: str) -> int:
        digest = hashlib.blake2b(f"{purpose}\x00{self.schema}\x00{self.prefix}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def lock_key(self) -> int:
        """Advisory lock key serialising this store's own DDL (the meta table, vector columns)."""
        return self._key("mnemostore")

    def migration_lock_key(self) -> int:
        """Advisory lock key of this store's migration runner. Distinct from `lock_key`: a record
        migration writes records, and a first write may type the vector columns under that one."""
        return self._key("mnemostore-migrate")

    def append_lock_key(self, tenant: str, run_id: str, branch: str) -> int:
        """Advisory lock key serialising default-parent saves to one run and branch of this store."""
        return self._key(f"append\x00{tenant}\x00{run_id}\x00{branch}")

    def placeholders(self) -> dict[str, object]:
        """What layout statement templates may name: `{schema}`, `{vector_schema}` and
        `{name[outcome]}` (the prefixed object name), each a quoted identifier."""
        return {"schema": quote_ident(self.schema), "vector_schema": quote_ident(self.vector_schema),
                "name": _Prefixed(self.prefix)}

    def render(self, template: str) -> str:
        """One layout statement template with this store's quoted names filled in."""
        return template.format_map(self.placeholders())


class _Prefixed:
    """`{name[outcome]}` in a template: the quoted identifier prefix + "outcome"."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __getitem__(self, suffix: str) -> str:
        return quote_ident(self.prefix + suffix)


class SessionLock:
    """A blocking session-level advisory lock held on an autocommit connection."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], key: int) -> None:
        self.conn, self.key = conn, key

    def __enter__(self) -> SessionLock:
        self.conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.conn.closed:
            self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))


def ensure_extension(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """Create pgvector if missing; return the schema it lives in."""
    query = ("SELECT nspname FROM pg_extension JOIN pg_namespace ON pg_namespace.oid = extnamespace "
             "WHERE extname = 'vector'")
    found = conn.execute(query).fetchone()
    if found is None:
        with SessionLock(conn, 0x6D6E656D6F766563):  # one creator per database
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.errors.InsufficientPrivilege:
                raise BackendError(
                    "the pgvector extension is not installed in this database and this role may not "
                    "create it; ask an administrator to run: CREATE EXTENSION vector") from None
            except psycopg.errors.FeatureNotSupported as exc:
                raise BackendError(f"pgvector is not available on this server: {exc}") from None
        found = conn.execute(query).fetchone()
    assert found is not None
    return str(found[0])


def create_meta(conn: psycopg.Connection[tuple[object, ...]], names: Names) -> None:
    """Create the schema and the meta table (home of the ledger) if missing; nothing else.

    An existing meta table costs one catalog lookup and takes no lock (and needs no CREATE
    privilege); racing creators are serialised by a transaction-level advisory lock.
    """
    exists = "SELECT to_regclass(%s) IS NOT NULL"
    qualified = names.meta.as_string(conn)
    row = conn.execute(exists, (qualified,)).fetchone()
    if row is not None and row[0]:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (names.lock_key(),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(names.schema)))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value jsonb NOT NULL)").format(
            names.meta))


def layout_version(conn: psycopg.Connection[tuple[object, ...]], names: Names) -> tuple[int, bool]:
    """(the meta table's `layout_version`, 0 if unset; whether a ledger exists)."""
    row = conn.execute(sql.SQL(
        "SELECT (SELECT value #>> '{{}}' FROM {0} WHERE key = %s), EXISTS (SELECT 1 FROM {0} WHERE key = 'ledger')"
    ).format(names.meta), (LAYOUT_VERSION_KEY,)).fetchone()
    assert row is not None
    text, has_ledger = row
    try:
        return (0 if text is None else int(str(text))), bool(has_ledger)
    except ValueError:
        raise MigrationError(
            f"the {LAYOUT_VERSION_KEY!r} entry of {names.schema}.{names.prefix}meta is {text!r}, not a number; "
            "is this a mnemostore schema?") from None


def check_not_newer(conn: psycopg.Connection[tuple[object, ...]], names: Names, newest: int) -> None:
    """Refuse a store whose layout a newer mnemostore wrote (its steps are unknown here)."""
    version, _ = layout_version(conn, names)
    if version > newest:
        raise StoreTooNew(
            f"the store in schema {names.schema!r} has layout version {version}, newer than this mnemostore "
            f"understands ({newest}); upgrade mnemostore")


def vector_dimension(conn: psycopg.Connection[tuple[object, ...]], names: Names, table: str) -> int | None:
    """The typed dimension of a table's embedding column, or None while it is untyped."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
        (sql.Identifier(names.schema, table).as_string(conn),)).fetchone()
    if row is None:
        raise BackendError(f"table {names.schema}.{table} has no embedding column; is this a mnemostore schema?")
    typmod = int(str(row[0]))
    return None if typmod < 0 else typmod


def _exists(conn: psycopg.Connection[tuple[object, ...]], names: Names, relation: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                       (sql.Identifier(names.schema, relation).as_string(conn),)).fetchone()
    return bool(row and row[0])


def ensure_vectors(conn: psycopg.Connection[tuple[object, ...]], names: Names, dimension: int,
                   metric: str, hnsw: tuple[int, int] | None) -> None:
    """Type every embedding column `vector(dimension)` and build the HNSW indexes (if `hnsw`)."""
    pending_indexes: list[sql.Composed] = []
    with SessionLock(conn, names.lock_key()):
        with conn.transaction():
            for kind_layout in names.layouts():
                if not _exists(conn, names, kind_layout.table):
                    continue  # an application's kind not written yet: its table is made typed
                table = names.table(kind_layout.table)
                current = vector_dimension(conn, names, kind_layout.table)
                if current is None:
                    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE {}({})").format(
                        table, sql.Identifier(names.vector_schema, "vector"), sql.Literal(dimension)))
                elif current != dimension:
                    raise SchemaMismatch(
                        f"the embedding columns of this store are {current}-dimensional, not {dimension}")
                index_name = kind_layout.table + "_hnsw"
                if hnsw is None or _exists(conn, names, index_name):
                    continue  # and a role that does not own the table may not even CREATE INDEX IF NOT EXISTS
                index = sql.SQL("IF NOT EXISTS {} ON {} USING hnsw (embedding {}) WITH (m = {}, "
                                "ef_construction = {})").format(
                    sql.Identifier(index_name), table,
                    sql.Identifier(names.vector_schema, OPCLASSES[metric]),
                    sql.Literal(hnsw[0]), sql.Literal(hnsw[1]))
                empty = conn.execute(sql.SQL("SELECT NOT EXISTS (SELECT 1 FROM {} WHERE embedding IS NOT NULL)").format(
                    table)).fetchone()
                if empty and empty[0]:
                    conn.execute(sql.SQL("CREATE INDEX ") + index)
                else:
                    pending_indexes.append(sql.SQL("CREATE INDEX CONCURRENTLY ") + index)
        for statement in pending_indexes:  # outside any transaction, as CONCURRENTLY requires
            conn.execute(statement)


def index_name(table: str, fields: Sequence[str]) -> str:
    """`<table>__<fields>` (no kind name holds `__`, so it is never a table's), shortened with a
    digest where PostgreSQL would truncate it (63 bytes) and two names could meet."""
    name = f"{table}__{'_'.join(fields)}"
    if len(name.encode()) <= 63:
        return name
    return f"{name.encode()[:50].decode(errors='ignore')}_{hashlib.blake2b(name.encode(), digest_size=6).hexdigest()}"


def create_kind(conn: psycopg.Connection[tuple[object, ...]], names: Names, kind_layout: KindLayout,
                policies: list[str]) -> None:
    """Create an application's kind's table at the newest layout (what the layout history gives a
    built-in kind: typed columns, offsets, bytes columns, EXTERNAL documents, rows whole up to
    `INLINE_ROW_BYTES`, the default order and scope indexes) with its declared indexes and `policies`
    (row-level security), in one transaction under the store's DDL lock; nothing if it exists. Its
    vectors are typed after."""
    table = names.table(kind_layout.table)
    columns = [sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(COLUMN_TYPES[kind_layout.types[name]]))
               for name in kind_layout.fields]
    columns += [sql.SQL("{} bigint").format(sql.Identifier(offset_column(name))) for name in kind_layout.datetimes]
    columns += [sql.SQL("{} bytea").format(sql.Identifier(name)) for name in kind_layout.binary]
    statements: list[sql.Composed] = [sql.SQL(
        "CREATE TABLE {} (tenant text COLLATE \"C\" NOT NULL, id text COLLATE \"C\" NOT NULL, {}, doc bytea NOT NULL, "
        "metadata jsonb NOT NULL, embedding {}, PRIMARY KEY (tenant, id)) WITH (toast_tuple_target = {})").format(
        table, sql.SQL(", ").join(columns), sql.Identifier(names.vector_schema, "vector"),
        sql.Literal(INLINE_ROW_BYTES))]
    statements += [sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STORAGE EXTERNAL").format(table, sql.Identifier(name))
                   for name in ("doc", *kind_layout.binary)]
    statements += [index_sql(names, kind_layout, fields) for fields in secondary_indexes(kind_layout.cls)]
    statements += [index_sql(names, kind_layout, (name,), present=True) for name in sorted(SCOPE_COLUMNS)]
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (names.lock_key(),))
            if _exists(conn, names, kind_layout.table):
                return
            for statement in statements:
                conn.execute(statement)
            for policy in policies:
                conn.execute(policy)
    except psycopg.errors.DuplicateTable:
        # Another connection made it while this one waited for the lock: the server may still answer
        # `_exists` from this session's catalog cache (an advisory lock does not refresh it).
        return


def index_sql(names: Names, kind_layout: KindLayout, fields: Sequence[str], *, present: bool = False) -> sql.Composed:
    """An index of a kind's table led by the tenant (text it indexes by prefix: `KindLayout.prefixed`);
    `present`: of the rows whose fields are not NULL only (as layout 6 makes the scope indexes)."""
    keys = [sql.SQL("left({}, {})").format(sql.Identifier(name), sql.Literal(SCOPE_PREFIX))
            if name in kind_layout.prefixed else sql.Identifier(name) for name in fields]
    statement = sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (tenant, {})").format(
        sql.Identifier(index_name(kind_layout.table, fields)), names.table(kind_layout.table), sql.SQL(", ").join(keys))
    if present:
        statement += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(
            sql.SQL("{} IS NOT NULL").format(sql.Identifier(name)) for name in fields)
    return statement


def evolve_kind(conn: psycopg.Connection[tuple[object, ...]], names: Names, kind_layout: KindLayout,
                change: KindChange) -> None:
    """A kind's table grown to its declaration, in the caller's transaction: a column (and offset column)
    per added field, filled from the stored documents (else the field's default), bytea columns for
    added bytes fields, and the declared indexes. Columns already there (a step run again) are kept."""
    table = names.table(kind_layout.table)
    if not _exists(conn, names, kind_layout.table):
        return  # never written here: its first write makes its table as now declared
    added = [name for name in change.added if name in kind_layout.types]
    columns = [(name, COLUMN_TYPES[kind_layout.types[name]]) for name in added]
    columns += [(offset_column(name), "bigint") for name in added if kind_layout.types[name] is datetime]
    columns += [(name, "bytea") for name in change.added_binary]
    for name, column_type in columns:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
            table, sql.Identifier(name), sql.SQL(column_type)))
    if added:
        _backfill(conn, table, kind_layout, added)
    for fields in change.dropped_indexes:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(
            sql.Identifier(names.schema, index_name(kind_layout.table, fields))))
    for fields in change.added_indexes:
        conn.execute(index_sql(names, kind_layout, fields))


def _backfill(conn: psycopg.Connection[tuple[object, ...]], table: sql.Identifier, kind_layout: KindLayout,
              added: Sequence[str]) -> None:
    """Each row's values of the `added` fields, from its document (they were document fields) or defaults."""
    targets = [column for name in added for column, _ in kind_layout.field_values(name, None)]
    update = sql.SQL("UPDATE {} SET {} WHERE tenant = %s AND id = %s").format(
        table, sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(column)) for column in targets))
    select = sql.SQL("SELECT tenant, id, doc FROM {} WHERE (tenant, id) > (%s, %s) ORDER BY tenant, id LIMIT 1000")
    last = ("", "")
    while rows := conn.execute(select.format(table), last).fetchall():
        changed = []
        for tenant, id, doc in rows:
            data = parse_fields(kind_layout.cls, decode_doc(bytes(doc)))  # type: ignore[call-overload]
            values = [value for name in added for _, value in
                      kind_layout.field_values(name, backfill_value(kind_layout.cls, name, data, str(id)))]
            changed.append((*values, tenant, id))
        with conn.cursor() as cursor:
            cursor.executemany(update, changed)
        last = (str(rows[-1][0]), str(rows[-1][1]))
