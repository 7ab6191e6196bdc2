"""Helpers for a backend whose sync and native async sides share one body of code.

The backend's operations are written once as coroutines over its driver's async client; the sync
side gives them the sync client as `Direct` (its methods as coroutines that return at once) and
finishes them with `core.calls.run_sync`, the way the sync `Store` drives the facade's coroutines.
`Finishing` lets the async side's writes run to their end when the awaiting task is cancelled;
`OperationsSide` is a native side that forwards the record calls to such shared coroutines, and
`loop_write_lock` the lock its read-modify-write updates take.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .async_protocol import AsyncBackend
from .errors import BackendError

if TYPE_CHECKING:
    from .filters import Expr
    from .protocol import Hit, OrderKey
    from .records import Record
    from .vectors import Vector

T = TypeVar("T")

_LOOP_WRITE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, asyncio.Lock]] = \
    weakref.WeakKeyDictionary()
_LOOP_WRITE_LOCKS_GUARD = threading.Lock()


def loop_write_lock(store_key: Hashable) -> asyncio.Lock:
    """The lock the native async sides of one store (`store_key`) on the running event loop write
    under, so their updates are atomic among themselves (a sync Store's take a thread lock instead)."""
    loop = asyncio.get_running_loop()
    with _LOOP_WRITE_LOCKS_GUARD:
        return _LOOP_WRITE_LOCKS.setdefault(loop, {}).setdefault(store_key, asyncio.Lock())


class Direct:
    """`target`'s methods as coroutines that never suspend: a sync client in its async client's shape."""

    __slots__ = ("target",)

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        method = getattr(self.target, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


class Finishing:
    """Writes that run to their end even when the task awaiting them is cancelled.

    For engines without transactions: a batch cut short by a cancellation would be left half
    written, so the write runs as a task of its own that the cancellation does not reach (as a
    sync call in the executor's thread finishes), and `drain` waits for those still running."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    async def run(self, write: Coroutine[Any, Any, T]) -> T:
        """`write`'s result; cancelling the caller stops the waiting, not the write."""
        task = asyncio.ensure_future(write)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await asyncio.shield(task)

    async def drain(self) -> None:
        """Wait for the writes still running (their errors went to their cancelled callers)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


class RecordOperations(Protocol):
    """A backend's record calls written once as coroutines (the sync side drives them with `run_sync`)."""

    async def put(self, kind: str, records: Sequence[Record]) -> None: ...
    async def prepare(self, kind: str, tenant: str | None) -> None: ...
    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None: ...
    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int: ...
    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]: ...
    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]: ...
    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int: ...
    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]: ...


class OperationsSide(AsyncBackend):
    """A native side awaiting `RecordOperations` over the driver's async client, for an engine without
    transactions: its writes run to their end when cancelled (`Finishing`) and `close` waits for them.

    A subclass's `open` sets `self.records`; its `close` calls `super().close()` first."""

    records: RecordOperations | None = None

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self._writes = Finishing()

    async def close(self) -> None:
        try:
            await self._writes.drain()
        finally:
            self.records = None

    @property
    def _records(self) -> RecordOperations:
        if self.records is None:
            raise BackendError(f"the async side of {self.backend.url.masked} is closed")
        return self.records

    async def put(self, kind: str, records: Sequence[Record]) -> None:
        await self._writes.run(self._records.put(kind, records))

    async def prepare(self, kind: str, tenant: str | None) -> None:
        await self._writes.run(self._records.prepare(kind, tenant))

    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None:
        return await self._writes.run(self._records.update(kind, tenant, id, set, inc))

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._writes.run(self._records.delete(kind, tenant, where))

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return await self._records.get(kind, tenant, ids, vectors)

    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        return await self._records.query(kind, tenant, where, order, limit, vectors)

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return await self._records.count(kind, tenant, where)

    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        return await self._records.search(kind, tenant, vector, k, where, vectors)
