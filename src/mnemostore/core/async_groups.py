"""Group commit for a native async side (postgres uses it): concurrent calls of one shape go out as one statement.

A lane is one shape of call (a checkpoint save, a put of one kind, a search of one kind, k and
filter). While a call of a lane is at the server, calls of the same lane that arrive wait in its
queue; when it is back, the queue goes as one group: one statement, one commit (one WAL flush)
and one round trip for all of them. A lone call runs at once, in its own task, as it would with
no groups: nothing waits for company. A group that fails is retried call by call, so each call
gets its own result, or the very error it gets alone.

A call cancelled while queued is dropped from its group: nothing of it is written. A call
cancelled after its group was sent raises CancelledError in its task; its write, like any
statement the server may already have committed, is then whole or absent.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - a lane's item: one call's arguments
R = TypeVar("R")


class Lane(Generic[I, R]):
    """Calls of one shape: `alone(item)` runs one, `together(items)` runs a group of them (its
    results in order). `keys(item)`: what two calls of one group may not share (a run, an id);
    such a call waits for the next group, behind it in order. At most `limit` calls per group, of
    one of `sizes` if given (a group's statement text depends on its size: few sizes, few texts to
    render, parse and prepare; the calls over a size wait for the next group), and `width` calls or
    groups at the server at once (1 keeps writes in the order they were made)."""

    __slots__ = ("alone", "keys", "limit", "queue", "running", "sizes", "tasks", "together", "width")

    def __init__(self, alone: Callable[[I], Awaitable[R]], together: Callable[[list[I]], Awaitable[list[R]]],
                 keys: Callable[[I], Iterable[Hashable]], limit: int, width: int = 1,
                 sizes: Sequence[int] | None = None) -> None:
        self.alone = alone
        self.together = together
        self.keys = keys
        self.limit = limit
        self.width = width
        self.sizes = sizes
        self.running = 0
        self.queue: deque[tuple[I, asyncio.Future[R]]] = deque()
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def idle(self) -> bool:
        return not self.running and not self.queue

    async def __call__(self, item: I) -> R:
        if self.running < self.width and not self.queue:
            self.running += 1
            try:
                return await self.alone(item)
            finally:
                self.running -= 1
                if self.queue:
                    self._drain()
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.queue.append((item, future))
        return await future  # cancelled while queued: the future is cancelled, and `_take` skips it

    def _drain(self) -> None:
        """Send the queue, group after group, from a task of the lane's own: no caller's
        cancellation stops a group that carries other callers' calls."""
        self.running += 1
        task = asyncio.get_running_loop().create_task(self._groups())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _groups(self) -> None:
        taken: list[tuple[I, asyncio.Future[R]]] = []
        try:
            while self.queue:
                taken = self._take()
                if len(taken) == 1:
                    await _settle(taken[0], self.alone)
                elif taken:
                    await self._group(taken)
                taken = []
        except BaseException as exc:  # the lane's task itself cancelled (the loop closing): its callers too
            for _, future in [*taken, *self.queue]:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            self.queue.clear()
            raise
        finally:
            self.running -= 1

    async def _group(self, taken: list[tuple[I, asyncio.Future[R]]]) -> None:
        try:
            results = await self.together([item for item, _ in taken])
        except Exception:  # one call's failure is its own: each runs alone and gets its own result or error
            for member in taken:
                await _settle(member, self.alone)
            return
        for (_, future), result in zip(taken, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _take(self) -> list[tuple[I, asyncio.Future[R]]]:
        """The next group: queued calls in order, up to `limit` (then down to one of `sizes`),
        skipping those cancelled and leaving in the queue (in order) those that share a key with
        one taken or left before; at most `SCANNED` x `limit` calls are looked at (saves of
        one run queued by the thousand go one per group, not one scan of them all per group)."""
        taken: list[tuple[I, asyncio.Future[R]]] = []
        seen: list[tuple[I, asyncio.Future[R]]] = []
        used: set[Hashable] = set()
        queue = self.queue
        while queue and len(taken) < self.limit and len(seen) < SCANNED * self.limit:
            member = queue.popleft()
            if member[1].done():
                continue
            seen.append(member)
            keys = list(self.keys(member[0]))
            if not used.intersection(keys):
                taken.append(member)
            used.update(keys)
        if self.sizes is not None and taken:
            del taken[self.sizes[bisect_right(self.sizes, len(taken)) - 1]:]
        chosen = {future for _, future in taken}
        left = deque(member for member in seen if member[1] not in chosen)
        left.extend(queue)
        self.queue = left
        return taken


async def _settle(member: tuple[Any, asyncio.Future[R]], alone: Callable[[Any], Awaitable[R]]) -> None:
    """`alone(item)`'s result or exception into the member's future (unless its caller left)."""
    item, future = member
    if future.done():
        return
    try:
        result = await alone(item)
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
        return
    if not future.done():
        future.set_result(result)


class Lanes:
    """A side's lanes by shape; an idle lane is forgotten when its next call finds it so."""

    def __init__(self) -> None:
        self._lanes: dict[Hashable, Lane[Any, Any]] = {}

    def lane(self, key: Hashable, make: Callable[[], Lane[I, R]]) -> Lane[I, R]:
        found = self._lanes.get(key)
        if found is None:
            if len(self._lanes) >= MAX_IDLE_LANES:
                self._lanes = {k: v for k, v in self._lanes.items() if not v.idle}
            found = self._lanes[key] = make()
        return found


SCANNED = 4
"""How many calls per place in a group `Lane._take` looks at, at most."""
MAX_IDLE_LANES = 256
"""Lanes kept before the idle ones are dropped (a program cycling through filter shapes makes one each)."""
