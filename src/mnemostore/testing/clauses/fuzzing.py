"""Garbage into every entry point: each call either succeeds (what was put reads back exactly)
or raises a ValidationError naming the problem (UnsupportedFilter for a query, and
UnsupportedCapability for a search the backend does not declare), and a call that
raised leaves the store exactly as it was: no driver error escapes, nothing is half-written."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ...core.errors import MnemostoreError, UnsupportedCapability, UnsupportedFilter, ValidationError
from ...core.kinds import record_type
from ...core.records import Record
from ...core.store import Store
from ..factories import batch
from ..oracle import assert_same_records
from ..requirements import since
from ..strategies import examples
from . import clear, each_kind

_odd_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.binary(max_size=4),
    st.datetimes(), st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(["\x00", "\ud800", "x" * 3000, "🙂", math.nan, float("inf"), (), frozenset({1})]),
)
_odd_values = st.recursive(
    _odd_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4) | st.integers(), inner,
                                                                max_size=3),
    max_leaves=6,
)


def _field_names(kind: str) -> st.SearchStrategy[str]:
    cls = record_type(kind)
    return st.sampled_from(sorted(cls.model_fields)) | st.text(max_size=6)


def _garbled_record(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid record's fields with a few replaced by odd values or odd names."""
    return st.tuples(st.integers(0, 40), st.dictionaries(_field_names(kind), _odd_values, max_size=3)).map(
        lambda pair: {**batch(kind, 1, start=pair[0])[0].model_dump(), **pair[1]})


def _snapshot(store: Store, kind: str) -> list[Record]:
    return list(store.collection(kind).all(order_by="id"))


def _call(action: Any, allowed: tuple[type[MnemostoreError], ...]) -> Any:
    """Run one call: its result, or the `allowed` error it raised (anything else fails the clause)."""
    try:
        return action()
    except allowed as exc:
        if isinstance(exc, ValidationError):
            assert exc.errors and all(message for _, message in exc.errors), f"an error without a message: {exc!r}"
        return exc


class FuzzClauses:
    @since("1.1")
    @each_kind
    @examples(12)
    @given(data=st.data())
    def test_garbage_into_put_update_query_and_search_fails_cleanly(self, store: Store, kind: str,
                                                                      data: st.DataObject) -> None:
        collection = store.collection(kind)
        clear(store, kind)
        collection.put(batch(kind, 3))
        before = _snapshot(store, kind)
        target = before[0].id
        calls = {
            "put": lambda: collection.put(data.draw(st.lists(_garbled_record(kind), min_size=1, max_size=3))),
            "update": lambda: collection.update(
                target, set=data.draw(st.dictionaries(_field_names(kind), _odd_values, max_size=2)),
                inc=data.draw(st.dictionaries(_field_names(kind), _odd_scalars, max_size=1))),
            "query": lambda: collection.query(data.draw(st.dictionaries(_field_names(kind), _odd_values, max_size=2)),
                                              limit=data.draw(st.none() | st.integers(-2, 5))),
            "search": lambda: store.search(kind, data.draw(st.lists(_odd_scalars, max_size=4)),
                                           k=data.draw(st.integers(-1, 3))),
            "get": lambda: collection.get_many(data.draw(st.lists(_odd_scalars, max_size=3))),
            "delete": lambda: collection.delete(data.draw(st.lists(_odd_scalars, max_size=2))),
        }
        name = data.draw(st.sampled_from(sorted(calls)), label="entry point")
        allowed: tuple[type[MnemostoreError], ...] = {
            "query": (ValidationError, UnsupportedFilter),
            "search": (ValidationError, UnsupportedFilter, UnsupportedCapability),  # undeclared metrics
        }.get(name, (ValidationError,))
        result = _call(calls[name], allowed)
        if isinstance(result, MnemostoreError) or name in ("query", "search", "get"):
            assert_same_records(_snapshot(store, kind), before)  # rejected, or a read: nothing changed
        elif name == "put":  # stored: read back exactly as returned
            assert_same_records(collection.get_many([r.id for r in result]), result)
