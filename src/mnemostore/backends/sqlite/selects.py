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
    repeat: int = 1
    """How many times the statement takes the tenant and the condition's parameters, one after another."""

    @classmethod
    def of(cls, layout: Layout, where: Expr | None, condition: str, order: Sequence[OrderKey], limit: int | None,
           vectors: bool) -> Select:
        """The statement of a query: `where` is the filter `condition` (its SQL) was made from."""
        # Order and limit on seqs first: SQLite's sorter would otherwise carry every
        # matching document (a run's 50 KB checkpoints) through the sort.
        head = f"SELECT seq FROM {layout.table} WHERE tenant = ? AND {condition} ORDER BY "
        order_by = order_sql(layout, order)
        sql = head + order_by
        if limit == 1:  # first(): one statement, its own snapshot
            pick, repeat = f"{sql} LIMIT 1", 1
            if first_key_indexed(layout, where, order):
                pick, repeat = _unique_first(layout, condition, order, pick), 3
            return cls(f"SELECT {layout.read_columns(vectors)} FROM {layout.table} WHERE seq = ({pick})",
                       "first", repeat)
        if by_id_range(where, order):  # the (tenant, id) index both selects and orders: no sorter to carry docs
            sql += " LIMIT ?" if limit is not None else ""
            return cls(f"SELECT {layout.read_columns(vectors)} {sql[len('SELECT seq '):]}", "whole")
        if scoped_by_index(layout, where, order):  # `+id`: no index gives the order, so the scope's index is used
            sql = head + "+" + order_by
        return cls(sql + (" LIMIT ?" if limit is not None else ""), "seqs")


def _unique_first(layout: Layout, condition: str, order: Sequence[OrderKey], sorted_pick: str) -> str:
    """The seq of the first record in `order` without a sort where it has no tie: the index gives the
    record with the first order key's first value, and a second lookup in it checks that no other
    matching record has that value (`IS`: NULLs tie, as they sort together); on a tie, `sorted_pick`
    sorts them (a run's latest checkpoint on layout 7's run index: ~30k instructions of ~67k for the sorted
    statement)."""
    key = layout.column(order[0].field)
    matching = f"FROM {layout.table} WHERE tenant = ? AND {condition}"
    return (f"SELECT CASE WHEN NOT EXISTS (SELECT 1 {matching} AND {key} IS top.{key} AND seq != top.seq) "
            f"THEN top.seq ELSE ({sorted_pick}) END "
            f"FROM (SELECT seq, {key} {matching} ORDER BY {order_sql(layout, order[:1])} LIMIT 1) AS top")


def first_key_indexed(layout: Layout, where: Expr | None, order: Sequence[OrderKey]) -> bool:
    """Whether an index of the kind orders the matching records by the first of several order keys, and
    none by them all: after the fields `where` fixes by == at its top level comes that key, and then
    not the next one. SQLite would otherwise sort every record with the first key's first value (a run's
    checkpoints by (sequence, created_at, id) on layout 7's (run_id, sequence, branch_id) index; layout 8's
    gives that whole order, `schema.CHANGED_INDEXES`)."""
    if len(order) < 2:
        return False
    fixed = _fixed_fields(where)
    fields = [key.field for key in order]
    served = 0
    for index in layout.indexes:
        rest = [name for name in index if name not in fixed or name in fields]
        count = 0
        while count < min(len(rest), len(fields)) and rest[count] == fields[count]:
            count += 1
        served = max(served, count)
    return served == 1


def scoped_by_index(layout: Layout, where: Expr | None, order: Sequence[OrderKey]) -> bool:
    """Whether a query ordered by id alone fixes by == at its top level the first field of an index (a
    thread's checkpoints by `run_id`). SQLite would otherwise walk the whole tenant in the (tenant, id)
    index to skip the sort, so a page of one thread cost what the store's size does (the statement of a
    LangGraph `list` of a thread with no namespace, limit 10, among 100 threads of 100: 5.4 ms); through the
    scope's index it costs what the scope's size does (46 us), as SqliteSaver's does."""
    if not _by_id_alone(order):
        return False
    fixed = _fixed_fields(where)
    return any(index[0] in fixed for index in layout.indexes)


def by_id_range(where: Expr | None, order: Sequence[OrderKey]) -> bool:
    """Whether a query is ordered by id alone and bounded by an id comparison at its top level
    (an id range, as the LangGraph saver reads a checkpoint with its writes)."""
    return _by_id_alone(order) and any(term.field == ("id",) and term.op != "ne" for term in _top_comparisons(where))


def _by_id_alone(order: Sequence[OrderKey]) -> bool:
    return len(order) == 1 and order[0].field == "id"


def _top_comparisons(where: Expr | None) -> list[Cmp]:
    """The comparisons `where` ANDs at its top level (itself, if it is one)."""
    terms = where.items if isinstance(where, And) else (where,)
    return [term for term in terms if isinstance(term, Cmp)]


def _fixed_fields(where: Expr | None) -> set[str]:
    """The fields `where` fixes by == at its top level."""
    return {term.field[0] for term in _top_comparisons(where) if term.op == "eq" and len(term.field) == 1}
