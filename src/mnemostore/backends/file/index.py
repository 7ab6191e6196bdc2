"""The in-memory index of one kind: its live records per tenant, rebuilt from the log.

It also keeps the accounting compaction needs (how many log bytes are still live) and
a per-tenant float32 matrix for vector search, rebuilt lazily after changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ...core.filters import And, Cmp, Expr, matches
from ...core.records import Record
from ...core.vectorsearch import normalise_rows
from .convert import from_json

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class Row(NamedTuple):
    record: Record
    size: int
    """The log bytes this record's line accounts for (its share of a batch line)."""


@dataclass
class Matrix:
    """The embeddings of one tenant's records, stacked (rows unit-length for cosine)."""

    version: int
    metric: str
    records: list[Record]
    ids: list[str]
    matrix: npt.NDArray[np.float32]


class KindIndex:
    def __init__(self, cls: type[Record]) -> None:
        self.cls = cls
        self.tenants: dict[str | None, dict[str, Row]] = {}
        self.live_bytes = 0
        self.version = 0
        self._matrices: dict[str | None, Matrix] = {}

    def clear(self) -> None:
        self.tenants.clear()
        self.live_bytes = 0
        self._changed()

    def rows(self, tenant: str | None) -> dict[str, Row]:
        return self.tenants.get(tenant) or {}

    def put(self, records: Sequence[Record], line_size: int) -> None:
        share = line_size // max(len(records), 1)
        for record in records:
            rows = self.tenants.setdefault(record.tenant_id, {})
            old = rows.get(record.id)
            if old is not None:
                self.live_bytes -= old.size
            rows[record.id] = Row(record, share)
            self.live_bytes += share
        self._changed()

    def delete(self, tenant: str | None, ids: Iterable[str]) -> None:
        rows = self.tenants.get(tenant)
        if not rows:
            return
        for id in ids:
            old = rows.pop(id, None)
            if old is not None:
                self.live_bytes -= old.size
        self._changed()

    def apply(self, entry: dict[str, Any], line_size: int) -> None:
        """Replay one log entry."""
        op = entry.get("op")
        if op == "put":
            self.put([from_json(self.cls, data) for data in entry["records"]], line_size)
        elif op == "delete":
            self.delete(entry.get("tenant"), entry["ids"])

    def resized(self, sizes: Iterator[int]) -> None:
        """Set every row's size, in `all_rows()` order (after compaction)."""
        self.live_bytes = 0
        for rows in self.tenants.values():
            for id, row in rows.items():
                size = next(sizes)
                rows[id] = Row(row.record, size)
                self.live_bytes += size

    def all_rows(self) -> Iterator[Row]:
        for rows in self.tenants.values():
            yield from rows.values()

    def select(self, tenant: str | None, where: Expr | None) -> list[Record]:
        """The tenant's records matching `where` (reference semantics), in no particular order."""
        rows = self.rows(tenant)
        ids = _id_candidates(where)
        if ids is None:
            candidates: Iterable[Row] = rows.values()
        else:
            candidates = [rows[i] for i in dict.fromkeys(ids) if i in rows]
        return [row.record for row in candidates if matches(where, row.record)]

    def matrix(self, tenant: str | None, metric: str) -> Matrix | None:
        """The stacked embeddings of the tenant's records (cached until the next change)."""
        import numpy as np

        cached = self._matrices.get(tenant)
        if cached is not None and cached.version == self.version and cached.metric == metric:
            return cached
        records = [row.record for row in self.rows(tenant).values() if row.record.embedding is not None]
        if not records:
            return None
        stacked = np.stack([r.embedding for r in records]).astype(np.float32, copy=False)
        if metric == "cosine":
            stacked = normalise_rows(stacked)
        built = Matrix(self.version, metric, records, [r.id for r in records], stacked)
        self._matrices[tenant] = built
        return built

    def _changed(self) -> None:
        self.version += 1


def _id_candidates(where: Expr | None) -> Sequence[str] | None:
    """Ids the filter restricts to, when it says so at the top (a fast path for gets and deletes)."""
    if isinstance(where, Cmp) and where.field == ("id",):
        if where.op == "in":
            return [v for v in where.value if isinstance(v, str)]
        if where.op == "eq" and isinstance(where.value, str):
            return [where.value]
    if isinstance(where, And):
        for item in where.items:
            found = _id_candidates(item)
            if found is not None:
                return found
    return None
