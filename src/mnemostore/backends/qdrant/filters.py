"""core.filters expressions as Qdrant filters, with exactly `core.filters.matches` semantics.

Each expression becomes a pair of bounds, `lower ⊆ matches ⊆ upper`: equal when Qdrant can
decide the comparison exactly, wider where it cannot (string ranges — Qdrant ranges are
numeric only — and numbers of 2**53 or more, which Qdrant compares as doubles). `Not` swaps
the bounds, so the upper bound of any expression is a true superset. The backend sends the
upper bound to Qdrant and, when the translation is not exact, re-checks every candidate in
Python with `matches`: nothing is dropped and nothing extra comes back.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...core import codec
from ...core.filters import And, Cmp, Expr, Not, Or
from .payload import TENANT, field_key, metadata_key, metadata_suffix, tenant_value

if TYPE_CHECKING:
    from qdrant_client import models

    Cond = bool | models.Filter | models.FieldCondition | models.IsEmptyCondition
else:
    Cond = Any

EXACT_LIMIT = 2**53
"""Numbers below this magnitude compare the same as doubles and as Python numbers."""


@dataclass(frozen=True)
class Bounds:
    lower: Cond
    upper: Cond
    exact: bool


@dataclass(frozen=True)
class Translation:
    """The Qdrant filter to send (None: no condition), whether it is exact, and whether nothing can match."""

    filter: models.Filter | None
    exact: bool
    empty: bool = False


def translate(expr: Expr | None, tenant: str | None, filterable: dict[str, type],
              scoped: bool = True) -> Translation:
    """The tenant's records matching `expr`, as a Qdrant filter (a superset unless `exact`).

    `scoped=False` leaves the tenant condition out: for a collection known to hold no other tenant.
    """
    from qdrant_client import models

    bounds = _bounds(expr, filterable) if expr is not None else _exact(True)
    if bounds.upper is False:
        return Translation(None, True, empty=True)
    must: list[Any] = []
    if scoped:
        must.append(models.FieldCondition(key=TENANT, match=models.MatchValue(value=tenant_value(tenant))))
    if bounds.upper is not True:
        must.append(bounds.upper)
    return Translation(models.Filter(must=must) if must else None, bounds.exact)


def _bounds(expr: Expr, filterable: dict[str, type]) -> Bounds:
    if isinstance(expr, Cmp):
        return _comparison(expr, filterable)
    if isinstance(expr, And):
        parts = [_bounds(item, filterable) for item in expr.items]
        return Bounds(_all([p.lower for p in parts]), _all([p.upper for p in parts]), all(p.exact for p in parts))
    if isinstance(expr, Or):
        parts = [_bounds(item, filterable) for item in expr.items]
        return Bounds(_any([p.lower for p in parts]), _any([p.upper for p in parts]), all(p.exact for p in parts))
    if isinstance(expr, Not):
        inner = _bounds(expr.item, filterable)
        return Bounds(_not(inner.upper), _not(inner.lower), inner.exact)
    raise TypeError(f"not a filter expression: {expr!r}")


def _exact(cond: Cond) -> Bounds:
    return Bounds(cond, cond, True)


def _all(conds: list[Cond]) -> Cond:
    from qdrant_client import models

    if any(c is False for c in conds):
        return False
    rest = [c for c in conds if c is not True]
    if not rest:
        return True
    return rest[0] if len(rest) == 1 else models.Filter(must=rest)


def _any(conds: list[Cond]) -> Cond:
    from qdrant_client import models

    if any(c is True for c in conds):
        return True
    rest = [c for c in conds if c is not False]
    if not rest:
        return False
    return rest[0] if len(rest) == 1 else models.Filter(should=rest)


def _not(cond: Cond) -> Cond:
    from qdrant_client import models

    if cond is True or cond is False:
        return not cond
    return models.Filter(must_not=[cond])


def _missing(key: str) -> Cond:
    from qdrant_client import models

    return models.IsEmptyCondition(is_empty=models.PayloadField(key=key))


def _present(key: str) -> Cond:
    return _not(_missing(key))


def _comparison(cmp: Cmp, filterable: dict[str, type]) -> Bounds:
    """One comparison; `in`/`nin`/`ne` are built from equality."""
    if cmp.op == "in":
        parts = [_equal(cmp.field, v, filterable) for v in cmp.value]
        return Bounds(_any([p.lower for p in parts]), _any([p.upper for p in parts]), all(p.exact for p in parts))
    if cmp.op == "nin":
        inner = _comparison(Cmp(cmp.field, "in", cmp.value), filterable)
        return Bounds(_not(inner.upper), _not(inner.lower), inner.exact)
    if cmp.op == "eq":
        return _equal(cmp.field, cmp.value, filterable)
    if cmp.op == "ne":
        inner = _equal(cmp.field, cmp.value, filterable)
        return Bounds(_not(inner.upper), _not(inner.lower), inner.exact)
    return _range(cmp.field, cmp.op, cmp.value, filterable)


def _value_key(path: tuple[str, ...], value: Any, filterable: dict[str, type]) -> tuple[str, type | None]:
    """The payload key holding values comparable with `value`, and the field's type (None for metadata)."""
    if path[0] == "metadata":
        suffix = metadata_suffix(value)
        assert suffix is not None
        return metadata_key(path[1], suffix), None
    return field_key(path[0]), filterable[path[0]]


def _equal(path: tuple[str, ...], value: Any, filterable: dict[str, type]) -> Bounds:
    from qdrant_client import models

    if value is None:
        key = metadata_key(path[1], "p") if path[0] == "metadata" else field_key(path[0])
        return _exact(_missing(key))
    key, field_type = _value_key(path, value, filterable)
    if isinstance(value, datetime):
        value = codec.instant_micros(value)
    if type(value) is str or type(value) is bool:
        return _exact(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
    if field_type is int or (type(value) is int and field_type is datetime):
        # integer-valued fields: exact integer matching, any size
        if type(value) is float:
            if not value.is_integer():
                return _exact(False)
            value = int(value)
        return _exact(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
    # float fields and metadata numbers (int and float mixed): compare as doubles
    if abs(value) >= EXACT_LIMIT:
        return Bounds(False, _present(key), False)
    return _exact(models.FieldCondition(key=key, range=models.Range(gte=value, lte=value)))


def _range(path: tuple[str, ...], op: str, value: Any, filterable: dict[str, type]) -> Bounds:
    from qdrant_client import models

    key, field_type = _value_key(path, value, filterable)
    if type(value) is bool:  # only cursors compare booleans (False < True): the booleans in range
        wanted = [b for b in (False, True) if _RANGE_TESTS[op](b, value)]
        return _exact(_any([models.FieldCondition(key=key, match=models.MatchValue(value=b)) for b in wanted]))
    if type(value) is str:  # Qdrant ranges are numeric only: checked in Python
        return Bounds(False, _present(key), False)
    if isinstance(value, datetime):
        value = codec.instant_micros(value)
        field_type = int
    if field_type is int and type(value) is float:
        # integers only: turn a fractional bound into the equivalent integer bound
        op, value = _integer_bound(op, value)
    if abs(value) >= EXACT_LIMIT:
        return Bounds(False, _present(key), False)
    bound = {"lt": "lt", "le": "lte", "gt": "gt", "ge": "gte"}[op]
    return _exact(models.FieldCondition(key=key, range=models.Range(**{bound: value})))


_RANGE_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
}


def _integer_bound(op: str, value: float) -> tuple[str, int | float]:
    if op == "gt":
        return "ge", math.floor(value) + 1
    if op == "ge":
        return "ge", math.ceil(value)
    if op == "lt":
        return "le", math.ceil(value) - 1
    return "le", math.floor(value)
