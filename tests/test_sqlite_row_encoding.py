"""The SQLite row of a record: the encoder of kinds without bytes fields or a checkpoint state writes
the row the general one writes, and the row reads back as the record."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemostore.backends.sqlite.schema import Layout, sql_value
from mnemostore.core import codec
from mnemostore.core.compression import PAYS_AT, Verdicts, deflate
from mnemostore.core.records import Record
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
