"""Clauses through the async facade: an `AsyncStore` on an event loop in a thread of its own, driven
from a clause's sync code by `Store.driving`, so one clause text checks both facades.

A backend's async side (the executor every backend gets, or a native one it adds) is thereby held to
the same clauses as its sync side, with no code from its author.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from ..core.async_open import open_async
from ..core.calls import run_sync
from ..core.records import KINDS
from ..core.store import Store
from .specimen import SPECIMEN

T = TypeVar("T")

ASYNC_SINCE = pytest.mark.mnemostore_since("1.5")
FACADES = ("sync", pytest.param("async", marks=ASYNC_SINCE))
"""The values of a clause's `facade`: "sync" drives `Store`, "async" an `AsyncStore` (suite 1.5)."""
ASYNC_KINDS = ("heuristic", "checkpoint")
"""The kinds a per-kind clause runs for through the async facade: the facade's code is one for every
kind, and these two have the special paths (counters and vectors; states, payloads and lineage).
Every kind runs through the sync facade: the async runs then add about half the suite's time."""

SYNC_ONLY_AREAS = frozenset({"processes", "crashes", "migrations", "kind_evolution"})
"""Clause modules that stay on the sync facade: their subject is other processes, or the migration
runner, which has no async form; the async facade opens and migrates through the same code."""


def _kinds(facade: str, specimen: bool) -> list[Any]:
    """A per-kind clause's kinds through `facade` (`pytest.param`s with ids), and the suite's own if `specimen`."""
    kinds = [pytest.param(kind, id=kind) for kind in (KINDS if facade == "sync" else ASYNC_KINDS)]
    if specimen:  # an application's kind, through each facade
        kinds.append(pytest.param(SPECIMEN, marks=ASYNC_SINCE, id="specimen"))
    return kinds


def parametrize(metafunc: pytest.Metafunc) -> None:
    """A clause's `facade` (if it opens a store, outside `SYNC_ONLY_AREAS`) and, for `each_kind`,
    its `kind`: every kind through `Store`, `ASYNC_KINDS` through `AsyncStore`."""
    marker = metafunc.definition.get_closest_marker
    specimen = marker("mnemostore_each_kind_and_specimen") is not None
    each_kind = specimen or marker("mnemostore_each_kind") is not None
    both = "facade" in metafunc.fixturenames and (
        str(metafunc.function.__module__).rpartition(".")[2] not in SYNC_ONLY_AREAS)
    if each_kind and both:
        metafunc.parametrize(("facade", "kind"), [
            pytest.param(facade, *kind.values, marks=[*kind.marks, *([ASYNC_SINCE] if facade == "async" else [])],
                         id=f"{facade}-{kind.id}")
            for facade in ("sync", "async") for kind in _kinds(facade, specimen)], indirect=["facade"])
    elif each_kind:
        metafunc.parametrize("kind", _kinds("sync", specimen))
    elif both:
        metafunc.parametrize("facade", FACADES, indirect=True)


class LoopThread:
    """An event loop running in a daemon thread; `run` finishes a coroutine on it from any other thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mnemostore-suite-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], /) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def open(self, url: str, **options: Any) -> Store:
        """`open_async(url, **options)` on this loop, as a sync `Store` whose every call runs there."""
        return Store.driving(self.run(open_async(url, **options)), self.run)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


def concurrently(store: Store, times: int, call: Callable[[Any, int], Any]) -> list[Any]:
    """`call(facade, i)` for i in range(times), all at once on one store instance: as that many tasks
    on its AsyncStore under the async facade (`call` returns a coroutine there), from a pool of threads
    on the Store under the sync one. The results, in the order of i."""
    if store._run is run_sync:
        with ThreadPoolExecutor(max_workers=16) as pool:
            return list(pool.map(lambda i: call(store, i), range(times)))
    twin = store._async

    async def together() -> list[Any]:
        return list(await asyncio.gather(*(call(twin, i) for i in range(times))))

    return store._run(together())
