"""Hypothesis strategies: records and filter expressions drawn from small, nasty value pools.

Pools are small so that equality and ties actually happen, and nasty so that type
mismatches (bool vs int, int vs float, str vs number), missing keys, None, int64 limits,
combining characters and equal instants with different offsets are exercised.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ..core.filters import RANGE_OPS, And, Cmp, Expr, Not, Or
from ..core.kinds import record_type
from ..core.protocol import OrderKey
from ..core.records import Record
from .factories import BASE_TIME
from .specimen import SPECIMEN

SUITE_SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.differing_executors],
)
"""Base settings of every property clause: the `store` fixture is reused across examples
(clauses clear it themselves), a slow backend must not fail on timing, and one clause runs
on every backend's test class (each its own executor)."""


def examples(n: int) -> settings:
    """Suite settings with `n` examples (kept small: the whole suite must stay quick)."""
    return settings(SUITE_SETTINGS, max_examples=n)


TEXTS: tuple[str, ...] = ("", "a", "b", "A", "coder", "planner", "é", "e\u0301", "😀", "\uffef", "a b", "%", "_")
IDS: tuple[str, ...] = (*(f"r{j:02d}" for j in range(24)), "é", "e\u0301", "Z", "a", "😀", "a b", "%")
COUNTS: tuple[int, ...] = (0, 1, 2, 7, 2**53 + 1, 2**63 - 1)
NUMBERS: tuple[int | float, ...] = (0, 1, 2, 7, -1, 0.5, 1.0, -0.0, 7.000001, 2**53 + 1, 2.0**53, 2**63 - 1, 2.0**63)
FRACTIONS: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 1 / 3, 1.0)
INSTANTS = (
    BASE_TIME,
    BASE_TIME.astimezone(timezone(timedelta(hours=5, minutes=30))),  # same instant, other offset
    BASE_TIME + timedelta(microseconds=1),
    BASE_TIME - timedelta(days=1, hours=3),
    (BASE_TIME + timedelta(hours=7)).astimezone(timezone(timedelta(hours=-9, minutes=-30))),
    BASE_TIME.replace(year=1999),
)
META_KEYS: tuple[str, ...] = ("a", "b", "c")
META_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, 1, 1.0, -0.0, 2.5, 2**53 + 1, 2**63 - 1, "1", "a", "", "é", "true",
)
META_VALUES: tuple[Any, ...] = (*META_SCALARS, [1], [], {"x": 1}, {})

_text = st.sampled_from(TEXTS)
_optional_text = st.none() | _text
_instant = st.sampled_from(INSTANTS)


def _kind_fields(kind: str) -> dict[str, st.SearchStrategy[Any]]:
    if kind == "outcome":
        return {"task_type": _text, "task_description": _text, "success": st.booleans(),
                "strategy_used": _text, "duration_ms": st.none() | st.sampled_from(COUNTS),
                "error_message": _optional_text}
    if kind == "heuristic":
        return {"condition": _text, "strategy": _text, "confidence": st.sampled_from(FRACTIONS),
                "occurrence_count": st.sampled_from(COUNTS), "success_count": st.sampled_from(COUNTS),
                "last_validated": st.none() | _instant}
    if kind == "anti_pattern":
        return {"pattern": _text, "occurrence_count": st.sampled_from(COUNTS), "last_seen": st.none() | _instant}
    if kind == "checkpoint":
        return {"run_id": st.sampled_from(("run-1", "run-2", "é")), "node_id": _text,
                "sequence": st.sampled_from(COUNTS), "branch_id": st.sampled_from(("main", "b")),
                "state": st.sampled_from(({}, {"x": 1}, {"x": [1, 2]}))}
    if kind == "embedding":
        return {"namespace": st.sampled_from(("default", "docs", "é")), "text": _text, "model": _text}
    if kind == SPECIMEN:
        return {"label": _text, "count": st.sampled_from(COUNTS), "score": st.none() | st.sampled_from(NUMBERS),
                "flag": st.booleans(), "due": st.none() | _instant}
    raise ValueError(f"unknown kind {kind!r}")


def metadata() -> st.SearchStrategy[dict[str, Any]]:
    """Metadata over the keys filters use, each key present or missing."""
    return st.dictionaries(st.sampled_from(META_KEYS), st.sampled_from(META_VALUES), max_size=len(META_KEYS))


@st.composite
def records(draw: st.DrawFn, kind: str, max_size: int = 12) -> list[Record]:
    """A batch of valid records of `kind` with unique ids and colliding field values."""
    ids = draw(st.lists(st.sampled_from(IDS), unique=True, max_size=max_size))
    cls = record_type(kind)
    specific = _kind_fields(kind)
    batch: list[Record] = []
    for record_id in ids:
        values = {name: draw(strategy) for name, strategy in specific.items()}
        batch.append(cls(
            id=record_id, agent=draw(_optional_text), project_id=draw(_optional_text),
            created_at=draw(_instant), updated_at=draw(_instant), metadata=draw(metadata()), **values))
    return batch


def operands(field_type: type | None, op: str) -> st.SearchStrategy[Any]:
    """Operands a filter on a field of this type accepts for `op` (None where allowed)."""
    ranged = op in RANGE_OPS
    if field_type is None:
        pool = [v for v in META_SCALARS if not (ranged and (v is None or isinstance(v, bool)))]
        return st.sampled_from(pool)
    base: st.SearchStrategy[Any]
    if field_type is str:
        base = _text
    elif field_type is bool:
        base = st.booleans()
    elif field_type is datetime:
        base = _instant
    else:
        base = st.sampled_from(NUMBERS + FRACTIONS)
    return base if ranged else st.none() | base


@st.composite
def comparisons(draw: st.DrawFn, kind: str, *, ranges: bool = True, metadata_keys: bool = True) -> Expr:
    """One comparison on a filterable field or a metadata key (present, missing or mistyped)."""
    cls = record_type(kind)
    names: list[tuple[str, ...]] = [(name,) for name in cls.filterable]
    if metadata_keys:
        names += [("metadata", key) for key in (*META_KEYS, "missing")]
    path = draw(st.sampled_from(names))
    field_type = cls.filterable.get(path[0]) if len(path) == 1 else None
    ops = ["eq", "ne", "in", "nin"]
    if ranges and field_type is not bool:
        ops += sorted(RANGE_OPS)
    op = draw(st.sampled_from(ops))
    if op in ("in", "nin"):
        value: Any = tuple(draw(st.lists(operands(field_type, "eq"), max_size=3)))
    else:
        value = draw(operands(field_type, op))
    return Cmp(path, op, value)  # type: ignore[arg-type]


def filters(kind: str, *, ranges: bool = True, metadata_keys: bool = True,
            max_leaves: int = 5) -> st.SearchStrategy[Expr]:
    """Filter expressions with and/or/not over `comparisons`."""
    leaf = comparisons(kind, ranges=ranges, metadata_keys=metadata_keys)
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3).map(lambda items: And(tuple(items))),
            st.lists(inner, min_size=1, max_size=3).map(lambda items: Or(tuple(items))),
            inner.map(Not),
        ),
        max_leaves=max_leaves,
    )


def orderings(kind: str) -> st.SearchStrategy[list[OrderKey]]:
    """One or two ordering keys over the kind's orderable fields, each ascending or descending."""
    fields = sorted(record_type(kind).filterable)
    key = st.builds(OrderKey, st.sampled_from(fields), st.booleans())
    return st.lists(key, min_size=1, max_size=2, unique_by=lambda k: k.field)
