"""SQLite's replace that keeps a record's `created_at`: one statement (`Layout.insert_sql`'s "keep_created"), the
stored time moved into the new document by `codec.with_created_at_of`, whatever form each document is stored in
(plain JSON, a checkpoint's framed msgpack state, zstd-compressed), and the row given a new, higher `seq`."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.core import codec
from mnemostore.core.compression import FRAMED, deflate, inflate, is_compressed
from mnemostore.core.records import Checkpoint
from mnemostore.testing import factories

LARGE = {"messages": [{"role": "user", "content": f"message {i}: " + "words " * 20} for i in range(200)]}
"""Repeated text: a document holding it is stored compressed (`compression.PAYS_AT`)."""


def _stored(path: Path, table: str, record_id: str) -> tuple[int, int, bytes]:
    """The row's seq, the table's highest seq, and the row's document as stored."""
    with closing(sqlite3.connect(path)) as conn:
        seq, doc = conn.execute(f"SELECT seq, doc FROM {table} WHERE id = ?", (record_id,)).fetchone()
        (highest,) = conn.execute(f"SELECT max(seq) FROM {table}").fetchone()
    return seq, highest, doc


@settings(max_examples=40, deadline=None)
@given(framed=st.tuples(st.booleans(), st.booleans()), compressed=st.tuples(st.booleans(), st.booleans()),
       offset=st.integers(-12 * 60, 14 * 60),
       state=st.dictionaries(st.text("abcé", max_size=6), st.integers(-2**53, 2**53), max_size=4))
def test_the_stored_time_moves_into_a_document_of_every_form(
        framed: tuple[bool, bool], compressed: tuple[bool, bool], offset: int, state: dict[str, int]) -> None:
    """`codec.with_created_at_of` of a new checkpoint's document and a stored one's, each plain JSON or framed
    (its state as msgpack), compressed or not: the new document in its own form, holding the stored time."""
    first = datetime(2024, 6, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(minutes=offset)))
    later = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)

    def document(at: datetime, framed: bool, compressed: bool) -> tuple[Checkpoint, bytes]:
        record = factories.make("checkpoint", 1, created_at=at, updated_at=at, state=state)  # its state proven now
        encoded = codec.encode_framed_document(record) if framed else codec.encode_document(record)
        assert (encoded[:1] == FRAMED) == framed
        return record, deflate(encoded, threshold=0) if compressed else encoded

    _, stored = document(first, framed[0], compressed[0])
    new, written = document(later, framed[1], compressed[1])
    kept = codec.with_created_at_of(written, stored)
    assert is_compressed(kept) == compressed[1] and (inflate(kept)[:1] == FRAMED) == framed[1]
    read = codec.decode("checkpoint", kept)
    assert read.model_dump() == new.model_copy(update={"created_at": first}).model_dump()
    assert read.created_at.utcoffset() == first.utcoffset()


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["heuristic", "embedding", "checkpoint"]), large=st.tuples(st.booleans(), st.booleans()),
       vectors=st.tuples(st.booleans(), st.booleans(), st.booleans()), others=st.integers(0, 9),
       offset=st.integers(-12 * 60, 14 * 60))
def test_a_replaced_record_keeps_its_stored_created_at_and_moves_to_a_new_seq_where_a_vector_is_involved(
        tmp_path_factory: pytest.TempPathFactory, kind: str, large: tuple[bool, bool],
        vectors: tuple[bool, bool, bool], others: int, offset: int) -> None:
    """Stored small or large (compressed), with a vector or not, replaced by a small or large record with a
    vector or not, alone or in a batch of up to ten (one multi-row statement, or `executemany` past
    `SMALL_BATCH`) with stored and new records, with vectors or not: each reads back as given but for
    `created_at`, which is the stored one with its offset. A row with a vector before or after, or written with
    rows that hold one, takes the highest seq, as a replace's does (the vector cache finds changed rows by it);
    else it keeps its seq (rewritten in place)."""
    path = tmp_path_factory.mktemp("kept") / "s.db"
    first = datetime(2024, 6, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(minutes=offset)))
    later = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    old_vector, new_vector, *rest = factories.vectors(2 + others, dimension=8)

    def body(big: bool, vector: bool, embedding: object) -> dict[str, object]:
        held = {"embedding": embedding if vector else None}
        if kind == "checkpoint":
            return {"state": LARGE if big else {"step": 1}, **held}
        return {"metadata": LARGE if big else {"small": True}, **held}

    stored = factories.make(kind, 1, created_at=first, updated_at=first, **body(large[0], vectors[0], old_vector))
    neighbours = [factories.make(kind, 20 + i, embedding=vector if vectors[2] else None)
                  for i, vector in enumerate(rest)]
    with mnemostore.open(f"sqlite:///{path}") as store:
        collection = store.collection(kind)
        collection.put([stored, *neighbours[: others // 2]])
        table = store.backend._written_kind(kind).layout.table  # type: ignore[attr-defined]
        before, _, _ = _stored(path, table, stored.id)
        assert len(collection.search(old_vector, k=others + 1)) == (others // 2) * vectors[2] + vectors[0]
        replacement = factories.make(kind, 2, id=stored.id, created_at=later, updated_at=later,
                                     **body(large[1], vectors[1], new_vector))
        collection.put([*neighbours, replacement], keep_created=True)
        read = collection.get(stored.id)
        assert read is not None
        assert read.model_dump() == replacement.model_copy(update={"created_at": first}).model_dump()
        assert read.created_at.utcoffset() == first.utcoffset()
        assert collection.count() == 1 + others
        found = [hit.record.id for hit in collection.search(old_vector, k=others + 1)]
        assert len(found) == others * vectors[2] + vectors[1] and found.count(stored.id) == vectors[1]
        seq, highest, doc = _stored(path, table, stored.id)
    moved = vectors[0] or vectors[1] or (vectors[2] and others > 0)
    assert seq == highest if moved else seq == before
    assert is_compressed(doc) == large[1]

