"""SQLite layout 3: large documents are stored zstd-compressed, small ones plain; both read back
exactly, and reverting the layout inflates every document so layout 2 code can read them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.core.compression import COMPRESS_AT, deflate, inflate, is_compressed
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner

STATE = {"messages": [{"role": "user", "content": f"message {i}: " + "words " * 20} for i in range(200)]}


def stored_docs(path: Path, table: str) -> dict[str, bytes]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute(f"SELECT id, doc FROM {table}").fetchall())


def test_large_documents_are_stored_compressed_and_read_back_equal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url) as store:
        big = store.checkpoints.save("run", STATE, parent=None)
        small = store.checkpoints.save("run", {"step": 1})
        store.checkpoints.update(big.id, set={"node_id": "edited"})  # a rewrite in place compresses too
    docs = stored_docs(tmp_path / "store.db", "mnemo_checkpoint")
    assert is_compressed(docs[big.id]) and len(docs[big.id]) < len(inflate(docs[big.id])) // 4
    assert not is_compressed(docs[small.id])
    with mnemostore.open(url) as store:
        assert store.checkpoints.get(big.id).state == STATE  # type: ignore[union-attr]
        assert store.checkpoints.get(big.id).node_id == "edited"  # type: ignore[union-attr]
        assert store.checkpoints.latest("run").id == small.id  # type: ignore[union-attr]


def test_a_document_that_would_not_shrink_enough_is_stored_plain(tmp_path: Path) -> None:
    """Varied text shrinks ~4x, less than `PAYS_AT`: zstd would cost more than the bytes it saves."""
    import random

    rng = random.Random(7)
    words = ["".join(rng.choice("etaoinshrdlucmfwypvbgkjqxz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    varied = {"messages": [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(45))}
                           for _ in range(150)]}
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url) as store:
        plain = store.checkpoints.save("run", varied, parent=None)
        repeated = store.checkpoints.save("run", STATE)
    docs = stored_docs(tmp_path / "store.db", "mnemo_checkpoint")
    assert len(docs[plain.id]) > COMPRESS_AT and not is_compressed(docs[plain.id])
    assert is_compressed(docs[repeated.id])
    with mnemostore.open(url) as store:
        assert store.checkpoints[plain.id].state == varied
        assert store.checkpoints[repeated.id].parent_ids == [plain.id]


def test_reverting_layout_3_inflates_every_document_and_up_reads_both(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    with mnemostore.open(url) as store:
        # a hash of the application's own: the state-hash rehash, run again on the way up, leaves its row as it is
        big = store.checkpoints.save("run", STATE, parent=None, state_hash="app-given")
    backend = open_backend(url)
    try:
        Runner(backend).down("sqlite.0002_project_indexes")
    finally:
        backend.close()
    assert not any(is_compressed(doc) for doc in stored_docs(path, "mnemo_checkpoint").values())
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    with mnemostore.open(url) as store:  # an embedded store migrates itself up again on open
        assert store.checkpoints.get(big.id).state == STATE  # type: ignore[union-attr]
        again = store.checkpoints.save("run", STATE)
    docs = stored_docs(path, "mnemo_checkpoint")
    assert not is_compressed(docs[big.id]) and is_compressed(docs[again.id])




@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3 * COMPRESS_AT), st.integers(0, 2 * COMPRESS_AT))
def test_deflate_then_inflate_is_the_identity(payload: bytes, threshold: int) -> None:
    document = b"{" + payload  # documents are JSON objects: they start with `{`
    stored = deflate(document, threshold)
    assert inflate(stored) == document
    assert is_compressed(stored) == (len(document) >= threshold)
