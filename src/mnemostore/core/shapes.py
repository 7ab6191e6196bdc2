"""Prepared query shapes: a filter with named parameters and an order, checked once and compiled
once per backend, then run with values (`Collection.fetch`).

A hot read repeats one query with other values (a run's latest checkpoint, a thread's id range);
binding and compiling its filter each time cost about what the engine's lookup does. A shape is
bound against its kind once; a call checks only its values (by the rules `filters.bind` applies)
and the backend reuses the statement it compiled for the shape (`Backend.query_shape`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .capabilities import Capability
from .errors import ValidationError
from .filters import RANGE_OPS, And, Cmp, Expr, Not, Or, bind, check_operand, walk
from .jsonvalues import check_text, plain_text
from .protocol import OrderKey
from .query import parse_order
from .records import Record

SHAPE_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
"""The comparisons a `Param` may stand in: one value against a field's column."""


@dataclass(frozen=True, slots=True)
class Param:
    """A named value of a query shape, given at each call: `F.run_id == Param("run")`."""

    name: str


class QueryShape:
    """A filter whose values may be `Param`s, and an order, bound to a record kind once.

    Params stand for non-metadata fields compared with ==, !=, <, <=, > or >=. Shapes compare
    by identity: build one per query a program repeats (a module constant), not one per call."""

    __slots__ = ("fields", "kind", "needs", "order", "record_cls", "where")

    def __init__(self, record_cls: type[Record], where: Expr,
                 order_by: str | Sequence[str | OrderKey] | None = None) -> None:
        self.record_cls = record_cls
        self.kind = record_cls.kind
        self.order = parse_order(order_by, record_cls)
        self.fields: dict[str, tuple[tuple[str, ...], type, str]] = {}
        """Each param's (field path, field type, operator): how a call's value is checked."""
        self.where = self._bind(where)
        comparisons = list(walk(self.where))
        self.needs = frozenset(
            {Capability.FILTER_RANGE for c in comparisons if c.op in RANGE_OPS}
            | {Capability.FILTER_METADATA for c in comparisons if c.field[0] == "metadata"})
        """The capabilities a store must declare to run it (as `query` asks of the same filter)."""

    def _bind(self, expr: Expr) -> Expr:
        if isinstance(expr, Cmp):
            if type(expr.value) is not Param:
                return bind(expr, self.record_cls.filterable)
            field, name = expr.field, expr.value.name
            if expr.op not in SHAPE_OPS or field[0] == "metadata" or field[0] not in self.record_cls.filterable:
                raise ValidationError.one(f"where.{'.'.join(field)}", f"Param({name!r}) stands only for the value "
                                          "of a filterable field (not metadata) compared by ==, !=, <, <=, > or >=")
            if name in self.fields:
                raise ValidationError.one(f"where.{field[0]}", f"Param({name!r}) is used twice; name each once")
            self.fields[name] = (field, self.record_cls.filterable[field[0]], expr.op)
            return expr
        if isinstance(expr, (And, Or)):
            return type(expr)(tuple(self._bind(item) for item in expr.items))
        if isinstance(expr, Not):
            return Not(self._bind(expr.item))
        raise ValidationError.one("where", f"not a filter expression: {expr!r}")

    def check(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The values for a call, each checked as `bind` checks a filter's operand (errors name
        `where.<field>`); every param must be given, and nothing else."""
        fields = self.fields
        if values.keys() != fields.keys():
            missing, extra = sorted(fields.keys() - values.keys()), sorted(values.keys() - fields.keys())
            raise ValidationError.one("values", (f"missing {', '.join(missing)}" if missing else "")
                                      + ("; " if missing and extra else "")
                                      + (f"no param named {', '.join(extra)}" if extra else ""))
        checked = {}
        for name, value in values.items():
            field, field_type, op = fields[name]
            if field_type is str and (plain_text(value) or (type(value) is str and check_text(value) is None)):
                checked[name] = value
            else:
                checked[name] = check_operand(field, field_type, op, value)
        return checked

    def where_with(self, values: Mapping[str, Any]) -> Expr:
        """The filter with each param replaced by its (checked) value: what `query` would be given."""
        return _substituted(self.where, values)

    def __repr__(self) -> str:
        return f"QueryShape({self.kind}, {self.where!r}, {[tuple(key) for key in self.order]})"


def _substituted(expr: Expr, values: Mapping[str, Any]) -> Expr:
    if isinstance(expr, Cmp):
        return Cmp(expr.field, expr.op, values[expr.value.name]) if type(expr.value) is Param else expr
    if isinstance(expr, (And, Or)):
        return type(expr)(tuple(_substituted(item, values) for item in expr.items))
    if isinstance(expr, Not):
        return Not(_substituted(expr.item, values))
    raise TypeError(f"not a filter expression: {expr!r}")
