"""SQLite layout 6: bytes columns hold a payload bare (no format byte, so a read hands the column's
bytes over without a copy); rows of layouts 4 and 5 read as before, and reverting the layout puts the
format byte back on every bare payload, of the built-in kinds and of an application's."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore import Record, register_kind
from mnemostore.core.compression import (
    COMPRESS_AT,
    pack_bare_payload,
    pack_payload,
    prefixed_payload,
    unpack_payload,
)
from mnemostore.core.kinds import kinds
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PAYLOADS = {
    "repetitive": b"the same sentence again; " * 2000,
    "varied": random.Random(7).randbytes(50_000),
    "format byte 0": b"\x00rest",
    "format byte 1": b"\x01rest",
    "zstd magic": ZSTD_MAGIC + b"not a frame",
    "magic prefix": ZSTD_MAGIC[:3] + b"x",
    "empty": b"",
    "msgpack": b"\x83\xa1a\x01",
    "none": None,
}


def layout5_read(stored: bytes) -> bytes:
    """What layouts 4 and 5 read from a bytes column: a format byte, then the bytes or a zstd frame."""
    if stored[0] == 1:
        return zstandard.ZstdDecompressor().decompress(stored[1:])
    assert stored[0] == 0, f"not in layout 5's form: {stored[:8]!r}"
    return stored[1:]


class Attachment(Record):
    """An application's kind with a bytes field: its own table gets a bytes column."""

    name: str = ""
    data: bytes | None = None
    kind: ClassVar[str] = "attachment"
    filterable: ClassVar[dict[str, type]] = {"name": str}


@pytest.fixture
def attachment() -> Iterator[type[Attachment]]:
    register_kind(Attachment)
    yield Attachment
    kinds.unregister("attachment")


def columns(path: Path, table: str, column: str) -> dict[str, Any]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute(f"SELECT id, {column} FROM {table}").fetchall())


@settings(max_examples=120, deadline=None)
@given(st.one_of(
    st.binary(max_size=3 * COMPRESS_AT),
    st.builds(lambda head, tail: head + tail, st.sampled_from([b"\x00", b"\x01", ZSTD_MAGIC, ZSTD_MAGIC[:2]]),
              st.binary(max_size=64)),
    st.builds(lambda part, n: part * n, st.binary(min_size=1, max_size=40), st.integers(1, 400))))
@example(b"\x00" * COMPRESS_AT)  # a reserved first byte that compresses: stored compressed, not prefixed
def test_a_bare_payload_reads_back_and_is_the_bytes_themselves_unless_it_begins_as_another_form(
        payload: bytes) -> None:
    stored = pack_bare_payload(payload)
    assert unpack_payload(stored) == payload
    assert unpack_payload(memoryview(stored)) == payload
    assert layout5_read(prefixed_payload(stored)) == payload  # what reverting the layout leaves
    assert prefixed_payload(pack_payload(payload)) == pack_payload(payload)  # a layout 5 row is left as it is
    reserved = payload[:1] in (b"", b"\x00", b"\x01") or payload[:4] == ZSTD_MAGIC
    if stored[:4] == ZSTD_MAGIC:  # a prefixed payload begins b"\x00", never as the magic
        assert len(payload) >= COMPRESS_AT  # compressed: it paid, reserved first byte or not
    else:
        assert stored == (b"\x00" + payload if reserved else payload)


def test_layout_6_stores_bare_payloads_and_reverting_it_prefixes_them_all(
        tmp_path: Path, attachment: type[Attachment]) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    with mnemostore.open(url) as store:
        saved = {name: store.checkpoints.save("run", {"name": name}, payload=payload, parent=None).id
                 for name, payload in PAYLOADS.items()}
        notes = store.collection(Attachment)
        for name, payload in PAYLOADS.items():
            notes.add(Attachment(id=name, name=name, data=payload))
    bare = columns(path, "mnemo_checkpoint", "payload")
    assert bare[saved["varied"]] == PAYLOADS["varied"] and bare[saved["msgpack"]] == PAYLOADS["msgpack"]
    assert bare[saved["repetitive"]][:4] == ZSTD_MAGIC
    assert columns(path, "mnemo_attachment", "data")["varied"] == PAYLOADS["varied"]

    backend = open_backend(url)
    try:
        Runner(backend).down(target="sqlite.0005_leaner_indexes")
    finally:
        backend.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    for table, column, ids in (("mnemo_checkpoint", "payload", saved), ("mnemo_attachment", "data", None)):
        stored = columns(path, table, column)
        for name, payload in PAYLOADS.items():
            value = stored[ids[name] if ids else name]
            assert (value is None) == (payload is None)
            if value is not None:
                assert layout5_read(value) == payload, (table, name)  # what layout 5's code reads

    with mnemostore.open(url) as store:  # an embedded store migrates itself up again on open
        assert {name: store.checkpoints[id].payload for name, id in saved.items()} == PAYLOADS
        again = store.checkpoints.save("run", {"name": "again"}, payload=b"new", parent=None)
        assert store.checkpoints[again.id].payload == b"new"
        assert {record.id: record.data for record in store.collection(Attachment).all()} == PAYLOADS
    assert columns(path, "mnemo_checkpoint", "payload")[again.id] == b"new"
    # rows of layout 5's form are left as they are (the checkpoints were rewritten by the state-hash rehash, which
    # ran again after the revert; the application kind's rows were not)
    assert columns(path, "mnemo_attachment", "data")["varied"][:1] == b"\x00"
