"""A small typed filter language over record fields, and its reference semantics.

Build filters with `F` (`(F.confidence >= 0.5) & F.agent.in_(["a", "b"])`) or from the
dict form (`{"confidence": {"$gte": 0.5}, "agent": {"$in": ["a", "b"]}}`).

Semantics are two-valued, like Python, and every backend must match `matches()`:

- `== None` tests for a missing value; `!= v` is true for missing values too.
- Ranges (`<`, `<=`, `>`, `>=`) are false when the value is missing or of another
  type; there is no ordering across types. `in_` is any `==`; `not_in` its negation.
- bool is its own type (True is not 1). Numbers compare by value (int with float).
  Strings compare by code point. Datetimes compare as instants.
- `F.metadata["key"]` reads a top-level metadata key; a missing key is None, and a
  list or object value equals nothing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .errors import ValidationError
from .jsonvalues import check_text

Op = Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "nin"]
RANGE_OPS: frozenset[str] = frozenset({"lt", "le", "gt", "ge"})
Scalar = str | int | float | bool | datetime | None


class Expr:
    """A filter expression; combine with `&`, `|` and `~`."""

    __slots__ = ()

    def __and__(self, other: Expr) -> Expr:
        """`a & b & c` is one And of three (not nested): binding and compiling walk fewer nodes."""
        return And((*self.items, _expr(other)) if type(self) is And else (self, _expr(other)))

    def __or__(self, other: Expr) -> Expr:
        return Or((*self.items, _expr(other)) if type(self) is Or else (self, _expr(other)))

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise TypeError("combine filters with & | ~, not `and`, `or`, `not` or chained comparisons")


def _expr(value: object) -> Expr:
    if not isinstance(value, Expr):
        raise TypeError(f"expected a filter expression, got {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True, eq=False)
class Cmp(Expr):
    """`field <op> value`. `field` is a path: `("agent",)` or `("metadata", key)`."""

    field: tuple[str, ...]
    op: Op
    value: Any

    def __repr__(self) -> str:
        return f"Cmp({'.'.join(self.field)} {self.op} {self.value!r})"


@dataclass(frozen=True, slots=True, eq=False)
class And(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Or(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Not(Expr):
    item: Expr


@dataclass(frozen=True, slots=True, eq=False)
class Field:
    """A field reference produced by `F`; its comparison operators build `Cmp`."""

    path: tuple[str, ...]

    def __getitem__(self, key: str) -> Field:
        if self.path != ("metadata",):
            raise TypeError("only F.metadata[...] takes a key")
        if not isinstance(key, str):
            raise TypeError("metadata keys are strings")
        return Field(("metadata", key))

    def __eq__(self, value: object) -> Cmp:  # type: ignore[override]
        return Cmp(self.path, "eq", value)

    def __ne__(self, value: object) -> Cmp:  # type: ignore[override]
        return Cmp(self.path, "ne", value)

    def __lt__(self, value: object) -> Cmp:
        return Cmp(self.path, "lt", value)

    def __le__(self, value: object) -> Cmp:
        return Cmp(self.path, "le", value)

    def __gt__(self, value: object) -> Cmp:
        return Cmp(self.path, "gt", value)

    def __ge__(self, value: object) -> Cmp:
        return Cmp(self.path, "ge", value)

    def in_(self, values: Iterable[Any]) -> Cmp:
        return Cmp(self.path, "in", tuple(values))

    def not_in(self, values: Iterable[Any]) -> Cmp:
        return Cmp(self.path, "nin", tuple(values))

    def is_none(self) -> Cmp:
        return Cmp(self.path, "eq", None)

    __hash__ = object.__hash__


class _FieldFactory:
    def __getattr__(self, name: str) -> Field:
        if name.startswith("__"):
            raise AttributeError(name)
        return Field((name,))


F = _FieldFactory()
"""Field references: `F.agent == "coder"`, `F.metadata["topic"].in_(["a", "b"])`."""


_DICT_OPS: dict[str, Op] = {
    "$eq": "eq", "$ne": "ne", "$lt": "lt", "$lte": "le", "$gt": "gt", "$gte": "ge",
    "$in": "in", "$nin": "nin",
}


def from_dict(spec: Mapping[str, Any]) -> Expr:
    """Build an expression from the dict form used in config files.

    `{"agent": "coder"}` is equality; `{"confidence": {"$gte": 0.5}}` an operator;
    `"$and"`/`"$or"` take lists, `"$not"` one filter; `"metadata.<key>"` names a metadata key.
    """
    if not isinstance(spec, Mapping):
        raise ValidationError.one("where", f"a filter must be a mapping, not {type(spec).__name__}")
    items: list[Expr] = []
    for key, value in spec.items():
        if not isinstance(key, str):
            raise ValidationError.one("where", f"filter keys are field names (strings), not {key!r}")
        if key in ("$and", "$or"):
            if not isinstance(value, list):
                raise ValidationError.one("where", f"{key} takes a list of filters")
            parts = tuple(from_dict(part) for part in value)
            items.append(And(parts) if key == "$and" else Or(parts))
        elif key == "$not":
            items.append(Not(from_dict(value)))
        elif key.startswith("$"):
            raise ValidationError.one("where", f"unknown operator {key!r} at the top level")
        else:
            path = ("metadata", key[9:]) if key.startswith("metadata.") else (key,)
            if isinstance(value, Mapping) and value and all(isinstance(k, str) and k.startswith("$") for k in value):
                for op_name, operand in value.items():
                    if op_name not in _DICT_OPS:
                        known = ", ".join(_DICT_OPS)
                        raise ValidationError.one("where", f"unknown operator {op_name!r}; use one of {known}")
                    op = _DICT_OPS[op_name]
                    if op in ("in", "nin"):
                        if not isinstance(operand, (list, tuple)):
                            raise ValidationError.one(f"where.{key}", f"{op_name} takes a list")
                        operand = tuple(operand)
                    items.append(Cmp(path, op, operand))
            else:
                items.append(Cmp(path, "eq", value))
    return items[0] if len(items) == 1 else And(tuple(items))


def to_dict(expr: Expr) -> dict[str, Any]:
    """The dict form of an expression (inverse of `from_dict`)."""
    if isinstance(expr, Cmp):
        key = "metadata." + expr.field[1] if expr.field[0] == "metadata" else expr.field[0]
        reverse = {op: name for name, op in _DICT_OPS.items()}
        value = list(expr.value) if expr.op in ("in", "nin") else expr.value
        return {key: {reverse[expr.op]: value}}
    if isinstance(expr, And):
        return {"$and": [to_dict(item) for item in expr.items]}
    if isinstance(expr, Or):
        return {"$or": [to_dict(item) for item in expr.items]}
    if isinstance(expr, Not):
        return {"$not": to_dict(expr.item)}
    raise TypeError(f"not a filter expression: {expr!r}")


def _type_class(value: Any) -> str | None:
    """The comparison class of a value: bool, number, str, datetime, or None if unorderable."""
    kind = type(value)
    if kind is bool:
        return "bool"
    if kind is int or kind is float:
        return "number"
    if kind is str:
        return "str"
    if isinstance(value, datetime):
        return "datetime"
    return None


_CLASS_OF_TYPE = {bool: "bool", int: "number", float: "number", str: "str", datetime: "datetime"}


def check_operand(field: tuple[str, ...], field_type: type | None, op: str, value: Any) -> Any:
    """Validate one operand against the field's type; return it in canonical form (errors name
    `where.<field>`, built only then: on every call it cost more than the checks)."""
    if value is None:
        if op in RANGE_OPS:
            raise ValidationError.one(_where(field), f"{op} needs a value, not None")
        return None
    cls = _type_class(value)
    if cls is None:
        raise ValidationError.one(_where(field), f"cannot compare with a {type(value).__name__}")
    if field_type is not None and cls != _CLASS_OF_TYPE[field_type]:
        raise ValidationError.one(_where(field), f"expects a {field_type.__name__}, got {type(value).__name__}")
    if field_type is None and cls == "datetime":
        raise ValidationError.one(_where(field), "metadata holds JSON values; compare with a string, not a datetime")
    if cls == "datetime" and value.utcoffset() is None:
        raise ValidationError.one(_where(field), "datetimes must be timezone-aware")
    if cls == "number" and type(value) is float and not math.isfinite(value):
        raise ValidationError.one(_where(field), "numbers must be finite")
    if cls == "str":
        problem = check_text(value)
        if problem:
            raise ValidationError.one(_where(field), f"string {problem}")
    if cls == "bool" and op in RANGE_OPS:
        raise ValidationError.one(_where(field), f"{op} is not defined for booleans")
    return value


def _where(field: tuple[str, ...]) -> str:
    return "where." + ".".join(field)


def bind(expr: Expr, filterable: Mapping[str, type]) -> Expr:
    """Validate an expression against a kind's filterable fields; raise ValidationError.

    Returns the expression in canonical form: `expr` itself when it already was."""
    if isinstance(expr, Cmp):
        field = expr.field
        if not field or (field[0] == "metadata") != (len(field) == 2) or len(field) > 2:
            raise ValidationError.one("where", f"bad field path {field!r}")
        name = field[0]
        if name == "metadata":
            field_type: type | None = None
            problem = check_text(field[1])
            if problem:
                raise ValidationError.one(_where(field), f"metadata key {problem}")
        elif name not in filterable:
            known = ", ".join(sorted(filterable))
            raise ValidationError.one(
                _where(field), f"unknown or unfilterable field {name!r}; filterable: {known}, metadata[...]")
        else:
            field_type = filterable[name]
        if expr.op in ("in", "nin"):
            if not isinstance(expr.value, (tuple, list)):
                raise ValidationError.one(_where(field), f"{expr.op} takes a list of values")
            values = _distinct(check_operand(field, field_type, "eq", v) for v in expr.value)
            return Cmp(field, expr.op, values)
        if expr.op not in _OPS:
            raise ValidationError.one(_where(field), f"unknown operator {expr.op!r}")
        value = check_operand(field, field_type, expr.op, expr.value)
        return expr if value is expr.value else Cmp(field, expr.op, value)
    if isinstance(expr, (And, Or)):
        items = tuple([bind(item, filterable) for item in expr.items])
        return expr if items == expr.items else type(expr)(items)  # expressions compare by identity
    if isinstance(expr, Not):
        item = bind(expr.item, filterable)
        return expr if item is expr.item else Not(item)
    raise ValidationError.one("where", f"not a filter expression: {expr!r}")


def _distinct(values: Iterable[Any]) -> tuple[Any, ...]:
    """`in`/`not in` values with repeats dropped (first kept), so every engine sees a set:
    `True` and `1` stay apart, as the filter semantics keep them."""
    seen: set[tuple[bool, Any]] = set()
    kept = []
    for value in values:
        key = (type(value) is bool, value)
        if key not in seen:
            seen.add(key)
            kept.append(value)
    return tuple(kept)


def field_value(record: Any, path: tuple[str, ...]) -> Any:
    """The value a filter sees for `path` on `record` (missing metadata keys are None)."""
    if path[0] == "metadata":
        return record.metadata.get(path[1])
    return getattr(record, path[0])


def _eq(actual: Any, expected: Any) -> bool:
    if expected is None:
        return actual is None
    return _type_class(actual) == _type_class(expected) and bool(actual == expected)


def _range(op: str, actual: Any, bound: Any) -> bool:
    if _type_class(actual) != _type_class(bound):
        return False
    if op == "lt":
        return bool(actual < bound)
    if op == "le":
        return bool(actual <= bound)
    if op == "gt":
        return bool(actual > bound)
    return bool(actual >= bound)


_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "in", "nin"})


def matches(expr: Expr | None, record: Any) -> bool:
    """Evaluate a bound expression on a record: the reference semantics."""
    if expr is None:
        return True
    if isinstance(expr, Cmp):
        actual = field_value(record, expr.field)
        op = expr.op
        if op == "eq":
            return _eq(actual, expr.value)
        if op == "ne":
            return not _eq(actual, expr.value)
        if op == "in":
            return any(_eq(actual, v) for v in expr.value)
        if op == "nin":
            return not any(_eq(actual, v) for v in expr.value)
        return _range(op, actual, expr.value)
    if isinstance(expr, And):
        return all(matches(item, record) for item in expr.items)
    if isinstance(expr, Or):
        return any(matches(item, record) for item in expr.items)
    if isinstance(expr, Not):
        return not matches(expr.item, record)
    raise TypeError(f"not a filter expression: {expr!r}")


def walk(expr: Expr | None) -> Iterable[Cmp]:
    """Every comparison in an expression (for capability checks)."""
    if expr is None:
        return
    if isinstance(expr, Cmp):
        yield expr
    elif isinstance(expr, (And, Or)):
        for item in expr.items:
            yield from walk(item)
    elif isinstance(expr, Not):
        yield from walk(expr.item)


def expression_key(expr: Expr) -> Hashable:
    """A hashable key for a bound expression that tells apart everything a compiled filter depends
    on: the tree, the fields, the operators and the values with their types (1, 1.0 and True
    compile differently). Backends key their compiled-SQL caches by it."""
    if isinstance(expr, Cmp):
        value = expr.value
        if expr.op in ("in", "nin"):
            return expr.field, expr.op, tuple((type(v), v) for v in value)
        return expr.field, expr.op, type(value), value
    if isinstance(expr, Not):
        return "not", expression_key(expr.item)
    if isinstance(expr, (And, Or)):
        return type(expr).__name__, tuple(expression_key(item) for item in expr.items)
    raise TypeError(f"not a filter expression: {expr!r}")


def all_of(*exprs: Expr | None) -> Expr | None:
    """AND of the given expressions, skipping None; None when nothing is left."""
    parts = tuple(e for e in exprs if e is not None)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(parts)
