"""Whether the planner walks a kind's HNSW index for one search, as EXPLAIN last showed it, kept per store.

A search alone is what the planner makes of it: on a small table (2,000 x 384 rows) it scans the
table and sorts, exactly; on a large one it walks the HNSW index, approximately. A group of
searches the planner would each scan goes as one scan of the table (`Statements.scanned_many`):
the same rows, for ~40% less of the server's time per search (in groups of 16 or more). That
holds only while the planner scans: each such group carries the EXPLAIN of its first search alone
in its round trip, and if that walks the index the group is run again as walks
(`Statements.nearest_many`), as the planner runs it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from time import monotonic
from typing import Any

TTL = 60.0
"""Seconds a search shape seen walking the index goes before a group of it is EXPLAINed again."""
GROUP = 6
"""Groups of fewer searches walk or scan each query in turn. Measured on 2,000 x 384 rows, server CPU per
search: one scan 625 / 505-606 us for 4 / 6 searches, and its EXPLAIN ~180 us a group, against
~700 us for each walk or scan alone."""


class IndexWalks:
    """Each search shape's last EXPLAIN: whether it walked the index, and when (monotonic seconds)."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[bool, float]] = {}

    def scans(self, shape: Hashable) -> bool:
        """Whether the planner scanned when it last planned a search of `shape` alone."""
        found = self._seen.get(shape)
        return found is not None and not found[0]

    def due(self, shape: Hashable) -> bool:
        """Whether a group of `shape` should carry an EXPLAIN (never seen, or walking since `TTL`)."""
        found = self._seen.get(shape)
        return found is None or monotonic() - found[1] >= TTL

    def record(self, shape: Hashable, plan: Sequence[Sequence[Any]]) -> bool:
        """Whether `plan` (EXPLAIN's rows) walks an index in distance order, remembered for `shape`.
        Only a k-nearest index scan shows an `Order By:` (a sort shows `Sort Key:`)."""
        walks = any("Order By:" in str(row[0]) for row in plan)
        if len(self._seen) >= MAX_SHAPES:
            self._seen.clear()
        self._seen[shape] = (walks, monotonic())
        return walks


MAX_SHAPES = 512
"""Shapes kept before the record starts again (a program cycling through filter shapes makes one each)."""
