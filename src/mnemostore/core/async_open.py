"""`open_async()`: an `AsyncStore` from the same arguments as `open()`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .async_store import AsyncStore
from .collector import freeze_long_lived
from .executor import ExecutorCalls, NativeCalls
from .protocol import Backend
from .store import prepared_backend, store_config

if TYPE_CHECKING:
    from ..migrations.model import Migration


async def open_async(url: str | None = None, *, tenant: str | None = None, dimension: int | None = None,
                     metric: str | None = None, embedding_model: str | None = None, migrate: str | None = None,
                     migrations: Sequence[Migration] = (), create: bool = True, workers: int | None = None,
                     **options: Any) -> AsyncStore:
    """`open`, for asyncio code: the same arguments, an `AsyncStore` whose methods are awaited.

    The backend's native async side serves the calls it implements (`Backend.async_backend`); the
    others run in a thread pool of the store's own, of at most `workers` threads (default: the
    backend's `executor_workers`, else `ThreadPoolExecutor`'s). Opening and migrating run in a
    thread too, off the event loop."""
    config = store_config(url, tenant=tenant, dimension=dimension, metric=metric, embedding_model=embedding_model,
                          migrate=migrate, options=options)
    opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemostore-open")
    opener.submit(freeze_long_lived)
    opening = opener.submit(prepared_backend, config, migrations, create=create)
    opener.shutdown(wait=False)  # its thread ends once the backend is open
    try:
        backend = await asyncio.wrap_future(opening)
    except BaseException:
        opening.add_done_callback(_close_opened)  # cancelled while the backend opened: close it once it has
        raise
    executor = ThreadPoolExecutor(max_workers=type(backend).executor_workers if workers is None else workers,
                                  thread_name_prefix="mnemostore")
    store = AsyncStore(_calls(backend, executor), tenant=config.tenant)
    try:
        if isinstance(store._calls, NativeCalls):
            await store._calls.side.open()
        await store._settle_params(config.dimension, config.metric, config.embedding_model)
    except BaseException:
        await store.aclose()
        raise
    return store


def _calls(backend: Backend, executor: ThreadPoolExecutor) -> ExecutorCalls:
    """The backend's native async side where it has one, else its sync calls in the executor."""
    side = type(backend).async_backend
    return ExecutorCalls(backend, executor) if side is None else NativeCalls(backend, executor, side(backend))


def _close_opened(opening: Future[Backend]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
