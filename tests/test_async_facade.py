"""The async facade beyond the conformance clauses (which run through it too): its lifecycle,
`async for`, cancellation mid-batch, the sync Store inside a running event loop, and a backend's
native async side."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.chroma_server import chroma_server
from tests.native_async_memory import BrokenNativeMemory, NativeMemory
from tests.native_async_qdrant import NativeQdrant

import mnemostore
from mnemostore import AsyncStore, StoreClosed, ValidationError, registry
from mnemostore.core.executor import NativeCalls
from mnemostore.testing import ConformanceSuite, validate
from mnemostore.testing.factories import batch

__all__ = ["chroma_server"]

METADATA_CLAUSE = "test_nested_metadata_round_trips_with_exact_types"

EMBEDDED = ["memory://", "sqlite:///{dir}/store.db", "file://{dir}/store"]


@pytest.fixture(params=EMBEDDED, ids=lambda url: url.partition(":")[0])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(request.param).format(dir=tmp_path)


def test_open_async_gives_a_store_closed_by_async_with(url: str) -> None:
    asyncio.run(open_use_and_close(url))


async def open_use_and_close(url: str) -> None:
    async with await mnemostore.open_async(url, workers=2) as store:
        assert isinstance(store, AsyncStore) and not store.closed
        added = await store.outcomes.record("deploy", True, agent="ops")
        assert await store.outcomes.get(added.id) == added
        with pytest.raises(ValidationError, match="task_type"):
            await store.outcomes.add(success=True)
    assert store.closed
    with pytest.raises(StoreClosed):
        await store.outcomes.count()
    await store.aclose()  # idempotent


def test_saves_interleaved_over_runs_and_branches_each_link_to_their_own_latest(url: str) -> None:
    """Property: default-parent saves awaited one after another, in any order over runs and branches
    (the facade keeps each run's bound `latest` filter), each link to the save before them on their
    own run and branch, and a name equal to a run's but not a `str` finds that run too."""

    class Name(str):
        pass

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["main", "x"]), st.booleans()),
                    min_size=1, max_size=30))
    def check(saves: list[tuple[str, str, bool]]) -> None:
        prefix = uuid.uuid4().hex[:8]

        async def scenario() -> None:
            async with await mnemostore.open_async(url, workers=2) as store:
                before: dict[tuple[str, str], str] = {}
                for run, branch, look_alike in saves:
                    run_id = f"{prefix}-{run}"
                    saved = await store.checkpoints.save(Name(run_id) if look_alike else run_id, {}, branch=branch)
                    parent = before.get((run, branch))
                    assert saved.parent_ids == ([] if parent is None else [parent])
                    before[(run, branch)] = saved.id

        asyncio.run(scenario())

    check()


def test_async_for_walks_every_page_in_order_and_a_break_stops_it(url: str) -> None:
    asyncio.run(walk_pages(url))


async def walk_pages(url: str) -> None:
    async with await mnemostore.open_async(url) as store:
        records = batch("heuristic", 11)
        await store.heuristics.put(records)
        walked = [r.id async for r in store.heuristics.iterate(order_by="id", batch_size=3)]
        assert walked == sorted(r.id for r in records)
        async for record in store.heuristics.iterate(order_by="id", batch_size=3):
            assert record.id == walked[0]
            break
        assert await store.heuristics.count() == 11  # the abandoned iteration left the store usable


def test_a_batch_put_cancelled_midway_is_whole_or_absent(url: str) -> None:
    """The task stops waiting; the batch is written whole by its thread, or not at all, and the
    store (its connection back in its pool) serves the next call."""
    outcomes = asyncio.run(cancel_puts(url, [0.0, 0.002, 0.01, 0.03, 0.1, 0.3]))
    assert set(outcomes) <= {"absent", "whole"}


async def cancel_puts(url: str, delays: list[float]) -> list[str]:
    """For each delay: start a 3,000-record put, cancel it after the delay, then say what it left."""
    outcomes = []
    async with await mnemostore.open_async(url, workers=1) as store:  # one thread: calls queue behind the put
        for delay in delays:
            records = batch("heuristic", 3000)
            await put_cancelled_after(store, records, delay)
            count = await store.heuristics.count()  # runs once the put's thread is done with it
            assert count in (0, len(records)), f"a cancelled batch left {count} of {len(records)} records"
            outcomes.append("whole" if count else "absent")
            await store.heuristics.delete(where={})
    return outcomes


async def put_cancelled_after(store: AsyncStore, records: list[Any], delay: float) -> None:
    """Put `records` in a task and cancel it after `delay` seconds (if it has not finished by then)."""
    task = asyncio.create_task(store.heuristics.put(records))
    await asyncio.sleep(delay)
    if task.cancel():
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        await task  # it had finished


def test_the_sync_store_works_inside_a_running_event_loop(url: str) -> None:
    """`Store` drives the shared coroutines itself: being called from asyncio code does not matter."""

    async def inside() -> None:
        with mnemostore.open(url) as store:
            saved = store.checkpoints.save("run", {"step": 1})
            assert store.checkpoints.latest("run") == saved
            assert [c.id for c in store.checkpoints.iterate()] == [saved.id]

    asyncio.run(inside())


@pytest.fixture
def native() -> Iterator[None]:
    """The test backends with a native async side, registered for the test."""
    for cls in (NativeMemory, BrokenNativeMemory):
        registry.register(cls, replace=True)
    yield
    for cls in (NativeMemory, BrokenNativeMemory):
        registry.unregister(cls.name)


def test_a_native_async_side_serves_its_calls_and_the_executor_the_rest(native: None) -> None:
    async def use() -> None:
        async with await mnemostore.open_async("native-memory://") as store:
            calls = store._calls
            assert isinstance(calls, NativeCalls) and "tenants" not in calls.side.native_calls()
            await store.heuristics.put(batch("heuristic", 3))
            assert await store.heuristics.count() == 3
            assert await store._backend_call("tenants", "heuristic") == [None]  # in the executor
        assert not calls.side.opened  # closed with the store

    asyncio.run(use())


def test_the_suite_holds_a_native_async_side_to_its_sync_sides_results(native: None) -> None:
    """Through the AsyncStore the suite reaches the native side: the clause fails there only."""
    report = validate("broken-native-memory://", keyword=METADATA_CLAUSE)
    failed = {r.nodeid.rpartition("[")[2] for r in report.results if r.outcome == "failed"}
    passed = {r.nodeid.rpartition("[")[2] for r in report.results if r.outcome == "passed"}
    assert failed and all(n.startswith("async-") for n in failed), failed
    assert passed and all(n.startswith("sync-") for n in passed), passed


class TestNativeAsyncSide(ConformanceSuite):
    """The whole suite on a backend with a native async side: its AsyncStore runs await that side."""

    @pytest.fixture
    def store_url(self, native: None) -> str:
        return f"native-memory://{uuid.uuid4().hex}"


@pytest.fixture(params=["native-qdrant", "chroma-http"])
def native_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store whose AsyncStore awaits a native side of an engine without transactions: the qdrant
    server's side (over the local engine, tests/native_async_qdrant.py) and a Chroma server's."""
    if request.param == "chroma-http":
        yield request.getfixturevalue("chroma_server").url()
        return
    registry.register(NativeQdrant, replace=True)
    yield f"native-qdrant://memory/{uuid.uuid4().hex}"
    registry.unregister(NativeQdrant.name)


def test_a_native_batch_put_cancelled_midway_is_whole_or_absent(native_url: str) -> None:
    """Without transactions the native side lets a cancelled put run to its end, as the executor's
    thread does: once the store is closed (which waits for it), the batch is whole or absent."""
    outcomes = asyncio.run(cancel_native_puts(native_url, [0.0, 0.005, 0.02, 0.08]))
    assert set(outcomes) <= {"absent", "whole"}


async def cancel_native_puts(url: str, delays: list[float]) -> list[str]:
    outcomes = []
    for delay in delays:
        records = batch("heuristic", 1500)
        async with await mnemostore.open_async(url) as store:
            calls = store._calls
            assert isinstance(calls, NativeCalls) and "put" in calls.side.native_calls()
            await put_cancelled_after(store, records, delay)
        async with await mnemostore.open_async(url) as store:
            count = await store.heuristics.count()
            assert count in (0, len(records)), f"a cancelled batch left {count} of {len(records)} records"
            outcomes.append("whole" if count else "absent")
            await store.heuristics.delete(where={})
    return outcomes


def test_the_executor_has_the_backends_declared_size_unless_workers_is_given(tmp_path: Path) -> None:
    """sqlite declares one thread (its calls are CPU work under the GIL); memory declares none."""
    from concurrent.futures import ThreadPoolExecutor

    async def sizes() -> list[int]:
        found = []
        for url, workers in ((f"sqlite:///{tmp_path / 'a.db'}", None), (f"sqlite:///{tmp_path / 'b.db'}", 3),
                             ("memory://", None)):
            async with await mnemostore.open_async(url, workers=workers) as store:
                executor = store._calls.executor  # type: ignore[attr-defined]
                assert isinstance(executor, ThreadPoolExecutor)
                found.append(executor._max_workers)
        return found

    assert asyncio.run(sizes()) == [1, 3, ThreadPoolExecutor()._max_workers]
