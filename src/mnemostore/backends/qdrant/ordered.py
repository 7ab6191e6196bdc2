"""A page ordered by one number or datetime field, read with Qdrant's `order_by` instead of a full scan.

Qdrant orders a scroll by one payload key (numbers; datetimes are stored as integer
microseconds), skips points without the key, and breaks ties its own way (the local engine
by insertion, a server by point id; neither is the record id). The reference order
(`core.query.sort_records`) puts missing values first ascending and last descending and
breaks ties by id, so a page is assembled from: the missing-value group, read whole and
sorted by id; then `order_by` batches of about `limit + 1` rows, where the value group a
batch ends inside is read whole (a scroll on `field == value`) and sorted by id. A page
costs about `limit` rows plus the ties at its edges, not every match.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from ...core import codec
from ...core.filters import Cmp, Expr, all_of
from ...core.kinds import record_type
from ...core.protocol import ID_ORDER, OrderKey
from ...core.query import sort_records
from ...core.records import Record

ORDERABLE = (int, float, datetime)
"""Field types Qdrant's `order_by` can order (strings and booleans cannot be ordered by Qdrant)."""
SPARE = 8
"""Rows read past `limit + 1`: a cursor's filter rejects the previous page's last row(s), and a
small tie at the page's edge then needs no second call (each call of the local engine checks
the filter on every point, a few extra decoded rows are cheaper)."""


class Batch(NamedTuple):
    """One `order_by` scroll: its points' records in Qdrant's order, whether each matches the
    filter exactly (the Qdrant filter may be a superset), and whether Qdrant had no more."""

    records: list[Record]
    kept: list[bool]
    exhausted: bool


Scan = Callable[[Expr | None], Awaitable[list[Record]]]
"""Every record matching a filter exactly, in any order."""
Scroll = Callable[[Expr | None, str, bool, Any, int], Awaitable[Batch]]
"""An `order_by` scroll: (filter, field, descending, start value or None, how many points)."""


def delegable(kind: str, order: Sequence[OrderKey], limit: int | None) -> OrderKey | None:
    """The key to hand to Qdrant's `order_by`, or None when the query must be ordered in Python
    (no limit, several keys, or a string or boolean key)."""
    if limit is None or len(order) != 2 or order[1] != ID_ORDER:
        return None
    key = order[0]
    field_type = record_type(kind).filterable.get(key.field)
    return key if field_type in ORDERABLE and key.field != "id" else None


def order_value(value: Any) -> Any:
    """A field value as Qdrant orders it (datetimes as the microseconds stored in the payload)."""
    return codec.instant_micros(value) if isinstance(value, datetime) else value


async def ordered_page(kind: str, where: Expr | None, key: OrderKey, limit: int, scan: Scan,
                       scroll: Scroll) -> list[Record]:
    """The first `limit` records matching `where` in the order (key, id), as `sort_records` orders them."""
    async def missing() -> list[Record]:
        found = await scan(all_of(where, Cmp((key.field,), "eq", None))) if _nullable(kind, key.field) else []
        return sorted(found, key=_id)

    page = [] if key.descending else (await missing())[:limit]
    bound = where
    start: Any = None
    size = limit - len(page) + 1 + SPARE
    while len(page) < limit:
        batch = await scroll(bound, key.field, key.descending, start, size)
        rows = [record for record, kept in zip(batch.records, batch.kept, strict=True) if kept]
        if batch.exhausted:
            page.extend(sort_records(rows, (key, ID_ORDER)))
            break
        edge = getattr(batch.records[-1], key.field)  # the value group the batch may end inside
        page.extend(sort_records([r for r in rows if getattr(r, key.field) != edge], (key, ID_ORDER)))
        if len(page) >= limit:
            break
        page.extend(sorted(await scan(all_of(bound, Cmp((key.field,), "eq", edge))), key=_id))
        bound = all_of(where, Cmp((key.field,), "lt" if key.descending else "gt", edge))
        start = edge
        size = max(2 * size, limit - len(page) + 1 + SPARE)
    if key.descending and len(page) < limit:
        page.extend(await missing())
    return page[:limit]


def _id(record: Record) -> str:
    return record.id


def _nullable(kind: str, field: str) -> bool:
    """Whether the field may be None (a missing-value group to read), from its annotation."""
    annotation = record_type(kind).model_fields[field].annotation
    return type(None) in typing.get_args(annotation)
