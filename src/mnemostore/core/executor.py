"""Calls that run a sync backend off the event loop, in a bounded thread pool of the store's own.

Every backend works under `open_async` this way, built-in or plugin, without a line of async code.
The protocol holds no thread-bound state across calls (a backend checks a connection out per call),
so any of the pool's threads may run any call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import MnemostoreError
from .protocol import backend_error

if TYPE_CHECKING:
    from .async_protocol import AsyncBackend
    from .protocol import Backend

T = TypeVar("T")


class ExecutorCalls:
    """A sync backend's calls awaited on the event loop while a thread of `executor` makes them.

    Cancelling the await stops the waiting, not the call: a call already running finishes in its
    thread (a batch is written whole, or rolled back by the backend if it fails) and its connection
    goes back to its pool; a call that has not started yet never runs."""

    def __init__(self, backend: Backend, executor: ThreadPoolExecutor) -> None:
        self.backend = backend
        self.executor = executor
        self.lock: AbstractAsyncContextManager[Any] = asyncio.Lock()

    async def __call__(self, method: str, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, getattr(self.backend, method), *args)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    def native(self, method: str) -> bool:
        return False

    async def pause(self) -> None:
        await asyncio.sleep(0)

    async def close(self) -> None:
        try:
            await self("close")
        finally:
            self.executor.shutdown(wait=False)


class NativeCalls(ExecutorCalls):
    """Awaits a backend's native async side for the calls it implements, the executor for the rest.

    A cancelled await cancels a native call where it stands: the side's driver rolls its
    transaction back and returns the connection to its pool."""

    def __init__(self, backend: Backend, executor: ThreadPoolExecutor, side: AsyncBackend) -> None:
        super().__init__(backend, executor)
        self.side = side
        self._native = side.native_calls()

    async def __call__(self, method: str, *args: Any) -> Any:
        if method not in self._native:
            if method == "query_shape" and "query" in self._native:  # `Backend.query_shape`'s default, natively
                kind, tenant, shape, values, limit, vectors = args
                return await self("query", kind, tenant, shape.where_with(values), shape.order, limit, vectors)
            return await super().__call__(method, *args)
        try:
            return await getattr(self.side, method)(*args)
        except MnemostoreError:
            raise
        except Exception as exc:  # the driver's, as the sync calls raise it (DRIVER_CALLS)
            raise backend_error(self.backend, method, exc) from exc

    def native(self, method: str) -> bool:
        return method in self._native

    async def close(self) -> None:
        try:
            await self.side.close()
        finally:
            await super().close()
