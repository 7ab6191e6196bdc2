"""Partial updates and merges (suite 1.4): `apply` keeps a node's update, a merge folds each branch's
updates since the parents' common ancestor onto its state (inherited values count once), reducers
refuse what they cannot fold, and nothing is written on any error. Core does the work, so a
backend passes by storing a checkpoint's fields as it stores every record's."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from ...core.capabilities import Capability
from ...core.errors import MergeConflict, ReducerError, ValidationError
from ...core.records import Checkpoint
from ...core.reducers import Reducer, fold, plan, register_reducer
from ...core.store import Store
from ..requirements import requires, since
from ..strategies import examples

EXACT_FOR_SNAPSHOTS = ("first", "append", "union", "sum", "max", "min")
"""Reducers whose difference rule recovers any branch's updates from its snapshots (integers)."""
REDUCERS = (*EXACT_FOR_SNAPSHOTS, "last", "merge", "messages")
FIELDS = ("f0", "f1", "f2")

_small = st.integers(-3, 3)
_item = st.sampled_from([0, 1, 2, "a", "b", True, None, [1], {"k": 1}])
_message = st.builds(lambda key, text: {"text": text} if key is None else {"id": key, "text": text},
                     st.sampled_from([None, "m1", "m2", "m3"]), st.sampled_from(["hi", "ok", "done"]))
VALUES: dict[str | None, st.SearchStrategy[Any]] = {
    None: st.sampled_from([0, 1, 2, "x"]),  # unreduced (strict last-write-wins): small pool, so branches clash
    "last": _small | st.sampled_from(["x", "y"]),
    "first": _small,
    "append": st.lists(_item, max_size=3),
    "union": st.lists(_item, max_size=3),
    "merge": st.dictionaries(st.sampled_from("abc"), _small, max_size=2),
    "sum": _small,
    "max": _small,
    "min": _small,
    "messages": st.lists(_message, max_size=3),
}


def _concat(prior: Any, partial: Any) -> Any:
    """An application's reducer: text concatenation."""
    return (prior or "") + partial


def _concat_diff(before: Any, after: Any) -> Any:
    return after[len(before or ""):]


@dataclass
class Scenario:
    """A run: a trunk of updates from {}, branches forking at one trunk checkpoint, parents in an order."""

    reducers: dict[str, str | None]
    trunk: list[dict[str, Any]]
    fork: int
    branches: list[list[dict[str, Any]]]
    order: list[int]

    @property
    def chosen(self) -> dict[str, str]:
        return {field: name for field, name in self.reducers.items() if name is not None}


@st.composite
def scenarios(draw: st.DrawFn, reducers: tuple[str, ...], unreduced: bool = False) -> Scenario:
    names: st.SearchStrategy[str | None] = st.sampled_from(reducers)
    if unreduced:
        names = names | st.none()
    chosen = {field: draw(names) for field in FIELDS}
    update = st.fixed_dictionaries({}, optional={field: VALUES[name] for field, name in chosen.items()})
    trunk = draw(st.lists(update, min_size=1, max_size=3))
    fork = draw(st.integers(0, len(trunk) - 1))
    branches = draw(st.lists(st.lists(update, min_size=1, max_size=2), min_size=1, max_size=3))
    if fork < len(trunk) - 1:  # the trunk went on after the fork: its tip is one of the parents too
        branches.append(trunk[fork + 1:])
        trunk = trunk[:fork + 1]
    order = draw(st.permutations(range(len(branches))))
    return Scenario(chosen, trunk, fork, branches, list(order))


def _apply_all(store: Store, run: str, updates: list[dict[str, Any]], reducers: dict[str, str], *,
               parent: Any = None, branch: str = "main") -> list[Checkpoint]:
    made: list[Checkpoint] = []
    for step, update in enumerate(updates):
        made.append(store.checkpoints.apply(run, update, reducers=reducers, default="last", node_id=f"{branch}-{step}",
                                            branch=branch, parent=made[-1] if made else parent))
    return made


def _build(store: Store, scenario: Scenario, run: str, *,
           snapshots: bool = False) -> tuple[Checkpoint, list[Checkpoint]]:
    """The parents' common ancestor (the fork point; the tip itself if there is one parent) and the
    parents' tips in merge order, built with `apply`, or with `save` of the same states when
    `snapshots` (so only the difference rules can tell the updates)."""
    reducers = scenario.chosen
    trunk = _apply_all(store, run, scenario.trunk, reducers)
    tips = [_apply_all(store, run, updates, reducers, parent=trunk[-1], branch=f"b{i}")[-1]
            for i, updates in enumerate(scenario.branches)]
    fork = trunk[-1] if len(tips) > 1 else tips[0]
    if not snapshots:
        return fork, [tips[i] for i in scenario.order]
    copies: dict[str, Checkpoint] = {}
    for checkpoint in store.checkpoints.history(run):  # oldest first: parents before children
        copies[checkpoint.id] = store.checkpoints.save(
            f"{run}-snapshots", checkpoint.state, parent=[copies[p].id for p in checkpoint.parent_ids] or None,
            node_id=checkpoint.node_id, branch=checkpoint.branch_id)
    return copies[fork.id], [copies[tips[i].id] for i in scenario.order]


def _in_order(scenario: Scenario) -> dict[str, Any]:
    """Every update folded one after another, as `apply` folds them on one chain: the trunk's, then
    each parent's branch's (computed, not written: the suite stays quick on slow engines)."""
    state: dict[str, Any] = {}
    for update in [*scenario.trunk, *(u for i in scenario.order for u in scenario.branches[i])]:
        state = fold(state, update, plan(scenario.chosen, "last"), "in-order")
    return state


def _check_lineage(store: Store, merged: Checkpoint, fork: Checkpoint, tips: list[Checkpoint]) -> None:
    cps = store.checkpoints
    assert merged.parent_ids == [tip.id for tip in tips]
    assert merged.sequence == 1 + max(tip.sequence for tip in tips)
    assert cps.common_ancestor(tips) == fork
    assert cps.get(merged.id) == merged
    assert [c.id for c in cps.lineage(merged)][:2] == [merged.id, tips[0].id]


def _check_merge_in_order(store: Store, scenario: Scenario, *, snapshots: bool) -> None:
    """The merge of the scenario's parents equals its updates applied in order, with the lineage of a merge."""
    run = uuid.uuid4().hex
    fork, tips = _build(store, scenario, run, snapshots=snapshots)
    assert all((tip.update is None) == snapshots for tip in tips)
    merged = store.checkpoints.merge(f"{run}-snapshots" if snapshots else run, tips, reducers=scenario.chosen)
    assert merged.state == _in_order(scenario)
    _check_lineage(store, merged, fork, tips)


class MergeClauses:
    @since("1.4")
    def test_a_merge_counts_what_the_branches_inherited_once(self, store: Store) -> None:
        cps = store.checkpoints
        reducers = {"log": "append", "n": "sum", "tags": "union"}
        base = cps.save("r", {"log": ["plan"], "n": 10, "tags": ["x"]})
        a = cps.save("r", {"log": ["plan", "test"], "n": 15, "tags": ["x"]}, parent=base.id, branch="a")
        b = cps.save("r", {"log": ["plan", "docs"], "n": 13, "tags": ["x", "y"]}, parent=base.id, branch="b")
        expected = {"log": ["plan", "test", "docs"], "n": 18, "tags": ["x", "y"]}
        assert cps.merge("r", [a.id, b.id], reducers=reducers).state == expected
        ua = cps.apply("u", {"log": ["test"], "n": 5}, parent=cps.save("u", base.state), branch="a", reducers=reducers)
        ub = cps.apply("u", {"log": ["docs"], "n": 3, "tags": ["y"]}, parent=ua.parent_ids[0], branch="b",
                       reducers=reducers)
        assert cps.merge("u", [ua, ub], reducers=reducers).state == expected

    @since("1.4")
    def test_apply_folds_a_partial_update_into_the_latest_state_and_keeps_it(self, store: Store) -> None:
        cps = store.checkpoints
        reducers = {"log": "append", "n": "sum", "seen": "union", "cfg": "merge", "chat": "messages"}
        first = cps.apply("run", {"log": ["plan"], "n": 1, "step": "plan"}, node_id="plan", reducers=reducers)
        second = cps.apply("run", {"log": ["act"], "n": 2, "seen": ["a", "a"], "cfg": {"x": 1},
                                   "chat": [{"id": "m1", "text": "hi"}]}, node_id="act", reducers=reducers)
        third = cps.apply("run", {"step": "check", "seen": ["b", "a"], "cfg": {"y": 2},
                                  "chat": [{"id": "m1", "text": "hello"}, {"text": "ok"}]},
                          node_id="check", reducers=reducers, metadata={"why": "kept"})
        side = cps.apply("run", {"n": 40}, branch="side", reducers=reducers)
        assert (first.parent_ids, first.sequence, first.state) == ([], 0, {"log": ["plan"], "n": 1, "step": "plan"})
        assert (second.parent_ids, second.sequence) == ([first.id], 1)
        assert (third.parent_ids, third.sequence, third.metadata) == ([second.id], 2, {"why": "kept"})
        assert third.state == {"log": ["plan", "act"], "n": 3, "step": "check", "seen": ["a", "b"],
                               "cfg": {"x": 1, "y": 2}, "chat": [{"id": "m1", "text": "hello"}, {"text": "ok"}]}
        assert (side.parent_ids, side.sequence, side.state) == ([], 0, {"n": 40})  # a branch of its own
        assert third.update == {"step": "check", "seen": ["b", "a"], "cfg": {"y": 2},
                                "chat": [{"id": "m1", "text": "hello"}, {"text": "ok"}]}
        assert [cps.get(c.id) for c in (first, second, third, side)] == [first, second, third, side]
        assert cps.latest("run", branch="main") == third
        retry = cps.apply("run", {"n": 100}, parent=first, reducers=reducers)
        assert (retry.parent_ids, retry.sequence, retry.state["n"]) == ([first.id], 1, 101)
        root = cps.apply("run", {"n": 7}, parent=None, branch="fresh")
        assert (root.parent_ids, root.sequence, root.state, root.update) == ([], 0, {"n": 7}, {"n": 7})
        assert cps.save("run", {"whole": True}).update is None  # a snapshot keeps no update

    @since("1.4")
    def test_a_merge_through_an_earlier_merge_counts_each_update_once(self, store: Store) -> None:
        cps = store.checkpoints
        reducers = {"log": "append", "n": "sum"}
        root = cps.apply("run", {"log": ["r"], "n": 0}, reducers=reducers)
        a1 = cps.apply("run", {"log": ["a"], "n": 1}, parent=root, branch="a", reducers=reducers)
        b1 = cps.apply("run", {"log": ["b"], "n": 2}, parent=root, branch="b", reducers=reducers)
        m1 = cps.merge("run", [a1, b1], reducers=reducers, branch="a")
        b2 = cps.apply("run", {"log": ["c"], "n": 4}, parent=b1, branch="b", reducers=reducers)
        assert cps.common_ancestor([m1, b2]) == b1
        assert cps.common_ancestor([a1, b2]) == root
        assert cps.common_ancestor([m1, a1]) == a1  # a parent that is the other's ancestor
        final = cps.merge("run", [m1, b2], reducers=reducers)
        assert final.state == {"log": ["r", "b", "a", "c"], "n": 7}
        assert (final.parent_ids, final.sequence) == ([m1.id, b2.id], 3)
        assert cps.merge("run", [m1, a1], reducers=reducers, branch="same").state == m1.state

    @since("1.4")
    def test_bad_merges_and_updates_raise_named_errors_and_write_nothing(self, store: Store) -> None:
        cps = store.checkpoints
        root = cps.save("run", {"log": ["a"], "n": 1, "title": "t", "cfg": {}})
        a = cps.save("run", {"log": ["a", "b"], "n": "two", "title": "A", "cfg": {}}, parent=root, branch="a")
        b = cps.save("run", {"log": ["a", "c"], "n": 3, "title": "B", "cfg": {}}, parent=root, branch="b")
        other_run = cps.save("other", {})
        stranger = cps.save("run", {}, parent=None, branch="stranger")
        written = cps.count()
        with pytest.raises(ValidationError, match="parents"):
            cps.merge("run", [])
        with pytest.raises(ValidationError, match=r"parents\[1\].*other"):
            cps.merge("run", [a, other_run])
        with pytest.raises(ValidationError, match="no common ancestor"):
            cps.merge("run", [a, stranger])
        with pytest.raises(MergeConflict) as conflict:
            cps.merge("run", [a, b], reducers={"n": "max", "log": "append"})
        assert conflict.value.field == "title" and len(conflict.value.branches) == 2
        assert "'a'" in str(conflict.value) and "'b'" in str(conflict.value)
        with pytest.raises(ReducerError) as failed:  # the snapshot's "two" is no number to sum
            cps.merge("run", [a, b], reducers={"n": "sum", "title": "last", "log": "append"})
        assert (failed.value.field, failed.value.reducer) == ("n", "sum")
        assert cps.count() == written
        refusals: list[tuple[dict[str, Any], str, str]] = [
                    ({"log": "abc"}, "log", "append"), ({"log": {"k": 1}}, "log", "append"),
                    ({"tags": "xy"}, "tags", "union"), ({"tags": {"k": 1}}, "tags", "union"),
                    ({"n": "1"}, "n", "sum"), ({"n": True}, "n", "sum"), ({"cfg": [1]}, "cfg", "merge"),
                    ({"hi": "z"}, "hi", "max"), ({"chat": "hi"}, "chat", "messages")]
        reducers = {"log": "append", "tags": "union", "n": "sum", "cfg": "merge", "hi": "max", "chat": "messages"}
        cps.apply("run", {"hi": 3, "tags": ["x"]}, reducers=reducers, branch="typed")
        before = cps.count()
        for update, field, reducer in refusals:
            with pytest.raises(ReducerError) as refused:
                cps.apply("run", update, reducers=reducers, node_id="bad-node", branch="typed")
            assert (refused.value.field, refused.value.reducer, refused.value.node) == (field, reducer, "bad-node")
            assert field in str(refused.value) and "bad-node" in str(refused.value)
        with pytest.raises(ValidationError, match=r"reducers\.n"):
            cps.apply("run", {"n": 1}, reducers={"n": "average"})
        with pytest.raises(ValidationError, match="default"):
            cps.merge("run", [a, b], default="average")
        with pytest.raises(ValidationError, match=r"update\.bad"):
            cps.apply("run", {"bad": float("nan")})
        with pytest.raises(ValidationError, match="update"):
            cps.apply("run", ["not", "a", "dict"])  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="parent"):
            cps.apply("run", {"n": 1}, parent=[a, b])
        with pytest.raises(ValidationError, match="parent"):
            cps.apply("run", {"n": 1}, parent=other_run)
        assert cps.count() == before

    @since("1.4")
    def test_reducers_declared_on_a_state_model_and_registered_by_the_application(self, store: Store) -> None:
        cps = store.checkpoints

        class State(BaseModel):
            notes: Annotated[list[str], Reducer("append")] = []
            best: Annotated[int, Reducer("max")] = 0
            text: Annotated[str, Reducer("suite-concat")] = ""
            step: str = ""

        class Twice(BaseModel):
            notes: Annotated[list[str], Reducer("append"), Reducer("union")] = []

        register_reducer("suite-concat", _concat, diff=_concat_diff)
        register_reducer("suite-concat", _concat, diff=_concat_diff)  # the same again: a no-op
        cps.apply("run", {"notes": ["a"], "best": 3, "text": "ab"}, model=State)
        second = cps.apply("run", {"notes": ["b"], "best": 1, "text": "c"}, model=State)
        assert second.state == {"notes": ["a", "b"], "best": 3, "text": "abc"}
        assert cps.apply("run", {"notes": ["c"]}, model=State, reducers={"notes": "last"}).state["notes"] == ["c"]
        side = cps.save("run", {**second.state, "text": "abcd", "step": "side"}, parent=second, branch="side")
        main = cps.apply("run", {"text": "e", "notes": ["x"]}, parent=second, model=State, branch="main2")
        merged = cps.merge("run", [main, side], model=State)
        assert merged.state == {"notes": ["a", "b", "x"], "best": 3, "text": "abced", "step": "side"}
        before = cps.count()
        with pytest.raises(ValidationError, match=r"Twice\.notes"):
            cps.apply("run", {"notes": ["d"]}, model=Twice)
        with pytest.raises(ValidationError, match=r"state\.best"):
            cps.apply("run", {"best": "high"}, model=State, reducers={"best": "last"})
        with pytest.raises(ReducerError, match="text"):  # the application's reducer raising is named too
            cps.apply("run", {"text": 5}, model=State, node_id="typo")
        with pytest.raises(ValidationError, match="already"):
            register_reducer("append", lambda prior, partial: partial)
        assert cps.count() == before

    @since("1.4")
    @requires(Capability.PERSISTENT)
    def test_an_applied_update_survives_reopen(self, open_store: Any) -> None:
        first = open_store()
        applied = first.checkpoints.apply("run", {"log": ["a"], "deep": {"x": [1, 2.5, None]}},
                                          reducers={"log": "append"})
        first.close()
        again = open_store()
        assert again.checkpoints.get(applied.id) == applied
        assert again.checkpoints.get(applied.id).update == {"log": ["a"], "deep": {"x": [1, 2.5, None]}}

    @since("1.4")
    @pytest.mark.parametrize("snapshots", [False, True], ids=["updates", "snapshots"])
    @examples(15)
    @given(data=st.data())
    def test_merging_branches_of_random_updates_equals_applying_them_in_order(
            self, store: Store, snapshots: bool, data: st.DataObject) -> None:
        """Branches built with `apply` (every reducer), or saved whole (the reducers whose difference
        rule is exact), merge to what applying all their updates in order on one chain gives."""
        _check_merge_in_order(store, data.draw(scenarios(EXACT_FOR_SNAPSHOTS if snapshots else REDUCERS)),
                              snapshots=snapshots)

    @since("1.4")
    @examples(15)
    @given(scenario=scenarios(REDUCERS, unreduced=True))
    def test_branches_changing_an_unreduced_field_differently_conflict_and_write_nothing(
            self, store: Store, scenario: Scenario) -> None:
        run = uuid.uuid4().hex
        fork, tips = _build(store, scenario, run)
        changed: dict[str, list[Any]] = {}
        for tip in tips:
            for field in (f for f, name in scenario.reducers.items() if name is None):
                if tip.state.get(field, KeyError) != fork.state.get(field, KeyError):
                    changed.setdefault(field, []).append(tip.state.get(field, KeyError))
        clashing = sorted(field for field, values in changed.items() if len(set(map(repr, values))) > 1)
        before = store.checkpoints.count()
        if clashing:
            with pytest.raises(MergeConflict) as conflict:
                store.checkpoints.merge(run, tips, reducers=scenario.chosen)
            assert sorted(conflict.value.conflicts) == clashing
            assert store.checkpoints.count() == before
            return
        merged = store.checkpoints.merge(run, tips, reducers=scenario.chosen)
        expected = _in_order(scenario)
        for field, values in changed.items():
            expected[field] = values[0]  # the one value the branches that changed it agree on
        for field in (f for f, name in scenario.reducers.items() if name is None and f not in changed):
            expected.pop(field, None)
            if field in fork.state:
                expected[field] = fork.state[field]
        assert merged.state == expected
        _check_lineage(store, merged, fork, tips)
