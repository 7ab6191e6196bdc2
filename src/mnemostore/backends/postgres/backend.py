"""The postgres backend: psycopg 3, a health-checked connection pool, pgvector.

Row layout and its reasons: layout.py; the tables' history: migrations.py (run by the
migration runner, under advisory_lock.py); what opening creates and the lazily typed
vector column: schema.py; filters: sql_filters.py; the tenant policies of the
`row_security` option: row_security.py. The protocol's calls are plans (plans.py: their
statements in statements.py, rows decoded by rows.py) run by sync_driver.py here and by the
native async side (async_side.py) under `open_async`; the connections of both pools keep their
cursors (own_connections.py), and the sync pool's run lone writes at the libpq level
(lone_writes.py). The driver is imported when a store is opened, not before.
"""

from __future__ import annotations

import select
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from time import monotonic
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from ...core.capabilities import Capability
from ...core.errors import (
    BackendError,
    ConfigError,
    MigrationError,
    MnemostoreError,
    SchemaMismatch,
    ValidationError,
)
from ...core.field_puts import FieldWriter
from ...core.filters import Expr
from ...core.kinds import record_type
from ...core.protocol import Backend, Hit, OrderKey
from ...core.records import KINDS, Checkpoint, Record
from ...core.shapes import QueryShape
from ...core.vectors import Vector
from ...migrations.ledger import LEDGER_KEY
from ...migrations.model import LayoutMigration
from . import plans
from .async_side import AsyncPostgresSide
from .index_walks import IndexWalks
from .kept_connections import KeptConnections
from .layout import KindLayout, layout
from .migrations import HISTORY, NEWEST_LAYOUT_VERSION
from .options import PostgresOptions
from .row_estimates import RowEstimates
from .statements import Statements

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool

    from ...core.declarations import KindChange
    from ...migrations.locking import MigrationLock
    from .schema import Names
    from .steps import Plan

    Connection = psycopg.Connection[tuple[Any, ...]]

T = TypeVar("T")


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
    async_backend: ClassVar[type[AsyncPostgresSide]] = AsyncPostgresSide
    documents_page: ClassVar[int] = 25
    """Checkpoints a page of the LangGraph saver's `list` reads (`reads.FlatReads`): each page costs a round trip."""

    def __init__(self, url: Any, options: Any) -> None:
        super().__init__(url, options)
        self._pool: ConnectionPool[Any] | None = None
        self._own_pool = False
        self._kept: KeptConnections | None = None
        """Our own pool's connections kept between calls (kept_connections.py); None for a borrowed pool."""
        self._names: Names | None = None
        self._vector_oid = 0
        self._vectors_ready: int | None = None
        self._kind_tables: set[str] = set()
        """Tables of applications' kinds seen to exist (a built-in kind's is the layout history's)."""
        self.row_estimates = RowEstimates()
        self.index_walks = IndexWalks()
        self._row_security_active: bool | None = None
        """Whether the tenant policies apply to this role (None: not looked up yet)."""
        self._facts: dict[str, Any] = {}
        self._statements: Statements | None = None
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

        from .own_connections import OwnConnection

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
                    conninfo, connection_class=OwnConnection, min_size=options.pool_min_size,
                    max_size=options.pool_max_size, open=False, configure=self._configure, check=self._check,
                    timeout=options.pool_timeout, name=f"mnemostore:{options.schema_name}", num_workers=2)
                self._own_pool = True
                self._kept = KeptConnections(self._pool, self._check)
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
            self._statements = Statements(self._names, self._vector_oid)
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
            conn.execute(*self.session_settings())

    def session_settings(self) -> tuple[str, tuple[str, str]]:
        """The statement and parameters setting the HNSW search options for a connection's session."""
        return ("SELECT set_config('hnsw.ef_search', %s, false), set_config('hnsw.iterative_scan', %s, false)",
                (str(self.options.hnsw_ef_search), self.options.iterative_scan))

    def _check(self, conn: Connection) -> None:
        """Health check of a pooled connection as it is taken: a ping (one round trip) only when
        the server may have dropped it. A connection the server closed (a restart, a proxy's idle
        timeout) has something to read on its idle socket, so it is pinged, fails and is replaced;
        one idle longer than `pool_check_after` is pinged too (a silent drop sends nothing)."""
        if self._needs_ping(conn):
            from psycopg_pool import ConnectionPool  # here, not per call: a `from … import` costs ~1 us

            ConnectionPool.check_connection(conn)

    def _needs_ping(self, conn: Any) -> bool:
        """Whether a pooled connection (sync or async) being taken is checked with a ping (`_check`)."""
        last = self._last_used.get(conn)
        return last is None or monotonic() - last >= self.options.pool_check_after or _readable(conn)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._own_pool:
            if self._kept is not None:
                self._kept.close()
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
        pool's is in a transaction, committed on success."""
        conn = self._take()
        try:
            if self._own_pool:
                yield conn
            else:
                self._configure(conn)
                with conn:
                    yield conn
        finally:
            self._give(conn)

    def _take(self) -> Connection:
        """A connection of the pool, taken without the pool's context manager, whose commit or
        rollback an autocommit connection does not need (a search's client time is mostly such
        layers): of our own pool, one kept from an earlier call if there is one
        (kept_connections.py); `_give` returns it."""
        pool = self._pool
        if pool is None:
            raise BackendError(f"{self!r} is closed")
        try:
            conn: Connection = pool.getconn() if self._kept is None else self._kept.take()
        except Exception as exc:
            from psycopg_pool import PoolTimeout  # here, not per call: a `from … import` costs ~1 us

            if isinstance(exc, PoolTimeout):
                raise self._no_connection(exc) from None
            raise
        return conn

    def _give(self, conn: Connection) -> None:
        now = self._last_used[conn] = monotonic()
        if self._kept is not None:
            self._kept.give(conn, now)  # after close: to the closed pool, which closes it
        elif self._pool is not None:
            self._pool.putconn(conn)

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._connection() as conn, conn.transaction():
            yield conn

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

    def _ensure_row_security(self) -> None:
        """Under row_security, put the policies on the tables if they lack them (see
        row_security.py) and look up whether they apply to this role: once per store."""
        from . import row_security

        with self._errors("checking row-level security"), self._connection() as conn:
            self._row_security_active = row_security.ensure(
                conn, self.names, force=self.options.row_security == "force")

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

    def prepare(self, kind: str, tenant: str | None) -> None:
        """An application's kind's table (the built-in kinds' exist from the store's creation)."""
        self._writable(kind)

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

    @property
    def statements(self) -> Statements:
        if self._statements is None:
            raise BackendError(f"{self!r} is not open")
        return self._statements

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

    # the protocol's calls: plans (plans.py) run by the sync driver -----------------------
    def _run(self, plan: Plan[T]) -> T:
        result: T = (_sync_run or _load_sync_driver())(self, plan)
        return result

    def read_meta(self, key: str) -> Any:
        return self._run(plans.read_meta(self, key))

    def write_meta(self, key: str, value: Any) -> None:
        self._run(plans.write_meta(self, key, value))

    def tenants(self, kind: str) -> list[str | None]:
        return self._run(plans.tenants(self, kind))

    def put(self, kind: str, records: Sequence[Record]) -> None:
        self._run(plans.insert(self, kind, records, keep_existing=False))

    def put_missing(self, kind: str, records: Sequence[Record]) -> None:
        self._run(plans.insert(self, kind, records, keep_existing=True))

    def put_keeping_created(self, kind: str, records: Sequence[Record]) -> None:
        self._run(plans.insert(self, kind, records, keep_existing=False, keep_created=True))

    def field_writer(self, kind: str, call: str, common: dict[str, Any], own: Sequence[str]) -> FieldWriter | None:
        """`core.field_puts.FieldWrites.field_writer`: a call's fields with `common` make the row, no record
        between them (`plans.insert_fields`; the LangGraph saver's `put_writes`: ~15 us of ~75 of client CPU
        less). None for `put_keeping_created` (a replaced row keeps a stored time: `put`'s plan)."""
        if call == "put_keeping_created":
            return None
        keep_existing = call == "put_missing"
        shared = dict.fromkeys(record_type(kind).model_fields) | common

        def write(fields: dict[str, Any]) -> None:
            self._run(plans.insert_fields(self, kind, shared | fields, keep_existing))

        return write

    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        return self._run(plans.append_checkpoint(self, record))

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        return self._run(plans.update(self, kind, tenant, id, set, inc))

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        return self._run(plans.query(self, kind, tenant, where, order, limit, vectors))

    def query_values(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                     limit: int | None, fields: Sequence[str]) -> list[tuple[Any, ...]]:
        return self._run(plans.query_values(self, kind, tenant, where, order, limit, fields))

    def query_shape(self, kind: str, tenant: str | None, shape: QueryShape, values: Mapping[str, Any],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        return self._run(plans.query_shape(self, kind, tenant, shape, values, limit, vectors))

    def query_shape_documents(self, kind: str, tenant: str | None, shape: QueryShape, values: Mapping[str, Any],
                              limit: int | None) -> list[dict[str, Any]] | None:
        """`query_shape`'s records (without vectors) as their stored fields, unvalidated (`KindLayout.document`):
        for a hot read that needs a few fields, not records (the LangGraph saver's). None where a value is None:
        the caller then takes `query_shape`."""
        found = self._run(plans.query_shapes_documents(self, tenant, [(kind, shape, values, limit)]))
        return None if found is None else found[0]

    def query_shapes_documents(self, tenant: str | None, reads: Sequence[tuple[str, QueryShape, Mapping[str, Any],
                                                                          int | None]],
                               ) -> list[list[dict[str, Any]]] | None:
        """`query_shape_documents` of several (kind, shape, values, limit) reads in one round trip (pipelined)."""
        return self._run(plans.query_shapes_documents(self, tenant, reads))

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return self._run(plans.get(self, kind, tenant, ids, vectors))

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return self._run(plans.count(self, kind, tenant, where))

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return self._run(plans.delete(self, kind, tenant, where))

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        return self._run(plans.search(self, kind, tenant, vector, k, where, vectors))

    def explain_search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None) -> str:
        """The server's plan for the index search `search` runs first (EXPLAIN; a diagnostic)."""
        return self._run(plans.explain_search(self, kind, tenant, vector, k, where))

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
        if self._statements is not None:
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
                    conn.execute(self.statements.write_meta(), plans.meta_row(LEDGER_KEY, dict(ledger)))
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


_sync_run: Callable[[PostgresBackend, Plan[Any]], Any] | None = None
"""sync_driver.run once loaded (`_load_sync_driver`): a call's `from … import` costs ~1 us each time."""


def _load_sync_driver() -> Callable[[PostgresBackend, Plan[Any]], Any]:
    """sync_driver.run, imported on the first call (it imports psycopg)."""
    global _sync_run
    from .sync_driver import run

    _sync_run = run
    return run


def _readable(conn: Connection) -> bool:
    """Whether an idle connection's socket has something to read: the server closed it (EOF or
    a FATAL message) or sent a notice; either way it is worth a ping before use."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except Exception:  # a closed connection has no socket
        return True
