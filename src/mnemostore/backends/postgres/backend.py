"""The postgres backend: psycopg 3, a health-checked connection pool, pgvector.

Row layout and its reasons: layout.py; the tables' history: migrations.py (run by the
migration runner, under advisory_lock.py); what opening creates and the lazily typed
vector column: schema.py; filters: sql_filters.py; the tenant policies of the
`row_security` option: row_security.py. The driver is imported when a store is opened, not
before.
"""

from __future__ import annotations

import select
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from datetime import datetime
from time import monotonic
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import orjson

from ...core.base64text import from_text
from ...core.capabilities import Capability
from ...core.errors import (
    BackendError,
    ConfigError,
    MigrationError,
    MnemostoreError,
    SchemaMismatch,
    UnsupportedCapability,
    ValidationError,
)
from ...core.filters import Expr, expression_key
from ...core.protocol import Backend, Hit, OrderKey, link_parent
from ...core.records import KINDS, Checkpoint, Record
from ...core.vectors import Vector
from ...migrations.ledger import LEDGER_KEY
from ...migrations.model import LayoutMigration
from .layout import JsonbBytes, KindLayout, decode_doc, layout, tenant_key
from .migrations import HISTORY, NEWEST_LAYOUT_VERSION
from .options import PostgresOptions

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool

    from ...core.declarations import KindChange
    from ...migrations.locking import MigrationLock
    from .schema import Names

    Connection = psycopg.Connection[tuple[Any, ...]]

COPY_THRESHOLD = 64
"""Batches at least this large go through binary COPY; smaller ones through executemany."""
_OPERATORS = {"cosine": "<=>", "dot": "<#>", "l2": "<->"}
_TYPE_OIDS = {str: 25, int: 20, float: 701, bool: 16}
_TEXT_ARRAY_OID = 1009
_TYPE_NAMES = {25: "text", 20: "bigint", 701: "double precision", 16: "boolean", 17: "bytea", 3802: "jsonb",
               _TEXT_ARRAY_OID: "text[]"}
STATEMENT_CACHE_SIZE = 512
"""Rendered statements kept per store (one per kind, statement and filter shape); past that
the cache starts again (a program cycling through more filter shapes only renders again)."""


class PostgresBackend(Backend):
    """Records in PostgreSQL, one table per kind, embeddings in pgvector columns."""

    name: ClassVar[str] = "postgres"
    schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.PERSISTENT,
        Capability.TRANSACTIONS,
        Capability.ATOMIC_UPDATE,
        Capability.MULTI_PROCESS,
        Capability.CRASH_SAFE,
        Capability.FILTER_RANGE,
        Capability.FILTER_METADATA,
        Capability.VECTOR_COSINE,
        Capability.VECTOR_DOT,
        Capability.VECTOR_L2,
        Capability.VECTOR_FILTERED,
        Capability.LARGE_STATE,
        Capability.CHECKPOINT_CHAIN,
    })
    options_model: ClassVar[type[PostgresOptions]] = PostgresOptions
    requires: ClassVar[tuple[str, ...]] = ("psycopg", "psycopg_pool")
    extra: ClassVar[str | None] = "postgres"
    layout_migrations: ClassVar[tuple[LayoutMigration, ...]] = HISTORY
    auto_migrate: ClassVar[bool] = False
    """A shared server: other applications may run older code against the same schema, so
    pending migrations are applied by `mnemostore migrate up` (or migrate="auto"), not by
    whoever opens the store first. A fresh, empty schema is still laid out on open."""

    options: PostgresOptions

    def __init__(self, url: Any, options: Any) -> None:
        super().__init__(url, options)
        self._pool: ConnectionPool[Any] | None = None
        self._own_pool = False
        self._names: Names | None = None
        self._vector_oid = 0
        self._vectors_ready: int | None = None
        self._kind_tables: set[str] = set()
        """Tables of applications' kinds seen to exist (a built-in kind's is the layout history's)."""
        self._row_security_active: bool | None = None
        """Whether the tenant policies apply to this role (None: not looked up yet)."""
        self._facts: dict[str, Any] = {}
        self._statements: dict[tuple[Any, ...], bytes] = {}
        self._last_used: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._tenant_named: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"<PostgresBackend {self.url.masked} schema={self.options.schema_name!r}>"

    # lifecycle -----------------------------------------------------------------------
    def conninfo(self) -> str:
        """The libpq connection string (it holds the password: never log or show it)."""
        from psycopg.conninfo import make_conninfo

        url, options = self.url, self.options
        if url.host and options.host:
            raise ValidationError.one("host", "is given both in the URL and as an option; give it once")
        params: dict[str, Any] = {
            "host": url.host or options.host,
            "port": url.port,
            "user": url.username,
            "password": url.password,
            "dbname": url.path.lstrip("/") or None,
            "sslmode": options.sslmode,
            "connect_timeout": options.connect_timeout,
            "application_name": options.application_name,
        }
        if options.statement_timeout is not None:
            params["options"] = f"-c statement_timeout={max(1, round(options.statement_timeout * 1000))}"
        return make_conninfo("", **{key: value for key, value in params.items() if value is not None})

    def exists(self) -> bool:
        """Whether the store's meta table is in its schema (one catalog lookup; creates nothing)."""
        from .schema import Names

        meta = Names(self.options.schema_name, self.options.table_prefix).meta
        with self._errors("connecting"), self._one_off() as conn:
            found = conn.execute("SELECT to_regclass(%s)", (meta.as_string(conn),)).fetchone()
        return found is not None and found[0] is not None

    def drop(self) -> None:
        """Drop the store's tables (their indexes and row policies go with them) and its function in
        one transaction, then its schema if that is not `public` and nothing else is left in it."""
        import psycopg
        from psycopg import sql

        from .schema import Names

        names = Names(self.options.schema_name, self.options.table_prefix)
        tables = [names.meta, *(names.table(kind_layout.table) for kind_layout in names.layouts())]
        with self._errors("dropping the store"), self._one_off() as conn, conn.transaction():
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(", ").join(tables)))
            conn.execute(names.render("DROP FUNCTION IF EXISTS {schema}.{name[checkpoint_latest]}"))
        if names.schema != "public":
            with self._errors("dropping the store's schema"), self._one_off() as conn, \
                    suppress(psycopg.errors.DependentObjectsStillExist):  # another store, or other tables, live there
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} RESTRICT").format(sql.Identifier(names.schema)))

    @contextmanager
    def _one_off(self) -> Iterator[Connection]:
        """A connection in autocommit for a call on a store that is not open: from the pool the
        application passed, or a new one."""
        import psycopg

        if self.options.pool is not None:
            with self.options.pool.connection() as conn:
                autocommit, conn.autocommit = conn.autocommit, True
                try:
                    yield conn
                finally:
                    conn.autocommit = autocommit
        else:
            with psycopg.connect(self.conninfo(), autocommit=True) as conn:
                yield conn

    def open(self) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        options = self.options
        with self._errors("connecting"):
            if options.pool is not None:
                self._pool, self._own_pool = options.pool, False
                with self._pool.connection() as conn:
                    self._setup(conn)
            else:
                conninfo = self.conninfo()
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    self._setup(conn)
                self._pool = ConnectionPool(
                    conninfo, min_size=options.pool_min_size, max_size=options.pool_max_size,
                    open=False, configure=self._configure, check=self._check,
                    timeout=options.pool_timeout, name=f"mnemostore:{options.schema_name}", num_workers=2)
                self._own_pool = True
                self._pool.open(wait=False)

    def _setup(self, conn: Connection) -> None:
        from psycopg import sql

        from . import row_security, schema

        autocommit = conn.autocommit
        conn.autocommit = True
        try:
            vector_schema = schema.ensure_extension(conn)
            self._names = schema.Names(self.options.schema_name, self.options.table_prefix, vector_schema)
            schema.create_meta(conn, self._names)
            schema.check_not_newer(conn, self._names, NEWEST_LAYOUT_VERSION)
            active, tables = row_security.active_tables_sql(self._names)
            row = conn.execute(
                "SELECT %s::regtype::oid, current_setting('server_version'), "
                f"(SELECT extversion FROM pg_extension WHERE extname = 'vector'), {active}, current_user",
                (sql.Identifier(vector_schema, "vector").as_string(conn), tables)).fetchone()
            assert row is not None
            self._vector_oid = int(row[0])
            self._facts = {"server_version": row[1], "pgvector_version": row[2]}
            if row[3] and self.options.row_security == "off":
                raise ConfigError(
                    f"row_security is off, but the tables of schema {self.options.schema_name!r} have "
                    f"row-level security that applies to role {row[4]}: every statement would see no rows; "
                    "open the store with row_security=on")
        finally:
            conn.autocommit = autocommit

    def _configure(self, conn: Connection) -> None:
        from .adapters import register

        register(conn, self._vector_oid)
        self._last_used[conn] = monotonic()
        if self.options.pool is None:
            # Our own connections: reads run in autocommit (no COMMIT round trip), writes in
            # explicit transactions; the HNSW search settings are set once per session.
            conn.autocommit = True
            conn.execute("SELECT set_config('hnsw.ef_search', %s, false), set_config('hnsw.iterative_scan', %s, false)",
                         (str(self.options.hnsw_ef_search), self.options.iterative_scan))

    def _check(self, conn: Connection) -> None:
        """Health check of a pooled connection as it is taken: a ping (one round trip) only when
        the server may have dropped it. A connection the server closed (a restart, a proxy's idle
        timeout) has something to read on its idle socket, so it is pinged, fails and is replaced;
        one idle longer than `pool_check_after` is pinged too (a silent drop sends nothing)."""
        from psycopg_pool import ConnectionPool

        last = self._last_used.get(conn)
        if last is None or monotonic() - last >= self.options.pool_check_after or _readable(conn):
            ConnectionPool.check_connection(conn)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._own_pool:
            pool.close()

    def describe(self) -> dict[str, Any]:
        options = self.options
        return {
            "url": self.url.masked,
            "schema": options.schema_name,
            "table_prefix": options.table_prefix,
            "index": options.index,
            "row_security": options.row_security,
            "pool": "external" if not self._own_pool else f"{options.pool_min_size}..{options.pool_max_size}",
            **self._facts,
        }

    # connections and errors ----------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A pooled connection: our own pool's is in autocommit (see `_configure`); a borrowed
        pool's is in a transaction, committed on success. Taken and given back without the
        pool's context manager, whose commit or rollback an autocommit connection does not
        need (a search's client time is mostly such layers)."""
        from psycopg_pool import PoolTimeout

        pool = self._pool
        if pool is None:
            raise BackendError(f"{self!r} is closed")
        try:
            conn = pool.getconn()
        except PoolTimeout as exc:
            raise self._no_connection(exc) from None
        try:
            if self._own_pool:
                yield conn
            else:
                self._configure(conn)
                with conn:
                    yield conn
        finally:
            self._last_used[conn] = monotonic()
            pool.putconn(conn)

    def _fetch(self, action: str, tenant: str | None, statement: bytes, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of one reading statement on a kind table, in binary, for `tenant`. On our own
        pool without row-level security, what `_errors` and `_connection` do, inline: this is a
        search's and a read's whole client path, and each context manager layer cost it ~10-20 µs
        when it runs with cold caches (after the server's work, as a search always does)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self._pool
        if pool is None or not self._own_pool or self.options.row_security != "off":
            with self._errors(action), self._connection() as conn:
                cursor = conn.cursor(binary=True)
                with self._tenant_scope(conn, tenant):
                    cursor.execute(statement, params)
                return cursor.fetchall()
        try:
            conn = pool.getconn()
        except PoolTimeout as exc:
            raise self._no_connection(exc) from None
        try:
            cursor = conn.cursor(binary=True)
            cursor.execute(statement, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall()
            return rows
        except psycopg.Error as exc:
            raise self._driver_error(action, exc) from exc
        finally:
            self._last_used[conn] = monotonic()
            pool.putconn(conn)

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _tenant_scope(self, conn: Connection, tenant: str | None, transaction: bool = False) -> Iterator[None]:
        """The block's statements on kind tables work for `tenant` (named to the row-level
        security policies when row_security is on), in one transaction if asked."""
        from .row_security import SET_TENANT, setting_value

        if self._ensure_row_security(conn):
            if not self._own_pool:
                # A borrowed connection goes back to its owner's pool: name the tenant for this
                # transaction only.
                with conn.transaction():
                    conn.execute(SET_TENANT, (setting_value(tenant),))
                    yield
                return
            self._name_tenant(conn, setting_value(tenant))
        if transaction:
            with conn.transaction():
                yield
        else:
            yield

    def _name_tenant(self, conn: Connection, value: str) -> None:
        """Set `mnemostore.tenant` for the session of one of our own (autocommit) connections,
        unless it holds that value already: a store works for one tenant, so this costs a round
        trip once per pooled connection, not per statement. Only this backend uses the pool, and
        every statement on a kind table names its tenant first, so a value left set is not stale."""
        from .row_security import SET_TENANT_SESSION

        if self._tenant_named.get(conn) != value:
            self._tenant_named.pop(conn, None)  # unknown if the statement fails
            conn.execute(SET_TENANT_SESSION, (value,))
            self._tenant_named[conn] = value

    def _ensure_row_security(self, conn: Connection) -> bool:
        """Whether statements name their tenant (row_security on); the first time, put the
        policies on the tables if they lack them (see row_security.py)."""
        mode = self.options.row_security
        if mode == "off":
            return False
        if self._row_security_active is None:
            from . import row_security

            with self._errors("checking row-level security"):
                self._row_security_active = row_security.ensure(conn, self.names, force=mode == "force")
        return True

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Driver errors as BackendError (`_driver_error`)."""
        import psycopg

        try:
            yield
        except MnemostoreError:
            raise
        except psycopg.Error as exc:
            raise self._driver_error(action, exc) from exc

    def _driver_error(self, action: str, exc: Exception) -> BackendError:
        """A driver error as BackendError, with a message that names the store but no secret."""
        import psycopg

        if isinstance(exc, psycopg.errors.QueryCanceled):
            return BackendError(
                f"{action} on {self.url.masked} was cancelled by the server "
                f"(statement_timeout={self.options.statement_timeout}s): {self._scrub(exc)}")
        return BackendError(f"{action} on {self.url.masked} failed: {type(exc).__name__}: {self._scrub(exc)}")

    def _no_connection(self, exc: Exception) -> BackendError:
        return BackendError(
            f"no connection to {self.url.masked} within {self.options.pool_timeout}s "
            f"(pool of {self.options.pool_max_size}; is the server reachable?): {self._scrub(exc)}")

    def _scrub(self, exc: BaseException) -> str:
        return self.url.scrub(str(exc).strip())

    @property
    def names(self) -> Names:
        if self._names is None:
            raise BackendError(f"{self!r} is not open")
        return self._names

    def _layout(self, kind: str) -> KindLayout:
        return layout(kind, self.options.table_prefix)

    def _readable(self, kind: str) -> KindLayout | None:
        """The kind's layout, or None for an application's kind whose table does not exist yet (it is
        made by its first write: a read creates nothing). A table missing a column of the kind's
        declaration (a filterable field added since) is refused."""
        kind_layout = self._layout(kind)
        if kind in KINDS or kind_layout.table in self._kind_tables:
            return kind_layout
        qualified = self._table(kind_layout)
        with self._errors(f"looking up the {kind} table"), self._connection() as conn:
            columns = {str(name) for (name,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                "AND NOT attisdropped", (qualified.as_string(conn),)).fetchall()}
        if not columns:
            return None
        missing = sorted(set(kind_layout.write_columns) - columns)
        if missing:
            raise SchemaMismatch(
                f"this store's {kind} table has no column for {', '.join(missing)}: the kind's declaration gained "
                f"fields since its table was created; `mnemostore migrate plan {self.url.masked}` shows the change "
                "and `mnemostore migrate up` applies it")
        self._kind_tables.add(kind_layout.table)
        return kind_layout

    def _writable(self, kind: str) -> KindLayout:
        """The kind's layout, its table created first if it is an application's kind's first write."""
        found = self._readable(kind)
        if found is not None:
            return found
        from . import row_security, schema

        kind_layout = self._layout(kind)
        mode = self.options.row_security
        policies = ([] if mode == "off" else
                    row_security.policy_statements(self.names, [kind_layout.table], force=mode == "force"))
        import psycopg

        with self._errors(f"creating the {kind} table"), self._connection() as conn:
            try:
                schema.create_kind(conn, self.names, kind_layout, policies)
            except psycopg.errors.InsufficientPrivilege as exc:
                raise BackendError(
                    f"this store has no table for the {kind} kind yet and this role may not create it "
                    f"({self._scrub(exc)}); write the first {kind} record as a role that may (the schema's "
                    "owner), then grant the table to this one") from exc
        self._kind_tables.add(kind_layout.table)
        self._vectors_ready = None  # its embedding column is typed (and indexed) by the next `_ensure_vectors`
        return kind_layout

    def _table(self, kind_layout: KindLayout) -> sql.Identifier:
        return self.names.table(kind_layout.table)

    def _statement(self, key: tuple[Any, ...], build: Callable[[], sql.Composable]) -> bytes:
        """A statement rendered once per store and key: composing psycopg.sql objects costs more
        than a small query's round trip. Keys name the statement, its kind and its filter's SQL."""
        found: bytes = self._cached(key, lambda: build().as_bytes(None))
        return found

    def _condition(self, kind_layout: KindLayout, where: Expr | None) -> tuple[bytes, list[Any]]:
        """`where` as SQL on the kind's table and its parameters, compiled once per store and
        expression, values included (an agent searches its own scope call after call; compiling
        took a third of a filtered search's client time)."""
        if where is None:
            return b"TRUE", []
        from .sql_filters import FilterCompiler

        def build() -> tuple[bytes, list[Any]]:
            compiler = FilterCompiler(kind_layout)
            return compiler.where(where).as_bytes(None), compiler.params

        found: tuple[bytes, list[Any]] = self._cached(("where", kind_layout.kind, expression_key(where)), build)
        return found

    def _cached(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """`build()` once per store and key (`STATEMENT_CACHE_SIZE` keys, then it starts again)."""
        found = self._statements.get(key)
        if found is None:
            if len(self._statements) >= STATEMENT_CACHE_SIZE:
                self._statements.clear()
            found = self._statements[key] = build()
        return found

    def _ensure_vectors(self) -> None:
        """Type the embedding columns once the store's dimension is known (see schema.py)."""
        dimension = self.params.dimension
        if dimension is None or self._vectors_ready == dimension:
            return
        from .schema import ensure_vectors

        hnsw = (self.options.hnsw_m, self.options.hnsw_ef_construction) if self.options.index == "hnsw" else None
        with self._errors("preparing the vector columns"), self._connection() as conn:
            autocommit, conn.autocommit = conn.autocommit, True
            try:
                ensure_vectors(conn, self.names, dimension, self.params.metric, hnsw)
            finally:
                conn.autocommit = autocommit
        self._vectors_ready = dimension

    # meta ----------------------------------------------------------------------------
    def read_meta(self, key: str) -> Any:
        from psycopg import sql

        with self._errors("reading store metadata"), self._connection() as conn:
            row = conn.execute(sql.SQL("SELECT value::text FROM {} WHERE key = %s").format(self.names.meta),
                               (key,)).fetchone()
        return None if row is None else orjson.loads(row[0])

    def write_meta(self, key: str, value: Any) -> None:
        with self._errors("writing store metadata"), self._transaction() as conn:
            self._write_meta(conn, key, value)

    def _write_meta(self, conn: Connection, key: str, value: Any) -> None:
        from psycopg import sql

        statement = sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s::jsonb) "
                            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value").format(self.names.meta)
        conn.execute(statement, (key, orjson.dumps(value).decode()))

    # migrations ----------------------------------------------------------------------
    def migration_lock(self) -> MigrationLock:
        """A session-level advisory lock keyed by schema and prefix (see advisory_lock.py);
        `break-lock` terminates the holding session."""
        from .advisory_lock import AdvisoryLock

        return AdvisoryLock(self._dedicated_connection, self.names.migration_lock_key(), self._errors)

    def _dedicated_connection(self) -> Connection:
        """A new autocommit connection outside the pool (the lock's session, non-atomic steps)."""
        import psycopg

        pool = self.options.pool
        if pool is None:
            return psycopg.connect(self.conninfo(), autocommit=True)
        # A borrowed pool's own settings; either may be a callable (rotating credentials).
        conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo or ""
        kwargs = (pool.kwargs() if callable(pool.kwargs) else pool.kwargs) or {}
        return psycopg.connect(conninfo, **{**kwargs, "autocommit": True})

    def legacy_layout(self) -> str | None:
        """A schema laid out before the ledger has `layout_version` in its meta table and no
        ledger: it is adopted at that step of the history (only layout 1 existed then)."""
        from . import schema

        with self._errors("reading the layout version"), self._connection() as conn:
            version, has_ledger = schema.layout_version(conn, self.names)
        if has_ledger or not version:
            return None
        return HISTORY[min(version, NEWEST_LAYOUT_VERSION) - 1].id

    def evolve_kind(self, change: KindChange) -> None:
        """The kind's table grown in one transaction (`schema.evolve_kind`), without the store's
        statement_timeout: a backfill of a large table takes as long as it takes."""
        from . import schema

        kind_layout = self._layout(change.kind)
        with self._transaction() as conn:
            conn.execute("SET LOCAL statement_timeout = 0")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self.names.lock_key(),))
            schema.evolve_kind(conn, self.names, kind_layout, change)
        self._kind_tables.discard(kind_layout.table)
        self._statements.clear()

    def layout_sql(self, migration: LayoutMigration, direction: Literal["up", "down"] = "up") -> list[str]:
        """A layout step's statements as they run on this store (its schema and prefix filled in)."""
        return [self.names.render(template) for template in migration.sql(direction)]

    def run_layout(self, migration: LayoutMigration, direction: Literal["up", "down"],
                   ledger: Mapping[str, Any]) -> None:
        """An atomic step and its ledger write commit in one transaction (DDL is transactional
        here), so a failed step leaves no trace; a non-atomic one (`CREATE INDEX
        CONCURRENTLY`) runs statement by statement on its own autocommit connection and the
        ledger is written after its last statement. Neither is cut short by the store's
        statement_timeout: index builds on a large store take as long as they take."""
        import psycopg

        step = migration.step(direction)
        self._vectors_ready = None  # tables may have been recreated: check their vector type
        self._row_security_active = None  # and their policies again
        self._kind_tables.clear()
        if callable(step):
            step(self)
            self.write_meta(LEDGER_KEY, dict(ledger))
            return
        # Templates are this package's code; the only values filled in are quoted identifiers.
        statements = self.layout_sql(migration, direction)
        done = 0
        try:
            if migration.atomic:
                with self._transaction() as conn:
                    conn.execute("SET LOCAL statement_timeout = 0")
                    for statement in statements:
                        conn.execute(statement)
                        done += 1
                    self._write_meta(conn, LEDGER_KEY, dict(ledger))
            else:
                with self._errors(f"connecting to run {migration.id}"):
                    dedicated = self._dedicated_connection()
                with closing(dedicated) as conn:
                    conn.execute("SET statement_timeout = 0")
                    for statement in statements:
                        conn.execute(statement)
                        done += 1
                self.write_meta(LEDGER_KEY, dict(ledger))
        except psycopg.Error as exc:
            raise MigrationError(self._step_failure(migration, direction, statements, done, exc)) from exc

    def _step_failure(self, migration: LayoutMigration, direction: str, statements: Sequence[str], done: int,
                      exc: Exception) -> str:
        where = (f"at statement {done + 1} of {len(statements)} ({statements[done][:160]})"
                 if done < len(statements) else "writing the ledger")
        if migration.atomic:
            outcome = "it was rolled back: nothing of it was applied"
        else:
            outcome = (f"it is not transactional: the {done} statement(s) before it took effect and are not "
                       "recorded; each can run again, so fix the cause and run `mnemostore migrate up` again")
        reason = (self._scrub(exc).splitlines() or [""])[0]  # the rest repeats the statement
        return (f"layout migration {migration.id!r} ({direction}) failed on {self.url.masked} {where}: "
                f"{type(exc).__name__}: {reason}; {outcome}")

    def tenants(self, kind: str) -> list[str | None]:
        from psycopg import sql

        kind_layout = self._readable(kind)
        if kind_layout is None:
            return []
        statement = sql.SQL("SELECT DISTINCT tenant FROM {} ORDER BY tenant").format(self._table(kind_layout))
        with self._errors(f"listing the tenants of {kind} records"), self._connection() as conn:
            if self._ensure_row_security(conn) and self._row_security_active:
                raise UnsupportedCapability(
                    f"row_security={self.options.row_security}: the tenant policies apply to this role, so it "
                    "sees one tenant at a time and cannot list them all; run migrations and copies as the "
                    "tables' owner (unless forced) or a role with BYPASSRLS")
            rows = conn.execute(statement).fetchall()
        return [tenant or None for (tenant,) in rows]

    # writing ---------------------------------------------------------------------------
    def put(self, kind: str, records: Sequence[Record]) -> None:
        self._insert(kind, records, keep_existing=False)

    def put_missing(self, kind: str, records: Sequence[Record]) -> None:
        self._insert(kind, records, keep_existing=True)

    def _insert(self, kind: str, records: Sequence[Record], keep_existing: bool) -> None:
        """Upsert `records`, or with `keep_existing` insert only those not stored (ON CONFLICT DO NOTHING)."""
        if not records:
            return
        kind_layout = self._writable(kind)
        self._ensure_vectors()
        rows = [kind_layout.encode(record) for record in records]
        with self._errors(f"writing {len(rows)} {kind} records"), self._connection() as conn:
            if not self._ensure_row_security(conn):
                batches: dict[str | None, list[tuple[Any, ...]]] = {None: rows}
                name = None
            else:  # written tenant by tenant, each named to the policies first
                batches = _by_tenant(rows)
                name = self._name_batch(conn, batches)
            if len(rows) >= COPY_THRESHOLD and not keep_existing:
                with conn.transaction():
                    for tenant, batch in batches.items():
                        if name is not None:
                            name(tenant)
                        self._copy_upsert(conn, kind_layout, batch, direct=not self._row_security_active)
                return
            statement = self._statement(("upsert", kind, keep_existing),
                                        lambda: self._upsert_sql(kind_layout, keep_existing=keep_existing))
            if len(rows) == 1 and name is None:  # one statement: atomic without BEGIN and COMMIT
                conn.execute(statement, rows[0])
            else:  # BEGIN, the upserts and COMMIT in one round trip
                with conn.pipeline(), conn.transaction():
                    for tenant, batch in batches.items():
                        if name is not None:
                            name(tenant)
                        conn.cursor().executemany(statement, batch)

    def _name_batch(self, conn: Connection, batches: Mapping[str | None, Any]) -> Callable[[str | None], None] | None:
        """Name the tenant of a one-tenant batch now (see `_name_tenant`), or return what names each
        tenant of the batch in turn inside the write's transaction."""
        from .row_security import SET_TENANT, setting_value

        if len(batches) == 1 and self._own_pool:
            self._name_tenant(conn, setting_value(next(iter(batches))))
            return None

        def name(tenant: str | None) -> None:
            conn.execute(SET_TENANT, (setting_value(tenant),))

        return name

    def _upsert_sql(self, kind_layout: KindLayout, source: sql.Composable | None = None,
                    keep_existing: bool = False) -> sql.Composed:
        from psycopg import sql

        columns = kind_layout.write_columns
        names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        if source is None:
            source = sql.SQL("VALUES ({})").format(sql.SQL(", ").join(sql.Placeholder() * len(columns)))
        if keep_existing:
            return sql.SQL("INSERT INTO {} ({}) {} ON CONFLICT (tenant, id) DO NOTHING").format(
                self._table(kind_layout), names, source)
        updates = sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in columns if c not in ("tenant", "id"))
        return sql.SQL("INSERT INTO {} ({}) {} ON CONFLICT (tenant, id) DO UPDATE SET {}").format(
            self._table(kind_layout), names, source, updates)

    # checkpoints -----------------------------------------------------------------------
    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        """The parent lookup and the write in one statement: an INSERT … SELECT whose parent comes
        from the layout's `checkpoint_latest` function (migrations.py), which takes an advisory
        lock on the record's (tenant, run, branch) for the transaction and then reads the latest
        checkpoint with a fresh snapshot: racing saves to one run and branch queue up, and each
        links to the one committed before it. The function's query is what core's `latest` and
        `order` select (tested against `LATEST_CHECKPOINT_ORDER`), so they are not compiled here."""
        import psycopg

        self._ensure_vectors()
        kind_layout = self._layout("checkpoint")
        statement = self._statement(("append",), lambda: self._append_sql(kind_layout))
        tenant = tenant_key(record.tenant_id)
        lock = self.names.append_lock_key(tenant, record.run_id, record.branch_id)
        params = [tenant, record.run_id, record.branch_id, lock, *kind_layout.encode(record)]
        with self._errors(f"writing checkpoint {record.id!r}"), self._connection() as conn:
            cursor = conn.cursor(binary=True)
            try:
                with self._tenant_scope(conn, record.tenant_id):
                    cursor.execute(statement, params)
            except psycopg.errors.NumericValueOutOfRange:
                raise ValidationError.one(
                    "sequence", f"would exceed a 64-bit integer (the latest of run {record.run_id!r} is at the "
                                "limit)") from None
            parent = cursor.fetchone()
        assert parent is not None
        return link_parent(record, None if parent[0] is None else (parent[0], parent[1]))

    def _append_sql(self, kind_layout: KindLayout) -> sql.Composable:
        """`put`'s upsert of one checkpoint from a SELECT whose `sequence` and `parent_ids` come from
        the CTE `latest` (the `checkpoint_latest` function's row) if it has one; returns that
        parent's id and sequence (NULLs for a root)."""
        from psycopg import sql

        values: list[sql.Composable] = []
        for column, type_ in zip(kind_layout.write_columns, self._column_types(kind_layout), strict=True):
            value = sql.SQL("%s::{}").format(type_)
            if column == "sequence":
                value = sql.SQL("coalesce((SELECT sequence + 1 FROM latest), {})").format(value)
            elif column == "parent_ids":
                value = sql.SQL("coalesce((SELECT ARRAY[id] FROM latest), {})").format(value)
            values.append(value)
        insert = self._upsert_sql(kind_layout, sql.SQL("SELECT {}").format(sql.SQL(", ").join(values)))
        function = self.names.table(self.names.prefix + "checkpoint_latest")
        return sql.SQL("WITH latest AS (SELECT id, sequence FROM {}(%s, %s, %s, %s)) {} "
                       "RETURNING (SELECT id FROM latest), (SELECT sequence FROM latest)").format(function, insert)

    def _column_types(self, kind_layout: KindLayout) -> list[sql.Composable]:
        """The SQL types of `write_columns`, for casts: the names of `_copy_types`' OIDs."""
        from psycopg import sql

        vector = sql.Identifier(self.names.vector_schema, "vector")
        oids = self._copy_types(kind_layout)
        return [vector if oid == self._vector_oid else sql.SQL(_TYPE_NAMES[oid]) for oid in oids]

    def _copy_types(self, kind_layout: KindLayout) -> list[int]:
        oids = [25, 25]
        oids += [_TYPE_OIDS.get(kind_layout.types[name], 20) for name in kind_layout.fields]
        oids += [20] * len(kind_layout.datetimes)
        oids += [_TEXT_ARRAY_OID] * len(kind_layout.lists)
        oids += [17] * len(kind_layout.binary)
        return [*oids, 17, 3802, self._vector_oid]

    def _copy_upsert(self, conn: Connection, kind_layout: KindLayout, rows: list[tuple[Any, ...]],
                     direct: bool = True) -> None:
        """Binary COPY straight into the table (if `direct`: the server refuses COPY FROM into a
        table whose policies apply); if an id exists already, or not `direct`, COPY into a
        staging table and upsert from it instead (both in the caller's transaction)."""
        import psycopg
        from psycopg import sql

        columns = sql.SQL(", ").join(sql.Identifier(c) for c in kind_layout.write_columns)
        types = self._copy_types(kind_layout)
        cursor = conn.cursor()

        def copy_into(target: sql.Composable) -> None:
            with cursor.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(target, columns)) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)

        if direct:
            try:
                with conn.transaction():
                    copy_into(self._table(kind_layout))
                return
            except psycopg.errors.UniqueViolation:
                pass
        stage = sql.Identifier(kind_layout.table + "_stage")
        cursor.execute(sql.SQL("CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP").format(
            stage, self._table(kind_layout)))
        copy_into(stage)
        source = sql.SQL("SELECT {} FROM {}").format(columns, stage)
        cursor.execute(self._upsert_sql(kind_layout, source))
        cursor.execute(sql.SQL("DROP TABLE {}").format(stage))  # the transaction may stage another batch

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        import psycopg
        from psycopg import sql

        kind_layout = self._readable(kind)
        if kind_layout is None:
            return None
        if "embedding" in set and set["embedding"] is not None:
            self._ensure_vectors()
        assignments: list[sql.Composable] = []
        params: list[Any] = []
        doc_changes: dict[str, Any] = {}
        for name, value in set.items():
            if name in kind_layout.types:
                for column, stored in kind_layout.field_values(name, value):
                    assignments.append(sql.SQL("{} = %s").format(sql.Identifier(column)))
                    params.append(stored)
            elif name == "embedding" or name in kind_layout.lists:
                assignments.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
                params.append(value)
            elif name in kind_layout.binary:
                assignments.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
                params.append(kind_layout.encode_binary(value))
            else:
                doc_changes[name] = value
        for name, amount in inc.items():
            assignments.append(sql.SQL("{0} = {0} + %s").format(sql.Identifier(name)))
            params.append(amount)
        table = self._table(kind_layout)
        key = (tenant_key(tenant), id)
        with self._errors(f"updating {kind} {id!r}"), self._connection() as conn:
            cursor = conn.cursor(binary=True)
            try:
                with self._tenant_scope(conn, tenant, transaction=True):
                    if doc_changes:
                        lists = [sql.Identifier(name) for name in kind_layout.lists]
                        row = conn.execute(sql.SQL("SELECT {} FROM {} WHERE tenant = %s AND id = %s FOR UPDATE")
                                           .format(sql.SQL(", ").join([sql.Identifier("doc"), *lists]), table),
                                           key).fetchone()
                        if row is None:
                            return None
                        data = decode_doc(row[0])
                        data.update(doc_changes)
                        for name, stored in zip(kind_layout.lists, row[1:], strict=True):
                            if stored is None and name not in set:  # a row from before layout 3: move it
                                assignments.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
                                params.append(data.get(name, []))
                        for name in kind_layout.binary:
                            held = data.get(name)
                            if type(held) is str and name not in set:  # base64 from before layout 5: move it
                                assignments.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
                                params.append(kind_layout.encode_binary(from_text(held)))
                        assignments.append(sql.SQL("doc = %s"))
                        params.append(kind_layout.encode_doc(data))
                        if "metadata" in doc_changes:
                            assignments.append(sql.SQL("metadata = %s"))
                            params.append(JsonbBytes(orjson.dumps(doc_changes["metadata"])))
                    statement = sql.SQL(
                        "UPDATE {} SET {} WHERE tenant = %s AND id = %s RETURNING {}, embedding"
                    ).format(table, sql.SQL(", ").join(assignments), self._select_list(kind_layout))
                    cursor.execute(statement, [*params, *key])
            except psycopg.errors.NumericValueOutOfRange:
                raise ValidationError.one(
                    "inc", f"would take a counter of {kind} {id!r} past 2**63 - 1") from None
            found = cursor.fetchone()
        return None if found is None else self._decode(kind_layout, found, True)

    # reading ---------------------------------------------------------------------------
    def _select_list(self, kind_layout: KindLayout) -> sql.Composable:
        from psycopg import sql

        return sql.SQL(", ").join(sql.Identifier(c) for c in kind_layout.data_columns)

    @staticmethod
    def _decode(kind_layout: KindLayout, row: tuple[Any, ...], vectors: bool) -> Record:
        from .adapters import decode_vector

        vector = row[len(kind_layout.data_columns)] if vectors else None
        return kind_layout.decode(row, None if vector is None else decode_vector(vector))

    def _select(self, kind: str, tenant: str | None, where: Expr | None, vectors: bool, tail_key: tuple[Any, ...],
                tail: Callable[[KindLayout], sql.Composable], tail_params: Sequence[Any]) -> list[Record]:
        """Whole records matching `where`, the statement ending in `tail` (rendered once per
        `tail_key` and filter shape, see `_statement`)."""
        from psycopg import sql

        kind_layout = self._readable(kind)
        if kind_layout is None:
            return []
        condition, condition_params = self._condition(kind_layout, where)

        def build() -> sql.Composable:
            columns = self._select_list(kind_layout)
            if vectors:
                columns = sql.SQL("{}, embedding").format(columns)
            return sql.SQL("SELECT {} FROM {} WHERE tenant = %s AND {} {}").format(
                columns, self._table(kind_layout), sql.SQL(condition.decode()), tail(kind_layout))

        statement = self._statement(("select", kind, vectors, condition, *tail_key), build)
        rows = self._fetch(f"reading {kind} records", tenant, statement,
                           [tenant_key(tenant), *condition_params, *tail_params])
        return [self._decode(kind_layout, row, vectors) for row in rows]

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        from psycopg import sql

        from .sql_filters import order_by

        def tail(kind_layout: KindLayout) -> sql.Composable:
            ordering = sql.SQL("ORDER BY {}").format(order_by(kind_layout, order))
            return ordering if limit is None else sql.SQL("{} LIMIT %s").format(ordering)

        key = ("order", tuple((o.field, o.descending) for o in order), limit is None)
        return self._select(kind, tenant, where, vectors, key, tail, [] if limit is None else [limit])

    def query_values(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                     limit: int | None, fields: Sequence[str]) -> list[tuple[Any, ...]]:
        """Only the fields' columns (a checkpoint's id and sequence, not its state); fields kept
        in the document are read through whole records."""
        from psycopg import sql

        from .sql_filters import order_by

        kind_layout = self._readable(kind)
        if kind_layout is None:
            return []
        if any(name != "id" and name not in kind_layout.types for name in fields):
            return super().query_values(kind, tenant, where, order, limit, fields)
        condition, condition_params = self._condition(kind_layout, where)

        def build() -> sql.Composable:
            columns: list[sql.Composable] = []
            for name in fields:
                columns += [sql.Identifier(column) for column, _ in (
                    kind_layout.field_values(name, None) if name != "id" else [("id", None)])]
            ordering = sql.SQL(" ORDER BY {}").format(order_by(kind_layout, order)) if order else sql.SQL("")
            return sql.SQL("SELECT {} FROM {} WHERE tenant = %s AND {}{}{}").format(
                sql.SQL(", ").join(columns), self._table(kind_layout), sql.SQL(condition.decode()), ordering,
                sql.SQL(" LIMIT %s") if limit is not None else sql.SQL(""))

        key = ("values", kind, tuple(fields), condition, tuple((o.field, o.descending) for o in order), limit is None)
        statement = self._statement(key, build)
        params = [tenant_key(tenant), *condition_params, *([limit] if limit is not None else [])]
        rows = self._fetch(f"reading {kind} records", tenant, statement, params)
        return [_field_values(kind_layout, fields, row) for row in rows]

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        from psycopg import sql

        return self._select(kind, tenant, None, vectors, ("ids",), lambda _: sql.SQL("AND id = ANY(%s::text[])"),
                            [list(ids)])

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return self._count_or_delete("SELECT count(*) FROM {} WHERE tenant = %s AND {}", kind, tenant, where)

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return self._count_or_delete("DELETE FROM {} WHERE tenant = %s AND {}", kind, tenant, where)

    def _count_or_delete(self, template: str, kind: str, tenant: str | None, where: Expr | None) -> int:
        from psycopg import sql

        kind_layout = self._readable(kind)
        if kind_layout is None:
            return 0
        condition, condition_params = self._condition(kind_layout, where)
        statement = self._statement((template, kind, condition), lambda: sql.SQL(template).format(
            self._table(kind_layout), sql.SQL(condition.decode())))
        reading = template.startswith("SELECT")
        with self._errors(f"{template.split()[0].lower()} of {kind} records"), self._connection() as conn:
            cursor = conn.cursor()
            with self._tenant_scope(conn, tenant, transaction=not reading):
                cursor.execute(statement, [tenant_key(tenant), *condition_params])
            if reading:
                row = cursor.fetchone()
                return int(row[0]) if row else 0
            return cursor.rowcount

    # vector search ---------------------------------------------------------------------
    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        if self._readable(kind) is None:
            return []
        self._ensure_vectors()
        metric = self.params.metric
        exact = self.options.index == "exact"
        found = self._nearest(kind, tenant, vector, k, where, exact, vectors)
        if not exact and (len(found) < k or (len(found) > k and found[k][-1] == found[k - 1][-1])
                          or any(row[-1] != row[-1] for row in found)):
            # The index scan gave up early (a very selective filter), a tie straddles the k-th
            # place, or a distance is NaN (a zero vector, the query or a stored one, has no
            # direction; the exact scan scores it as cosine similarity 0): the exact scan returns
            # k whenever k match, ties broken by id.
            found = self._nearest(kind, tenant, vector, k, where, True, vectors)
        kind_layout, rows = self._layout(kind), found[:k]
        if not rows:
            return []
        if not vectors:
            # No embeddings travel: the scores are the server's distances (float32 arithmetic,
            # well within float32 precision of the reference's), ties by id.
            convert = _FROM_DISTANCE[metric]
            return [Hit(kind_layout.decode(row), convert(row[-1])) for row in sorted(rows, key=_distance_then_id)]
        from .adapters import decode_matrix

        matrix = decode_matrix([row[len(kind_layout.data_columns)] for row in rows])
        records = [kind_layout.decode(row, matrix[i]) for i, row in enumerate(rows)]
        return _rescore(records, matrix, vector, k, metric)

    def explain_search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None) -> str:
        """The server's plan for the index search `search` runs first (EXPLAIN; a diagnostic)."""
        self._ensure_vectors()
        plan = self._nearest(kind, tenant, vector, k, where, self.options.index == "exact", True, explain=True)
        return "\n".join(str(row[0]) for row in plan)

    def _nearest(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                 exact: bool, vectors: bool, explain: bool = False) -> list[tuple[Any, ...]]:
        """Rows of the nearest records (data columns, the embedding if `vectors`, the server's
        distance); one more than k from the index. Search settings share the round trip."""
        kind_layout = self._layout(kind)
        # A filter on agent or project_id also compares the prefix its scope index holds
        # (sql_filters), so the planner can read the matching rows by that index and sort them
        # (exact) instead of walking the HNSW graph and filtering as it goes. The redundant clause
        # lowers its row estimate (10x for a 10% filter), which offsets pgvector's estimate of a
        # filtered walk (too cheap: it leaves out the iterative scan): measured on 384-dim
        # vectors, a 10% agent filter over 2,000 / 10,000 rows read by index 0.1 / 0.4-1.0 ms
        # against 0.2 (a scan) / 2.3-3.7 ms (the walk); over 100,000 the planner still walks.
        condition, condition_params = self._condition(kind_layout, where)
        metric = self.params.metric
        limit = k if exact else k + 1
        statement = self._statement(
            ("nearest", kind, metric, exact, vectors, explain, condition, limit),
            lambda: self._nearest_sql(kind_layout, metric, exact, vectors, explain, condition, limit))
        if exact:
            settings: tuple[str, tuple[str, ...]] | None = ("SELECT set_config('enable_indexscan', 'off', true)", ())
        else:
            ef_search = min(1000, max(self.options.hnsw_ef_search, k))
            preset = self._own_pool and ef_search == self.options.hnsw_ef_search  # see _configure
            settings = None if preset else (
                "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true)",
                (str(ef_search), self.options.iterative_scan))
        params = [vector, tenant_key(tenant), *condition_params]
        action = f"searching {kind} records"
        if settings is None:
            rows = self._fetch(action, tenant, statement, params)
        else:
            with self._errors(action), self._connection() as conn:
                cursor = conn.cursor(binary=True)
                with self._tenant_scope(conn, tenant), conn.pipeline(), conn.transaction():
                    conn.execute(settings[0], settings[1])
                    cursor.execute(statement, params)
                rows = cursor.fetchall()
        if not explain and rows and rows[-1][-1] is None:  # records without an embedding sort last
            rows = [row for row in rows if row[-1] is not None]
        return rows

    def _nearest_sql(self, kind_layout: KindLayout, metric: str, exact: bool, vectors: bool, explain: bool,
                     condition: bytes, limit: int) -> sql.Composable:
        """The nearest rows' statement. The inner query orders only (row address, distance) pairs
        and the outer one reads the columns of the k it kept: a scan that sorts carries narrow
        rows (half the time of the wide ones on a small table), an index scan is unaffected. The
        distance is computed once (ordered by its alias); a record without an embedding is not
        excluded in SQL (a NOT NULL test on the last column runs first and costs every row a full
        decode): its NULL distance sorts last, and `_nearest` drops it. The limit is a literal:
        with a parameter the server would plan every execution anew (a generic plan that does not
        know the limit costs as if it read a tenth of the table), ~0.1 ms each."""
        from psycopg import sql

        operator = sql.SQL("OPERATOR({}.{})").format(
            sql.Identifier(self.names.vector_schema), sql.SQL(_OPERATORS[metric]))
        distance: sql.Composable = sql.SQL("embedding {} %s").format(operator)
        inner, ordering = sql.SQL(""), sql.SQL("")
        if exact:
            if metric == "cosine":  # a zero vector has no direction: similarity 0 (NULL stays NULL)
                distance = sql.SQL(
                    "coalesce(nullif({}, 'NaN'::float8), CASE WHEN embedding IS NULL THEN NULL ELSE 1.0 END)"
                ).format(distance)
            inner, ordering = sql.SQL(", id"), sql.SQL(", s.id")
        table = self._table(kind_layout)
        columns = [sql.Identifier("t", column) for column in kind_layout.data_columns]
        if vectors:
            columns.append(sql.Identifier("t", "embedding"))
        statement = sql.SQL(
            "SELECT {columns}, s.distance FROM (SELECT ctid AS row_ref{inner}, {distance} AS distance FROM {table} "
            "WHERE tenant = %s AND {condition} ORDER BY distance{inner} LIMIT {limit}) AS s "
            "JOIN {table} AS t ON t.ctid = s.row_ref ORDER BY s.distance{ordering}"
        ).format(columns=sql.SQL(", ").join(columns), inner=inner, distance=distance, table=table,
                 condition=sql.SQL(condition.decode()), limit=sql.Literal(limit), ordering=ordering)
        return sql.SQL("EXPLAIN ") + statement if explain else statement


_FROM_DISTANCE: dict[str, Callable[[float], float]] = {
    "cosine": lambda distance: 1.0 - distance,  # <=> is 1 - cosine similarity
    "dot": lambda distance: -distance,  # <#> is the negative inner product
    "l2": lambda distance: distance,
}
"""A score (as the reference defines it) from the distance the server ordered by."""


def _distance_then_id(row: tuple[Any, ...]) -> tuple[float, str]:
    return row[-1], row[0]


def _rescore(records: list[Record], matrix: Any, vector: Vector, k: int, metric: str) -> list[Hit]:
    """Scores in float64 as the reference computes them, best first, ties by id."""
    import numpy as np

    from ...core.vectorsearch import scores, top_k

    values = scores(matrix.astype(np.float64), np.asarray(vector, dtype=np.float64), metric)
    best = top_k(values, [r.id for r in records], k, metric)
    return [Hit(records[i], score) for i, score in best]


def _field_values(kind_layout: KindLayout, fields: Sequence[str], row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A `query_values` row: a datetime's two columns (instant, offset) become one value."""
    from .layout import decode_datetime

    values, i = [], 0
    for name in fields:
        if name != "id" and kind_layout.types[name] is datetime:
            values.append(None if row[i] is None else decode_datetime(row[i], row[i + 1]))
            i += 2
        else:
            values.append(row[i])
            i += 1
    return tuple(values)


def _by_tenant(rows: list[tuple[Any, ...]]) -> dict[str | None, list[tuple[Any, ...]]]:
    """Encoded rows (`KindLayout.encode`: id, tenant, …) grouped by tenant, in order."""
    groups: dict[str | None, list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault(row[1] or None, []).append(row)
    return groups


def _readable(conn: Connection) -> bool:
    """Whether an idle connection's socket has something to read: the server closed it (EOF or
    a FATAL message) or sent a notice; either way it is worth a ping before use."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except Exception:  # a closed connection has no socket
        return True
