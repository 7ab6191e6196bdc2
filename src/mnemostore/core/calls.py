"""How a facade reaches its backend: the one thing the sync and async facades do differently.

The facade's validation and planning are written once, as coroutines (`AsyncStore`,
`AsyncCollection`, `AsyncCheckpoints`) that reach the backend only through a `Calls`
object. `AsyncStore` awaits them on an event loop with calls that run in a bounded executor
or on a native async driver; `Store` drives the same coroutines with `DirectCalls`, whose
awaits never suspend, so `run_sync` finishes them in one step without an event loop.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from .protocol import Backend

T = TypeVar("T")



class Runner(Protocol):
    """Drives one facade coroutine to its result from sync code (`run_sync`, or a loop's thread)."""

    def __call__(self, coro: Coroutine[Any, Any, T], /) -> T: ...


class Calls(Protocol):
    """The backend as a facade sees it: each protocol method awaited by name."""

    backend: Backend
    lock: AbstractAsyncContextManager[Any]
    """Serialises the facade's read-then-write of the store's parameters within this process."""

    async def __call__(self, method: str, *args: Any) -> Any:
        """`backend.<method>(*args)`: its result, or its error (a driver's as `BackendError`)."""

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)`, a sync helper of core's that makes several backend calls, where the
        backend's calls run (the caller's thread, or the executor): e.g. recording a kind's declaration."""

    def native(self, method: str) -> bool:
        """Whether `method` is awaited on the backend's native async side (`AsyncBackend.native_calls`), not
        called in the caller's thread or the executor."""

    async def pause(self) -> None:
        """Let other tasks run during long work on the caller's thread (validating a big batch)."""

    async def close(self) -> None:
        """Close the backend and release what these calls hold (threads, async pools)."""


class DirectCalls:
    """Calls a sync backend in the caller's thread: the sync facade's `Calls`. No await suspends."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.lock: AbstractAsyncContextManager[Any] = ThreadLock()

    async def __call__(self, method: str, *args: Any) -> Any:
        return getattr(self.backend, method)(*args)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        return function(*args)

    def native(self, method: str) -> bool:
        return False

    async def pause(self) -> None:
        return None

    async def close(self) -> None:
        self.backend.close()


class ThreadLock(AbstractAsyncContextManager[None]):
    """A thread lock (a new `threading.Lock`, or `lock`) entered with `async with`; it blocks instead
    of suspending: what code shared with an async side locks with when a sync driver runs it."""

    def __init__(self, lock: threading.Lock | threading.RLock | None = None) -> None:
        self._lock = threading.Lock() if lock is None else lock

    async def __aenter__(self) -> None:
        self._lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a facade coroutine whose calls are `DirectCalls`: it finishes in one step."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a facade coroutine suspended under the sync Store: its calls must not await a loop")


async def next_item(items: AsyncGenerator[T, None]) -> T:
    """The next item of an async generator, as a coroutine any `Runner` can drive."""
    return await items.__anext__()


def iterate_sync(items: AsyncGenerator[T, None], run: Runner) -> Iterator[T]:
    """An async generator of the facade, iterated from sync code one item at a time by `run`."""
    try:
        while True:
            try:
                item = run(next_item(items))
            except StopAsyncIteration:
                return
            yield item
    finally:
        run(items.aclose())
