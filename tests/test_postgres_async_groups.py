"""Group commit on the postgres async side (async_groups.py) against a real server: concurrent calls
of one shape go out as one statement, and each still gets what it gets alone: the same hits, the
same chains, its own error, nothing written if it was cancelled while queued."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server
from tests.test_postgres_async import _assert_all_back, _side

import mnemostore
from mnemostore import F, ValidationError
from mnemostore.backends.postgres import plans
from mnemostore.backends.postgres.async_side import AsyncPostgresSide
from mnemostore.testing.factories import make

__all__ = ["postgres_server"]

DIMENSION = 8


@pytest.fixture
def url(postgres_server: PostgresTestServer) -> str:
    return postgres_server.url()


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """The sizes of the groups the side sent, by plan (the real plans, counted on the way)."""
    sent: dict[str, list[int]] = {"append": [], "search": []}
    append, search = plans.append_checkpoints, plans.search_many

    def counted_append(backend: Any, records: Any) -> Any:
        sent["append"].append(len(records))
        return append(backend, records)

    def counted_search(backend: Any, kind: str, tenant: Any, queries: Any, *args: Any) -> Any:
        sent["search"].append(len(queries))
        return search(backend, kind, tenant, queries, *args)

    monkeypatch.setattr(plans, "append_checkpoints", counted_append)
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
    for parent, child in zip(history, history[1:], strict=False):
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


def _same_hits(ours: list[Any], theirs: list[Any]) -> None:
    assert [(h.record.id, h.score) for h in ours] == [(h.record.id, h.score) for h in theirs]
    assert [h.record for h in ours] == [h.record for h in theirs]


def test_grouped_searches_return_what_each_search_returns_alone(url: str, groups: dict[str, list[int]]) -> None:
    """Property: concurrent searches of one shape (k, filter, vectors) through the async side's
    groups give each caller the ids, scores and records the sync Store gives it one at a time,
    ties across the k-th place and a zero query vector (both re-run exactly) included."""
    records = _search_store(url)
    stored = np.asarray([r.embedding for r in records[:295]])
    query = st.one_of(st.integers(0, 294).map(lambda i: stored[i]),
                      st.integers(0, 10_000).map(lambda seed: _vectors(1, seed)[0]),
                      st.just(np.zeros(DIMENSION, dtype=np.float32)))

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
                cursor = await conn.execute(b"EXPLAIN " + statement, [*vectors[:3], "", *params])
                return "\n".join(str(row[0]) for row in await cursor.fetchall())

    plan = asyncio.run(scenario())
    walk = plan.split("Values Scan")[1]
    assert "Index Scan using" in walk and "_hnsw on" in walk, plan
    assert 'Order By: (embedding <=> "*VALUES*".column2)' in walk, plan
