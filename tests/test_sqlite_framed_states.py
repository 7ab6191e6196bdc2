"""SQLite layout 7: a checkpoint's document frames its state as msgpack after the other fields' JSON
(`codec.encode_framed_document`). States read back exactly, keys sorted (as the proof packs them,
in C or in Python, and as postgres's sorted JSON gives them back); rows of layout 6
(JSON documents, plain or compressed) read as before; reverting the layout rewrites every framed
document as layout 6's JSON, which the layout's code reads."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.backends.sqlite.migrations import HISTORY
from mnemostore.core import codec
from mnemostore.core.compression import COMPRESS_AT, FRAMED, deflate, inflate, is_compressed
from mnemostore.core.records import hash_state
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=24)
STATES = st.dictionaries(TEXT, VALUES, max_size=6)
REPEATED = {"messages": [{"role": "user", "content": "the same sentence again; " * 40}] * 20, "step": 0}


def key_orders(value: Any) -> Any:
    """Every dict's keys in order, nested: what equality of dicts leaves out."""
    if isinstance(value, dict):
        return [(key, key_orders(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [key_orders(item) for item in value]
    return None


def sorted_keys(value: Any) -> Any:
    """`value` with every dict's keys sorted (by code point: UTF-8's byte order, which the proof sorts by)."""
    if isinstance(value, dict):
        return {key: sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(item) for item in value]
    return value


def documents(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT id, doc FROM mnemo_checkpoint").fetchall())


def unpacked(stored: bytes) -> bytes:
    """A stored document as it was before compression."""
    return inflate(stored) if is_compressed(stored) else stored


@pytest.fixture(scope="module")
def store() -> Iterator[tuple[mnemostore.Store, Path]]:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "store.db"
        with mnemostore.open(f"sqlite:///{path}") as opened:
            yield opened, path


@settings(max_examples=150, deadline=None)
@given(STATES)
@example(REPEATED)  # compressed, then framed inside
@example({"n": 2**60, "text": "a \\u0000 b"})  # proven by the walk, which packs it after
@example({})
def test_a_state_reads_back_exactly_with_its_keys_sorted(
        store: tuple[mnemostore.Store, Path], state: dict[str, Any]) -> None:
    opened, path = store
    saved = opened.checkpoints.save("run", state, parent=None)
    for got in (opened.checkpoints.get(saved.id), opened.checkpoints.latest("run")):
        assert got is not None and got.state == state
        assert key_orders(got.state) == key_orders(sorted_keys(state))
        assert got.state_hash == hash_state(state) == saved.state_hash  # the hash stays the sorted JSON's
        assert got == saved
    assert unpacked(documents(path)[saved.id])[:1] == FRAMED


def test_layout_6_documents_read_as_before_beside_framed_ones(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        cps = store.checkpoints
        records = {name: cps.save("run", state, parent=None, payload=b"bytes")
                   for name, state in (("plain", {"b": 1, "a": [1.5, None]}), ("compressed", REPEATED))}
        framed = cps.save("run", {"z": 1, "a": 2}, parent=None)
        with sqlite3.connect(path) as conn:  # the rows as layout 6 wrote them: JSON, compressed when large
            for record in records.values():
                document = codec.encode_document(record, ("payload",))
                conn.execute("UPDATE mnemo_checkpoint SET doc = ? WHERE id = ?",
                             (deflate(document, COMPRESS_AT), record.id))
    stored = documents(path)
    assert stored[records["plain"].id][:1] == b"{" and is_compressed(stored[records["compressed"].id])
    with mnemostore.open(f"sqlite:///{path}") as store:
        cps = store.checkpoints
        assert {name: cps.get(record.id) for name, record in records.items()} == records
        assert cps.get(framed.id) == framed
        assert sorted(cps.history("run"), key=lambda c: c.id) == sorted([*records.values(), framed], key=lambda c: c.id)


def test_reverting_layout_7_rewrites_framed_documents_as_layout_6_json(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    states = {"plain": {"z": 1, "a": {"y": [1, "x"], "b": None}}, "compressed": REPEATED, "empty": {}}
    with mnemostore.open(url) as store:
        saved = {name: store.checkpoints.save("run", state, parent=None, payload=b"p")
                 for name, state in states.items()}
        store.outcomes.add(task_type="t", success=True)  # another kind's documents are left as they are
    before = documents(path)
    assert all(unpacked(before[record.id])[:1] == FRAMED for record in saved.values())
    assert is_compressed(before[saved["compressed"].id])

    backend = open_backend(url)  # the step's own down (the runner reverts the record migrations after it first)
    try:
        down = next(step for step in HISTORY if step.id == "sqlite.0007_framed_states").down
        assert callable(down)
        down(backend)
    finally:
        backend.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 6
    after = documents(path)
    assert is_compressed(after[saved["compressed"].id]) and not is_compressed(after[saved["plain"].id])
    for name, record in saved.items():
        document = unpacked(after[record.id])
        assert document[:1] == b"{"  # what layout 6's code reads: JSON, the state's keys sorted, last
        assert document.endswith(b'"state":' + orjson.dumps(states[name], option=orjson.OPT_SORT_KEYS) + b"}")
        assert orjson.loads(document) == codec.document_fields(codec.encode_document(record, ("payload",)))

    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 7")  # as the step's up leaves it: its ledger entry is still there
    with mnemostore.open(url) as store:
        assert {name: store.checkpoints.get(record.id) for name, record in saved.items()} == saved


def test_the_runner_reverts_layout_7_and_the_store_migrates_itself_up_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url) as store:
        saved = [store.checkpoints.save("run", state, parent=None) for state in ({"b": 1, "a": 2}, REPEATED)]
    backend = open_backend(url)
    try:
        Runner(backend).down(target="sqlite.0006_bare_payloads")
    finally:
        backend.close()
    assert all(unpacked(doc)[:1] == b"{" for doc in documents(tmp_path / "store.db").values())
    with mnemostore.open(url) as store:  # an embedded store migrates itself up again on open
        assert [store.checkpoints.get(record.id) for record in saved] == saved
        again = store.checkpoints.save("run", {"b": 1, "a": 2}, parent=None)
        assert list(store.checkpoints[again.id].state) == ["a", "b"]  # keys sorted, as the proof packs them
    assert documents(tmp_path / "store.db")[again.id][:1] == FRAMED
