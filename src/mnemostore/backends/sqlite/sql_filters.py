"""Filter expressions -> parameterised SQL with exactly the semantics of `filters.matches`.

Every compiled comparison is two-valued (never NULL), so `NOT` and `OR` behave as in
Python. Column names come only from the kind's `filterable` allow-list; values and
metadata keys are always bound parameters. Metadata keys are read from the `meta`
column by `json_type`/`json_extract` (or `json_each` for keys a path cannot address),
whose JSON type keeps values apart (true is not 1, "1" is not 1, lists and objects
equal nothing).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from ...core.filters import And, Cmp, Expr, Not, Or
from ...core.jsonvalues import INT64_MAX, INT64_MIN
from ...core.protocol import OrderKey
from ...core.shapes import Param
from .schema import Layout, sql_value

INLINE_LIMIT = 250
"""Longer `in` lists travel as one JSON array parameter (SQLite caps bound variables)."""

_SQL_OPS = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_TRUE, _FALSE = "1", "0"


class Compiled:
    """SQL text and its parameters, built left to right."""

    __slots__ = ("params", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list[Any] = []

    @property
    def sql(self) -> str:
        return "".join(self.parts)


def where_sql(layout: Layout, expr: Expr | None) -> tuple[str, list[Any]]:
    """`(condition)` and its parameters; "1" for no filter."""
    if expr is None:
        return _TRUE, []
    out = Compiled()
    _compile(layout, expr, out)
    return out.sql, out.params


def order_sql(layout: Layout, order: Sequence[OrderKey]) -> str:
    """ORDER BY terms. NULL sorts as the smallest value, as in the reference backend."""
    terms = [f"{layout.column(key.field)} {'DESC' if key.descending else 'ASC'}" for key in order]
    return ", ".join(terms) if terms else "seq"


def _compile(layout: Layout, expr: Expr, out: Compiled) -> None:
    if isinstance(expr, Cmp):
        if expr.field[0] == "metadata":
            _metadata(expr, out)
        else:
            _column(layout, expr, out)
    elif isinstance(expr, (And, Or)):
        if not expr.items:
            out.parts.append(_TRUE if isinstance(expr, And) else _FALSE)
            return
        joiner = " AND " if isinstance(expr, And) else " OR "
        out.parts.append("(")
        for i, item in enumerate(expr.items):
            if i:
                out.parts.append(joiner)
            _compile(layout, item, out)
        out.parts.append(")")
    elif isinstance(expr, Not):
        out.parts.append("(NOT ")
        _compile(layout, expr.item, out)
        out.parts.append(")")
    else:
        raise TypeError(f"not a filter expression: {expr!r}")


# numbers ------------------------------------------------------------------------------

def _number_bound(op: str, value: Any) -> tuple[str, Any] | bool:
    """An operand SQLite can bind (int64 or float) giving the same answer as Python.

    Python compares ints of any size exactly; an int outside int64 becomes the nearest
    float on the correct side, or a constant answer when no stored value can equal it.
    """
    if type(value) is not int or INT64_MIN <= value <= INT64_MAX:
        return op, value
    try:
        nearest = float(value)
        exact = nearest == value
    except OverflowError:
        nearest, exact = (math.inf if value > 0 else -math.inf), False
    if exact:
        return op, nearest
    if op in ("eq", "ne"):
        return op == "ne"
    below = nearest if nearest < value else math.nextafter(nearest, -math.inf)
    if math.isinf(below) and below > 0:
        below = math.nextafter(math.inf, 0.0)
    if op in ("lt", "le"):
        return "le", below
    return "ge", math.nextafter(below, math.inf)


def _members(values: Sequence[Any]) -> tuple[list[Any], bool]:
    """Bindable `in` members (ints outside int64 that no stored value equals dropped) and
    whether None is among them."""
    kept: list[Any] = []
    has_none = False
    for value in values:
        if value is None:
            has_none = True
            continue
        bound = _number_bound("eq", value)
        if bound is not False:
            assert not isinstance(bound, bool)
            kept.append(bound[1])
    return kept, has_none


def _in_list(subject: str, values: Sequence[Any], out: Compiled) -> None:
    """`subject IN (...)` for non-null values; an empty list is false."""
    if not values:
        out.parts.append(_FALSE)
    elif len(values) <= INLINE_LIMIT:
        out.parts.append(f"{subject} IN ({', '.join('?' * len(values))})")
        out.params.extend(values)
    else:
        out.parts.append(f"{subject} IN (SELECT value FROM json_each(?))")
        out.params.append(orjson.dumps(list(values)).decode())


# projected columns ----------------------------------------------------------------------

def _column(layout: Layout, cmp: Cmp, out: Compiled) -> None:
    name = cmp.field[0]
    column = layout.column(name)
    field_type = layout.fields[name]
    op: str = cmp.op
    value = cmp.value
    if op in ("in", "nin"):
        kept, has_none = _members([sql_value(field_type, v) for v in value])
        out.parts.append("(NOT (" if op == "nin" else "((")
        if has_none:
            out.parts.append(f"{column} IS NULL OR ")
            _in_list(column, kept, out)
        else:
            out.parts.append(f"{column} IS NOT NULL AND ")
            _in_list(column, kept, out)
        out.parts.append("))")
        return
    if type(value) is Param:  # a shape's value, bound per call: one a column can hold (see `Slot`)
        out.parts.append(_comparison(column, op, True))
        out.params.append(Slot(value.name, field_type))
        return
    bound = _number_bound(op, sql_value(field_type, value))
    if isinstance(bound, bool):
        out.parts.append(_TRUE if bound else _FALSE)
        return
    op, value = bound
    out.parts.append(_comparison(column, op, value is not None))
    out.params.append(value)


def _comparison(column: str, op: str, present: bool) -> str:
    """`column <op> ?`, two-valued, for a value that is `present` (not None) or None."""
    if op == "eq" and present:  # `=`, not `IS`: with an ORDER BY that fits another index SQLite
        # uses an index for `=` only; `IS NOT NULL` makes a NULL column false, not unknown, under NOT
        return f"({column} = ? AND {column} IS NOT NULL)"
    if op == "eq":
        return f"({column} IS ?)"
    if op == "ne":
        return f"({column} IS NOT ?)"
    return f"({column} IS NOT NULL AND {column} {_SQL_OPS[op]} ?)"


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a compiled shape's parameter list takes a call's value of the param `name`, as the
    column of `field_type` stores it. Compiled for a value that is not None and, for an int, within
    64 bits (`bindable`): other values give other SQL, and take the plain path."""

    name: str
    field_type: type


def bindable(value: Any) -> bool:
    """Whether a param's value fits the SQL compiled for it (`Slot`)."""
    return value is not None and (type(value) is not int or INT64_MIN <= value <= INT64_MAX)


class Binder:
    """A compiled shape's statement arguments for a call: the tenant, then its parameters with the
    call's values in their `Slot`s; None if a value is one the SQL was not compiled for (`bindable`).
    Made once per compiled shape, so a call only fills the slots."""

    __slots__ = ("_items", "_slots", "_span", "_strs", "_template")

    def __init__(self, params: Sequence[Any]) -> None:
        self._template: list[Any] = [None, *params]
        self._slots = tuple((index, p.name, p.field_type) for index, p in enumerate(params, 1) if type(p) is Slot)
        places = [index for index, _, _ in self._slots]
        adjacent = len(places) > 1 and places[-1] - places[0] == len(places) - 1
        self._span = slice(places[0], places[-1] + 1) if adjacent else None
        """Where two or more slots follow each other (a range's bounds): filled in one go when their values are
        str (`_items`: the values in slot order; `_strs`: their types then)."""
        self._items = operator.itemgetter(*(name for _, name, _ in self._slots)) if self._span else None
        self._strs = (str,) * len(places)

    def __call__(self, tenant: str, values: Mapping[str, Any]) -> list[Any] | None:
        args = self._template.copy()
        args[0] = tenant
        span = self._span
        if span is not None:
            items = self._items(values)  # type: ignore[misc]
            if tuple(map(type, items)) == self._strs:
                args[span] = items
                return args
        for index, name, field_type in self._slots:
            value = values[name]
            if type(value) is not str:  # a checked str value is stored as it is, whatever the field
                if not bindable(value):
                    return None
                value = sql_value(field_type, value)
            args[index] = value
        return args


# metadata ---------------------------------------------------------------------------------

class _Entry:
    """How SQL reads one top-level metadata key: its JSON type ('' if missing) and its value.

    A key whose JSON form needs no escapes is read by path (`json_type`/`json_extract`,
    with the path as a bound parameter); SQLite 3.40 cannot address other keys by path,
    so those go through a `json_each` row matched on its `key` column.
    """

    def __init__(self, key: str) -> None:
        self.by_path = '"' not in key and orjson.dumps(key)[1:-1] == key.encode()
        if self.by_path:
            self.path: str = f'$."{key}"'
            self.type_sql = "coalesce(json_type(meta, ?), '')"
            self.value_sql = "json_extract(meta, ?)"
        else:
            self.type_sql, self.value_sql = "j.type", "j.atom"
        self.key = key

    def emit(self, sql: str, params: list[Any], out: Compiled) -> None:
        """Append `sql` (written with {type}/{value} placeholders) and its parameters."""
        if not self.by_path:
            out.parts.append(sql.format(type=self.type_sql, value=self.value_sql))
            out.params.extend(params)
            return
        pieces = sql.split("{")
        out.parts.append(pieces[0])
        marks = pieces[0].count("?")  # values bound before the first placeholder
        out.params.extend(params[:marks])
        params = params[marks:]
        for piece in pieces[1:]:
            name, _, rest = piece.partition("}")
            out.parts.append(self.type_sql if name == "type" else self.value_sql)
            out.params.append(self.path)
            # bound values inside `rest` come after this placeholder's path
            marks = rest.count("?")
            out.params.extend(params[:marks])
            params = params[marks:]
            out.parts.append(rest)


def _metadata(cmp: Cmp, out: Compiled) -> None:
    op: str = cmp.op
    value = cmp.value
    if op in ("ne", "nin"):
        out.parts.append("(NOT ")
        _metadata(Cmp(cmp.field, "eq" if op == "ne" else "in", value), out)
        out.parts.append(")")
        return
    entry = _Entry(cmp.field[1])
    if op in ("eq", "in"):
        kept, has_none = _members(value if op == "in" else (value,))
        _metadata_equal(entry, kept, has_none, out)
        return
    bound = _number_bound(op, value)
    if isinstance(bound, bool):  # pragma: no cover - ranges never get a constant answer
        out.parts.append(_TRUE if bound else _FALSE)
        return
    op, value = bound
    type_test = "{type} = 'text'" if isinstance(value, str) else "{type} IN ('integer', 'real')"
    _metadata_any(entry, [(f"{type_test} AND {{value}} {_SQL_OPS[op]} ?", [value])], out)


def _metadata_equal(entry: _Entry, values: Sequence[Any], has_none: bool, out: Compiled) -> None:
    """The key's value equals one of `values` (or is missing/null, with `has_none`)."""
    conditions: list[tuple[str, list[Any]]] = []
    texts = [v for v in values if type(v) is str]
    numbers = [v for v in values if type(v) in (int, float)]
    if texts and entry.by_path and not any(text[:1] in ("[", "{") for text in texts):
        # json_extract gives a JSON string as that text, a number or boolean as a number (never equal to a text),
        # null or a missing key as NULL (made false), and an array or object as its JSON text (starts with [ or {):
        # for these texts the value alone decides, one JSON lookup a row instead of two
        inner = Compiled()
        _in_list("{value}", texts, inner)
        if len(texts) == 1:  # the stored text (orjson's, as `schema` writes it) holds the value's JSON: a cheap
            # substring test first spares most rows their JSON parse (~0.3 us each)
            conditions.append((f"instr(meta, ?) AND coalesce({inner.sql}, 0)",
                               [orjson.dumps(texts[0]).decode(), *inner.params]))
        else:
            conditions.append((f"coalesce({inner.sql}, 0)", inner.params))
    elif texts:
        conditions.append(_typed_in("{type} = 'text'", texts))
    if numbers:
        conditions.append(_typed_in("{type} IN ('integer', 'real')", numbers))
    for flag in (True, False):
        if any(v is flag for v in values):
            conditions.append((f"{{type}} = '{'true' if flag else 'false'}'", []))
    if any(isinstance(v, datetime) for v in values):  # pragma: no cover - bind() rejects these
        raise TypeError("metadata holds JSON values; datetimes cannot match")
    if not has_none:
        _metadata_any(entry, conditions, out)
        return
    out.parts.append("(")
    if entry.by_path:
        entry.emit("{type} IN ('', 'null')", [], out)
    else:
        out.parts.append("NOT ")
        _metadata_any(entry, [("{type} <> 'null'", [])], out)
    if conditions:
        out.parts.append(" OR ")
        _metadata_any(entry, conditions, out)
    out.parts.append(")")


def _typed_in(type_test: str, values: list[Any]) -> tuple[str, list[Any]]:
    inner = Compiled()
    _in_list("{value}", values, inner)
    return f"{type_test} AND {inner.sql}", inner.params


def _metadata_any(entry: _Entry, conditions: list[tuple[str, list[Any]]], out: Compiled) -> None:
    """The key is present and meets one of `conditions` (written with {type}/{value})."""
    if not conditions:
        out.parts.append(_FALSE)
        return
    if entry.by_path:
        out.parts.append("(")
        for i, (sql, params) in enumerate(conditions):
            out.parts.append(" OR (" if i else "(")
            entry.emit(sql, params, out)
            out.parts.append(")")
        out.parts.append(")")
        return
    out.parts.append("(meta IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(meta) AS j WHERE j.key = ? AND (")
    out.params.append(entry.key)
    for i, (sql, params) in enumerate(conditions):
        out.parts.append(" OR (" if i else "(")
        entry.emit(sql, params, out)
        out.parts.append(")")
    out.parts.append(")))")
