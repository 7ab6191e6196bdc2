"""A checkpoint's `state_hash`: equal states hash equally whatever the order of their keys, at every
depth and on every path that stamps one (validation, `hash_state`, the LangGraph mapping's
`hash_exact_state`); a state that differs in one value hashes differently. The algorithm (xxh3-128)
is pinned, and so is the migration that rehashes SHA-256 hashes older code stored: its change and
revert, and archives an older mnemostore exported (the suite's migration clauses run it on stores)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore import Checkpoint
from mnemostore.core.jsonvalues import dumps_json_document
from mnemostore.core.records import hash_exact_state, hash_state
from mnemostore.migrations import export_archive, import_archive
from mnemostore.migrations.records import brought_up_to_date, changed_record
from mnemostore.migrations.state_hashes import STATE_HASH_MIGRATION, sha256_state_digest

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


def test_the_algorithm_and_the_shipped_migration_are_pinned() -> None:
    """Stored hashes are filtered on: another digest, or an edited migration (every migrated store would
    then refuse to open with ChecksumMismatch), needs a new migration, not an edit."""
    assert hash_state({}) == "dc7048f8f8747f561349cde127705c16"  # xxh3-128 of b"{}"
    assert hash_state({"b": [1, "x", None], "a": {"z": 1.5, "y": True}}) == "6638eb4c8732326c1c08afac049d580e"
    assert STATE_HASH_MIGRATION.checksum == "0030409062a9907f34890266c107a41db77675b12b04fecbc186c068802de57d"


def _older(state: dict[str, Any]) -> Checkpoint:
    """A checkpoint as an older mnemostore stored it: its state's SHA-256 as `state_hash`."""
    return Checkpoint(run_id="r", state=state, state_hash=sha256_state_digest(dumps_json_document(state, "state")))


@settings(max_examples=60, deadline=None)
@given(_states(_LEAF), st.randoms(use_true_random=False), _TEXT)
def test_the_migration_rehashes_sha256_hashes_only_and_reverts_them(
        state: dict[str, Any], rng: random.Random, given: str) -> None:
    """Up: a SHA-256 hash becomes the hash a save stamps today, whatever the stored key order; a current
    hash or an application's own is left. Down: the exact inverse. Both idempotent (resumable)."""
    up, down = STATE_HASH_MIGRATION.function("up"), STATE_HASH_MIGRATION.function("down")
    old = _older(_reordered(state, rng))
    new = changed_record(old, up(old) or {})
    assert new.state_hash == hash_state(state) == Checkpoint(run_id="r", state=state).state_hash != old.state_hash
    assert up(new) is None and down(old) is None
    assert changed_record(new, down(new) or {}).state_hash == old.state_hash
    assume(given not in (old.state_hash, new.state_hash) and given)
    own = Checkpoint(run_id="r", state=state, state_hash=given)
    assert up(own) is None and down(own) is None
    assert brought_up_to_date(old) == new and brought_up_to_date(own) is own


def test_an_archive_an_older_mnemostore_exported_imports_with_current_hashes(tmp_path: Any) -> None:
    """Importing is not a stored record migration: its records come in as the migration leaves them,
    and the import's verification holds them to that."""
    states = [{"step": n, "messages": ["m"] * n} for n in range(3)]
    with mnemostore.open(f"sqlite:///{tmp_path / 'old.db'}") as old:  # SHA-256 hashes, as older code wrote
        old.checkpoints.put([*(_older(state).model_copy(update={"id": f"c{n}"}) for n, state in enumerate(states)),
                             Checkpoint(id="own", run_id="r", state={}, state_hash="app-given")])
        export_archive(old, tmp_path / "old.jsonl")
    with mnemostore.open(f"sqlite:///{tmp_path / 'new.db'}") as new:
        report = import_archive(tmp_path / "old.jsonl", new)
        assert report.kinds["checkpoint"].count == 4
        hashes = {c.id: c.state_hash for c in new.checkpoints.all()}
        assert hashes == {**{f"c{n}": hash_state(state) for n, state in enumerate(states)}, "own": "app-given"}
        assert new.checkpoints.count({"state_hash": hash_state(states[1])}) == 1


def test_an_older_mnemostore_refuses_a_store_this_one_rehashed(tmp_path: Any, monkeypatch: Any) -> None:
    """Older code does not know the rehash: it must refuse the store, not write SHA-256 hashes beside xxh3 ones."""
    import pytest

    from mnemostore.core.errors import StoreTooNew
    from mnemostore.migrations import plan

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url) as store:
        store.checkpoints.save("run", {"step": 1}, parent=None)
    monkeypatch.setattr(plan, "library_migrations", lambda: ())  # what an older mnemostore knows
    with pytest.raises(StoreTooNew, match=r"mnemostore\.0001_state_hash_xxh3"):
        mnemostore.open(url)
    monkeypatch.undo()
    with mnemostore.open(url) as store:
        assert store.checkpoints.count() == 1
