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
from typing import TYPE_CHECKING, Any

from ...core.async_sides import OperationsSide, loop_write_lock
from .handles import server_options
from .operations import Io

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

    from .backend import QdrantBackend


class QdrantAsyncSide(OperationsSide):
    """The record calls of a Qdrant server store on qdrant-client's `AsyncQdrantClient`."""

    backend: QdrantBackend

    def __init__(self, backend: QdrantBackend) -> None:
        super().__init__(backend)
        self._client: AsyncQdrantClient | None = None

    def connect(self) -> AsyncQdrantClient:
        """The async client of the store's server (made on the store's event loop)."""
        from qdrant_client import AsyncQdrantClient

        return AsyncQdrantClient(**server_options(self.backend.location, self.backend.qdrant_options))

    async def open(self) -> None:
        self._client = self.connect()
        writing = loop_write_lock(("qdrant", self.backend.handle.location.key()))
        unlocked = contextlib.nullcontext()
        self.records = self.backend.operations_over(
            Io(client=self._client, writing=lambda: writing, reading=lambda: unlocked, blocking=self._in_thread))

    async def close(self) -> None:
        client, self._client = self._client, None
        try:
            await super().close()
        finally:
            if client is not None:
                await client.close()

    async def _in_thread(self, step: Any, *args: Any) -> Any:
        """A layout step (sync client) in a thread, under the lock the sync side's steps take."""
        def locked() -> Any:
            with self.backend.handle.lock:
                return step(*args)

        return await asyncio.to_thread(locked)
