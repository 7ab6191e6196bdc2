"""The qdrant backend's record calls, written once for its sync and its native async side.

Each call is a coroutine over `Io`: the client it awaits (an `AsyncQdrantClient`, or the sync
client as `core.async_sides.Direct`), the locks it takes, and how it runs the rare layout steps
written for the sync client (creating a collection). Requests are built and answers decoded
here only; the sides differ in `Io` alone (see `backend.py` and `native.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.batching import chunks
from ...core.filters import Expr, matches
from ...core.kinds import record_type
from ...core.protocol import Hit, OrderKey, StoreParams, apply_update
from ...core.query import sort_records
from ...core.records import Record
from ...core.vectors import Vector
from . import payload as codec
from .filters import Translation, translate
from .handles import Handle
from .ids import point_id
from .layout import VECTOR, Layout
from .options import Location, QdrantOptions
from .ordered import Batch, delegable, order_value, ordered_page
from .points import point_builder
from .ranking import PAYLOAD as SEARCH_PAYLOAD
from .ranking import Candidates, first_request

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient, models

SCROLL_PAGE = 1000
DELETE_CHUNK = 1000
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""A server rejects requests over 32 MB by default; upserts are cut well below that."""
FACET_PAGE = 1000
"""Distinct tenants asked of a facet request at first (asked again, wider, if it comes back full)."""


@dataclass(frozen=True)
class Io:
    """What one side's calls go through."""

    client: AsyncQdrantClient
    writing: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    """Held by writes and the read-modify-write of `update`."""
    reading: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    """Held by reads (the local engine is plain Python, not thread-safe; a server needs none)."""
    blocking: Callable[..., Awaitable[Any]]
    """`blocking(fn, *args)`: a sync layout step (`Layout`), called directly or in a thread."""


def _request_bytes(point: models.PointStruct) -> int:
    """About how many bytes `point` adds to an upsert request (its vector as JSON floats, generously)."""
    payload = point.payload or {}
    return len(payload[codec.DOC]) + 8 * (len(payload.get(codec.VEC, "")) + 64)


class Operations:
    """The record calls of one open qdrant store, through one side's `Io`."""

    def __init__(self, handle: Handle, layout: Layout, options: QdrantOptions, location: Location,
                 params: Callable[[], StoreParams], io: Io) -> None:
        self.handle, self.layout, self.options, self.location = handle, layout, options, location
        self._params = params
        self.io = io
        self.server = location.mode == "server"

    # collections -------------------------------------------------------------------
    async def _exists(self, kind: str) -> bool:
        return self.layout.known(kind) or bool(await self.io.blocking(self.layout.exists, kind))

    async def _has_vector(self, kind: str) -> bool:
        return self.layout.known_vector(kind) or bool(await self.io.blocking(self.layout.has_vector, kind))

    async def _ensure(self, kind: str) -> str:
        params = self._params()
        ready = self.layout.ready(kind, params)
        return ready if ready is not None else str(await self.io.blocking(self.layout.ensure, kind, params))

    async def tenant_values(self, name: str) -> list[str]:
        """The `_t` values in collection `name`: a facet count, or a payload scroll where the
        server has no facet (before Qdrant 1.12) or no tenant index."""
        try:
            limit = FACET_PAGE
            while True:
                hits = (await self.io.client.facet(name, codec.TENANT, limit=limit, exact=True)).hits
                if len(hits) < limit:
                    return [str(hit.value) for hit in hits if hit.count > 0]
                limit *= 10
        except Exception:
            if not self.server:
                raise
            return await self.scrolled_tenant_values(name)

    async def scrolled_tenant_values(self, name: str) -> list[str]:
        present: set[str] = set()
        offset: Any = None
        while True:
            points, offset = await self.io.client.scroll(name, limit=SCROLL_PAGE, offset=offset,
                                                         with_payload=[codec.TENANT], with_vectors=False)
            present.update(p.payload[codec.TENANT] for p in points if p.payload)
            if offset is None:
                return list(present)

    # writing -----------------------------------------------------------------------
    async def put(self, kind: str, records: Sequence[Record]) -> None:
        async with self.io.writing():
            name = await self._ensure(kind)
            present = self.handle.tenants.get(name)
            if present is not None:  # before writing: the set may over-state, never under-state
                present.update(map(codec.tenant_value, {r.tenant_id for r in records}))
            limit = self.options.batch_size
            for start in range(0, len(records), limit):
                await self._upsert(name, records[start:start + limit])

    async def prepare(self, kind: str, tenant: str | None) -> None:
        """The kind's collection (shared by its tenants), made as its first put makes it."""
        async with self.io.writing():
            await self._ensure(kind)

    async def _upsert(self, name: str, records: Sequence[Record]) -> None:
        """Upsert one batch of records, cut into requests of about MAX_REQUEST_BYTES. Its points are
        built here and die on return, before the next batch's: a put holds one batch of points at a
        time, so it neither fills the GC's oldest generation nor grows the heap with its size."""
        points = self._points(records)
        for chunk in chunks(points, len(points), MAX_REQUEST_BYTES, _request_bytes):
            await self.io.client.upsert(name, chunk)

    def _points(self, records: Sequence[Record]) -> list[models.PointStruct]:
        """The records' points; a server needs JSON-ready floats, the local engine copies an array as it is."""
        build = point_builder()
        server = self.server
        return [build(point_id(record.tenant_id, record.id),
                      {} if record.embedding is None else {VECTOR: record.embedding.tolist() if server
                                                           else record.embedding},
                      codec.encode(record))
                for record in records]

    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None:
        async with self.io.writing():
            if not await self._exists(kind):
                return None
            found = await self.io.client.retrieve(self.layout.name(kind), [point_id(tenant, id)],
                                                  with_payload=codec.WITH_VECTOR)
            if not found:
                return None
            record = apply_update(codec.decode(kind, found[0].payload or {}), set, inc)
            name = await self._ensure(kind)
            await self.io.client.upsert(name, self._points([record]))
            return record

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        from qdrant_client import models

        async with self.io.writing():
            doomed = [pid async for pid, _ in self._scan(kind, tenant, where, payload=False)]
            for start in range(0, len(doomed), DELETE_CHUNK):
                selector = models.PointIdsList(points=doomed[start:start + DELETE_CHUNK])
                await self.io.client.delete(self.layout.name(kind), points_selector=selector)
        return len(doomed)

    # reading -----------------------------------------------------------------------
    async def _translate(self, kind: str, tenant: str | None, where: Expr | None) -> Translation:
        return translate(where, tenant, record_type(kind).filterable,
                         scoped=not await self._sole_tenant(kind, tenant))

    async def _sole_tenant(self, kind: str, tenant: str | None) -> bool:
        """Whether the kind's collection holds no other tenant's records, so the tenant condition can go.

        Local engine only (its directory is locked to this process, so the set is complete):
        its filters run in Python per point, and an unfiltered search is ~10x cheaper.
        """
        if self.server or not await self._exists(kind):
            return False
        name = self.layout.name(kind)
        present = self.handle.tenants.get(name)
        if present is None:
            present = self.handle.tenants[name] = set(await self.tenant_values(name))
        return present <= {codec.tenant_value(tenant)}

    async def _scan(self, kind: str, tenant: str | None, where: Expr | None, payload: bool = True,
                    vectors: bool = False) -> AsyncIterator[tuple[Any, Record | None]]:
        """(point id, record) of every record matching `where` exactly; the record is None
        when `payload` is false and the filter is exact (nothing to re-check)."""
        if not await self._exists(kind):
            return
        translation = await self._translate(kind, tenant, where)
        if translation.empty:
            return
        fetch: Any = (codec.WITH_VECTOR if vectors else codec.WITHOUT_VECTOR) if payload or not translation.exact \
            else False
        offset: Any = None
        while True:
            points, offset = await self.io.client.scroll(
                self.layout.name(kind), scroll_filter=translation.filter, limit=SCROLL_PAGE, offset=offset,
                with_payload=fetch, with_vectors=False)
            for point in points:
                record = codec.decode(kind, point.payload) if fetch and point.payload else None
                if translation.exact or matches(where, record):
                    yield point.id, record
            if offset is None:
                return

    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        key = delegable(kind, order, limit)
        async with self.io.reading():
            if key is not None and limit is not None:
                async def scan(expr: Expr | None) -> list[Record]:
                    return await self._records(kind, tenant, expr, vectors)

                async def scroll(*batch: Any) -> Batch:
                    return await self._ordered_batch(kind, tenant, vectors, *batch)

                return await ordered_page(kind, where, key, limit, scan, scroll)
            found = await self._records(kind, tenant, where, vectors)
        ordered = sort_records(found, order)
        return ordered if limit is None else ordered[:limit]

    async def _records(self, kind: str, tenant: str | None, where: Expr | None, vectors: bool) -> list[Record]:
        return [record async for _, record in self._scan(kind, tenant, where, vectors=vectors) if record is not None]

    async def _ordered_batch(self, kind: str, tenant: str | None, vectors: bool, where: Expr | None, field: str,
                             descending: bool, start: Any, size: int) -> Batch:
        """Up to `size` points of a Qdrant-filtered superset of `where`, by `field` from `start` (inclusive)."""
        from qdrant_client import models

        translation = await self._translate(kind, tenant, where)
        if translation.empty or not await self._exists(kind):
            return Batch([], [], True)
        order_by = models.OrderBy(key=codec.field_key(field),
                                  direction=models.Direction.DESC if descending else models.Direction.ASC,
                                  start_from=None if start is None else order_value(start))
        points, _ = await self.io.client.scroll(
            self.layout.name(kind), scroll_filter=translation.filter, limit=size, order_by=order_by,
            with_payload=codec.WITH_VECTOR if vectors else codec.WITHOUT_VECTOR, with_vectors=False)
        records = [codec.decode(kind, point.payload or {}) for point in points]
        kept = [True] * len(records) if translation.exact else [matches(where, r) for r in records]
        return Batch(records, kept, len(points) < size)

    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        async with self.io.reading():
            if not await self._exists(kind):
                return []
            found = await self.io.client.retrieve(
                self.layout.name(kind), [point_id(tenant, i) for i in ids],
                with_payload=codec.WITH_VECTOR if vectors else codec.WITHOUT_VECTOR)
        return [codec.decode(kind, p.payload) for p in found if p.payload]  # point ids fold in the tenant

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        async with self.io.reading():
            if not await self._exists(kind):
                return 0
            translation = await self._translate(kind, tenant, where)
            if translation.empty:
                return 0
            if translation.exact:
                return (await self.io.client.count(self.layout.name(kind), count_filter=translation.filter,
                                                   exact=True)).count
            return len([pid async for pid, _ in self._scan(kind, tenant, where, payload=False)])

    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        from qdrant_client import models

        async with self.io.reading():
            if not await self._has_vector(kind):
                return []
            translation = await self._translate(kind, tenant, where)
            if translation.empty:
                return []
            query_filter = translation.filter
            if not translation.exact:  # the exact matches, by id (point ids fold in the tenant)
                ids = [pid async for pid, _ in self._scan(kind, tenant, where, payload=False)]
                if not ids:
                    return []
                query_filter = models.Filter(must=[models.HasIdCondition(has_id=ids)])
            search_params = models.SearchParams(exact=True) if self.options.exact else None
            limit = first_request(k)
            while True:
                points = (await self.io.client.query_points(
                    self.layout.name(kind), query=vector.tolist(), using=VECTOR, query_filter=query_filter,
                    limit=limit, with_payload=SEARCH_PAYLOAD, with_vectors=False,
                    search_params=search_params)).points
                candidates = Candidates(points, vector, self._params().metric, limit)
                best = candidates.best(k)
                if best is not None:
                    break
                limit *= 4
        return [Hit(codec.decode(kind, candidates.payloads[i], vectors), score) for i, score in best]
