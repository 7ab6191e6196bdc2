"""The postgres backend's native async side: its plans (plans.py) awaited on psycopg's async pool.

Under `open_async` the protocol's reads and writes run here, on the store's event loop, with the
statements and decoding of the sync backend; `drop`, `migration_lock`, `legacy_layout` and
`describe` run in the store's executor. The async pool has the sizes, timeout and health check of
the sync one (`pool_min_size`, `pool_max_size`, `pool_timeout`, `pool_check_after`), which still
serves the executor's calls and each kind's one-off preparation. With a borrowed pool (`pool=`, a
sync `ConnectionPool`) there is no async pool: the plans run on the borrowed connections, in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from time import monotonic
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.async_protocol import AsyncBackend
from ...core.filters import Expr
from ...core.protocol import Hit, OrderKey
from ...core.records import Checkpoint, Record
from ...core.shapes import QueryShape
from ...core.vectors import Vector
from . import plans

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from .backend import PostgresBackend
    from .steps import Plan

T = TypeVar("T")


class AsyncPostgresSide(AsyncBackend):
    """The protocol's hot calls awaited on an `AsyncConnectionPool` of the store's own."""

    backend: PostgresBackend

    def __init__(self, backend: PostgresBackend) -> None:
        super().__init__(backend)
        self.pool: AsyncConnectionPool[Any] | None = None

    async def open(self) -> None:
        from psycopg_pool import AsyncConnectionPool

        backend, options = self.backend, self.backend.options
        if not backend._own_pool:
            return
        self.pool = AsyncConnectionPool(
            backend.conninfo(), min_size=options.pool_min_size, max_size=options.pool_max_size, open=False,
            configure=self._configure, check=self._check, timeout=options.pool_timeout,
            name=f"mnemostore-async:{options.schema_name}", num_workers=2)
        await self.pool.open()

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """`PostgresBackend._configure` for an async connection: the vector and JSONB adapters,
        autocommit, the HNSW search settings for the session."""
        from .adapters import register

        backend = self.backend
        register(conn, backend._vector_oid)
        backend._last_used[conn] = monotonic()
        await conn.set_autocommit(True)
        await conn.execute(*backend.session_settings())

    async def _check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """`PostgresBackend._check`: a ping only when the server may have dropped the connection."""
        from psycopg_pool import AsyncConnectionPool

        if self.backend._needs_ping(conn):
            await AsyncConnectionPool.check_connection(conn)

    async def _run(self, plan: Plan[T]) -> T:
        if self.pool is None:
            if self.backend._own_pool:
                from ...core.errors import BackendError

                raise BackendError(f"the async side of {self.backend!r} is closed")
            return await asyncio.to_thread(self.backend._run, plan)
        from .async_driver import run

        return await run(self.backend, self.pool, plan)

    # the protocol's calls ---------------------------------------------------------------
    async def read_meta(self, key: str) -> Any:
        return await self._run(plans.read_meta(self.backend, key))

    async def write_meta(self, key: str, value: Any) -> None:
        await self._run(plans.write_meta(self.backend, key, value))

    async def tenants(self, kind: str) -> list[str | None]:
        return await self._run(plans.tenants(self.backend, kind))

    async def put(self, kind: str, records: Sequence[Record]) -> None:
        await self._run(plans.insert(self.backend, kind, records, keep_existing=False))

    async def put_missing(self, kind: str, records: Sequence[Record]) -> None:
        await self._run(plans.insert(self.backend, kind, records, keep_existing=True))

    async def put_keeping_created(self, kind: str, records: Sequence[Record]) -> None:
        await self._run(plans.insert(self.backend, kind, records, keep_existing=False, keep_created=True))

    async def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        return await self._run(plans.append_checkpoint(self.backend, record))

    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None:
        return await self._run(plans.update(self.backend, kind, tenant, id, set, inc))

    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        return await self._run(plans.query(self.backend, kind, tenant, where, order, limit, vectors))

    async def query_values(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                           limit: int | None, fields: Sequence[str]) -> list[tuple[Any, ...]]:
        return await self._run(plans.query_values(self.backend, kind, tenant, where, order, limit, fields))

    async def query_shape(self, kind: str, tenant: str | None, shape: QueryShape, values: Mapping[str, Any],
                          limit: int | None, vectors: bool = True) -> list[Record]:
        return await self._run(plans.query_shape(self.backend, kind, tenant, shape, values, limit, vectors))

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return await self._run(plans.get(self.backend, kind, tenant, ids, vectors))

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._run(plans.count(self.backend, kind, tenant, where))

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._run(plans.delete(self.backend, kind, tenant, where))

    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        return await self._run(plans.search(self.backend, kind, tenant, vector, k, where, vectors))
