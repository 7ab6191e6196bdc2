"""The built-in reducers as functions: any JSON value in, a new value or a named ReducerError out
(never a bare TypeError, never a changed prior), and the snapshot difference rules recover the
partial update of every fold they are exact for."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemostore.core.errors import ReducerError
from mnemostore.core.reducers import BUILT_IN, difference, fold, plan
from mnemostore.testing.clauses.merges import EXACT_FOR_SNAPSHOTS, VALUES

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300)
@given(name=st.sampled_from(sorted(BUILT_IN)), prior=_json, partial=_json)
def test_a_reducer_never_changes_prior_and_refuses_only_with_a_named_reducer_error(
        name: str, prior: Any, partial: Any) -> None:
    kept = copy.deepcopy(prior)
    try:
        fold({"f": prior}, {"f": partial}, plan({"f": name}), "node")
    except ReducerError as exc:
        assert (exc.field, exc.reducer, exc.node) == ("f", name, "node")
    assert prior == kept and type(prior) is type(kept)


@settings(max_examples=300)
@given(data=st.data(), name=st.sampled_from([*EXACT_FOR_SNAPSHOTS, "last", "merge", "messages"]))
def test_the_difference_rule_recovers_a_fold(data: st.DataObject, name: str) -> None:
    """fold(before, difference(before, fold(before, update))) == fold(before, update), for a `before`
    the reducer can reach (a fold itself: no two messages with one id)."""
    rules = plan({"f": name})
    update = st.fixed_dictionaries({}, optional={"f": VALUES[name]})
    before = fold({}, data.draw(update), rules, "node")
    after = fold(before, data.draw(update), rules, "node")
    assert fold(before, difference(before, after, rules, "node"), rules, "node") == after


def test_strings_and_dicts_are_never_split_and_sums_take_only_numbers() -> None:
    rules = plan({"log": "append", "tags": "union", "n": "sum", "hi": "max"})
    for update in ({"log": "ab"}, {"log": {"a": 1}}, {"tags": "ab"}, {"tags": {"a": 1}}, {"n": "1"}, {"n": False},
                   {"hi": [1]}):
        try:
            fold({"log": ["x"], "tags": ["x"], "n": 1, "hi": 1}, update, rules, "step")
        except ReducerError as exc:
            assert exc.field in update and "step" in str(exc)
        else:
            raise AssertionError(f"{update} was folded")
