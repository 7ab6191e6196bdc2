"""Helpers for a backend whose sync and native async sides share one body of code.

The backend's operations are written once as coroutines over its driver's async client; the sync
side gives them the sync client as `Direct` (its methods as coroutines that return at once) and
finishes them with `core.calls.run_sync`, the way the sync `Store` drives the facade's coroutines.
`Finishing` lets the async side's writes run to their end when the awaiting task is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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
