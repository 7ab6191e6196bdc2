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
