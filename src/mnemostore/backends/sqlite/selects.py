"""How the sqlite backend reads a query: the statement for a compiled condition, order and limit.

Made per call for `query`, and once per shape for `query_shape` (its statement text is then the
same on every call, which also keeps it in sqlite3's statement cache)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ...core.filters import And, Cmp, Expr
from ...core.protocol import OrderKey
from .schema import Layout
from .sql_filters import order_sql

SHAPES_KEPT = 512
"""Compiled shapes kept per store; past that the cache starts again (shapes are meant to be few)."""


@dataclass(frozen=True, slots=True)
class Select:
    """A query's SQL, whose arguments are the tenant, the condition's parameters, then the limit
    (unless `mode` is "first"). Modes: "first" reads the one record in one statement; "whole" reads
    the records in one statement; "seqs" selects seqs, whose records a second statement reads."""

    sql: str
    mode: Literal["first", "whole", "seqs"]

    @classmethod
    def of(cls, layout: Layout, condition: str, order: Sequence[OrderKey], limit: int | None, vectors: bool,
           id_range: bool) -> Select:
        # Order and limit on seqs first: SQLite's sorter would otherwise carry every
        # matching document (a run's 50 KB checkpoints) through the sort.
        sql = f"SELECT seq FROM {layout.table} WHERE tenant = ? AND {condition} ORDER BY {order_sql(layout, order)}"
        if limit == 1:  # first(): one statement, its own snapshot
            return cls(f"SELECT {layout.read_columns(vectors)} FROM {layout.table} WHERE seq = ({sql} LIMIT 1)",
                       "first")
        if limit is not None:
            sql += " LIMIT ?"
        if id_range:  # the (tenant, id) index both selects and orders: no sorter to carry docs
            return cls(f"SELECT {layout.read_columns(vectors)} {sql[len('SELECT seq '):]}", "whole")
        return cls(sql, "seqs")


def by_id_range(where: Expr | None, order: Sequence[OrderKey]) -> bool:
    """Whether a query is ordered by id alone and bounded by an id comparison at its top level
    (an id range, as the LangGraph saver reads a checkpoint with its writes)."""
    if len(order) != 1 or order[0].field != "id":
        return False
    terms = where.items if isinstance(where, And) else (where,)
    return any(isinstance(term, Cmp) and term.field == ("id",) and term.op != "ne" for term in terms)
