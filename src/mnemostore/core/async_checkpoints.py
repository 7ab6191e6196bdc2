"""Checkpoints of a run awaited from asyncio code; their coroutines are also the sync `Checkpoints`' logic.

Lineage per run and branch, partial updates and merges folded by reducers (`reducers`, `merging`),
restore into a model."""

from __future__ import annotations

from collections.abc import Collection as Collection_
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from .async_collection import AsyncCollection
from .collection import check_ids
from .errors import NotFound, ValidationError
from .filters import Expr, F
from .jsonvalues import plain_text
from .merging import check_parents, check_run, common_ancestor, merged_state
from .protocol import LATEST_CHECKPOINT_ORDER
from .records import Checkpoint, convert_validation_error
from .reducers import fold, partial_update, plan
from .shapes import Param, QueryShape

M = TypeVar("M", bound=BaseModel)


class _Latest:
    def __repr__(self) -> str:
        return "LATEST"


LATEST: Any = _Latest()
"""Default `parent`: the latest checkpoint of the same run and branch, if there is one."""


class AsyncCheckpoints(AsyncCollection[Checkpoint]):
    """A store's checkpoints, every method awaited (see `Checkpoints` for the sync form)."""

    async def save(self, run_id: str, state: Mapping[str, Any] | BaseModel, *, parent: Any = LATEST,
                   node_id: str = "", branch: str = "main", **fields: Any) -> Checkpoint:
        """Save a snapshot of `state` for `run_id`, by default as the child of its run and branch's latest."""
        if isinstance(state, BaseModel):
            state = state.model_dump(mode="json")
        if parent is LATEST:
            return await self._append(dict(run_id=run_id, state=state, node_id=node_id, branch_id=branch,
                                           parent_ids=[], sequence=0, **fields))
        if parent is None:  # a root: nothing to look up
            return await self.add(run_id=run_id, state=state, node_id=node_id, branch_id=branch, parent_ids=[],
                                  sequence=0, **fields)
        parents = await self._parent_refs(parent)
        sequence = 1 + max((seq for _, seq in parents), default=-1)
        return await self.add(run_id=run_id, state=state, node_id=node_id, branch_id=branch,
                              parent_ids=[pid for pid, _ in parents], sequence=sequence, **fields)

    async def _append(self, fields: dict[str, Any]) -> Checkpoint:
        """Validate a root checkpoint, then let the backend link it to its run and branch's latest
        as it writes it (`Backend.append_checkpoint`: one round trip where the backend can)."""
        record = await self._admit_one(fields)
        latest = self._latest_filter(record.run_id, record.branch_id)
        appended = await self._store._backend_call("append_checkpoint", record, latest, LATEST_CHECKPOINT_ORDER)
        assert isinstance(appended, Checkpoint)
        return appended

    _latest_filters: dict[tuple[str, str | None], Expr | None] | None = None

    def _latest_filter(self, run_id: str, branch: str | None) -> Expr | None:
        """The bound filter of a run's checkpoints (of one branch, or all), kept for later calls on the
        same run: asyncio tasks save and read their own runs step after step, interleaved, and binding
        costs about as much as the lookup. `LATEST_FILTERS` runs are kept, then the record starts again."""
        kept = self._latest_filters
        if kept is None:
            kept = self._latest_filters = {}
        key = (run_id, branch)
        exact = type(run_id) is str and (branch is None or type(branch) is str)  # kept as bound: no look-alike
        if exact and (found := kept.get(key, _UNBOUND)) is not _UNBOUND:
            return found  # type: ignore[return-value]
        latest = self._bind(self._run_filter(run_id, branch))
        if exact:
            if len(kept) >= LATEST_FILTERS:
                kept.clear()
            kept[key] = latest
        return latest

    async def _parent_refs(self, parent: Any) -> list[tuple[str, int]]:
        """(id, sequence) of the parents `parent` names: read without decoding their states."""
        if parent is None:
            return []
        ids = self._parent_ids(parent)
        found = dict(await self._values(F.id.in_(ids), ("id", "sequence")))
        self._check_found(ids, found)
        return [(i, found[i]) for i in dict.fromkeys(ids)]

    async def _found(self, ids: list[str]) -> list[Checkpoint]:
        """The checkpoints with these ids (each once), or a ValidationError naming a missing one."""
        found = await self._read(ids)
        self._check_found(ids, {c.id for c in found})
        return found

    @staticmethod
    def _parent_ids(parent: Any, field: str = "parent") -> list[str]:
        """The ids `parent` names: an id, a Checkpoint, or a list of either."""
        if isinstance(parent, str | Checkpoint):
            return [_id_of(parent, field)]
        if not isinstance(parent, Sequence | set | frozenset) or isinstance(parent, bytes):
            raise ValidationError.one(
                field, f"takes a checkpoint id, a Checkpoint or a list of them, not {type(parent).__name__}")
        return [_id_of(item, f"{field}[{index}]") for index, item in enumerate(parent)]

    @staticmethod
    def _check_found(ids: list[str], found: Collection_[str]) -> None:
        missing = set(ids) - set(found)
        if missing:
            raise ValidationError.one("parent", f"no checkpoint with id {sorted(missing)[0]!r}")

    async def latest(self, run_id: str, branch: str | None = None) -> Checkpoint | None:
        """The checkpoint with the highest sequence (newest first on ties), or None."""
        found: list[Checkpoint] = await self._store._backend_call("query_shape", *self._latest_args(run_id, branch))
        return found[0] if found else None

    def _latest_args(self, run_id: str, branch: str | None) -> tuple[Any, ...]:
        """`latest`'s query: the backend call's arguments of `fetch` with limit 1 (the sync
        `Checkpoints.latest` calls it straight). Plain text (a run's id, a branch: `plain_text`) is what
        `QueryShape.check` passes as it is, and these shapes need no capability: their arguments are
        made here without `_fetch_args` (~4k instructions); anything else is checked there."""
        if branch is None:
            shape, values = LATEST_OF_RUN, {"run_id": run_id}
            plain = plain_text(run_id)
        else:
            shape, values = LATEST_ON_BRANCH, {"run_id": run_id, "branch_id": branch}
            plain = plain_text(run_id) and plain_text(branch)
        if plain:
            return self.kind, self._store.tenant, shape, values, 1, True
        return self._fetch_args(shape, values, 1, True)

    async def history(self, run_id: str, branch: str | None = None) -> list[Checkpoint]:
        """Every checkpoint of a run (optionally one branch), oldest first."""
        return await self.all(self._run_filter(run_id, branch), order_by=["sequence", "created_at"])

    async def lineage(self, checkpoint: str | Checkpoint) -> list[Checkpoint]:
        """A checkpoint (its id or itself) and its ancestors through first parents, newest first."""
        checkpoint_id = _id_of(checkpoint, "checkpoint")
        chain: list[Checkpoint] = []
        next_id: str | None = checkpoint_id
        seen: set[str] = set()
        while next_id is not None and next_id not in seen:
            seen.add(next_id)
            current = await self.get(next_id)
            if current is None:
                if not chain:
                    raise NotFound(f"no checkpoint with id {checkpoint_id!r}")
                break
            chain.append(current)
            next_id = current.parent_ids[0] if current.parent_ids else None
        return chain

    async def restore(self, run_id: str, model: type[M], branch: str | None = None) -> M | None:
        """The latest state of a run as an instance of `model`, or None."""
        latest = await self.latest(run_id, branch)
        if latest is None:
            return None
        return _fit(model, latest.state, f"checkpoint {latest.id!r} of run {run_id!r}")

    async def prune(self, run_id: str, keep: int, branch: str | None = None) -> int:
        """Delete all but the `keep` newest checkpoints of each branch of a run."""
        if type(keep) is not int or keep < 0:
            raise ValidationError.one("keep", "must be a non-negative integer")
        doomed: list[str] = []
        by_branch: dict[str, list[Checkpoint]] = {}
        async for checkpoint in self.iterate(self._run_filter(run_id, branch),
                                             order_by=LATEST_CHECKPOINT_ORDER, vectors=False):
            kept = by_branch.setdefault(checkpoint.branch_id, [])
            if len(kept) < keep:
                kept.append(checkpoint)
            else:
                doomed.append(checkpoint.id)
        return await self.delete(doomed) if doomed else 0

    async def apply(self, run_id: str, update: Mapping[str, Any], *, node_id: str = "", branch: str = "main",
                    parent: Any = LATEST, reducers: Mapping[str, str] | None = None, default: str | None = None,
                    model: type[BaseModel] | None = None, **fields: Any) -> Checkpoint:
        """Fold a node's partial `update` into the state of `parent` through the reducers; save the child."""
        rules = plan(reducers, default, model)
        changes = partial_update(update)
        prior = await self._prior(run_id, branch, parent)
        state = fold(prior.state if prior else {}, changes, rules, node_id or "(no node_id)")
        if model is not None:
            _fit(model, state, f"the state apply made for run {run_id!r}")
        return await self.add(run_id=run_id, state=state, node_id=node_id, branch_id=branch,
                              parent_ids=[prior.id] if prior else [], sequence=prior.sequence + 1 if prior else 0,
                        update=changes, **fields)

    async def _prior(self, run_id: str, branch: str, parent: Any) -> Checkpoint | None:
        """The one checkpoint `apply` folds onto: of this run, read afresh."""
        if parent is LATEST:
            return await self.latest(run_id, branch)
        if parent is None:
            return None
        if not isinstance(parent, str | Checkpoint):
            raise ValidationError.one("parent", "apply folds onto one checkpoint (its id or the Checkpoint); "
                                      "merge joins several")
        found = (await self._found([_id_of(parent, "parent")]))[0]
        check_run(run_id, found, "parent")
        return found

    async def merge(self, run_id: str, parents: Sequence[str | Checkpoint], *,
                    reducers: Mapping[str, str] | None = None, default: str | None = None,
                    model: type[BaseModel] | None = None, node_id: str = "merge", branch: str = "main",
                    **fields: Any) -> Checkpoint:
        """Join branches of a run into one checkpoint naming every parent (see `Checkpoints.merge`)."""
        rules = plan(reducers, default, model)
        parent_ids = self._parent_ids(parents, "parents")
        tips = check_parents(run_id, parent_ids, await self._found(parent_ids))
        ancestry = await common_ancestor(tips, self._read)
        if ancestry is None:
            raise ValidationError.one("parents", f"checkpoints {', '.join(map(repr, parent_ids))} have no common "
                                      "ancestor (separate roots, or their fork point was pruned)")
        state = merged_state(ancestry, tips, rules)
        if model is not None:
            _fit(model, state, f"the state the merge made for run {run_id!r}")
        return await self.save(run_id, state, parent=[tip.id for tip in tips], node_id=node_id, branch=branch, **fields)

    async def common_ancestor(self, checkpoints: Sequence[str | Checkpoint]) -> Checkpoint | None:
        """The nearest checkpoint all of `checkpoints` descend from (through all parents), or None."""
        ids = self._parent_ids(checkpoints, "checkpoints")
        if not ids:
            raise ValidationError.one("checkpoints", "give at least one checkpoint")
        tips = await self._found(ids)
        ancestry = await common_ancestor(tips, self._read)
        return None if ancestry is None else ancestry.ancestor

    async def _read(self, ids: list[str]) -> list[Checkpoint]:
        return await self.get_many(ids, vectors=False)

    @staticmethod
    def _run_filter(run_id: str, branch: str | None) -> Expr:
        expr: Expr = F.run_id == run_id
        return expr if branch is None else expr & (F.branch_id == branch)


LATEST_FILTERS = 1024
"""Runs whose bound `latest` filter an `AsyncCheckpoints` keeps (`_latest_filter`)."""
_UNBOUND = object()

LATEST_OF_RUN = QueryShape(Checkpoint, F.run_id == Param("run_id"), LATEST_CHECKPOINT_ORDER)
LATEST_ON_BRANCH = QueryShape(Checkpoint, (F.run_id == Param("run_id")) & (F.branch_id == Param("branch_id")),
                              LATEST_CHECKPOINT_ORDER)
"""`latest`'s queries, compiled once per store (they compare by ==: no capability needed, `_latest_args`)."""


def _id_of(item: Any, field: str) -> str:
    """A checkpoint's id, from the id itself or the Checkpoint a caller has in hand."""
    if isinstance(item, Checkpoint):
        return item.id
    if type(item) is not str:
        raise ValidationError.one(field, f"takes a checkpoint id or a Checkpoint, not {type(item).__name__}")
    check_ids([item], field)
    return item


def _fit(model: type[M], state: dict[str, Any], where: str) -> M:
    """`state` as an instance of `model`, or a ValidationError naming `state.<field>` and `where`."""
    try:
        return model.model_validate(state)
    except PydanticValidationError as exc:
        problem = f"{where} does not fit {model.__name__}"
        raise ValidationError([(f"state.{field}" if field else "state", f"{message} ({problem})")
                               for field, message in convert_validation_error(exc).errors]) from None
