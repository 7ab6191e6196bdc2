"""The lanes of group commit (core/async_groups.py), on plain asyncio: which calls go together, in
which order, how many at once, and what a failure or a cancellation does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemostore.core.async_groups import Lane


class Server:
    """Runs a lane's calls: each call's result is its item doubled; records groups and concurrency;
    an item in `failing` fails its group and, alone, itself."""

    def __init__(self, failing: frozenset[int] = frozenset()) -> None:
        self.failing = failing
        self.sent: list[list[int]] = []  # each statement's items, in the order sent
        self.running = 0
        self.most = 0

    async def _at_server(self, items: list[int]) -> None:
        self.sent.append(items)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0.001)
        finally:
            self.running -= 1

    async def alone(self, item: int) -> int:
        await self._at_server([item])
        if item in self.failing:
            raise ValueError(f"item {item} fails")
        return 2 * item

    async def together(self, items: list[int]) -> list[int]:
        await self._at_server(items)
        if self.failing.intersection(items):
            raise ValueError("the group fails")
        return [2 * item for item in items]


def _key(item: int) -> list[int]:
    return [item % 5]


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.integers(0, 30), min_size=1, max_size=60), delays=st.lists(st.integers(0, 3), max_size=60),
       limit=st.integers(1, 8), width=st.integers(1, 3), failing=st.frozensets(st.integers(0, 30), max_size=3),
       sizes=st.sampled_from([None, (1, 2, 3, 4, 6, 8), (1, 4, 8)]))
def test_each_call_gets_its_own_result_and_groups_keep_keys_apart_limit_width_and_order(
        items: list[int], delays: list[int], limit: int, width: int, failing: frozenset[int],
        sizes: tuple[int, ...] | None) -> None:
    """Calls made over a few turns of the loop: each gets its item's result or its own error; no
    group holds two calls of one key or more than `limit`, and each has one of `sizes`; at most
    `width` statements at once; with width 1, calls of one key reach the server in the order they
    were made."""
    server = Server(failing)
    lane: Lane[int, int] = Lane(server.alone, server.together, _key, limit, width, sizes)

    async def scenario() -> list[Any]:
        calls = []
        for i, item in enumerate(items):
            calls.append(asyncio.ensure_future(lane(item)))
            for _ in range(delays[i] if i < len(delays) else 0):
                await asyncio.sleep(0)
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(scenario())
    for item, result in zip(items, results, strict=True):
        if item in failing:
            assert isinstance(result, ValueError) and str(result) == f"item {item} fails"
        else:
            assert result == 2 * item
    assert server.most <= width
    for group in server.sent:
        assert len(group) <= limit and (sizes is None or len(group) in sizes)
        assert len({item % 5 for item in group}) == len(group)
    if width == 1:
        succeeded = [group for group in server.sent if not failing.intersection(group) or len(group) == 1]
        reached = [item for group in succeeded for item in group]
        for key in range(5):
            assert [i for i in reached if i % 5 == key] == [i for i in items if i % 5 == key]
    assert lane.idle


def test_a_lone_call_goes_at_once_and_calls_that_arrive_meanwhile_go_as_one_group() -> None:
    server = Server()
    lane: Lane[int, int] = Lane(server.alone, server.together, lambda item: [item], 64)

    async def scenario() -> list[int]:
        return list(await asyncio.gather(*(lane(i) for i in range(10))))

    assert asyncio.run(scenario()) == [2 * i for i in range(10)]
    assert server.sent == [[0], list(range(1, 10))]


def test_a_call_cancelled_while_queued_is_not_sent() -> None:
    server = Server()
    lane: Lane[int, int] = Lane(server.alone, server.together, lambda item: [item], 64)

    async def scenario() -> None:
        calls = [asyncio.ensure_future(lane(i)) for i in range(5)]
        await asyncio.sleep(0)
        calls[3].cancel()
        with pytest.raises(asyncio.CancelledError):
            await calls[3]
        assert [await call for i, call in enumerate(calls) if i != 3] == [0, 2, 4, 8]

    asyncio.run(scenario())
    assert server.sent == [[0], [1, 2, 4]]


def test_a_group_goes_down_to_one_of_the_sizes_and_the_rest_follow_in_order() -> None:
    """Nine calls on five keys queue behind a lone one: each group of five distinct keys is cut to
    four (sizes 1, 4, 8), and the calls cut or left for a key go next, in the order they came."""
    server = Server()
    lane: Lane[int, int] = Lane(server.alone, server.together, _key, 8, sizes=(1, 4, 8))

    async def scenario() -> list[int]:
        return list(await asyncio.gather(*(lane(i) for i in range(10))))

    assert asyncio.run(scenario()) == [2 * i for i in range(10)]
    assert server.sent == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9]]


def test_a_condition_written_for_psycopg_gets_the_servers_placeholders_from_a_number_on() -> None:
    from mnemostore.backends.postgres.statements import numbered

    assert numbered(b"a = %s AND b LIKE '%%x' AND c = ANY(%s)", 3) == "a = $3 AND b LIKE '%x' AND c = ANY($4)"
    assert numbered(b"TRUE", 2) == "TRUE"
