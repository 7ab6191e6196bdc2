"""LangGraph store filters: their meaning, and the part of them mnemostore's filter language runs.

A filter maps top-level value keys to a value (equality, Python's `==`: `True == 1`), a nested
dict (every given key matches, recursively) or a list (element-wise), or to operators `$eq`,
`$ne`, `$gt`, `$gte`, `$lt`, `$lte`. Ranges compare numbers with numbers and strings with
strings; a missing value or one of another type does not match (bools are not numbers).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from ...core.errors import ValidationError
from ...core.filters import Cmp, Expr, F, Field, Not, Or, all_of, bind
from ...core.jsonvalues import INT64_MAX, INT64_MIN, check_text
from ...kinds.langgraph_items import LangGraphItem

_RANGES: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
OPERATORS = frozenset({"$eq", "$ne", *_RANGES})


def _is_operators(spec: Any) -> bool:
    return isinstance(spec, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in spec)


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Reject what no store could answer (unknown operators, ranges over None or containers)."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise ValidationError.one("filter", f"must be a dict, not {type(filter).__name__}")
    for key, spec in filter.items():
        _check_spec(f"filter.{key}", spec)


def _check_spec(where: str, spec: Any) -> None:
    if _is_operators(spec):
        for name, operand in spec.items():
            if name not in OPERATORS:
                known = ", ".join(sorted(OPERATORS))
                raise ValidationError.one(where, f"unknown operator {name!r}; use one of {known}")
            if name in _RANGES and _range_bound(operand) is None:
                raise ValidationError.one(where, f"{name} compares with a number or a string, not {operand!r}")
    elif isinstance(spec, Mapping):
        for key, inner in spec.items():
            _check_spec(f"{where}.{key}", inner)
    elif isinstance(spec, list | tuple):
        for index, inner in enumerate(spec):
            _check_spec(f"{where}[{index}]", inner)


def _range_bound(value: Any) -> int | float | str | None:
    """The bound a range compares with (a bool counts as 0 or 1), or None if it cannot be one."""
    if type(value) is bool:
        return int(value)
    if type(value) is str or (type(value) is int) or (type(value) is float and math.isfinite(value)):
        return value
    return None


# the meaning: evaluated on an item's value ----------------------------------------------
def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a (checked) filter."""
    return not filter or all(_matches(value.get(key), spec) for key, spec in filter.items())


def _matches(actual: Any, spec: Any) -> bool:
    if _is_operators(spec):
        return all(_apply(actual, name, operand) for name, operand in spec.items())
    if isinstance(spec, Mapping):
        return isinstance(actual, dict) and all(_matches(actual.get(k), v) for k, v in spec.items())
    if isinstance(spec, list | tuple):
        return (isinstance(actual, list | tuple) and len(actual) == len(spec)
                and all(_matches(a, s) for a, s in zip(actual, spec, strict=True)))
    return bool(actual == spec)


def _apply(actual: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return bool(actual == operand)
    if name == "$ne":
        return bool(actual != operand)
    bound = _range_bound(operand)
    kinds = (str,) if type(bound) is str else (int, float)  # bools are not numbers here
    return type(actual) in kinds and _RANGES[name](actual, bound)


# the part the store runs ------------------------------------------------------------------
def push_down(filter: Mapping[str, Any] | None) -> tuple[Expr | None, bool]:
    """A mnemostore filter on `metadata` selecting a superset of the matches, and whether it is exact."""
    parts: list[Expr] = []
    exact = True
    for key, spec in (filter or {}).items():
        expr = _push(F.metadata[key], spec) if check_text(key) is None else None
        if expr is None:
            exact = False
            continue
        try:
            parts.append(bind(expr, LangGraphItem.filterable))
        except (ValidationError, TypeError):
            exact = False
    return all_of(*parts), exact


def _push(field: Field, spec: Any) -> Expr | None:
    if _is_operators(spec):
        parts = [_push_operator(field, name, operand) for name, operand in spec.items()]
        if any(part is None for part in parts):
            return None
        return all_of(*parts)
    if isinstance(spec, Mapping | list | tuple):
        return None  # nested and element-wise matches are checked on the value itself
    return _equal(field, spec)


def _push_operator(field: Field, name: str, operand: Any) -> Expr | None:
    if name == "$eq":
        return _equal(field, operand)
    if name == "$ne":
        equal = _equal(field, operand)
        return None if equal is None else Not(equal)
    bound = _range_bound(operand)
    if bound is None or not _storable(bound):
        return None
    return Cmp(field.path, {"$gt": "gt", "$gte": "ge", "$lt": "lt", "$lte": "le"}[name], bound)  # type: ignore[arg-type]


def _equal(field: Field, value: Any) -> Expr | None:
    """Python's `==` on JSON values: a bool equals the number 0 or 1, and None a missing key."""
    if value is None:
        return field == None  # noqa: E711
    if type(value) is bool:
        return Or((field == value, field == int(value)))
    if type(value) not in (int, float, str) or not _storable(value):
        return None
    if type(value) is not str and value in (0, 1):
        return Or((field == value, field == bool(value)))
    equal: Expr = field == value
    return equal


def _storable(value: Any) -> bool:
    if type(value) is str:
        return check_text(value) is None
    if type(value) is int:
        return INT64_MIN <= value <= INT64_MAX
    return type(value) is float and math.isfinite(value)
