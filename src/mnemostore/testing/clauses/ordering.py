"""Ordering and cursor pagination: reference order, None and ties, stable pages."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ...core.collection import OrderBy, Where
from ...core.errors import ValidationError
from ...core.filters import F
from ...core.kinds import record_type
from ...core.protocol import OrderKey
from ...core.records import Record
from ...core.store import Store
from ..factories import BASE_TIME, OPTIONAL_FIELDS, make
from ..oracle import expected_order
from ..requirements import since
from ..strategies import examples, orderings, records
from . import SpecimenFixtures, clear, each_kind, each_kind_and_specimen


def paged_ids(store: Store, kind: str, where: Where, order_by: OrderBy, limit: int) -> list[str]:
    """Every page of a query, concatenated by following cursors."""
    collection = store.collection(kind)
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(10_000):
        page = collection.query(where, order_by=order_by, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        ids.extend(r.id for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return ids
        assert page.items, "a page with a next cursor must not be empty"
    raise AssertionError("pagination did not end")


def tied_batch(kind: str, n: int = 12) -> list[Record]:
    """Records whose sort values collide and are often None, for every orderable field."""
    moments = [BASE_TIME, BASE_TIME.astimezone(timezone(timedelta(hours=-5))), BASE_TIME + timedelta(seconds=1)]
    optional = [name for name in OPTIONAL_FIELDS[kind] if name in record_type(kind).filterable]
    result = []
    for i in range(n):
        overrides: dict[str, Any] = {
            "id": f"t{(i * 7) % n:02d}",  # ids out of insertion order
            "created_at": moments[i % 3],
            "updated_at": moments[(i // 3) % 3],
            "agent": (None, "b", "a", "B")[i % 4],
        }
        base = make(kind, i % 4, **overrides)
        for name in optional:
            if i % 3 == 0:
                overrides[name] = None
            elif record_type(kind).filterable[name] is datetime:
                overrides[name] = moments[(i // 2) % 3]
            elif name not in overrides:
                overrides[name] = getattr(base, name)
        result.append(make(kind, i % 4, **overrides))
    return result


class OrderingClauses(SpecimenFixtures):
    @each_kind_and_specimen
    def test_every_orderable_field_in_both_directions(self, store: Store, kind: str) -> None:
        written = tied_batch(kind)
        store.collection(kind).put(written)
        for field in sorted(record_type(kind).filterable):
            for order_by in (field, "-" + field):
                want = expected_order(kind, written, None, order_by)
                got = [r.id for r in store.collection(kind).all(order_by=order_by)]
                assert got == want, f"order_by={order_by!r}"
                assert paged_ids(store, kind, None, order_by, 5) == want, f"pages of order_by={order_by!r}"

    @each_kind
    def test_missing_values_sort_first_ascending_and_last_descending(self, store: Store, kind: str) -> None:
        written = [make(kind, i, agent=None if i % 2 else f"agent {i}") for i in range(6)]
        store.collection(kind).put(written)
        ascending = [r.agent for r in store.collection(kind).all(order_by="agent")]
        descending = [r.agent for r in store.collection(kind).all(order_by="-agent")]
        assert ascending == [None, None, None, "agent 0", "agent 2", "agent 4"]
        assert descending == ["agent 4", "agent 2", "agent 0", None, None, None]

    @each_kind
    def test_ties_are_broken_by_id_and_pages_stay_stable(self, store: Store, kind: str) -> None:
        written = [make(kind, i, id=f"tie-{(i * 5) % 11:02d}", agent="same", created_at=BASE_TIME)
                   for i in range(11)]
        store.collection(kind).put(written)
        want = sorted(r.id for r in written)
        for order_by in ("agent", "-agent", "created_at", ["-created_at", "agent"], None):
            assert [r.id for r in store.collection(kind).all(order_by=order_by)] == want
            for limit in (1, 3, 11, 12):
                assert paged_ids(store, kind, None, order_by, limit) == want

    @each_kind
    def test_default_order_is_created_at_then_id(self, store: Store, kind: str) -> None:
        written = [make(kind, i, created_at=BASE_TIME + timedelta(seconds=(5 - i) // 2)) for i in range(6)]
        store.collection(kind).put(written)
        assert [r.id for r in store.collection(kind).all()] == expected_order(kind, written, None, "created_at")

    @each_kind_and_specimen
    def test_descending_id_and_filtered_pages(self, store: Store, kind: str) -> None:
        written = tied_batch(kind, 15)
        store.collection(kind).put(written)
        where = F.agent.in_(["a", "b"])
        for order_by in ("-id", ["agent", "-created_at"], ["-updated_at", "-agent"]):
            want = expected_order(kind, written, where, order_by)
            assert paged_ids(store, kind, where, order_by, 2) == want

    @each_kind
    @examples(20)
    @given(data=st.data())
    def test_pages_concatenate_to_the_full_ordered_result(self, store: Store, kind: str, data: st.DataObject) -> None:
        written = data.draw(records(kind), label="records")
        order: list[OrderKey] = data.draw(orderings(kind), label="order")
        limit = data.draw(st.integers(1, 5), label="limit")
        clear(store, kind)
        store.collection(kind).put(written)
        want = expected_order(kind, written, None, order)
        assert [r.id for r in store.collection(kind).all(order_by=order)] == want
        assert paged_ids(store, kind, None, order, limit) == want

    @each_kind
    def test_pages_neither_repeat_nor_skip_when_records_arrive_between_pages(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        written = [make(kind, i, id=f"p{i:02d}") for i in range(0, 20, 2)]
        collection.put(written)
        first = collection.query(order_by="id", limit=4)
        assert [r.id for r in first] == ["p00", "p02", "p04", "p06"]
        collection.put([make(kind, 1, id="p01"), make(kind, 7, id="p07"), make(kind, 21, id="p21")])
        collection.delete(["p10"])
        rest: list[str] = []
        cursor = first.next_cursor
        while cursor is not None:
            page = collection.query(order_by="id", limit=4, cursor=cursor)
            rest.extend(r.id for r in page)
            cursor = page.next_cursor
        assert rest == ["p07", "p08", "p12", "p14", "p16", "p18", "p21"]

    @each_kind
    def test_a_cursor_is_bound_to_its_filter_and_ordering(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put([make(kind, i) for i in range(6)])
        cursor = collection.query(F.project_id == "alpha", order_by="agent", limit=1).next_cursor
        assert cursor is not None
        assert len(collection.query(F.project_id == "alpha", order_by="agent", limit=1, cursor=cursor)) == 1
        for where, order_by in ((F.project_id == "beta", "agent"), (None, "agent"),
                                (F.project_id == "alpha", "-agent"), (F.project_id == "alpha", "created_at")):
            with pytest.raises(ValidationError):
                collection.query(where, order_by=order_by, limit=1, cursor=cursor)
        for garbage in ("", "not a cursor", cursor[:-3], "eyJ4IjoxfQ"):
            with pytest.raises(ValidationError):
                collection.query(F.project_id == "alpha", order_by="agent", limit=1, cursor=garbage)

    @each_kind
    def test_invalid_orderings_and_limits_are_rejected(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        for order_by in ("no_such_field", "metadata", "embedding", "-x; DROP TABLE y"):
            with pytest.raises(ValidationError):
                collection.all(order_by=order_by)
        for limit in (0, -1, 1.5, True):
            with pytest.raises(ValidationError):
                collection.query(limit=limit)  # type: ignore[arg-type]

    @each_kind
    def test_iterate_yields_every_record_once(self, store: Store, kind: str) -> None:
        written = [make(kind, i) for i in range(11)]
        store.collection(kind).put(written)
        got = [r.id for r in store.collection(kind).iterate(order_by="-created_at", batch_size=3)]
        assert got == expected_order(kind, written, None, "-created_at")

    @since("1.3")
    @examples(25)
    @given(data=st.data())
    def test_a_forged_cursor_pages_or_is_refused_as_a_cursor(self, store: Store, data: st.DataObject) -> None:
        """A cursor with the right encoding and fingerprint but forged values (wrong types, naive or
        unparsable datetimes, lists, huge numbers) either reads a page or raises ValidationError
        naming `cursor`: never a driver error, a bare TypeError or an assertion."""
        if not store.heuristics.count():
            store.heuristics.put([make("heuristic", i) for i in range(3)])
        order_by = data.draw(st.sampled_from(["created_at", "-confidence", "agent", "-occurrence_count"]))
        first = store.heuristics.query(order_by=order_by, limit=1)
        assert first.next_cursor is not None
        fingerprint, values = orjson.loads(base64.urlsafe_b64decode(first.next_cursor + "=" * 4))
        forged_value = st.one_of(
            st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=6),
            st.sampled_from(["not-a-date", "2025-01-01T00:00:00", "2025-01-01T00:00:00+00:00", "\x00"]),
            st.lists(st.integers(-9, 9), max_size=2),
            st.dictionaries(st.text(max_size=2), st.integers(-9, 9), max_size=1))
        forged = data.draw(st.lists(forged_value, min_size=len(values), max_size=len(values)), label="values")
        cursor = base64.urlsafe_b64encode(orjson.dumps([fingerprint, forged])).decode().rstrip("=")
        try:
            page = store.heuristics.query(order_by=order_by, limit=2, cursor=cursor)
        except ValidationError as exc:
            assert [field for field, _ in exc.errors] == ["cursor"], exc.errors
        else:
            assert len(page.items) <= 2
