"""The planner's row count of each kind's table, kept per store so a filtered search can choose its filter's SQL.

A filter on agent or project_id can compare the prefix the scope index holds (sql_filters'
scope hints), which lets the planner read the matching rows by that index and sort them all.
That beats walking the HNSW graph while few rows match (a 10% filter over 10,000 rows: ~1 ms
against 2-4 ms) and loses badly once many do (over 100,000 clustered rows: 19 ms of server CPU
against 2.7 ms for the walk, which raw SQL takes too): the planner misjudges both, its estimate
of the hinted filter being ~200x too low. So a search adds the hints only while its table holds
fewer than `SCOPE_INDEX_ROWS` rows, by `pg_class.reltuples`, read in the search's own round trip
every `TTL` seconds.
"""

from __future__ import annotations

from time import monotonic

SCOPE_INDEX_ROWS = 20_000
"""Up to this many rows in a table (2,000 matching a 10% filter), a filtered search reads the
matching rows by their scope index and sorts them; from there on it walks the HNSW graph."""
TTL = 60.0
"""Seconds a table's row count is used before a search reads it again."""


class RowEstimates:
    """Each table's `reltuples` and when it was read (monotonic seconds)."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[float, float]] = {}

    def stale(self, table: str) -> bool:
        """Whether a search on `table` should read its row count (never read, or older than `TTL`)."""
        found = self._rows.get(table)
        return found is None or monotonic() - found[1] >= TTL

    def scope_index_pays(self, table: str) -> bool:
        """Whether a filtered search on `table` should add the scope hints (a table never counted,
        or never analyzed, counts as small)."""
        found = self._rows.get(table)
        return found is None or found[0] < SCOPE_INDEX_ROWS

    def record(self, table: str, rows: float | None) -> None:
        """`table`'s `reltuples` as just read (None: no such table; -1: never analyzed)."""
        self._rows[table] = (-1.0 if rows is None else float(rows), monotonic())
