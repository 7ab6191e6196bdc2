"""`core.filters` expressions as Chroma `where` clauses over the projection in rows.py.

A translation is a superset of the records the expression matches, and says whether it
is exact. The backend re-checks inexact ones in Python with `core.filters.matches` on
views rebuilt from metadata, so nothing is ever dropped. Exact: equality, membership and
ranges on numbers, booleans and datetimes, None tests on record fields, and/or, and `not`
(pushed down to the comparisons). Checked in Python: ranges on strings (Chroma compares
only numbers), and metadata-key tests that need "key missing" (`== None`, `!=`, `not_in`,
negated ranges), since Chroma cannot test for a missing key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from ...core import codec
from ...core.filters import And, Cmp, Expr, Not, Or
from ...core.jsonvalues import INT64_MAX, INT64_MIN
from ...core.records import Record
from .rows import META_PREFIXES, NULL_PREFIX, nullable_fields

Clause = dict[str, Any] | bool
"""A Chroma where clause, or True (every record) / False (none)."""


class Translation(NamedTuple):
    clause: Clause
    exact: bool


EVERYTHING = Translation(True, True)
NOTHING = Translation(False, True)
_CHROMA_OPS = {"lt": "$lt", "le": "$lte", "gt": "$gt", "ge": "$gte"}
_COMPLEMENT = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_NEGATED = {"eq": "ne", "ne": "eq", "in": "nin", "nin": "in"}


def all_of(parts: Sequence[Translation]) -> Translation:
    clauses: list[dict[str, Any]] = []
    exact = True
    for part in parts:
        exact = exact and part.exact
        if part.clause is False:
            return NOTHING
        if part.clause is not True:
            clauses.append(part.clause)
    if not clauses:
        return Translation(True, exact)
    return Translation(clauses[0] if len(clauses) == 1 else {"$and": clauses}, exact)


def any_of(parts: Sequence[Translation]) -> Translation:
    if any(part.clause is True and part.exact for part in parts):
        return EVERYTHING
    if any(part.clause is True for part in parts):
        return Translation(True, False)
    clauses = [part.clause for part in parts if part.clause is not False]
    exact = all(part.exact for part in parts)
    if not clauses:
        return NOTHING
    return Translation(clauses[0] if len(clauses) == 1 else {"$or": clauses}, exact)


def translate(expr: Expr | None, cls: type[Record], negate: bool = False) -> Translation:
    """A superset translation of `expr` (of `not expr` with `negate`) for records of `cls`."""
    if expr is None:
        return NOTHING if negate else EVERYTHING
    if isinstance(expr, Not):
        return translate(expr.item, cls, not negate)
    if isinstance(expr, (And, Or)):
        parts = [translate(item, cls, negate) for item in expr.items]
        return all_of(parts) if isinstance(expr, And) != negate else any_of(parts)
    if isinstance(expr, Cmp):
        if expr.field[0] == "metadata":
            return _metadata_cmp(expr.field[1], expr.op, expr.value, negate)
        return _field_cmp(cls, expr.field[0], expr.op, expr.value, negate)
    raise TypeError(f"not a filter expression: {expr!r}")


# record fields -----------------------------------------------------------------------
def _field_cmp(cls: type[Record], name: str, op: str, value: Any, negate: bool) -> Translation:
    kind = cls.filterable[name]
    nullable = name in nullable_fields(cls)
    is_null = Translation({NULL_PREFIX + name: True}, True) if nullable else NOTHING
    not_null = Translation({NULL_PREFIX + name: False}, True) if nullable else EVERYTHING
    if op in _CHROMA_OPS:
        if negate:  # not (x < v): x missing, or x >= v (a record field has one type)
            return any_of([is_null, _range(name, kind, _COMPLEMENT[op], value, not_null)])
        return _range(name, kind, op, value, not_null)
    if negate:
        op = _NEGATED[op]
    values = value if op in ("in", "nin") else (value,)
    has_none = any(v is None for v in values)
    stored = [s for s in (_stored(kind, v) for v in values if v is not None) if s is not None]
    if op in ("eq", "in"):
        found = Translation({name: {"$in": stored}} if len(stored) > 1 else {name: stored[0]}, True) \
            if stored else NOTHING
        return any_of([is_null, found]) if has_none else found
    # ne / nin: the value is missing, or present and none of the values
    if stored:
        differs = any_of([is_null, Translation({name: {"$nin": stored} if len(stored) > 1 else {"$ne": stored[0]}},
                                               True)])
    else:
        differs = EVERYTHING
    return all_of([not_null, differs]) if has_none else differs


def _stored(kind: type, value: Any) -> Any:
    """`value` as the field stores it, or None where no stored value can equal it."""
    if kind is datetime:
        return codec.instant_micros(value)
    if kind is int:
        return _as_int(value)
    if kind is float:
        return _as_float(value)
    return value


def _range(name: str, kind: type, op: str, value: Any, not_null: Translation) -> Translation:
    if kind is str:
        return Translation(not_null.clause, False)  # Chroma compares numbers only: checked in Python
    if kind is datetime:
        return Translation({name: {_CHROMA_OPS[op]: codec.instant_micros(value)}}, True)
    if kind is bool:  # cursors order booleans (False < True), as `matches` does
        allowed: list[bool] = {"lt": [False] if value else [], "le": [False, True] if value else [False],
                               "gt": [] if value else [True], "ge": [True] if value else [False, True]}[op]
        if len(allowed) == 2:
            return not_null
        return Translation({name: allowed[0]}, True) if allowed else NOTHING
    bounded = _int_bound(op, value) if kind is int else _float_bound(op, value)
    if bounded is True:
        return not_null
    if bounded is False:
        return NOTHING
    if bounded is None:
        return Translation(not_null.clause, False)
    chroma_op, bound = bounded
    return Translation({name: {chroma_op: bound}}, True)


# metadata keys -----------------------------------------------------------------------
def _metadata_cmp(key: str, op: str, value: Any, negate: bool) -> Translation:
    if op in _CHROMA_OPS:
        if negate or isinstance(value, (str, bool)):
            return Translation(True, False)
        parts = []
        for bounded, prefix in ((_int_bound(op, value), "i"), (_float_bound(op, value), "f")):
            if bounded is True:  # every value of this type matches: Chroma cannot say "key present"
                return Translation(True, False)
            if bounded is None:
                return Translation(True, False)
            if bounded is not False:
                parts.append(Translation({META_PREFIXES[prefix] + key: {bounded[0]: bounded[1]}}, True))
        return any_of(parts)
    if negate:
        op = _NEGATED[op]
    if op in ("ne", "nin"):
        return Translation(True, False)  # true for a missing key: checked in Python
    values = value if op == "in" else (value,)
    if any(v is None for v in values):
        return Translation(True, False)
    return any_of([_metadata_eq(key, v) for v in values])


def _metadata_eq(key: str, value: Any) -> Translation:
    kind = type(value)
    if kind is str:
        return Translation({META_PREFIXES["s"] + key: value}, True)
    if kind is bool:
        return Translation({META_PREFIXES["b"] + key: value}, True)
    parts = []
    as_int, as_float = _as_int(value), _as_float(value)
    if as_int is not None:
        parts.append(Translation({META_PREFIXES["i"] + key: as_int}, True))
    if as_float is not None:
        parts.append(Translation({META_PREFIXES["f"] + key: as_float}, True))
    return any_of(parts)


# numbers -----------------------------------------------------------------------------
def _as_int(value: int | float) -> int | None:
    """The int64 equal to `value`, or None if there is none."""
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return value if INT64_MIN <= value <= INT64_MAX else None


def _as_float(value: int | float) -> float | None:
    """The float equal to `value`, or None if there is none."""
    if isinstance(value, float):
        return value
    try:
        converted = float(value)
    except OverflowError:
        return None
    return converted if converted == value else None


def _int_bound(op: str, value: int | float) -> tuple[str, int] | bool | None:
    """`x <op> value` over int64 x as a Chroma comparison with an int operand, or True / False
    when every / no int64 satisfies it."""
    if isinstance(value, float):
        value = math.floor(value) if op in ("gt", "le") else math.ceil(value)
    if op in ("gt", "ge"):
        if value > INT64_MAX or (value == INT64_MAX and op == "gt"):
            return False
        if value <= INT64_MIN:
            return True if op == "ge" or value < INT64_MIN else ("$gt", INT64_MIN)
    else:
        if value < INT64_MIN or (value == INT64_MIN and op == "lt"):
            return False
        if value >= INT64_MAX:
            return True if op == "le" or value > INT64_MAX else ("$lt", INT64_MAX)
    return _CHROMA_OPS[op], value


def _float_bound(op: str, value: int | float) -> tuple[str, float] | bool | None:
    """`x <op> value` over floats x with a float operand (exact even for ints no float equals);
    None when `value` is beyond the float range."""
    if isinstance(value, float):
        return _CHROMA_OPS[op], value
    try:
        near = float(value)
    except OverflowError:
        return None
    if near == value:
        return _CHROMA_OPS[op], near
    # No float lies strictly between `value` and its nearest float `near`.
    if op in ("gt", "ge"):
        return ("$gte" if near > value else "$gt"), near
    return ("$lte" if near < value else "$lt"), near

