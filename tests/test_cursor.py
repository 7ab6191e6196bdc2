"""Cursors and keyset pagination in core: encoding round trips, binding, and `after` semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemostore.core.errors import ValidationError
from mnemostore.core.filters import F, matches
from mnemostore.core.kinds import record_type
from mnemostore.core.query import after, decode_cursor, encode_cursor, parse_order, sort_records
from mnemostore.core.records import KINDS
from mnemostore.testing.oracle import json_difference
from mnemostore.testing.strategies import examples, orderings, records


@pytest.mark.parametrize("kind", KINDS)
@examples(20)
@given(data=st.data())
def test_a_cursor_decodes_to_the_exact_sort_values(kind: str, data: st.DataObject) -> None:
    written = data.draw(records(kind, max_size=1).filter(bool), label="record")
    cls = record_type(kind)
    order = parse_order(data.draw(orderings(kind), label="order"), cls)
    where = F.agent == "x"
    cursor = encode_cursor(written[0], order, where)
    decoded = decode_cursor(cursor, order, where, cls)
    for key, value in zip(order, decoded, strict=True):
        assert json_difference(value, getattr(written[0], key.field), key.field) is None


@pytest.mark.parametrize("kind", KINDS)
@examples(30)
@given(data=st.data())
def test_after_selects_exactly_the_rows_that_sort_later(kind: str, data: st.DataObject) -> None:
    written = data.draw(records(kind).filter(bool), label="records")
    order = parse_order(data.draw(orderings(kind), label="order"), record_type(kind))
    ordered = sort_records(written, order)
    position = data.draw(st.integers(0, len(ordered) - 1), label="position")
    values = [getattr(ordered[position], key.field) for key in order]
    later = [r.id for r in ordered if matches(after(order, values), r)]
    assert later == [r.id for r in ordered[position + 1:]]


def test_a_cursor_is_bound_to_its_filter_and_ordering() -> None:
    cls = record_type("heuristic")
    record = cls(condition="c", strategy="s")
    order = parse_order("-confidence", cls)
    cursor = encode_cursor(record, order, F.agent == "a")
    with pytest.raises(ValidationError, match="different filter"):
        decode_cursor(cursor, order, F.agent == "b", cls)
    with pytest.raises(ValidationError, match="different filter"):
        decode_cursor(cursor, parse_order("confidence", cls), F.agent == "a", cls)
    for garbage in ("", "%%%", cursor[:-4], cursor[::-1]):
        with pytest.raises(ValidationError, match="cursor"):
            decode_cursor(garbage, order, F.agent == "a", cls)


def test_parse_order_appends_the_id_tie_breaker_once() -> None:
    cls = record_type("outcome")
    assert [tuple(k) for k in parse_order(None, cls)] == [("created_at", False), ("id", False)]
    assert [tuple(k) for k in parse_order(["-success", "+agent"], cls)] == [
        ("success", True), ("agent", False), ("id", False)]
    assert [tuple(k) for k in parse_order(["-id", "agent"], cls)] == [("id", True)]
