"""A backend with a native async side (`Backend.async_backend`): the reference backend's calls
awaited on the event loop, each yielding to other tasks first, instead of run in the executor.
`BrokenNativeMemory`'s async side loses metadata that its sync side keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.async_protocol import AsyncBackend
from mnemostore.core.filters import Expr
from mnemostore.core.protocol import Hit, OrderKey
from mnemostore.core.records import Checkpoint, Record
from mnemostore.core.vectors import Vector


class NativeMemorySide(AsyncBackend):
    backend: MemoryBackend

    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__(backend)
        self.opened = False

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.opened = False

    async def _turn(self) -> MemoryBackend:
        """Let other tasks run, as a driver's await would; the sync backend to answer from."""
        assert self.opened, "core awaited a call before opening the async side, or after closing it"
        await asyncio.sleep(0)
        return self.backend

    async def read_meta(self, key: str) -> Any:
        return (await self._turn()).read_meta(key)

    async def write_meta(self, key: str, value: Any) -> None:
        (await self._turn()).write_meta(key, value)

    async def put(self, kind: str, records: Sequence[Record]) -> None:
        (await self._turn()).put(kind, records)

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return (await self._turn()).get(kind, tenant, ids, vectors)

    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        return (await self._turn()).query(kind, tenant, where, order, limit, vectors)

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return (await self._turn()).count(kind, tenant, where)

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return (await self._turn()).delete(kind, tenant, where)

    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None:
        return (await self._turn()).update(kind, tenant, id, set, inc)

    async def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        return (await self._turn()).append_checkpoint(record, latest, order)

    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        return (await self._turn()).search(kind, tenant, vector, k, where, vectors)


class NativeMemory(MemoryBackend):
    name: ClassVar[str] = "native-memory"
    schemes: ClassVar[tuple[str, ...]] = ("native-memory",)
    async_backend = NativeMemorySide


class MetadataLosingSide(NativeMemorySide):
    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        found = await super().get(kind, tenant, ids, vectors)
        return [record.model_copy(update={"metadata": {}}) for record in found]


class BrokenNativeMemory(MemoryBackend):
    name: ClassVar[str] = "broken-native-memory"
    schemes: ClassVar[tuple[str, ...]] = ("broken-native-memory",)
    async_backend = MetadataLosingSide
