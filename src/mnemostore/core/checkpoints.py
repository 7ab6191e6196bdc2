"""Checkpoints of a run: lineage per run and branch, partial updates and merges folded by reducers
(`reducers`, `merging`), restore into a model. The logic is `AsyncCheckpoints`', driven to its result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar

from pydantic import BaseModel

from .async_checkpoints import LATEST, LATEST_OF_RUN, AsyncCheckpoints
from .collection import Collection, RecordsRead
from .jsonvalues import plain_text
from .records import Checkpoint

M = TypeVar("M", bound=BaseModel)

__all__ = ["LATEST", "Checkpoints"]


class Checkpoints(Collection[Checkpoint]):
    _async: AsyncCheckpoints

    def save(self, run_id: str, state: Mapping[str, Any] | BaseModel, *, parent: Any = LATEST,
             node_id: str = "", branch: str = "main", **fields: Any) -> Checkpoint:
        """Save a snapshot of `state` (a dict or a pydantic model) for `run_id`.

        `parent` is a checkpoint (its id or the `Checkpoint`), a list of them (a merge), None for a root, or by default
        the latest checkpoint of this run and branch. `sequence` is one past the parents'.
        """
        return self._run(self._async.save(run_id, state, parent=parent, node_id=node_id, branch=branch, **fields))

    def latest(self, run_id: str, branch: str | None = None) -> Checkpoint | None:
        """The checkpoint with the highest sequence (newest first on ties), or None."""
        twin = self._async
        if twin._store._callable_now(self.kind, "query_shape"):  # as `Collection.fetch`
            found: list[Checkpoint]
            if branch is None and plain_text(run_id):  # `_latest_args`' first case, its reader kept at hand
                found = self._latest_of_run({"run_id": run_id})
            else:
                _, _, shape, values, limit, vectors = twin._latest_args(run_id, branch)
                found = self._shape_read(shape, limit, vectors)(values)
            return found[0] if found else None
        return self._run(twin.latest(run_id, branch))

    @cached_property
    def _latest_of_run(self) -> RecordsRead:
        """`latest(run_id)`'s reader (`_shape_read`), kept: an agent reads its run's latest checkpoint every step."""
        return self._shape_read(LATEST_OF_RUN, 1, True)

    def history(self, run_id: str, branch: str | None = None) -> list[Checkpoint]:
        """Every checkpoint of a run (optionally one branch), oldest first."""
        return self._run(self._async.history(run_id, branch))

    def lineage(self, checkpoint: str | Checkpoint) -> list[Checkpoint]:
        """A checkpoint (its id or itself) and its ancestors through first parents, newest first."""
        return self._run(self._async.lineage(checkpoint))

    def restore(self, run_id: str, model: type[M], branch: str | None = None) -> M | None:
        """The latest state of a run as an instance of `model`, or None."""
        return self._run(self._async.restore(run_id, model, branch))

    def prune(self, run_id: str, keep: int, branch: str | None = None) -> int:
        """Delete all but the `keep` newest checkpoints of each branch of a run."""
        return self._run(self._async.prune(run_id, keep, branch))

    def apply(self, run_id: str, update: Mapping[str, Any], *, node_id: str = "", branch: str = "main",
              parent: Any = LATEST, reducers: Mapping[str, str] | None = None, default: str | None = None,
              model: type[BaseModel] | None = None, **fields: Any) -> Checkpoint:
        """Fold a node's partial `update` into the state of `parent` (by default the latest checkpoint of
        this run and branch; None: onto {}) and save the result as its child, keeping `update` with it.

        Each field goes through its reducer: `reducers` over those `model` declares, `default` (last)
        for the rest. With `model`, the new state must fit it. A failing reducer writes nothing.
        """
        return self._run(self._async.apply(run_id, update, node_id=node_id, branch=branch, parent=parent,
                                           reducers=reducers, default=default, model=model, **fields))

    def merge(self, run_id: str, parents: Sequence[str | Checkpoint], *,
              reducers: Mapping[str, str] | None = None, default: str | None = None,
              model: type[BaseModel] | None = None, node_id: str = "merge", branch: str = "main",
              **fields: Any) -> Checkpoint:
        """Join branches of a run into one checkpoint naming every parent.

        Each branch's updates since the parents' common ancestor are folded onto the ancestor's state,
        branches in the order given, so nothing inherited counts twice; a snapshot's update is its
        difference from the step before. Reducers as for `apply`; without `default`, two branches
        changing an unreduced field differently raise `MergeConflict`. Nothing is written on an error.
        """
        return self._run(self._async.merge(run_id, parents, reducers=reducers, default=default, model=model,
                                           node_id=node_id, branch=branch, **fields))

    def common_ancestor(self, checkpoints: Sequence[str | Checkpoint]) -> Checkpoint | None:
        """The nearest checkpoint all of `checkpoints` descend from (through all parents), or None."""
        return self._run(self._async.common_ancestor(checkpoints))
