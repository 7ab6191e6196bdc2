"""SQLite layout 4: a checkpoint's `payload` is a BLOB column of its own (not base64 in the document),
compressed only when that pays; reverting the layout folds payloads back into the documents."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.core.base64text import from_text
from mnemostore.core.compression import (
    COMPRESS_AT,
    PAYLOAD_PLAIN,
    PAYLOAD_ZSTD,
    inflate,
    pack_payload,
    unpack_payload,
)
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner

REPETITIVE = b"the same sentence again; " * 2000
VARIED = random.Random(7).randbytes(50_000)  # zstd gains nothing
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def stored(path: Path) -> dict[str, tuple[bytes, bytes | None]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, doc, payload FROM mnemo_checkpoint").fetchall()
    return {id: (inflate(doc), payload) for id, doc, payload in rows}


def test_payloads_live_in_their_column_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        saved = {name: store.checkpoints.save("run", {"step": i}, payload=payload)
                 for i, (name, payload) in enumerate((("repetitive", REPETITIVE), ("varied", VARIED),
                                                      ("small", b"\x00\xff"), ("empty", b""), ("none", None)))}
        for record in saved.values():
            assert store.checkpoints[record.id].payload == record.payload
    rows = stored(path)
    for record in saved.values():
        doc, column = rows[record.id]
        assert b"payload" not in doc  # the document holds only the rest of the record
        assert (column is None) == (record.payload is None)
    assert rows[saved["repetitive"].id][1][:4] == ZSTD_MAGIC  # type: ignore[index]  # bare since layout 6
    assert len(rows[saved["repetitive"].id][1]) < len(REPETITIVE) // 20  # type: ignore[arg-type]
    assert rows[saved["varied"].id][1] == VARIED
    assert rows[saved["small"].id][1] == b"\x00\x00\xff"  # begins as a format byte: kept prefixed
    assert rows[saved["empty"].id][1] == bytes((PAYLOAD_PLAIN,))


def test_reverting_layout_4_folds_payloads_into_documents_and_up_reads_both(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    with mnemostore.open(url) as store:
        kept = store.checkpoints.save("run", {"step": 1}, payload=REPETITIVE)
        plain = store.checkpoints.save("run", {"step": 2}, payload=VARIED)
        empty = store.checkpoints.save("run", {"step": 3}, payload=b"")
        none = store.checkpoints.save("run", {"step": 4})
    backend = open_backend(url)
    try:
        Runner(backend).down("sqlite.0003_compressed_docs")
    finally:
        backend.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        columns = [row[1] for row in conn.execute("PRAGMA table_info(mnemo_checkpoint)")]
        assert "payload" not in columns
        docs = {id: orjson.loads(inflate(doc)) for id, doc in conn.execute("SELECT id, doc FROM mnemo_checkpoint")}
    assert from_text(docs[kept.id]["payload"]) == REPETITIVE  # what layout 3 code keeps in its documents
    assert from_text(docs[plain.id]["payload"]) == VARIED
    assert docs[empty.id]["payload"] == ""
    assert "payload" not in docs[none.id]
    with mnemostore.open(url) as store:  # an embedded store migrates itself up again on open
        assert [c.payload for c in store.checkpoints.history("run")] == [REPETITIVE, VARIED, b"", None]
        again = store.checkpoints.save("run", {"step": 5}, payload=b"new")
        store.checkpoints.update(kept.id, set={"node_id": "edited"})  # a rewrite moves it into the column
        assert store.checkpoints[kept.id].payload == REPETITIVE
    rows = stored(path)
    assert rows[again.id][1] == b"new"
    assert rows[kept.id][1] is not None and b'"payload"' not in rows[kept.id][0]


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.binary(max_size=3 * COMPRESS_AT),
                 st.builds(lambda part, n: part * n, st.binary(min_size=1, max_size=40), st.integers(1, 400))))
def test_pack_then_unpack_is_the_identity(payload: bytes) -> None:
    packed = pack_payload(payload)
    assert unpack_payload(packed) == payload
    assert unpack_payload(memoryview(packed)) == payload
    assert packed[0] in (PAYLOAD_PLAIN, PAYLOAD_ZSTD)
