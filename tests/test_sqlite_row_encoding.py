"""The SQLite row of a record: the encoder of kinds without bytes fields or a checkpoint state writes
the row the general one writes, and the row reads back as the record; a batch's statement writes the
columns that are None in every row as NULL."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.backends.sqlite.schema import Layout, sql_value
from mnemostore.core import codec
from mnemostore.core.compression import PAYS_AT, Verdicts, deflate
from mnemostore.core.records import Record
from mnemostore.testing import factories
from mnemostore.testing.strategies import records

PLAIN_KINDS = ("outcome", "heuristic", "anti_pattern", "embedding")
"""The built-in kinds with no bytes field and no `state`: `schema._plain_encoder` writes their rows."""


def general_row(layout: Layout, record: Record) -> tuple[Any, ...]:
    """The row in `insert_sql` order as the general encoder builds it (`codec.encode_document`)."""
    data = record.__dict__
    metadata = data["metadata"]
    return ("" if data["tenant_id"] is None else data["tenant_id"],
            *(data[name] for name in layout.plain_fields),
            *(sql_value(layout.fields[name], data[name]) for name in layout.converted_fields),
            codec.encode_vector(record), orjson.dumps(metadata).decode() if metadata else None,
            deflate(codec.encode_document(record), pays_at=PAYS_AT, verdicts=Verdicts()))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(PLAIN_KINDS).flatmap(lambda kind: st.tuples(st.just(kind), records(kind, max_size=4))))
def test_kinds_without_bytes_fields_get_the_general_row(drawn: tuple[str, list[Record]]) -> None:
    kind, batch = drawn
    layout = Layout.of(kind)
    encode = layout.row_encoder()
    for record in batch:
        row = encode(record)
        assert row == general_row(layout, record)
        back = layout.row_decoder((row[-1], row[-3]))  # (doc, vec), as `read_columns` selects them
        assert {**back.__dict__, "embedding": None} == {**record.__dict__, "embedding": None}
        assert (None if back.embedding is None else back.embedding.tolist()) == (
            None if record.embedding is None else record.embedding.tolist())
    shared = factories.make(kind).created_at  # a batch's records, made at one instant, share its datetime
    for record in batch:
        for times in ({"created_at": shared, "updated_at": shared}, {"created_at": shared}):
            alike = record.model_copy(update=times)
            assert encode(alike) == general_row(layout, alike)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(PLAIN_KINDS), nones=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()),
                                                          min_size=9, max_size=20),
       how=st.sampled_from(["put", "keep_existing", "keep_created"]))
def test_batches_write_none_as_null_in_the_statement_and_read_back_equal(
        tmp_path_factory: pytest.TempPathFactory, kind: str, nones: list[tuple[bool, bool, bool]], how: str) -> None:
    """A batch past `SMALL_BATCH` goes through `KindSQL.batch_insert`: columns that are None in every row
    are NULL in the statement, the rest bound; whichever rows hold None where, each reads back equal."""
    path = tmp_path_factory.mktemp("batch") / "s.db"
    batch = [factories.make(kind, i, **{name: None for name, none in zip(("agent", "project_id"), flags, strict=False)
                                        if none}, **({"metadata": {}} if flags[2] else {}))
             for i, flags in enumerate(nones)]
    with mnemostore.open(f"sqlite:///{path}") as store:
        collection = store.collection(kind)
        collection.put(batch[:3])  # some stored before: keep_existing leaves them, keep_created replaces them
        collection.put(batch, keep_existing=how == "keep_existing", keep_created=how == "keep_created")
        found = {record.id: record for record in collection.get_many([record.id for record in batch])}
        assert [found[record.id].model_dump() for record in batch] == [record.model_dump() for record in batch]
        prepared = store.backend._written_kind(kind)  # type: ignore[attr-defined]
        rows = [prepared.encode(record) for record in batch]
        sql, lean = prepared.batch_insert(rows, "replace")
        every = [i for i in prepared.nullable if all(row[i] is None for row in rows)]
        assert sql.count("NULL") == len(every) and all(len(row) == len(rows[0]) - len(every) for row in lean)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from([*PLAIN_KINDS, "checkpoint"]), flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
       how=st.sampled_from(["put", "keep_existing", "keep_created"]), stored=st.booleans())
def test_a_lone_record_writes_none_as_null_in_the_statement_and_reads_back_equal(
        tmp_path_factory: pytest.TempPathFactory, kind: str, flags: tuple[bool, bool, bool], how: str,
        stored: bool) -> None:
    """A one-record put goes through `KindSQL.one_insert`: its None columns are NULL in the statement, the
    rest bound; stored before or not, it reads back as a put, `keep_existing` or `keep_created` leaves it."""
    path = tmp_path_factory.mktemp("lone") / "s.db"
    nones = {name: None for name, none in zip(("agent", "project_id"), flags, strict=False) if none}
    record = factories.make(kind, 1, **nones, **({"metadata": {}} if flags[2] else {}))
    before = factories.make(kind, 2, id=record.id)
    with mnemostore.open(f"sqlite:///{path}") as store:
        collection = store.collection(kind)
        if stored:
            collection.put([before])
        collection.put([record], keep_existing=how == "keep_existing", keep_created=how == "keep_created")
        expected = before if stored and how == "keep_existing" else \
            record.model_copy(update={"created_at": before.created_at}) if stored and how == "keep_created" else record
        assert collection.get(record.id).model_dump() == expected.model_dump()  # type: ignore[union-attr]
        prepared = store.backend._written_kind(kind)  # type: ignore[attr-defined]
        row = prepared.encode(record)
        sql, lean = prepared.one_insert(row, "keep" if how == "keep_existing" else "replace")
        assert sql.count("NULL") == sum(value is None for value in row) == len(row) - len(lean)
        assert [value for value in row if value is not None] == list(lean)
        with closing(sqlite3.connect(path)) as conn:  # the document is a BLOB, whatever object bound it
            assert conn.execute(f"SELECT DISTINCT typeof(doc) FROM {prepared.layout.table}").fetchall() == [("blob",)]
