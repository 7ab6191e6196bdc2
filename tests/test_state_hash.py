"""A checkpoint's `state_hash`: equal states hash equally whatever the order of their keys, at every
depth and on every path that stamps one (validation, `hash_state`, the LangGraph mapping's
`hash_exact_state`); a state that differs in one value hashes differently."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mnemostore import Checkpoint
from mnemostore.core.records import hash_exact_state, hash_state

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
_PLAIN_LEAF = st.one_of(st.none(), st.integers(-(2**53), 2**53), _TEXT)
_LEAF = st.one_of(_PLAIN_LEAF, st.booleans(), st.floats(allow_nan=False, allow_infinity=False))


def _states(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=5),
                          max_leaves=40)
    return st.dictionaries(_TEXT, values, max_size=6)


def _reordered(value: Any, rng: random.Random) -> Any:
    """An equal value whose objects hold their keys in another order (lists keep theirs)."""
    if isinstance(value, dict):
        items = [(key, _reordered(item, rng)) for key, item in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_reordered(item, rng) for item in value]
    return value


@settings(max_examples=60, deadline=None)
@given(_states(_LEAF), st.randoms(use_true_random=False))
def test_equal_states_hash_equally_whatever_their_key_order(state: dict[str, Any], rng: random.Random) -> None:
    reordered = _reordered(state, rng)
    assert reordered == state
    stamped = Checkpoint(run_id="r", state=reordered).state_hash
    assert stamped == hash_state(state) == hash_state(reordered) == Checkpoint(run_id="r", state=state).state_hash


@settings(max_examples=40, deadline=None)
@given(_states(_PLAIN_LEAF), st.randoms(use_true_random=False))
def test_the_mappings_unproven_hash_is_the_proven_one(state: dict[str, Any], rng: random.Random) -> None:
    """`hash_exact_state` skips the proof for states of text, ints and None only: same value."""
    assert hash_exact_state(_reordered(state, rng)) == hash_state(state)


@settings(max_examples=40, deadline=None)
@given(_states(_LEAF), _TEXT, _LEAF)
def test_a_state_differing_in_one_value_hashes_differently(state: dict[str, Any], key: str, value: Any) -> None:
    changed = {**state, key: [value, "changed"]}
    assume(changed != state)
    assert hash_state(changed) != hash_state(state)
