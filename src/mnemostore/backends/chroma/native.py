"""The native async side of a Chroma server store (`open_async("chroma+http://...")`).

The record calls of `operations.py`, awaited on chromadb's `AsyncHttpClient`: put, get, query,
count, delete, update and search. The rest (meta, tenants, the migration lock, drop, describe)
run in the store's executor on the sync client, as does registering a tenant on its first
write. Chroma has no transactions: a put, delete or update whose task is cancelled runs to its
end (`core.async_sides.Finishing`), as a sync call in the executor's thread would, and `update`
is atomic among the AsyncStores of one process and event loop (a lock of their own; a sync
Store's writes take a thread lock). Embedded Chroma has no async client: its stores keep the
executor.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any

from ...core.async_sides import OperationsSide, loop_write_lock
from ...core.errors import BackendError
from .connect import http_headers
from .operations import Io, Operations

if TYPE_CHECKING:
    from chromadb.api.models.AsyncCollection import AsyncCollection

    from .backend import ChromaBackend

_SIDES_ON_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()


class ChromaAsyncSide(OperationsSide):
    """The record calls of a Chroma server store on chromadb's `AsyncHttpClient`."""

    backend: ChromaBackend

    def __init__(self, backend: ChromaBackend) -> None:
        super().__init__(backend)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def open(self) -> None:
        import chromadb
        from chromadb.config import Settings

        backend = self.backend
        location, options = backend.location, backend.options
        settings = Settings(anonymized_telemetry=False)
        settings.chroma_server_ssl_verify = options.verify_ssl
        try:
            client = await chromadb.AsyncHttpClient(
                host=location.host or "localhost", port=location.port or 8000, ssl=location.ssl,
                headers=http_headers(backend.url, options), settings=settings, tenant=options.chroma_tenant,
                database=options.database)
        except Exception as exc:
            raise BackendError(f"cannot open Chroma at {backend.url.masked}: {type(exc).__name__}: "
                               f"{backend.url.scrub(str(exc))}") from None
        self._loop = asyncio.get_running_loop()
        _SIDES_ON_LOOP[self._loop] = _SIDES_ON_LOOP.get(self._loop, 0) + 1
        writing = loop_write_lock(("chroma", *backend.lock_key))
        self.records = Operations(backend, Io(client=client, collection=_as_is, writing=lambda: writing,
                                              blocking=asyncio.to_thread))

    async def close(self) -> None:
        loop, self._loop = self._loop, None
        try:
            await super().close()
        finally:
            if loop is not None:
                _SIDES_ON_LOOP[loop] -= 1
                if not _SIDES_ON_LOOP[loop]:
                    await _close_http_client(loop)


def _as_is(collection: AsyncCollection) -> AsyncCollection:
    return collection


async def _close_http_client(loop: asyncio.AbstractEventLoop) -> None:
    """Close the HTTP connections chromadb's async client keeps for `loop`, once no side on it is open.

    chromadb keeps one `httpx.AsyncClient` per event loop in a class-wide table keyed by the loop's
    hash and never drops it (its own cleanup closes every loop's): left there, a later loop with the
    same hash would be handed connections of a closed loop."""
    from chromadb.api.async_fastapi import AsyncFastAPI

    clients: dict[int, Any] = getattr(AsyncFastAPI, "_clients", {})
    client = clients.pop(hash(loop), None)
    if client is not None:
        await client.aclose()

