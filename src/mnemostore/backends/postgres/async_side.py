"""The postgres backend's native async side: its plans (plans.py) awaited on psycopg's async pool.

Under `open_async` the protocol's reads and writes run here, on the store's event loop, with the
statements and decoding of the sync backend; `drop`, `migration_lock`, `legacy_layout` and
`describe` run in the store's executor. The async pool has the sizes, timeout and health check of
the sync one (`pool_min_size`, `pool_max_size`, `pool_timeout`, `pool_check_after`), which still
serves the executor's calls and each kind's one-off preparation. With a borrowed pool (`pool=`, a
sync `ConnectionPool`) there is no async pool: the plans run on the borrowed connections, in a thread.

On its own pool, concurrent checkpoint saves, small puts of one kind and index searches of one
shape go to the server in groups (core/async_groups.py): one statement and one commit for many calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from time import monotonic
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.async_groups import Lane, Lanes
from ...core.async_protocol import AsyncBackend
from ...core.filters import Expr, expression_key
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
        self.lanes = Lanes()

    async def open(self) -> None:
        from psycopg_pool import AsyncConnectionPool

        from .own_connections import OwnAsyncConnection

        backend, options = self.backend, self.backend.options
        if not backend._own_pool:
            return
        self.pool = AsyncConnectionPool(
            backend.conninfo(), connection_class=OwnAsyncConnection, min_size=options.pool_min_size,
            max_size=options.pool_max_size, open=False,
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
        await self._insert(kind, records, keep_existing=False, keep_created=False)

    async def put_missing(self, kind: str, records: Sequence[Record]) -> None:
        await self._insert(kind, records, keep_existing=True, keep_created=False)

    async def put_keeping_created(self, kind: str, records: Sequence[Record]) -> None:
        await self._insert(kind, records, keep_existing=False, keep_created=True)

    async def _insert(self, kind: str, records: Sequence[Record], keep_existing: bool, keep_created: bool) -> None:
        """A small put of one tenant's records joins its kind's group; a larger one runs alone."""
        backend = self.backend
        tenant = records[0].tenant_id if records else None
        if (self.pool is None or not records or len(records) > GROUPED_PUT
                or any(record.tenant_id != tenant for record in records)):
            await self._run(plans.insert(backend, kind, records, keep_existing, keep_created))
            return

        def make() -> Lane[Sequence[Record], None]:
            async def alone(batch: Sequence[Record]) -> None:
                await self._run(plans.insert(backend, kind, batch, keep_existing, keep_created))

            async def together(batches: list[Sequence[Record]]) -> list[None]:
                await self._run(plans.insert(backend, kind, [r for batch in batches for r in batch], keep_existing,
                                             keep_created))
                return [None] * len(batches)

            return Lane(alone, together, _record_ids, GROUP_LIMIT)

        await self.lanes.lane(("put", kind, tenant, keep_existing, keep_created), make)(records)

    async def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        backend = self.backend
        if self.pool is None or not plans.groupable_append(record):
            return await self._run(plans.append_checkpoint(backend, record))

        def make() -> Lane[Checkpoint, Checkpoint]:
            async def alone(one: Checkpoint) -> Checkpoint:
                return await self._run(plans.append_checkpoint(backend, one))

            async def together(records: list[Checkpoint]) -> list[Checkpoint]:
                return await self._run(plans.append_checkpoints(backend, records))

            return Lane(alone, together, _run_and_id, GROUP_LIMIT, sizes=GROUP_SIZES)

        return await self.lanes.lane(("append", record.tenant_id), make)(record)

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

    async def query_shapes_documents(self, tenant: str | None,
                                     reads: Sequence[tuple[str, QueryShape, Mapping[str, Any], int | None]],
                                     ) -> list[list[dict[str, Any]]] | None:
        return await self._run(plans.query_shapes_documents(self.backend, tenant, reads))

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return await self._run(plans.get(self.backend, kind, tenant, ids, vectors))

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._run(plans.count(self.backend, kind, tenant, where))

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._run(plans.delete(self.backend, kind, tenant, where))

    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        backend = self.backend
        if self.pool is None or not plans.searches_grouped(backend, k):
            return await self._run(plans.search(backend, kind, tenant, vector, k, where, vectors))

        def make() -> Lane[Vector, list[Hit]]:
            async def alone(query: Vector) -> list[Hit]:
                return await self._run(plans.search(backend, kind, tenant, query, k, where, vectors))

            async def together(queries: list[Vector]) -> list[list[Hit]]:
                return await self._run(plans.search_many(backend, kind, tenant, queries, k, where, vectors))

            return Lane(alone, together, _no_keys, GROUP_LIMIT, width=SEARCH_WIDTH, sizes=GROUP_SIZES)

        key = ("search", kind, tenant, k, None if where is None else expression_key(where), vectors)
        return await self.lanes.lane(key, make)(vector)


GROUP_LIMIT = 64
"""Calls per group at most (a group's statement has a row of parameters per call, or per record)."""
GROUP_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""The sizes of save and search groups, whose statement texts depend on their size: 12 texts each
to render, parse and prepare, instead of 64 (psycopg prepares a text after its 5th execution)."""
SEARCH_WIDTH = 2
"""Searches (or groups of them) of one shape at the server at once: reads need no order, and the
walks of one group run on one server process, so a second keeps another core busy."""
GROUPED_PUT = 8
"""Puts of at most this many records join their kind's group; larger ones run alone."""


def _record_ids(batch: Sequence[Record]) -> list[str]:
    """A put's ids: two puts of one id go in separate groups, in order."""
    return [record.id for record in batch]


def _run_and_id(record: Checkpoint) -> tuple[tuple[str, str, str], str]:
    """A save's run and branch, and its id: two saves of one run go in separate groups, in order
    (each links to the one committed before it)."""
    return ("run", record.run_id, record.branch_id), record.id


def _no_keys(query: Vector) -> tuple[()]:
    return ()
