"""The native async side of a Qdrant server store (`open_async("qdrant+http://...")`).

The record calls of `operations.py`, awaited on an `AsyncQdrantClient`: put, get, query (its
pages), count, delete, update and search. The rest (meta, tenants, the migration lock, drop,
describe) run in the store's executor on the sync client, as do the rare layout steps of a
write (creating a kind's collection). Qdrant has no transactions: a put, delete or update
whose task is cancelled runs to its end (`core.async_sides.Finishing`), as a sync call in the
executor's thread would, and `update` is atomic among the AsyncStores of one process and event
loop (their writes take one lock; a sync Store's take the client's thread lock instead).

The local engine (`qdrant://`) keeps the executor: qdrant-client's `AsyncQdrantLocal` runs the
engine on the event loop (its `async def` methods never await), so it would block the loop for
each call, and it holds the state of its own (a private `:memory:`, an exclusive lock on a path)
where the sync client already holds the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...core.async_protocol import AsyncBackend
from ...core.async_sides import Finishing
from ...core.filters import Expr
from ...core.protocol import Hit, OrderKey
from ...core.records import Record
from ...core.vectors import Vector
from .handles import async_write_lock, server_options
from .operations import Io, Operations

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

    from .backend import QdrantBackend


class QdrantAsyncSide(AsyncBackend):
    """The record calls of a Qdrant server store on qdrant-client's `AsyncQdrantClient`."""

    backend: QdrantBackend

    def __init__(self, backend: QdrantBackend) -> None:
        super().__init__(backend)
        self._client: AsyncQdrantClient | None = None
        self._operations: Operations | None = None
        self._writes = Finishing()

    def connect(self) -> AsyncQdrantClient:
        """The async client of the store's server (made on the store's event loop)."""
        from qdrant_client import AsyncQdrantClient

        return AsyncQdrantClient(**server_options(self.backend.location, self.backend.qdrant_options))

    async def open(self) -> None:
        self._client = self.connect()
        writing = async_write_lock(self.backend.handle)
        unlocked = contextlib.nullcontext()
        self._operations = self.backend.operations_over(
            Io(client=self._client, writing=lambda: writing, reading=lambda: unlocked, blocking=self._in_thread))

    async def close(self) -> None:
        client, self._client = self._client, None
        try:
            await self._writes.drain()
        finally:
            self._operations = None
            if client is not None:
                await client.close()

    async def _in_thread(self, step: Any, *args: Any) -> Any:
        """A layout step (sync client) in a thread, under the lock the sync side's steps take."""
        def locked() -> Any:
            with self.backend.handle.lock:
                return step(*args)

        return await asyncio.to_thread(locked)

    @property
    def operations(self) -> Operations:
        assert self._operations is not None, "the async side is closed"
        return self._operations

    async def put(self, kind: str, records: Sequence[Record]) -> None:
        await self._writes.run(self.operations.put(kind, records))

    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None:
        return await self._writes.run(self.operations.update(kind, tenant, id, set, inc))

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._writes.run(self.operations.delete(kind, tenant, where))

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return await self.operations.get(kind, tenant, ids, vectors)

    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        return await self.operations.query(kind, tenant, where, order, limit, vectors)

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self.operations.count(kind, tenant, where)

    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        return await self.operations.search(kind, tenant, vector, k, where, vectors)
