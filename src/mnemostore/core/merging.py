"""Merging branches of a run: the common ancestor of the parents, and each branch's updates since
it folded onto its state, so that nothing the branches inherited counts twice."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import MergeConflict, ValidationError
from .records import Checkpoint
from .reducers import DROPPED, Plan, difference, fold, same

Load = Callable[[list[str]], Awaitable[list[Checkpoint]]]
"""Read checkpoints by id (missing ones left out): the facade's `get_many`, awaited."""


@dataclass(frozen=True)
class Ancestry:
    """The nearest common ancestor of some checkpoints, and every checkpoint read to find it."""

    ancestor: Checkpoint
    seen: dict[str, Checkpoint]

    def path(self, tip: Checkpoint) -> list[Checkpoint]:
        """The checkpoints from the ancestor (first) to `tip` (last), through the first parent on the way."""
        children: dict[str, list[str]] = {}
        for node in self.seen.values():
            for parent in node.parent_ids:
                children.setdefault(parent, []).append(node.id)
        reaching, frontier = {self.ancestor.id}, [self.ancestor.id]
        while frontier:
            for child in children.get(frontier.pop(), ()):
                if child not in reaching:
                    reaching.add(child)
                    frontier.append(child)
        path = [tip]
        while path[-1].id != self.ancestor.id:
            step = next(p for p in path[-1].parent_ids if p in reaching)
            if len(path) > len(self.seen):
                raise ValidationError.one("parents", f"the lineage of checkpoint {tip.id!r} loops")
            path.append(self.seen[step])
        return path[::-1]


async def common_ancestor(tips: Sequence[Checkpoint], load: Load) -> Ancestry | None:
    """The nearest checkpoint every tip descends from (through all parents), or None.

    Walks down from the tips, highest sequence first (a parent's sequence is below its child's),
    marking which tips reach each checkpoint: the first one reached by all is the nearest."""
    everyone = (1 << len(tips)) - 1
    seen = {tip.id: tip for tip in tips}
    reached: dict[str, int] = {}
    for index, tip in enumerate(tips):
        reached[tip.id] = reached.get(tip.id, 0) | 1 << index
    queue = [(-tip.sequence, tip.id) for tip in seen.values()]
    heapq.heapify(queue)
    done: set[str] = set()
    while queue:
        level = queue[0][0]
        batch = []
        while queue and queue[0][0] == level:
            node_id = heapq.heappop(queue)[1]
            if node_id not in done:
                done.add(node_id)
                batch.append(seen[node_id])
        for node in sorted(batch, key=lambda c: c.id):
            if reached[node.id] == everyone:
                return Ancestry(node, seen)
        unread = list(dict.fromkeys(p for node in batch for p in node.parent_ids if p not in seen))
        if unread:
            seen.update((c.id, c) for c in await load(unread))
        for node in batch:
            for parent in node.parent_ids:
                if parent in seen and parent not in done:
                    if parent not in reached:
                        heapq.heappush(queue, (-seen[parent].sequence, parent))
                    reached[parent] = reached.get(parent, 0) | reached[node.id]
    return None


def _label(checkpoint: Checkpoint) -> str:
    return checkpoint.node_id or checkpoint.id


def branch_updates(path: list[Checkpoint], plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    """(node, update) for each step after the ancestor: the update `apply` kept, or else the
    difference from the step before (a snapshot, by each reducer's difference rule)."""
    return [(_label(node), node.update if node.update is not None
             else difference(before.state, node.state, plan, _label(node)))
            for before, node in itertools.pairwise(path)]


def merged_state(ancestry: Ancestry, tips: Sequence[Checkpoint], plan: Plan) -> dict[str, Any]:
    """The ancestor's state with each branch's updates folded on, branches in the order of `tips`.

    A strict (unchosen last-write-wins) field takes the value of the one branch that changed it;
    branches changing it to different values raise `MergeConflict`, naming them (before any fold)."""
    ancestor = ancestry.ancestor.state
    branches = [(tip, branch_updates(ancestry.path(tip), plan)) for tip in tips]
    finals: dict[str, list[tuple[Checkpoint, Any]]] = {}
    for tip, updates in branches:
        last = {f: v for _, update in updates for f, v in update.items() if plan.is_strict(f)}
        for field, value in last.items():
            unchanged = (field not in ancestor) if value is DROPPED else (
                field in ancestor and same(ancestor[field], value))
            if not unchanged:
                finals.setdefault(field, []).append((tip, value))
    conflicts = {field: [f"branch {tip.branch_id!r} (checkpoint {tip.id!r})" for tip, _ in changes]
                 for field, changes in sorted(finals.items())
                 if any(not _same_final(changes[0][1], value) for _, value in changes[1:])}
    if conflicts:
        raise MergeConflict(conflicts, ancestry.ancestor.id)
    state = ancestor
    for _, updates in branches:
        for node, update in updates:
            state = fold(state, {f: v for f, v in update.items() if not plan.is_strict(f)}, plan, node)
    return fold(state, {field: changes[0][1] for field, changes in finals.items()}, plan, "merge")


def _same_final(a: Any, b: Any) -> bool:
    return a is b if DROPPED in (a, b) else same(a, b)


def check_parents(run_id: str, parent_ids: list[str], found: list[Checkpoint]) -> list[Checkpoint]:
    """The parents in the order given, each of run `run_id`; at least one."""
    if not parent_ids:
        raise ValidationError.one("parents", "merge needs at least one checkpoint (the branches to join)")
    by_id = {c.id: c for c in found}
    for index, parent_id in enumerate(parent_ids):
        check_run(run_id, by_id[parent_id], f"parents[{index}]")
    return [by_id[i] for i in dict.fromkeys(parent_ids)]


def check_run(run_id: str, checkpoint: Checkpoint, field: str) -> None:
    """Refuse a checkpoint of another run where one of `run_id` is needed."""
    if checkpoint.run_id != run_id:
        raise ValidationError.one(field, f"checkpoint {checkpoint.id!r} belongs to run {checkpoint.run_id!r}, "
                                  f"not {run_id!r}")
