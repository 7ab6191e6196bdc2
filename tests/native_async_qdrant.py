"""The qdrant backend's native async side on the local engine, for its tests where no Qdrant server
can be had (none installs from the package registries this project reaches).

`native-qdrant://memory/NAME` is `qdrant://memory/NAME` whose `open_async` store awaits
`QdrantAsyncSide`, the side a server store uses, with the real `AsyncQdrantClient` in front
of the store's own local engine: each engine call runs in a thread under the store's lock,
so every await suspends, as a server's would, and the engine is the one the sync side writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from mnemostore.backends.qdrant import QdrantBackend
from mnemostore.backends.qdrant.native import QdrantAsyncSide
from mnemostore.core.capabilities import Capability
from mnemostore.core.url import StoreURL

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

    from mnemostore.backends.qdrant.handles import Handle


class _ThreadedEngine:
    """The sync client's local engine with its methods awaited in a thread under the store's lock."""

    def __init__(self, handle: Handle) -> None:
        self._engine = handle.client._client  # qdrant-client's QdrantLocal behind the sync client
        self._lock = handle.lock

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._engine, name)

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(locked, *args, **kwargs)

        return call

    async def close(self, **kwargs: Any) -> None:
        """The engine is the sync side's: it closes it."""


class LocalEngineSide(QdrantAsyncSide):
    def connect(self) -> AsyncQdrantClient:
        from qdrant_client import AsyncQdrantClient

        client = AsyncQdrantClient(":memory:")  # local mode, so the client treats the engine as local
        client._client = _ThreadedEngine(self.backend.handle)  # type: ignore[assignment]
        return client


def _as_qdrant(url: StoreURL) -> StoreURL:
    return dataclasses.replace(url, scheme="qdrant")


class NativeQdrant(QdrantBackend):
    name: ClassVar[str] = "native-qdrant"
    schemes: ClassVar[tuple[str, ...]] = ("native-qdrant",)
    async_backend = LocalEngineSide

    def __init__(self, url: StoreURL, options: BaseModel) -> None:
        super().__init__(_as_qdrant(url), options)

    @classmethod
    def capabilities_for(cls, url: StoreURL) -> frozenset[Capability]:
        return super().capabilities_for(_as_qdrant(url))
