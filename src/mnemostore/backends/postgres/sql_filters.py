"""Compile bound filters to SQL with exactly the two-valued semantics of `core.filters.matches`.

NOTs are pushed to the comparisons (De Morgan). A comparison in positive position is plain,
index-friendly SQL that is TRUE exactly when `matches` is true (FALSE or NULL otherwise,
which a WHERE clause treats alike); in negative position it is `(…) IS NOT TRUE`, which is
never NULL. Values and metadata keys are always bound parameters; column names come from the
kind's layout and are quoted. Metadata reads are guarded by `jsonb_typeof`, so a value of
another JSON type (or a list or object) never compares, and a cast never fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
from psycopg import sql

from ...core.filters import And, Cmp, Expr, Not, Or
from ...core.protocol import OrderKey
from ...core.shapes import Param
from .layout import SCOPE_PREFIX, KindLayout, encode_datetime

_OPS = {"eq": "=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_TRUE = sql.SQL("TRUE")
_FALSE = sql.SQL("FALSE")


class FilterCompiler:
    """Compiles expressions for one kind; collects the bound parameters in order."""

    def __init__(self, layout: KindLayout, scope_hints: bool = True) -> None:
        self.layout = layout
        self.params: list[Any] = []
        self.scope_hints = scope_hints
        """Add the prefix comparisons that let the planner use the prefix indexes (`KindLayout.prefixed`)."""

    def where(self, expr: Expr | None) -> sql.Composable:
        return _TRUE if expr is None else self._compile(expr, True)

    def _compile(self, expr: Expr, positive: bool) -> sql.Composable:
        if isinstance(expr, Cmp):
            leaf = self._leaf(expr)
            return leaf if positive else sql.SQL("({}) IS NOT TRUE").format(leaf)
        if isinstance(expr, Not):
            return self._compile(expr.item, not positive)
        if isinstance(expr, (And, Or)):
            conjunction = isinstance(expr, And) == positive
            if not expr.items:
                return _TRUE if isinstance(expr, And) == positive else _FALSE
            parts = [self._compile(item, positive) for item in expr.items]
            if len(parts) == 1:
                return parts[0]
            joiner = sql.SQL(" AND ") if conjunction else sql.SQL(" OR ")
            return sql.SQL("({})").format(joiner.join(parts))
        raise TypeError(f"not a filter expression: {expr!r}")

    def _param(self, value: Any) -> sql.Composable:
        self.params.append(value)
        return sql.Placeholder()

    # comparisons ------------------------------------------------------------------
    def _leaf(self, cmp: Cmp) -> sql.Composable:
        if cmp.field[0] == "metadata":
            return self._metadata_leaf(cmp.field[1], cmp.op, cmp.value)
        return self._column_leaf(cmp.field[0], cmp.op, cmp.value)

    def _column_leaf(self, field: str, op: str, value: Any) -> sql.Composable:
        column = sql.Identifier(self.layout.column_of(field))
        kind = str if field == "id" else self.layout.types[field]
        if type(value) is Param:  # a shape's value, bound per call: compiled as for one that is not None
            slot = Slot(value.name, kind, op=op)
            if op == "ne":
                return sql.SQL("{} IS DISTINCT FROM {}").format(column, self._param(slot))
            found: sql.Composable = sql.SQL("{} {} {}").format(column, sql.SQL(_OPS[op]), self._param(slot))
            if op == "eq" and self.scope_hints and field in self.layout.prefixed and kind is str:
                found = sql.SQL("({} AND left({}, {}) = {})").format(
                    found, column, sql.Literal(SCOPE_PREFIX), self._param(Slot(value.name, kind, prefix=True)))
            return found
        if op in ("eq", "ne"):
            if value is None:
                return sql.SQL("{} IS NULL" if op == "eq" else "{} IS NOT NULL").format(column)
            template = "{} = {}" if op == "eq" else "{} IS DISTINCT FROM {}"
            found = sql.SQL(template).format(column, self._param(_column_value(kind, value, op)))
            if op == "eq" and self.scope_hints and field in self.layout.prefixed and isinstance(value, str):
                found = sql.SQL("({} AND left({}, {}) = {})").format(
                    found, column, sql.Literal(SCOPE_PREFIX), self._param(value[:SCOPE_PREFIX]))
            return found
        if op in ("in", "nin"):
            present = [v for v in value if v is not None]
            parts: list[sql.Composable] = []
            if present:
                if kind is str:
                    parts.append(sql.SQL("{} = ANY({}::text[])").format(column, self._param(present)))
                    if (op == "in" and self.scope_hints and field in self.layout.prefixed
                            and all(isinstance(v, str) for v in present)):
                        parts[-1] = sql.SQL("({} AND left({}, {}) = ANY({}::text[]))").format(
                            parts[-1], column, sql.Literal(SCOPE_PREFIX),
                            self._param([v[:SCOPE_PREFIX] for v in present]))
                else:
                    parts.extend(self._column_leaf(field, "eq", v) for v in present)
            if len(present) < len(value):
                parts.append(sql.SQL("{} IS NULL").format(column))
            found = _any(parts)
            return found if op == "in" else sql.SQL("({}) IS NOT TRUE").format(found)
        return sql.SQL("{} {} {}").format(column, sql.SQL(_OPS[op]), self._param(_column_value(kind, value, op)))

    def _item(self, key: str) -> sql.Composable:
        return sql.SQL("(metadata -> {})").format(self._param(key))

    def _metadata_leaf(self, key: str, op: str, value: Any) -> sql.Composable:
        if op in ("eq", "ne"):
            if value is None:
                found: sql.Composable = sql.SQL("coalesce(jsonb_typeof({}), 'null') = 'null'").format(self._item(key))
            else:
                found = sql.SQL("{} = {}::jsonb").format(self._item(key), self._param(_json(value)))
            return found if op == "eq" else sql.SQL("({}) IS NOT TRUE").format(found)
        if op in ("in", "nin"):
            found = _any([self._metadata_leaf(key, "eq", v) for v in value])
            return found if op == "in" else sql.SQL("({}) IS NOT TRUE").format(found)
        symbol = sql.SQL(_OPS[op])
        if isinstance(value, str):
            return sql.SQL(
                "CASE WHEN jsonb_typeof({}) = 'string' THEN (metadata ->> {}) COLLATE \"C\" {} {} ELSE FALSE END"
            ).format(self._item(key), self._param(key), symbol, self._param(value))
        # Numbers: JSONB keeps the shortest decimal orjson wrote, so the bound is compared as
        # its own shortest decimal (exact for ints, and monotone for floats).
        bound = value if isinstance(value, int) else Decimal(repr(value))
        return sql.SQL(
            "CASE WHEN jsonb_typeof({}) = 'number' THEN {}::numeric {} {}::numeric ELSE FALSE END"
        ).format(self._item(key), self._item(key), symbol, self._param(bound))


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a compiled shape's parameters take a call's value of the param `name`: as the column of
    type `kind` holds it, or its first `SCOPE_PREFIX` characters (`prefix`: a scope index's hint)."""

    name: str
    kind: type
    prefix: bool = False
    op: str = "eq"
    """The comparison the slot's value is the right side of (`_column_value`)."""

    def value(self, values: Mapping[str, Any]) -> Any:
        value = values[self.name]
        return value[:SCOPE_PREFIX] if self.prefix else _column_value(self.kind, value, self.op)


def bound_params(params: Sequence[Any], values: Mapping[str, Any]) -> list[Any]:
    """A compiled shape's parameters with a call's values (none None: `IS NULL` is other SQL) in its slots."""
    return [p.value(values) if type(p) is Slot else p for p in params]


def _any(parts: Sequence[sql.Composable]) -> sql.Composable:
    if not parts:
        return _FALSE
    if len(parts) == 1:
        return parts[0]
    return sql.SQL("({})").format(sql.SQL(" OR ").join(parts))


def _json(value: Any) -> str:
    """A filter operand as JSON text; an integer beyond 64 bits (which orjson refuses) too."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return str(value)
    return orjson.dumps(value).decode()


def _column_value(kind: type, value: Any, op: str = "eq") -> Any:
    """A filter operand as the column stores it (instants for datetimes, exact numerics), for the
    comparison `op` (`eq`, `ne`, `lt`, `le`, `gt`, `ge`) of the column with it."""
    if kind is datetime:
        return encode_datetime(value)[0]
    if kind is int and isinstance(value, float):
        return Decimal(value)  # exact binary value: bigint vs numeric compares exactly
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return _float_bound(value, op)
    return value


def _float_bound(value: int, op: str) -> float:
    """An int compared with a float column, as the float that compares as the int does (the reference
    compares them exactly): the int itself when a float holds it; past 2**53 the float beside it on the
    side `op` needs (`col < v` is `col < above`, `col <= v` is `col <= below`, ...); NaN for = and
    IS DISTINCT FROM, as no stored (finite) float equals it."""
    near = float(value)
    if near == value:
        return near
    if op in ("eq", "ne"):
        return math.nan
    below, above = (near, math.nextafter(near, math.inf)) if near < value else (math.nextafter(near, -math.inf), near)
    return above if op in ("lt", "ge") else below


def order_by(layout: KindLayout, order: Sequence[OrderKey]) -> sql.Composable:
    """ORDER BY terms with missing values first in both directions, as the reference sorts. A
    field that is never missing is sorted plainly, in the order a btree index (or its backward
    scan) delivers, so an index on it serves the ordering (a checkpoint run's latest, say)."""
    terms = []
    for key in order:
        column = sql.Identifier(layout.column_of(key.field))
        if key.field == "id" or key.field not in layout.nullable:
            direction = "DESC" if key.descending else "ASC"
        else:
            direction = "DESC NULLS LAST" if key.descending else "ASC NULLS FIRST"
        terms.append(sql.SQL("{} {}").format(column, sql.SQL(direction)))
    return sql.SQL(", ").join(terms)
