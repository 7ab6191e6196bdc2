"""Query filters against the oracle: random records, random expressions, same answer."""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ...core.capabilities import Capability
from ...core.collection import Where
from ...core.errors import UnsupportedFilter, ValidationError
from ...core.filters import And, Cmp, Expr, F, Not, Or, to_dict
from ...core.kinds import record_type
from ...core.records import Heuristic, Record
from ...core.shapes import SHAPE_OPS, Param, QueryShape
from ...core.store import Store
from ..factories import BASE_TIME, batch, make
from ..oracle import assert_same_records, expected_ids, expected_order
from ..requirements import requires, since, skip_if_declared
from ..strategies import examples, filters, operands, orderings, records
from . import SpecimenFixtures, clear, each_kind, each_kind_and_specimen


def check_filter(store: Store, kind: str, written: list[Record], where: Expr) -> None:
    """query, count, the dict form and delete all agree with `core.filters.matches`."""
    collection = store.collection(kind)
    wanted = expected_ids(kind, written, where)
    got = [r.id for r in collection.all(where)]
    assert got == expected_order(kind, written, where), f"query({where!r})"
    assert set(got) == wanted
    assert collection.count(where) == len(wanted), f"count({where!r})"
    assert {r.id for r in collection.all(to_dict(where))} == wanted, f"dict form of {where!r}"
    assert collection.delete(where=where) == len(wanted), f"delete({where!r})"
    assert {r.id for r in collection.all()} == {r.id for r in written} - wanted


BEYOND_64_BITS = (2**64, -(2**64) - 1, 2**70 + 1)
"""Ints no 64-bit column holds: a prepared statement compiled for a 64-bit value must not take them as one."""


def shaped(data: st.DataObject, kind: str, where: Expr) -> tuple[QueryShape, dict[str, Any], dict[str, Any]]:
    """`where` as a shape, some of its comparisons' values made params, with two sets of values:
    the filter's own (or an int beyond 64 bits), and others drawn for the same fields."""
    cls = record_type(kind)
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}

    def param(expr: Expr) -> Expr:
        if isinstance(expr, Cmp):
            if expr.field[0] == "metadata" or expr.op not in SHAPE_OPS or not data.draw(st.booleans(), label="param"):
                return expr
            name = f"p{len(first)}"
            numeric = type(expr.value) in (int, float)
            first[name] = data.draw(st.sampled_from(BEYOND_64_BITS), label=name) if numeric and data.draw(
                st.booleans(), label="beyond 64 bits") else expr.value
            second[name] = data.draw(operands(cls.filterable[expr.field[0]], expr.op), label=name)
            return Cmp(expr.field, expr.op, Param(name))
        if isinstance(expr, (And, Or)):
            return type(expr)(tuple(param(item) for item in expr.items))
        assert isinstance(expr, Not)
        return Not(param(expr.item))

    shape = QueryShape(cls, param(where), data.draw(orderings(kind), label="order"))
    return shape, first, second


Values = tuple[dict[str, Any], dict[str, Any]]


def _stored_shape(store: Store, kind: str,
                  data: st.DataObject) -> tuple[list[Record], QueryShape, Values, int | None]:
    """Records of `kind` drawn and stored (the kind cleared first), a shape of a drawn filter the store can run,
    two sets of its values (`shaped`) and a limit (or None)."""
    caps = store.capabilities
    written = data.draw(records(kind), label="records")
    where = data.draw(filters(kind, ranges=Capability.FILTER_RANGE in caps,
                              metadata_keys=Capability.FILTER_METADATA in caps), label="where")
    shape, first, second = shaped(data, kind, where)
    limit = data.draw(st.none() | st.integers(1, 4), label="limit")
    clear(store, kind)
    store.collection(kind).put(written)
    return written, shape, (first, second), limit


class FilterClauses(SpecimenFixtures):
    @since("1.8")
    @each_kind_and_specimen
    @examples(25)
    @given(data=st.data())
    def test_a_prepared_shape_selects_what_its_filter_does(self, store: Store, kind: str,
                                                           data: st.DataObject) -> None:
        """`fetch` of a shape (some values params) gives what the reference gives for the filter with the
        values in, in the shape's order, under a limit too; the same shape again with other values (and
        with None, or an int beyond 64 bits) too: a backend compiling a shape once binds each call's values."""
        written, shape, (first, second), limit = _stored_shape(store, kind, data)
        collection = store.collection(kind)
        by_id = {record.id: record for record in written}
        for values in (first, second, first):
            expected = expected_order(kind, written, shape.where_with(values), shape.order)[:limit]
            found = collection.fetch(shape, values, limit=limit)
            assert [r.id for r in found] == expected, f"fetch({shape!r}, {values!r}, limit={limit})"
            assert_same_records(found, [by_id[i] for i in expected])

    @since("1.15")
    @each_kind_and_specimen
    @examples(15)
    @given(data=st.data())
    def test_a_shape_s_document_reads_give_what_fetch_gives(self, store: Store, kind: str,
                                                            data: st.DataObject) -> None:
        """A backend's optional reads of a shape's stored fields (`query_shape_documents`, with
        `query_shapes_documents` and `shapes_reader` where it has them: the LangGraph saver's flat reads) give
        the records `fetch` gives, in its order, a read of several shapes each one's, a read naming its fields
        those alone; None (a read the backend would rather not make that way) is allowed. Skipped without them."""
        backend, tenant = store.backend, store.tenant
        documents = getattr(backend, "query_shape_documents", None)
        if documents is None:
            pytest.skip("the backend has no query_shape_documents (optional: the saver then reads records)")
        several = getattr(backend, "query_shapes_documents", None)
        reader_of = getattr(backend, "shapes_reader", None)
        _, shape, (first, second), limit = _stored_shape(store, kind, data)
        collection = store.collection(kind)
        reader = None if reader_of is None else reader_of(tenant, [(kind, shape, limit, None),
                                                                   (kind, shape, limit, ("id",))])
        for values in (first, second, first):
            expected = [record.id for record in collection.fetch(shape, values, limit=limit)]
            found = documents(kind, tenant, shape, values, limit)
            assert found is None or [fields["id"] for fields in found] == expected, "query_shape_documents"
            both = None if several is None else several(tenant, [(kind, shape, values, limit)] * 2)
            assert both is None or [[fields["id"] for fields in part] for part in both] == [expected] * 2
            read = None if reader is None else reader((values, values))
            assert read is None or (read[1] == [{"id": i} for i in expected]
                                    and [fields["id"] for fields in read[0]] == expected), "shapes_reader"

    @since("1.17")
    @each_kind_and_specimen
    @examples(10)
    @given(data=st.data())
    def test_a_shape_s_documents_are_its_records_stored_fields(self, store: Store, kind: str,
                                                               data: st.DataObject) -> None:
        """Each document of a backend's optional `query_shape_documents` (and of `query_shapes_documents`) holds
        the stored fields of the record `fetch` gives in its place, as the LangGraph saver's flat reads take them:
        datetimes as RFC 3339 text, bytes fields as bytes, no embedding; parsed (`codec.parse_fields`), they make
        that record. Skipped without them."""
        from ...core.codec import _datetime_fields, binary_fields, parse_fields

        backend, tenant = store.backend, store.tenant
        documents = getattr(backend, "query_shape_documents", None)
        if documents is None:
            pytest.skip("the backend has no query_shape_documents (optional: the saver then reads records)")
        several = getattr(backend, "query_shapes_documents", None)
        _, shape, (first, _), limit = _stored_shape(store, kind, data)
        cls = record_type(kind)
        expected = store.collection(kind).fetch(shape, first, limit=limit, vectors=False)
        reads = [documents(kind, tenant, shape, first, limit)]
        if several is not None:
            reads += several(tenant, [(kind, shape, first, limit)]) or [None]
        for found in reads:
            if found is None:
                continue  # the backend would rather be asked `query_shape`
            for fields in found:
                assert "embedding" not in fields, "a document holds no embedding"
                for name in _datetime_fields(cls):
                    assert fields.get(name) is None or type(fields[name]) is str, f"{name}: RFC 3339 text"
                for name in binary_fields(cls):
                    assert fields.get(name) is None or type(fields[name]) is bytes, f"{name}: bytes"
            assert_same_records([cls(**parse_fields(cls, dict(fields))) for fields in found], expected, vectors=False)

    @since("1.18")
    @each_kind_and_specimen
    @examples(10)
    @given(data=st.data())
    def test_a_native_side_s_document_reads_give_what_the_backend_s_give(self, store: Store, kind: str,
                                                                         data: st.DataObject) -> None:
        """Under the async facade, the document reads a backend's native async side implements (`DOCUMENT_READS`:
        the LangGraph saver's async methods await them) give what the sync backend's give for the same reads,
        one shape and two at once. Skipped under the sync facade and on a side without them."""
        calls = store._async._calls
        one, several = calls.native("query_shape_documents"), calls.native("query_shapes_documents")
        if not (one or several):
            pytest.skip("no native async side with document reads (optional: the saver awaits them in the executor)")
        backend: Any = store.backend
        tenant = store.tenant
        _, shape, (first, second), limit = _stored_shape(store, kind, data)
        for values in (first, second):
            if one:
                assert store._run(calls("query_shape_documents", kind, tenant, shape, values, limit)) == \
                    backend.query_shape_documents(kind, tenant, shape, values, limit), "query_shape_documents"
            if several:
                reads = [(kind, shape, values, limit), (kind, shape, second, None)]
                assert store._run(calls("query_shapes_documents", tenant, reads)) == \
                    backend.query_shapes_documents(tenant, reads), "query_shapes_documents"

    @since("1.16")
    @each_kind_and_specimen
    @examples(15)
    @given(data=st.data())
    def test_a_records_reader_gives_what_query_shape_gives(self, store: Store, kind: str,
                                                           data: st.DataObject) -> None:
        """A backend's optional `records_reader` (the sync facade keeps one per shape for `fetch` and a run's
        `latest`) gives the records `query_shape` gives for each call's values, in its order, with vectors and
        without, and keeps doing so after records are written and deleted. Skipped without it."""
        backend, tenant = store.backend, store.tenant
        reader_of = getattr(backend, "records_reader", None)
        if reader_of is None:
            pytest.skip("the backend has no records_reader (optional: the facade then calls query_shape)")
        written, shape, (first, second), limit = _stored_shape(store, kind, data)
        readers = {vectors: reader_of(kind, tenant, shape, limit, vectors) for vectors in (True, False)}
        collection = store.collection(kind)
        for step in range(2):
            for values in (first, second, first):
                checked = shape.check(values)
                for vectors, reader in readers.items():
                    expected = backend.query_shape(kind, tenant, shape, checked, limit, vectors)
                    found = reader(checked)
                    assert [r.id for r in found] == [r.id for r in expected], f"records_reader({values!r})"
                    assert_same_records(found, expected)
            if step == 0:  # the same readers after the records change
                collection.delete([r.id for r in written[: len(written) // 2]])
                collection.put(data.draw(records(kind), label="more records"))

    @since("1.8")
    def test_a_prepared_shape_checks_its_values(self, store: Store) -> None:
        """A value a filter would refuse is refused by `fetch` too, naming the field; so is a missing one."""
        store.heuristics.put(batch("heuristic", 3))
        shape = QueryShape(Heuristic, (F.agent == Param("agent")) & (F.confidence >= Param("floor")), "-confidence")
        for values, field in (({"agent": 1, "floor": 0.5}, "where.agent"), ({"agent": "a", "floor": "x"},
                              "where.confidence"), ({"agent": "\x00", "floor": 0.5}, "where.agent"),
                              ({"agent": "a"}, "values"), ({"agent": "a", "floor": 0.5, "x": 1}, "values")):
            with pytest.raises(ValidationError) as raised:
                store.heuristics.fetch(shape, values)
            assert raised.value.errors[0][0] == field, raised.value.errors
        if Capability.FILTER_RANGE not in store.capabilities:
            with pytest.raises(UnsupportedFilter):
                store.heuristics.fetch(shape, {"agent": "coder", "floor": 0.5})

    @each_kind_and_specimen
    @examples(30)
    @given(data=st.data())
    def test_filters_agree_with_the_reference_semantics(self, store: Store, kind: str, data: st.DataObject) -> None:
        caps = store.capabilities
        written = data.draw(records(kind), label="records")
        where = data.draw(filters(kind, ranges=Capability.FILTER_RANGE in caps,
                                  metadata_keys=Capability.FILTER_METADATA in caps), label="where")
        clear(store, kind)
        store.collection(kind).put(written)
        check_filter(store, kind, written, where)

    @each_kind
    def test_equality_and_membership(self, store: Store, kind: str) -> None:
        written = batch(kind, 9)
        store.collection(kind).put(written)
        for where in (F.agent == "coder", F.agent != "coder", F.agent.in_(["coder", "critic"]),
                      F.agent.not_in(["coder", "critic"]), F.agent.in_([]), F.agent.not_in([]),
                      (F.agent == "coder") | (F.project_id == "beta"), ~(F.agent == "coder"),
                      (F.agent == "coder") & ~(F.project_id == "alpha"), F.id == written[3].id):
            check_filter(store, kind, written, where)
            store.collection(kind).put(written)

    @each_kind_and_specimen
    def test_none_means_missing(self, store: Store, kind: str) -> None:
        written = [make(kind, i, agent=None if i % 3 == 0 else "coder") for i in range(6)]
        store.collection(kind).put(written)
        for where in (F.agent == None, F.agent != None, F.agent.in_([None, "x"]),  # noqa: E711
                      F.agent.not_in([None]), F.agent != "coder", F.agent.is_none()):
            check_filter(store, kind, written, where)
            store.collection(kind).put(written)

    @since("1.5")
    @each_kind_and_specimen
    def test_a_negated_comparison_keeps_the_records_without_the_field(self, store: Store, kind: str) -> None:
        """NOT of a comparison with a missing field is true: SQL's `=` is unknown on NULL, and NOT keeps it unknown."""
        written = [make(kind, i, agent=None if i % 3 == 0 else "coder") for i in range(6)]
        store.collection(kind).put(written)
        for where in (~(F.agent == "coder"), ~(F.agent.in_(["coder"])), ~((F.agent == "coder") & (F.id != "x"))):
            check_filter(store, kind, written, where)
            store.collection(kind).put(written)

    @each_kind_and_specimen
    @requires(Capability.FILTER_RANGE)
    def test_ranges_on_numbers_strings_and_datetimes(self, store: Store, kind: str) -> None:
        written = batch(kind, 9)
        store.collection(kind).put(written)
        middle = BASE_TIME + timedelta(minutes=4)
        for where in (F.created_at > middle, F.created_at >= middle, F.created_at < middle, F.created_at <= middle,
                      F.created_at > middle.astimezone(timezone(timedelta(hours=-7))),
                      F.agent >= "critic", F.agent < "d", F.id > written[4].id,
                      (F.created_at >= middle) & (F.created_at < middle + timedelta(minutes=2))):
            check_filter(store, kind, written, where)
            store.collection(kind).put(written)

    @requires(Capability.FILTER_RANGE)
    def test_ranges_on_kind_specific_numbers(self, store: Store) -> None:
        written = batch("heuristic", 12)
        store.heuristics.put(written)
        for where in (F.confidence >= 0.5, F.confidence < 0.3, F.confidence > 1, F.occurrence_count <= 3,
                      F.occurrence_count > 2.5, (F.confidence >= 0.2) & (F.success_count < 3)):
            check_filter(store, "heuristic", written, where)
            store.heuristics.put(written)

    @requires(Capability.FILTER_METADATA)
    def test_metadata_keys_with_missing_keys_and_type_mismatches(self, store: Store) -> None:
        values = [None, True, False, 0, 1, 1.0, "1", "true", [1], {"a": 1}, 2**63 - 1, -0.0, 0.5]
        written = [make("outcome", i, metadata={"v": value}) for i, value in enumerate(values)]
        written.append(make("outcome", 99, metadata={}))
        store.outcomes.put(written)
        m = F.metadata["v"]
        cases = [m == 1, m == True, m == 0, m == "1", m != 1, m == None, m != None, m.in_([1, "true"]),  # noqa: E712, E711
                 m.not_in([True, 0]), F.metadata["missing"].is_none(), F.metadata["missing"] != "x",
                 m == 2**63 - 1, m == 0.0]
        if Capability.FILTER_RANGE in store.capabilities:
            cases += [m > 0, m >= 0, m < 1, m > "0", F.metadata["missing"] < 1]
        for where in cases:
            check_filter(store, "outcome", written, where)
            store.outcomes.put(written)

    @since("1.9")
    @requires(Capability.FILTER_METADATA)
    def test_metadata_texts_with_quotes_escapes_and_unicode_filter_exactly(self, store: Store) -> None:
        """A metadata text matches itself under its own key and nothing else, however the backend keeps
        metadata (JSON with escapes, a substring test on the stored text before parsing it)."""
        for text in ('a"b', "a\\b", "tab\there", "new\nline", "\u00e9", "\u2028", "", "[1]", "{}", "topic"):
            holding = [{"topic": text}, {"other": text}, {"topic": [text]}, {"topic": {"k": text}},
                       {"topic": text + "x"}, {}, {"topic": 1}, {"topic": None}]
            written = [make("outcome", i, metadata=metadata) for i, metadata in enumerate(holding)]
            for where in (F.metadata["topic"] == text, F.metadata["topic"] != text):
                store.outcomes.put(written)
                check_filter(store, "outcome", written, where)

    def test_bool_fields_are_not_numbers(self, store: Store) -> None:
        written = batch("outcome", 8)
        store.outcomes.put(written)
        check_filter(store, "outcome", written, F.success == True)  # noqa: E712
        store.outcomes.put(written)
        check_filter(store, "outcome", written, F.success != False)  # noqa: E712
        with pytest.raises(ValidationError):
            store.outcomes.count(F.success == 1)
        with pytest.raises(ValidationError):
            store.outcomes.count(F.duration_ms == True)  # noqa: E712

    @each_kind
    def test_range_filters_without_the_capability_raise_unsupported_filter(self, store: Store, kind: str) -> None:
        skip_if_declared(store.capabilities, Capability.FILTER_RANGE)
        store.collection(kind).put(batch(kind, 3))
        for call in (lambda w: store.collection(kind).all(w), store.collection(kind).count,
                     lambda w: store.collection(kind).delete(where=w)):
            with pytest.raises(UnsupportedFilter):
                call(F.created_at > BASE_TIME)
        assert store.collection(kind).count() == 3

    @each_kind
    def test_metadata_filters_without_the_capability_raise_unsupported_filter(self, store: Store, kind: str) -> None:
        skip_if_declared(store.capabilities, Capability.FILTER_METADATA)
        store.collection(kind).put(batch(kind, 3))
        for call in (lambda w: store.collection(kind).all(w), store.collection(kind).count,
                     lambda w: store.collection(kind).delete(where=w)):
            with pytest.raises(UnsupportedFilter):
                call(F.metadata["parity"] == "even")
        assert store.collection(kind).count() == 3

    def test_invalid_filters_are_rejected_before_reaching_the_backend(self, store: Store) -> None:
        store.heuristics.put(batch("heuristic", 3))
        invalid: list[Where] = [
            F.no_such_field == 1, F.confidence == "high", F.confidence < None,
            F.created_at == BASE_TIME.replace(tzinfo=None), F.agent == "a\x00b",
            F.confidence == float("nan"), F.embedding == 1, F.metadata == 1,
            {"confidence": {"$gte": 0.5, "$like": "x"}}, {"$nor": []}, {"agent": {"$in": "coder"}},
        ]
        for where in invalid:
            with pytest.raises(ValidationError):
                store.heuristics.count(where)
        assert store.heuristics.count() == 3
