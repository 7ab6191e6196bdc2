"""The dict form of filters (config files) means exactly what the `F` form means."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemostore.core.errors import ValidationError
from mnemostore.core.filters import And, Cmp, F, Not, Or, bind, from_dict, matches, to_dict
from mnemostore.core.kinds import record_type
from mnemostore.core.records import KINDS
from mnemostore.testing.strategies import examples, filters, records


@pytest.mark.parametrize("kind", KINDS)
@examples(30)
@given(data=st.data())
def test_dict_form_round_trip_keeps_the_meaning(kind: str, data: st.DataObject) -> None:
    expr = data.draw(filters(kind), label="where")
    written = data.draw(records(kind, max_size=8), label="records")
    cls = record_type(kind)
    original = bind(expr, cls.filterable)
    again = bind(from_dict(to_dict(expr)), cls.filterable)
    assert [matches(original, r) for r in written] == [matches(again, r) for r in written]
    assert to_dict(again) == to_dict(original)


@pytest.mark.parametrize(("spec", "expr"), [
    ({"agent": "coder"}, F.agent == "coder"),
    ({"agent": None}, F.agent == None),  # noqa: E711
    ({"confidence": {"$gte": 0.5}}, F.confidence >= 0.5),
    ({"confidence": {"$gt": 0.1, "$lte": 0.9}}, (F.confidence > 0.1) & (F.confidence <= 0.9)),
    ({"agent": {"$in": ["a", "b"]}}, F.agent.in_(["a", "b"])),
    ({"agent": {"$nin": []}}, F.agent.not_in([])),
    ({"agent": {"$ne": "x"}}, F.agent != "x"),
    ({"metadata.topic": "db"}, F.metadata["topic"] == "db"),
    ({"metadata.a.b": 1}, F.metadata["a.b"] == 1),
    ({"$or": [{"agent": "a"}, {"$not": {"project_id": "p"}}]}, (F.agent == "a") | ~(F.project_id == "p")),
    ({"$and": [{"agent": "a"}], "project_id": "p"}, And((And((F.agent == "a",)), F.project_id == "p"))),
])
def test_dict_form_builds_the_same_expression(spec: dict[str, Any], expr: Any) -> None:
    assert repr(from_dict(spec)) == repr(expr)


@pytest.mark.parametrize("spec", [
    {"agent": {"$like": "c%"}},
    {"$nor": [{"agent": "a"}]},
    {"$and": {"agent": "a"}},
    {"agent": {"$in": "coder"}},
    {"agent": {"$in": ["a"], "$regex": "x"}},
])
def test_malformed_dict_filters_are_rejected(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        from_dict(spec)


@pytest.mark.parametrize("spec", [{"metadata": {"a": 1}}, {"agent": {}}, {"agent": {"x": 1}}, {"nope": 1}])
def test_dict_filters_on_non_scalar_or_unknown_fields_fail_to_bind(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        bind(from_dict(spec), record_type("heuristic").filterable)


def test_a_filter_is_not_a_boolean() -> None:
    with pytest.raises(TypeError):
        bool(F.agent == "a")
    with pytest.raises(TypeError):
        (F.agent == "a") & "agent"  # type: ignore[operator]


def test_to_dict_covers_every_node() -> None:
    expr = Or((And((Cmp(("agent",), "in", ("a",)), Not(F.metadata["k"] < 3))), F.agent.is_none()))
    assert to_dict(expr) == {"$or": [{"$and": [{"agent": {"$in": ["a"]}}, {"$not": {"metadata.k": {"$lt": 3}}}]},
                                     {"agent": {"$eq": None}}]}
