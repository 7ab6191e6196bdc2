"""Group commit on the postgres async side (core/async_groups.py) against a real server: concurrent calls
of one shape go out as one statement, and each still gets what it gets alone: the same hits, the
same chains, its own error, nothing written if it was cancelled while queued."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server
from tests.test_postgres_async import _assert_all_back, _side

import mnemostore
from mnemostore import F, ValidationError
from mnemostore.backends.postgres import plans
from mnemostore.backends.postgres.async_side import AsyncPostgresSide
from mnemostore.backends.postgres.index_walks import GROUP
from mnemostore.backends.postgres.statements import Statements
from mnemostore.testing.factories import make

__all__ = ["postgres_server"]

DIMENSION = 8


@pytest.fixture
def url(postgres_server: PostgresTestServer) -> str:
    return postgres_server.url()


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """The sizes of the groups the side sent, by plan (the real plans, counted on the way)."""
    sent: dict[str, list[int]] = {"append": [], "search": [], "insert": []}
    append, search, insert = plans.append_checkpoints, plans.search_many, plans.insert

    def counted_append(backend: Any, records: Any) -> Any:
        sent["append"].append(len(records))
        return append(backend, records)

    def counted_search(backend: Any, kind: str, tenant: Any, queries: Any, *args: Any) -> Any:
        sent["search"].append(len(queries))
        return search(backend, kind, tenant, queries, *args)

    def counted_insert(backend: Any, kind: str, records: Any, *args: Any, **kwargs: Any) -> Any:
        sent["insert"].append(len(records))
        return insert(backend, kind, records, *args, **kwargs)

    monkeypatch.setattr(plans, "append_checkpoints", counted_append)
    monkeypatch.setattr(plans, "insert", counted_insert)
    monkeypatch.setattr(plans, "search_many", counted_search)
    yield sent


def _vectors(n: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def _chain_of(history: list[Any]) -> None:
    """`history` (oldest first) is one chain: sequences 0..n-1, each the child of the one before."""
    assert [c.sequence for c in history] == list(range(len(history)))
    assert history[0].parent_ids == []
    for parent, child in itertools.pairwise(history):
        assert child.parent_ids == [parent.id]


def test_concurrent_saves_on_many_runs_go_in_groups_and_form_the_chains_they_form_one_at_a_time(
        url: str, groups: dict[str, list[int]]) -> None:
    """50 tasks x 6 default-parent saves, each task on its run: saves went in groups of several, each
    save returned what is stored, and each run is one chain in its task's order."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            async def task(t: int) -> list[Any]:
                return [await store.checkpoints.save(f"run-{t}", {"t": t, "step": step}) for step in range(6)]

            saved = await asyncio.gather(*(task(t) for t in range(50)))
            for t, returned in enumerate(saved):
                history = await store.checkpoints.history(f"run-{t}")
                assert history == returned
                assert [c.state["step"] for c in history] == list(range(6))
                _chain_of(history)
            await _assert_all_back(_side(store))

    asyncio.run(scenario())
    assert groups["append"] and max(groups["append"]) > 1, groups


def test_concurrent_saves_in_any_mix_of_runs_form_the_chains_saves_one_at_a_time_form(url: str) -> None:
    """Property: concurrent default-parent saves over any mix of runs and branches (the order they
    are made drawn by hypothesis) leave each run and branch one chain of exactly its saves, each save
    returning the checkpoint stored, as when they are made one at a time."""
    examples = iter(range(10_000))

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["main", "b"])), min_size=2, max_size=80))
    def check(saves: list[tuple[int, str]]) -> None:
        example = next(examples)

        async def scenario() -> None:
            async with await mnemostore.open_async(url) as store:
                returned = await asyncio.gather(*(
                    store.checkpoints.save(f"x{example}-{run}", {"n": n}, branch=branch)
                    for n, (run, branch) in enumerate(saves)))
                for run, branch in set(saves):
                    history = await store.checkpoints.history(f"x{example}-{run}", branch)
                    mine = [c for c in returned if c.run_id == f"x{example}-{run}" and c.branch_id == branch]
                    assert sorted(history, key=lambda c: c.id) == sorted(mine, key=lambda c: c.id)
                    _chain_of(history)

        asyncio.run(scenario())

    check()


@pytest.mark.parametrize("runs", [1, 4])
def test_200_concurrent_default_parent_saves_on_few_runs_form_one_chain_each(
        url: str, runs: int, groups: dict[str, list[int]]) -> None:
    """The `checkpoint.chain` clause under groups: 200 concurrent saves over `runs` runs; two saves
    of one run never share a group, so each run is one chain of all its saves."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            saved = await asyncio.gather(*(store.checkpoints.save(f"run-{i % runs}", {"i": i}) for i in range(200)))
            for r in range(runs):
                history = await store.checkpoints.history(f"run-{r}")
                assert sorted(c.id for c in history) == sorted(c.id for c in saved if c.run_id == f"run-{r}")
                _chain_of(history)

    asyncio.run(scenario())
    if runs > 1:
        assert groups["append"] and max(groups["append"]) <= runs and max(groups["append"]) > 1, groups
    else:
        assert not groups["append"], groups


def _search_store(url: str) -> list[Any]:
    """300 heuristics of 3 agents: unit vectors, 10 pairs with the same vector (ties), 5 without one."""
    vectors = _vectors(300, seed=11)
    vectors[200:210] = vectors[100:110]
    records = [make("heuristic", i, agent=f"agent-{i % 3}", embedding=None if i >= 295 else vectors[i])
               for i in range(300)]
    with mnemostore.open(url, dimension=DIMENSION) as store:
        store.heuristics.put(records)
    return records


def _stored_vectors(url: str) -> np.ndarray:
    """`_search_store`'s vectors (those of the records that have one), stored."""
    return np.asarray([r.embedding for r in _search_store(url)[:295]])


def _queries(stored: np.ndarray) -> st.SearchStrategy[np.ndarray]:
    """Query vectors: a stored one (its twin, if it has one, ties it), a random one, the zero vector."""
    return st.one_of(st.integers(0, 294).map(lambda i: stored[i]),
                     st.integers(0, 10_000).map(lambda seed: _vectors(1, seed)[0]),
                     st.just(np.zeros(DIMENSION, dtype=np.float32)))


def _same_hits(ours: list[Any], theirs: list[Any]) -> None:
    assert [(h.record.id, h.score) for h in ours] == [(h.record.id, h.score) for h in theirs]
    assert [h.record for h in ours] == [h.record for h in theirs]


def test_grouped_searches_return_what_each_search_returns_alone(url: str, groups: dict[str, list[int]]) -> None:
    """Property: concurrent searches of one shape (k, filter, vectors) through the async side's
    groups give each caller the ids, scores and records the sync Store gives it one at a time,
    ties across the k-th place and a zero query vector (both re-run exactly) included."""
    stored = _stored_vectors(url)
    query = _queries(stored)

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(queries=st.lists(query, min_size=2, max_size=40), k=st.integers(1, 12),
           agent=st.sampled_from([None, "agent-1"]), vectors=st.booleans())
    def check(queries: list[np.ndarray], k: int, agent: str | None, vectors: bool) -> None:
        where = None if agent is None else F.agent == agent
        with mnemostore.open(url) as sync_store:
            alone = [sync_store.search("heuristic", q, k=k, where=where, vectors=vectors) for q in queries]

        async def together() -> list[list[Any]]:
            async with await mnemostore.open_async(url) as store:
                return await asyncio.gather(*(store.search("heuristic", q, k=k, where=where, vectors=vectors)
                                              for q in queries))

        for ours, theirs in zip(asyncio.run(together()), alone, strict=True):
            _same_hits(ours, theirs)

    check()
    assert groups["search"] and max(groups["search"]) > 1, groups


def test_each_query_of_a_group_walks_the_hnsw_index(url: str) -> None:
    """The group's statement (EXPLAIN, 3,000 rows analysed): the HNSW index is walked inside the
    LATERAL, ordered by the distance to each query of the VALUES list, as `search` walks it alone."""
    vectors = _vectors(3000, seed=3)
    with mnemostore.open(url, dimension=DIMENSION) as sync_store:
        sync_store.heuristics.put([make("heuristic", i, embedding=vectors[i]) for i in range(3000)])

    async def scenario() -> str:
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            backend, statements = side.backend, side.backend.statements
            layout = backend._layout("heuristic")
            condition, params = statements.condition(layout, None)
            statement = statements.nearest_many(layout, backend.params.metric, False, condition, 11, 3)
            assert side.pool is not None
            async with side.pool.connection() as conn:
                await conn.execute(b"ANALYZE " + statements.table(layout).as_bytes(None))
                cursor = psycopg.AsyncRawCursor(conn)  # the statement's placeholders are $1, $2, ...
                await cursor.execute(b"EXPLAIN " + statement, [*vectors[:3], "", *params])
                return "\n".join(str(row[0]) for row in await cursor.fetchall())

    plan = asyncio.run(scenario())
    walk = plan.split("Values Scan")[1]
    assert "Index Scan using" in walk and "_hnsw on" in walk, plan
    assert 'Order By: (embedding <=> "*VALUES*".column2)' in walk, plan


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The group search statements rendered, in order: ("scan", size) for one scan
    (`Statements.scanned_many`), ("walks", size) for walks (`Statements.nearest_many`)."""
    seen: list[tuple[str, int]] = []

    def counting(name: str, render: Callable[..., bytes]) -> Callable[..., bytes]:
        def counted(self: Statements, *args: Any) -> bytes:
            seen.append((name, args[-1]))
            return render(self, *args)

        return counted

    for name, method in (("scan", "scanned_many"), ("walks", "nearest_many")):
        monkeypatch.setattr(Statements, method, counting(name, getattr(Statements, method)))
    return seen


def test_groups_the_planner_scans_for_go_as_one_scan_and_get_what_each_search_gets_alone(
        url: str, rendered: list[tuple[str, int]]) -> None:
    """Property: on a table the planner scans for a search alone (300 rows), a group of `GROUP` or more
    searches of a shape it has EXPLAINed goes as one scan, and each query gets the ids, scores and
    records its search alone gets: ties across the k-th place, a zero query vector, records without
    an embedding, a filter, with and without vectors; the first group of the shape walks, EXPLAINed."""
    stored = _stored_vectors(url)
    query = _queries(stored)

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    @given(queries=st.lists(query, min_size=GROUP, max_size=40), k=st.integers(1, 12),
           agent=st.sampled_from([None, "agent-1"]), vectors=st.booleans())
    @example(queries=list(stored[100:110]), k=1, agent=None, vectors=False)  # each query's twin ties its first place
    def check(queries: list[np.ndarray], k: int, agent: str | None, vectors: bool) -> None:
        where = None if agent is None else F.agent == agent
        with mnemostore.open(url) as sync_store:
            alone = [sync_store.search("heuristic", q, k=k, where=where, vectors=vectors) for q in queries]

        async def grouped() -> list[list[list[Any]]]:
            async with await mnemostore.open_async(url) as store:
                side = _side(store)
                return [await side._run(plans.search_many(side.backend, "heuristic", None, queries, k, where,
                                                          vectors)) for _ in range(2)]

        rendered.clear()
        first, second = asyncio.run(grouped())
        assert rendered == [("walks", len(queries)), ("scan", len(queries))]  # the first learnt that the planner scans
        for walked, one_scan, theirs in zip(first, second, alone, strict=True):
            _same_hits(walked, theirs)
            _same_hits(one_scan, theirs)

    check()


def test_a_group_walks_the_index_again_once_the_planner_walks_it_for_a_search_alone(
        url: str, rendered: list[tuple[str, int]]) -> None:
    """A table the planner scanned grows until it walks the HNSW index (3,000 rows analysed): the next
    group, rendered as one scan, sees in its round trip's EXPLAIN that a search alone now walks, and
    runs as walks; each query gets what its search alone gets, and later groups walk without a scan."""
    from mnemostore.backends.postgres import PostgresBackend

    vectors = _vectors(3000, seed=3)
    queries = list(vectors[:GROUP])
    with mnemostore.open(url, dimension=DIMENSION) as store:
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        store.heuristics.put([make("heuristic", i, embedding=vectors[i]) for i in range(300)])
        backend._run(plans.search_many(backend, "heuristic", None, queries, 10, None, False))
        backend._run(plans.search_many(backend, "heuristic", None, queries, 10, None, False))
        assert rendered == [("walks", GROUP), ("scan", GROUP)]
        store.heuristics.put([make("heuristic", i, embedding=vectors[i]) for i in range(300, 3000)])
        layout = backend._layout("heuristic")
        with backend._connection() as conn:
            conn.execute(b"ANALYZE " + backend.statements.table(layout).as_bytes(None))
        assert "Order By:" in backend.explain_search("heuristic", None, queries[0], 10, None)
        for expected in ([("scan", GROUP), ("walks", GROUP)], [("walks", GROUP)]):
            rendered.clear()
            grouped = backend._run(plans.search_many(backend, "heuristic", None, queries, 10, None, False))
            assert rendered == expected  # the first sees the planner walk, and walks; the next walks at once
            for query, hits in zip(queries, grouped, strict=True):
                _same_hits(hits, store.search("heuristic", query, k=10, vectors=False))


def test_a_failing_save_in_a_group_gets_its_own_error_and_the_others_are_saved(
        url: str, groups: dict[str, list[int]]) -> None:
    """One save of a group would take its run's sequence past 2**63 - 1: the group's statement
    fails, its saves are retried one by one, that save raises the ValidationError it raises alone
    and every other is saved, linked as alone."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            await store.checkpoints.put([make("checkpoint", 0, run_id="full", sequence=2**63 - 1, parent_ids=[])])
            with pytest.raises(ValidationError) as alone:
                await store.checkpoints.save("full", {"alone": True})
            groups["append"].clear()
            saves = [store.checkpoints.save(f"run-{i}", {"i": i}) for i in range(20)]
            saves.insert(10, store.checkpoints.save("full", {"grouped": True}))
            results = await asyncio.gather(*saves, return_exceptions=True)
            failed = results.pop(10)
            assert isinstance(failed, ValidationError) and str(failed) == str(alone.value), failed
            assert all(not isinstance(r, BaseException) for r in results), results
            for i, saved in enumerate(results):
                assert await store.checkpoints.history(f"run-{i}") == [saved]
            assert [c.sequence for c in await store.checkpoints.history("full")] == [2**63 - 1]
            await _assert_all_back(_side(store))

    asyncio.run(scenario())
    assert any(size > 1 for size in groups["append"]), groups


async def _hold(conn: psycopg.AsyncConnection[Any], side: AsyncPostgresSide, run: str) -> int:
    """Take, on `conn`, the advisory lock default-parent saves to `run` wait on; returns its key."""
    key = side.backend.names.append_lock_key("", run, "main")
    await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    return key


async def _until_waiting(conn: psycopg.AsyncConnection[Any], n: int = 1) -> None:
    for _ in range(2000):
        cursor = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND datname = current_database()")
        found = await cursor.fetchone()
        if found and found[0] >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no save waited on the lock")


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_save_cancelled_while_queued_is_dropped_from_its_group_and_nothing_of_it_is_written(url: str) -> None:
    """A lone save waits on its run's lock, five saves queue behind it, one of them is cancelled:
    the other four go as one group, the cancelled one's run stays empty, every connection is back."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            await store.checkpoints.save("warm", {})
            async with await psycopg.AsyncConnection.connect(side.backend.conninfo(), autocommit=True) as blocker:
                await _hold(blocker, side, "first")
                first = asyncio.create_task(store.checkpoints.save("first", {}))
                await _until_waiting(blocker)
                queued = [asyncio.create_task(store.checkpoints.save(f"q-{i}", {"i": i})) for i in range(5)]
                await _turns()
                queued[2].cancel()
                await blocker.execute("SELECT pg_advisory_unlock_all()")
                await first
                with pytest.raises(asyncio.CancelledError):
                    await queued[2]
                for i, task in enumerate(queued):
                    if i != 2:
                        saved = await task
                        assert await store.checkpoints.history(f"q-{i}") == [saved]
            assert await store.checkpoints.count(where=F.run_id == "q-2") == 0
            await _assert_all_back(side)

    asyncio.run(scenario())


def test_a_save_cancelled_after_its_group_was_sent_is_whole_or_absent_and_the_others_are_saved(url: str) -> None:
    """A group of three saves waits on the lock of one of their runs; one member's task is
    cancelled then: it raises CancelledError, its checkpoint is whole or absent, the others are
    saved, every connection is back and the store serves the next call."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            side = _side(store)
            await store.checkpoints.save("warm", {})
            async with await psycopg.AsyncConnection.connect(side.backend.conninfo(), autocommit=True) as blocker:
                first_key = await _hold(blocker, side, "first")
                await _hold(blocker, side, "g-1")
                first = asyncio.create_task(store.checkpoints.save("first", {}))
                await _until_waiting(blocker)
                members = [asyncio.create_task(store.checkpoints.save(f"g-{i}", {"i": i})) for i in range(3)]
                await _turns()
                await blocker.execute("SELECT pg_advisory_unlock(%s)", (first_key,))
                await first
                await _until_waiting(blocker)  # the group, at g-1's lock
                members[2].cancel()
                await _turns()
                await blocker.execute("SELECT pg_advisory_unlock_all()")
                with pytest.raises(asyncio.CancelledError):
                    await members[2]
                for i in (0, 1):
                    saved = await members[i]
                    assert await store.checkpoints.history(f"g-{i}") == [saved]
            left = await store.checkpoints.history("g-2")
            assert left == [] or (len(left) == 1 and left[0].state == {"i": 2} and left[0].parent_ids == [])
            await _assert_all_back(side)
            assert (await store.checkpoints.save("g-2", {"next": True})).sequence == len(left)

    asyncio.run(scenario())


def test_concurrent_small_puts_of_one_kind_land_as_put_one_at_a_time(url: str, groups: dict[str, list[int]]) -> None:
    """60 concurrent puts (one or three records; ids repeated across puts), then 30 put_missing calls
    over stored and new ids: groups apply them in the order they were made, so the store ends as if
    they ran one at a time (a later put of an id wins; put_missing keeps what is stored, the first
    of two new ones wins)."""

    def records(i: int) -> list[Any]:
        ids = [f"h-{i % 17}"] if i % 4 else [f"h-{i % 17}", f"h-{(i + 5) % 17}", f"h-{(i + 9) % 17}"]
        return [make("heuristic", i, id=id, strategy=f"from put {i}") for id in ids]

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            expected: dict[str, str] = {}
            puts = [records(i) for i in range(60)]
            for batch_ in puts:
                expected.update((r.id, r.strategy) for r in batch_)
            await asyncio.gather(*(store.heuristics.put(batch_) for batch_ in puts))
            assert {r.id: r.strategy for r in await store.heuristics.all()} == expected
            missing = [records(i) for i in range(100, 130)]
            for batch_ in missing:
                for r in batch_:
                    expected.setdefault(r.id.replace("h-", "m-") if r.id.endswith("3") else r.id, r.strategy)
            missing = [[r.model_copy(update={"id": r.id.replace("h-", "m-")}) if r.id.endswith("3") else r
                        for r in batch_] for batch_ in missing]
            await asyncio.gather(*(store.heuristics.put(batch_, keep_existing=True) for batch_ in missing))
            assert {r.id: r.strategy for r in await store.heuristics.all()} == expected
            await _assert_all_back(_side(store))

    asyncio.run(scenario())
    assert max(groups["insert"]) > 3, groups


def test_the_sync_driver_runs_a_group_plan_too(url: str) -> None:
    """The group plans are plans like any (steps.py): the sync backend's driver runs a search group's
    raw statement and gets each query's hits as its searches alone."""
    from mnemostore.backends.postgres import PostgresBackend

    records = _search_store(url)
    queries = [np.asarray(records[i].embedding) for i in (3, 50, 120)]
    with mnemostore.open(url) as store:
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        grouped = backend._run(plans.search_many(backend, "heuristic", None, queries, 5, None, False))
        for query, hits in zip(queries, grouped, strict=True):
            _same_hits(hits, store.search("heuristic", query, k=5, vectors=False))


def test_concurrent_explicit_parent_saves_go_in_put_groups_and_form_their_chains(
        url: str, groups: dict[str, list[int]]) -> None:
    """40 tasks each save a root and four children, each naming the one before as its parent: the
    writes go in groups (one kind's puts) and every run is the chain its task made."""

    async def scenario() -> None:
        async with await mnemostore.open_async(url) as store:
            async def task(t: int) -> list[Any]:
                saved = [await store.checkpoints.save(f"p-{t}", {"step": 0}, parent=None)]
                for step in range(1, 5):
                    saved.append(await store.checkpoints.save(f"p-{t}", {"step": step}, parent=saved[-1]))
                return saved

            made = await asyncio.gather(*(task(t) for t in range(40)))
            for t, saved in enumerate(made):
                history = await store.checkpoints.history(f"p-{t}")
                assert history == saved
                _chain_of(history)

    asyncio.run(scenario())
    assert max(groups["insert"]) > 1, groups
