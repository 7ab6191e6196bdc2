"""Calls that run a sync backend off the event loop, in a bounded thread pool of the store's own.

Every backend works under `open_async` this way, built-in or plugin, without a line of async code.
The protocol holds no thread-bound state across calls (a backend checks a connection out per call),
so any of the pool's threads may run any call.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol import Backend


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

    async def pause(self) -> None:
        await asyncio.sleep(0)

    async def close(self) -> None:
        try:
            await self("close")
        finally:
            self.executor.shutdown(wait=False)
