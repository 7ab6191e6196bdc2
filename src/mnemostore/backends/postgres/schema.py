"""DDL: the store's tables, created and altered under a session-level advisory lock.

A table per record kind (see layout.py) and a meta table. The `embedding` column is created
as an untyped `vector`; core fixes the store's dimension before the first embedding is
written, and `ensure_vectors` then types the column `vector(dim)` (cheap: no vector is
stored yet) and builds the HNSW index for the store's metric. An index over rows that
already exist is built `CONCURRENTLY`, outside any transaction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import psycopg
from psycopg import sql

from ...core.errors import BackendError, SchemaMismatch
from ...core.records import KINDS
from .layout import COLUMN_TYPES, KindLayout, layout, offset_column

LAYOUT_VERSION = 1
OPCLASSES = {"cosine": "vector_cosine_ops", "dot": "vector_ip_ops", "l2": "vector_l2_ops"}


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
        return [layout(kind, self.prefix) for kind in KINDS]

    def lock_key(self) -> int:
        digest = hashlib.blake2b(f"mnemostore\x00{self.schema}\x00{self.prefix}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)


class AdvisoryLock:
    """A session-level advisory lock held on an autocommit connection."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], key: int) -> None:
        self.conn, self.key = conn, key

    def __enter__(self) -> AdvisoryLock:
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
        with AdvisoryLock(conn, 0x6D6E656D6F766563):  # one creator per database
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


def _table_ddl(names: Names, kind_layout: KindLayout) -> list[sql.Composed]:
    columns: list[sql.Composable] = [
        sql.SQL('tenant text COLLATE "C" NOT NULL'),
        sql.SQL('id text COLLATE "C" NOT NULL'),
    ]
    for name in kind_layout.fields:
        columns.append(sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(COLUMN_TYPES[kind_layout.types[name]])))
    for name in kind_layout.datetimes:
        columns.append(sql.SQL("{} bigint").format(sql.Identifier(offset_column(name))))
    columns += [
        sql.SQL("doc bytea NOT NULL"),
        sql.SQL("metadata jsonb NOT NULL"),
        sql.SQL("embedding {}").format(sql.Identifier(names.vector_schema, "vector")),
        sql.SQL("PRIMARY KEY (tenant, id)"),
    ]
    table = names.table(kind_layout.table)
    statements: list[sql.Composed] = [
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table, sql.SQL(", ").join(columns)),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (tenant, created_at, id)").format(
            sql.Identifier(kind_layout.table + "_created"), table),
    ]
    if kind_layout.kind == "checkpoint":
        statements.append(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (tenant, run_id, branch_id, sequence)").format(
            sql.Identifier(kind_layout.table + "_run"), table))
    return statements


def _complete(conn: psycopg.Connection[tuple[object, ...]], names: Names) -> bool:
    """Whether every table exists at this layout version (then opening takes no DDL lock)."""
    tables = [names.prefix + "meta", *(kind_layout.table for kind_layout in names.layouts())]
    row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
                       (names.schema, tables)).fetchone()
    if row is None or row[0] != len(tables):
        return False
    version = conn.execute(sql.SQL("SELECT value::text FROM {} WHERE key = 'layout_version'").format(
        names.meta)).fetchone()
    return version is not None and str(version[0]) == str(LAYOUT_VERSION)


def create_tables(conn: psycopg.Connection[tuple[object, ...]], names: Names) -> None:
    """Create the schema and every table that is missing, and check the layout version."""
    if _complete(conn, names):
        return
    with AdvisoryLock(conn, names.lock_key()), conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(names.schema)))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value jsonb NOT NULL)").format(
            names.meta))
        for kind_layout in names.layouts():
            for statement in _table_ddl(names, kind_layout):
                conn.execute(statement)
        row = conn.execute(sql.SQL("SELECT value::text FROM {} WHERE key = 'layout_version'").format(
            names.meta)).fetchone()
        if row is None:
            conn.execute(sql.SQL("INSERT INTO {} VALUES ('layout_version', %s::jsonb)").format(names.meta),
                         (str(LAYOUT_VERSION),))
        elif int(str(row[0])) > LAYOUT_VERSION:
            raise SchemaMismatch(
                f"this store's layout version is {row[0]}, newer than this mnemostore "
                f"understands ({LAYOUT_VERSION}); upgrade mnemostore")


def vector_dimension(conn: psycopg.Connection[tuple[object, ...]], names: Names, table: str) -> int | None:
    """The typed dimension of a table's embedding column, or None while it is untyped."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
        (sql.Identifier(names.schema, table).as_string(conn),)).fetchone()
    if row is None:
        raise BackendError(f"table {names.schema}.{table} has no embedding column; is this a mnemostore schema?")
    typmod = int(str(row[0]))
    return None if typmod < 0 else typmod


def ensure_vectors(conn: psycopg.Connection[tuple[object, ...]], names: Names, dimension: int,
                   metric: str, hnsw: tuple[int, int] | None) -> None:
    """Type every embedding column `vector(dimension)` and build the HNSW indexes (if `hnsw`)."""
    pending_indexes: list[sql.Composed] = []
    with AdvisoryLock(conn, names.lock_key()):
        with conn.transaction():
            for kind_layout in names.layouts():
                table = names.table(kind_layout.table)
                current = vector_dimension(conn, names, kind_layout.table)
                if current is None:
                    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE {}({})").format(
                        table, sql.Identifier(names.vector_schema, "vector"), sql.Literal(dimension)))
                elif current != dimension:
                    raise SchemaMismatch(
                        f"the embedding columns of this store are {current}-dimensional, not {dimension}")
                if hnsw is None:
                    continue
                index = sql.SQL("IF NOT EXISTS {} ON {} USING hnsw (embedding {}) WITH (m = {}, "
                                "ef_construction = {})").format(
                    sql.Identifier(kind_layout.table + "_hnsw"), table,
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
