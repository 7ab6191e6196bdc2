"""How the LangGraph classes reach the mnemostore store they were given, sync and async.

Their logic is written once, as coroutines over an `AsyncStore` (as the facade's is). Given a sync
`Store`, the sync methods drive them with the store's own direct calls (no event loop), and the
async methods await them on an `AsyncStore` over the same open backend whose calls run in a bounded
thread pool. Given an `AsyncStore` (`mnemostore.open_async`), the async methods await them on it
(native async drivers included), and the sync methods run them on its event loop from another
thread, as LangGraph's own async savers do.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from ...core.async_store import AsyncStore
from ...core.calls import Runner
from ...core.errors import MnemostoreError, StoreClosed, ValidationError
from ...core.executor import ExecutorCalls
from ...core.store import Store

T = TypeVar("T")

_executors: dict[int | None, ThreadPoolExecutor] = {}
_executors_lock = threading.Lock()


def _shared_executor(size: int | None) -> ThreadPoolExecutor:
    """The pool the async methods of classes built on a sync `Store` make its calls in: one per process
    for each executor size a backend declares (`Backend.executor_workers`)."""
    with _executors_lock:
        found = _executors.get(size)
        if found is None:
            found = _executors[size] = ThreadPoolExecutor(max_workers=size, thread_name_prefix="mnemostore-langgraph")
        return found


class Bridge:
    """The `AsyncStore` and runner sync methods use (`driven`, `run`), and the one async methods await."""

    def __init__(self, store: Store | AsyncStore, owner: str) -> None:
        self._twins: WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncStore] = WeakKeyDictionary()
        self._store: Store | None = None
        if isinstance(store, AsyncStore):
            self.driven = self._awaited = store
            self.run: Runner = _on_loop(_running_loop(), owner)
        elif isinstance(store, Store):
            self._store = store
            self.driven = store._async
            self.run = store._run
        else:
            raise ValidationError.one("store", f"{owner} takes a mnemostore Store or AsyncStore, "
                                               f"not {type(store).__name__}")

    def awaited(self) -> AsyncStore:
        """The store the async methods await, on the running loop (for a sync `Store`: a twin per loop
        over its backend, its calls in a thread pool shared by the process; closing the Store closes the backend)."""
        if self._store is None:
            return self._awaited
        if self._store.closed:
            raise StoreClosed(f"{self._store!r} is closed")
        loop = asyncio.get_running_loop()
        twin = self._twins.get(loop)
        if twin is None:  # one per loop: the twin's lock belongs to the loop that first waits on it
            store = self._store
            pool = _shared_executor(type(store.backend).executor_workers)
            twin = self._twins[loop] = AsyncStore(ExecutorCalls(store.backend, pool), tenant=store.tenant)
        return twin


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _on_loop(loop: asyncio.AbstractEventLoop | None, owner: str) -> Runner:
    """Runs a coroutine on `loop` (the AsyncStore's) from another thread and waits for its result."""

    def run(coro: Coroutine[Any, Any, T]) -> T:
        if loop is None or not loop.is_running() or _running_loop() is loop:
            coro.close()
            raise MnemostoreError(
                f"a sync call to a {owner} over an AsyncStore must come from a thread other than the event "
                "loop the store was opened on (it would block the loop that serves it): await the async "
                f"method (graph.ainvoke, graph.aget_state, ...), or build the {owner} over mnemostore.open()"
                + ("" if loop is not None and loop.is_running() else "; and its event loop must be running"))
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    return run
