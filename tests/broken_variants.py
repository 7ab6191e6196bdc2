"""Deliberately broken backends: the reference backend with one realistic bug each.

The suite must fail every one of them (tests/test_suite_catches_broken_variants.py); the
share it catches is the suite's catch rate. Each bug is one a real backend has shipped
(several are the prior art's defects listed in DESIGN.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any, ClassVar

from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.filters import Expr, walk
from mnemostore.core.protocol import Backend, Hit, OrderKey
from mnemostore.core.records import Checkpoint, Record
from mnemostore.core.vectors import Vector


class Broken(MemoryBackend):
    """Base of the variants: a memory backend under its own scheme."""

    bug: ClassVar[str]
    catch_needs: ClassVar[str | None] = None
    """If the suite cannot catch this bug yet: the clause it lacks (the test is a strict xfail)."""
    found_by: ClassVar[str | None] = None
    """A `-k` keyword naming the suite's clauses that catch this bug, for a variant the whole suite in its
    order reaches late (up to 30 s a run); None runs the whole suite up to its first failure."""


class NotEqualDropsMissing(Broken):
    bug = "`field != v` leaves out records whose field is missing (SQL three-valued logic leaking)"

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        found = super().query(kind, tenant, where, order, None, vectors)
        for cmp in walk(where):
            if cmp.op == "ne" and len(cmp.field) == 1:
                found = [r for r in found if getattr(r, cmp.field[0]) is not None]
        return found if limit is None else found[:limit]


class FilterAfterSearch(Broken):
    bug = "vector search takes the global top k, then filters (fewer than k results come back)"

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        from mnemostore.core.filters import matches

        return [hit for hit in super().search(kind, tenant, vector, k, None, vectors) if matches(where, hit.record)]


class LostIncrements(Broken):
    bug = "update reads, then writes, without a lock: concurrent increments are lost"
    found_by = "concurrent_increments"

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        from mnemostore.core.protocol import apply_update

        current = self.get(kind, tenant, [id])
        if not current:
            return None
        time.sleep(0.002)
        record = apply_update(current[0], set, inc)
        self.put(kind, [record])
        return record


class DescendingIgnored(Broken):
    bug = "ordering ignores the descending flag"

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        return super().query(kind, tenant, where, [OrderKey(k.field) for k in order], limit, vectors)


class TenantLeak(Broken):
    bug = "queries ignore the tenant and see every tenant's records"

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        from mnemostore.core.query import sort_records

        found = [r for t in self.tenants(kind) for r in super().query(kind, t, where, order, None, vectors)]
        found = sort_records(found, order)
        return found if limit is None else found[:limit]


class OffsetsLost(Broken):
    bug = "datetimes are stored in UTC and come back without their offset"
    found_by = "test_datetimes_keep_their_offset_and_microseconds"

    def put(self, kind: str, records: Sequence[Record]) -> None:
        moved = [r.model_copy(update={"created_at": r.created_at.astimezone(UTC)}) for r in records]
        super().put(kind, moved)


class PartialBatch(Broken):
    bug = "a batch that fails half-way leaves its first records written"

    def put(self, kind: str, records: Sequence[Record]) -> None:
        for record in records:
            super().put(kind, [record])


class DeleteIgnoresFilter(Broken):
    bug = "delete with a filter removes every record of the tenant"

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return super().delete(kind, tenant, None)


class CountIgnoresFilter(Broken):
    bug = "count ignores the filter"

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return super().count(kind, tenant, None)


class FloatsBecomeInts(Broken):
    bug = "metadata floats with integral values come back as ints (1.0 -> 1)"

    def put(self, kind: str, records: Sequence[Record]) -> None:
        def squash(value: Any) -> Any:
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, dict):
                return {k: squash(v) for k, v in value.items()}
            if isinstance(value, list):
                return [squash(v) for v in value]
            return value

        super().put(kind, [r.model_copy(update={"metadata": squash(r.metadata)}) for r in records])


class LimitIgnored(Broken):
    bug = "query ignores its limit"

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        return super().query(kind, tenant, where, order, None, vectors)


class EmbeddingsDropped(Broken):
    bug = "reads by id leave out the embedding (an export/re-import would lose every vector)"

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return [r.model_copy(update={"embedding": None}) for r in super().get(kind, tenant, ids, vectors)]


class L2Reversed(Broken):
    bug = "l2 search returns the farthest records first"
    found_by = "test_top_k_matches_numpy_exactly"

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        if self.params.metric != "l2":
            return super().search(kind, tenant, vector, k, where, vectors)
        everything = super().search(kind, tenant, vector, 1_000_000, where, vectors)
        return list(reversed(everything))[:k]


class UpsertDuplicates(Broken):
    bug = "putting an existing id adds a second copy instead of replacing it"

    def put(self, kind: str, records: Sequence[Record]) -> None:
        rows = self._rows(kind)
        fresh = []
        for record in records:
            if (record.tenant_id, record.id) in rows:
                copy = record.model_copy(update={"id": record.id + "\u200b"})
                fresh.append(copy)
            fresh.append(record)
        super().put(kind, [r for r in fresh if (r.tenant_id, r.id) not in rows or r.id.endswith("\u200b")])


class DropsMetadata(Broken):
    bug = "records lose their metadata on the way in"

    def put(self, kind: str, records: Sequence[Record]) -> None:
        super().put(kind, [r.model_copy(update={"metadata": {}}) for r in records])


class OneResultShort(Broken):
    bug = "vector search returns k - 1 results"

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        return super().search(kind, tenant, vector, k, where, vectors)[: max(k - 1, 0)]


class UnstableSort(Broken):
    bug = "ties in the ordering come back in arbitrary order (no id tie-breaker)"

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        import random

        from mnemostore.core.query import sort_records

        found = super().query(kind, tenant, where, (), None, vectors)
        random.Random(len(found)).shuffle(found)
        found = sort_records(found, [key for key in order if key.field != "id"])
        return found if limit is None else found[:limit]


class RacingAppends(Broken):
    bug = "a save with the default parent looks the latest up and writes it in two steps, unlocked: racing saves fork"

    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        return Backend.append_checkpoint(self, record, latest, order)


VARIANTS: tuple[type[Broken], ...] = (
    NotEqualDropsMissing, FilterAfterSearch, LostIncrements, DescendingIgnored, TenantLeak, OffsetsLost,
    PartialBatch, DeleteIgnoresFilter, CountIgnoresFilter, FloatsBecomeInts, LimitIgnored, EmbeddingsDropped,
    L2Reversed, UpsertDuplicates, DropsMetadata, OneResultShort, UnstableSort, RacingAppends,
)


def scheme(variant: type[Broken]) -> str:
    """The URL scheme a variant registers under, e.g. broken-tenantleak."""
    return "broken-" + variant.__name__.lower()
