"""The qdrant backends: Qdrant's local engine (`qdrant://`) and a Qdrant server (`qdrant+http(s)://`).

Filters run inside Qdrant (see `filters.py`; what Qdrant cannot decide exactly is re-checked
in Python over a superset). A query with a limit ordered by one number or datetime field
(the default `created_at` order, `-confidence`, and their cursor pages) is read with Qdrant's
`order_by` in both modes: about `limit` rows plus the ties at the page's edges, which are
read whole and sorted by id (`ordered.py`). Other orderings (strings, booleans, several
keys) and queries without a limit scan every match and sort them in Python
(`core.query.sort_records`). In the local engine each call still checks the filter on every
point of the collection in Python; a server answers `order_by` from its payload index.
Vector search asks Qdrant for k + 1 points with the filter inside `query_points` and
rescores only near-ties exactly (`ranking.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from ...core.batching import chunks
from ...core.capabilities import Capability
from ...core.filters import Expr, matches
from ...core.kinds import kind_names, record_type
from ...core.protocol import PARAMS_KEY, Backend, Hit, OrderKey, StoreParams, apply_update
from ...core.query import sort_records
from ...core.records import Record
from ...core.url import StoreURL
from ...core.vectors import Vector
from ...migrations.locking import FileLock, MigrationLock
from . import payload as codec
from .filters import Translation, translate
from .handles import Handle, acquire, held_locations, release
from .ids import meta_point_id, point_id
from .layout import VECTOR, Layout
from .options import QdrantOptions, parse_location
from .ordered import Batch, delegable, order_value, ordered_page
from .points import point_builder
from .ranking import PAYLOAD as SEARCH_PAYLOAD
from .ranking import Candidates, first_request

if TYPE_CHECKING:
    from qdrant_client import QdrantClient, models

    from ...core.declarations import KindChange

SCROLL_PAGE = 1000
DELETE_CHUNK = 1000
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""A server rejects requests over 32 MB by default; upserts are cut well below that."""
FACET_PAGE = 1000
"""Distinct tenants asked of a facet request at first (asked again, wider, if it comes back full)."""

_COMMON = frozenset({
    Capability.FILTER_RANGE, Capability.FILTER_METADATA, Capability.VECTOR_COSINE, Capability.VECTOR_DOT,
    Capability.VECTOR_L2, Capability.VECTOR_FILTERED, Capability.LARGE_STATE,
})


def _request_bytes(point: models.PointStruct) -> int:
    """About how many bytes `point` adds to an upsert request (its vector as JSON floats, generously)."""
    payload = point.payload or {}
    return len(payload[codec.DOC]) + 8 * (len(payload.get(codec.VEC, "")) + 64)


class QdrantBackend(Backend):
    """Qdrant's local engine, on disk (`qdrant:///path`) or in memory (`qdrant://memory[/NAME]`).

    One process at a time may open a directory (Qdrant locks it); Stores opened on the same
    location in one process share one client, whose lock makes updates atomic. Batches are
    not atomic (the engine commits point by point). `qdrant://memory` stores do not declare
    `persistent` (see `capabilities_for`).
    """

    name: ClassVar[str] = "qdrant"
    schemes: ClassVar[tuple[str, ...]] = ("qdrant",)
    capabilities: ClassVar[frozenset[Capability]] = _COMMON | {Capability.PERSISTENT, Capability.ATOMIC_UPDATE}
    options_model: ClassVar[type[BaseModel]] = QdrantOptions
    requires: ClassVar[tuple[str, ...]] = ("qdrant_client",)
    extra: ClassVar[str | None] = "qdrant"

    def __init__(self, url: StoreURL, options: BaseModel) -> None:
        super().__init__(url, options)
        assert isinstance(options, QdrantOptions)
        self.qdrant_options = options
        self.location = parse_location(url, options)
        self._handle: Handle | None = None
        self._layout: Layout | None = None

    @classmethod
    def capabilities_for(cls, url: StoreURL) -> frozenset[Capability]:
        """What a store at `url` declares: an in-memory store is not persistent."""
        if url.scheme == "qdrant" and url.host == "memory":
            return cls.capabilities - {Capability.PERSISTENT}
        return cls.capabilities

    # lifecycle -----------------------------------------------------------------
    def exists(self) -> bool | None:
        """A private in-memory store always (it is fresh). On disk: not without its directory (else
        core opens it to look). A shared in-memory store (not without its location opened in this
        process) and a server: whether the store's meta collection, under its prefix, is there."""
        location = self.location
        if location.mode == "memory" and (location.key() is None or location.key() not in held_locations()):
            return location.key() is None
        if location.mode == "disk":
            return None if location.path is not None and Path(location.path).is_dir() else False
        handle = acquire(location, self.qdrant_options)
        try:
            return bool(handle.client.collection_exists(self.qdrant_options.prefix + "meta"))
        finally:
            release(handle)

    def open(self) -> None:
        import qdrant_client  # noqa: F401  (a missing driver surfaces here, named by core)

        handle = acquire(self.location, self.qdrant_options)
        try:
            layout = Layout(handle, self.qdrant_options.prefix)
            layout.open()
            self._handle, self._layout = handle, layout
            stored = self.read_meta(PARAMS_KEY)
            if stored:
                layout.check(StoreParams.from_meta(stored))
        except BaseException:
            self._handle = self._layout = None
            release(handle)
            raise

    def close(self) -> None:
        handle, self._handle, self._layout = self._handle, None, None
        if handle is not None:
            release(handle)

    def drop(self) -> None:
        """Delete the store's collections (`<prefix><kind>` of every registered kind, `<prefix>meta`) and, on disk, its
        migration lock file."""
        self.open()
        try:
            assert self._handle is not None and self._layout is not None
            handle, layout = self._handle, self._layout
            with handle.lock:
                for name in (*(layout.name(kind) for kind in kind_names()), layout.meta):
                    if handle.client.collection_exists(name):
                        handle.client.delete_collection(name)
                    handle.collections.pop(name, None)
            lock = self.migration_lock()
            if isinstance(lock, FileLock):
                lock.path.unlink(missing_ok=True)
        finally:
            self.close()

    @property
    def _client(self) -> QdrantClient:
        assert self._handle is not None, "the store is closed"
        return self._handle.client

    @property
    def layout(self) -> Layout:
        assert self._layout is not None, "the store is closed"
        return self._layout

    def _writing(self) -> Any:
        assert self._handle is not None, "the store is closed"
        return self._handle.lock

    def _reading(self) -> Any:
        """The local engine is plain Python, not thread-safe: reads take the lock too; a server needs none."""
        return contextlib.nullcontext() if self.location.mode == "server" else self._writing()

    def read_meta(self, key: str) -> Any:
        with self._reading():
            found = self._client.retrieve(self.layout.meta, [meta_point_id(key)], with_payload=True)
        return codec.decode_meta(found[0].payload or {}) if found else None

    def write_meta(self, key: str, value: Any) -> None:
        """Set `key`'s point in the meta collection (None deletes it)."""
        from qdrant_client import models

        with self._writing():
            if value is None:
                self._client.delete(self.layout.meta, points_selector=models.PointIdsList(points=[meta_point_id(key)]))
                return
            point = models.PointStruct(id=meta_point_id(key), vector={}, payload=codec.encode_meta(key, value))
            self._client.upsert(self.layout.meta, [point])

    # migrations --------------------------------------------------------------------
    def migration_lock(self) -> MigrationLock:
        """A lock file in the store's directory; in memory, a lock shared by the opens of the
        store (one per private store); on a server, a lock record in the meta collection."""
        if self.location.mode == "disk":
            assert self.location.path is not None
            return FileLock(Path(self.location.path) / f"{self.qdrant_options.prefix}migrate.lock")
        if self.location.mode == "memory":
            assert self._handle is not None, "the store is closed"
            return self._handle.migration_lock
        return super().migration_lock()

    def evolve_kind(self, change: KindChange) -> None:
        """Payload indexes on the added fields (a server's), then every record put again: its payload
        gains the fields, so filters on them are exact for records written before."""
        filterable = record_type(change.kind).filterable
        self.layout.index_fields(change.kind, {name: filterable[name] for name in change.added})
        super().evolve_kind(change)

    def tenants(self, kind: str) -> list[str | None]:
        """The distinct `_t` values of the kind's collection, by a facet count (the server answers
        from its tenant index; the local engine scans payloads, without decoding records)."""
        record_type(kind)
        with self._reading():
            if not self.layout.exists(kind):
                return []
            name = self.layout.name(kind)
            found = self._tenant_values(name)
            if self.location.mode != "server":
                assert self._handle is not None
                self._handle.tenants[name] = set(found)  # exact now: sharpens `_sole_tenant`'s guess
        return [value or None for value in found]

    def _tenant_values(self, name: str) -> list[str]:
        """The `_t` values in collection `name`: a facet count, or a payload scroll where the
        server has no facet (before Qdrant 1.12) or no tenant index."""
        try:
            limit = FACET_PAGE
            while True:
                hits = self._client.facet(name, codec.TENANT, limit=limit, exact=True).hits
                if len(hits) < limit:
                    return [str(hit.value) for hit in hits if hit.count > 0]
                limit *= 10
        except Exception:
            if self.location.mode != "server":
                raise
            return self._scrolled_tenant_values(name)

    def _scrolled_tenant_values(self, name: str) -> list[str]:
        present: set[str] = set()
        offset: Any = None
        while True:
            points, offset = self._client.scroll(name, limit=SCROLL_PAGE, offset=offset,
                                                 with_payload=[codec.TENANT], with_vectors=False)
            present.update(p.payload[codec.TENANT] for p in points if p.payload)
            if offset is None:
                return list(present)

    # writing ---------------------------------------------------------------------
    def put(self, kind: str, records: Sequence[Record]) -> None:
        with self._writing():
            name = self.layout.ensure(kind, self.params)
            assert self._handle is not None
            present = self._handle.tenants.get(name)
            if present is not None:  # before writing: the set may over-state, never under-state
                present.update(map(codec.tenant_value, {r.tenant_id for r in records}))
            limit = self.qdrant_options.batch_size
            for start in range(0, len(records), limit):
                self._upsert(name, records[start:start + limit])

    def _upsert(self, name: str, records: Sequence[Record]) -> None:
        """Upsert one batch of records, cut into requests of about MAX_REQUEST_BYTES. Its points are
        built here and die on return, before the next batch's: a put holds one batch of points at a
        time, so it neither fills the GC's oldest generation nor grows the heap with its size."""
        points = self._points(records)
        for chunk in chunks(points, len(points), MAX_REQUEST_BYTES, _request_bytes):
            self._client.upsert(name, chunk)

    def _points(self, records: Sequence[Record]) -> list[models.PointStruct]:
        """The records' points; a server needs JSON-ready floats, the local engine copies an array as it is."""
        build = point_builder()
        server = self.location.mode == "server"
        return [build(point_id(record.tenant_id, record.id),
                      {} if record.embedding is None else {VECTOR: record.embedding.tolist() if server
                                                           else record.embedding},
                      codec.encode(record))
                for record in records]

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        with self._writing():
            if not self.layout.exists(kind):
                return None
            found = self._client.retrieve(self.layout.name(kind), [point_id(tenant, id)],
                                          with_payload=codec.WITH_VECTOR)
            if not found:
                return None
            record = apply_update(codec.decode(kind, found[0].payload or {}), set, inc)
            name = self.layout.ensure(kind, self.params)
            self._client.upsert(name, self._points([record]))
            return record

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        from qdrant_client import models

        with self._writing():
            doomed = [pid for pid, _ in self._scan(kind, tenant, where, payload=False)]
            for start in range(0, len(doomed), DELETE_CHUNK):
                selector = models.PointIdsList(points=doomed[start:start + DELETE_CHUNK])
                self._client.delete(self.layout.name(kind), points_selector=selector)
        return len(doomed)

    # reading ---------------------------------------------------------------------
    def _translate(self, kind: str, tenant: str | None, where: Expr | None) -> Translation:
        return translate(where, tenant, record_type(kind).filterable, scoped=not self._sole_tenant(kind, tenant))

    def _sole_tenant(self, kind: str, tenant: str | None) -> bool:
        """Whether the kind's collection holds no other tenant's records, so the tenant condition can go.

        Local engine only (its directory is locked to this process, so the set is complete):
        its filters run in Python per point, and an unfiltered search is ~10x cheaper.
        """
        if self.location.mode == "server" or not self.layout.exists(kind):
            return False
        assert self._handle is not None
        name = self.layout.name(kind)
        present = self._handle.tenants.get(name)
        if present is None:
            present = self._handle.tenants[name] = set(self._tenant_values(name))
        return present <= {codec.tenant_value(tenant)}

    def _scan(self, kind: str, tenant: str | None, where: Expr | None, payload: bool = True,
              vectors: bool = False) -> Iterator[tuple[Any, Record | None]]:
        """(point id, record) of every record matching `where` exactly; the record is None
        when `payload` is false and the filter is exact (nothing to re-check)."""
        if not self.layout.exists(kind):
            return
        translation = self._translate(kind, tenant, where)
        if translation.empty:
            return
        fetch: Any = (codec.WITH_VECTOR if vectors else codec.WITHOUT_VECTOR) if payload or not translation.exact \
            else False
        offset: Any = None
        while True:
            points, offset = self._client.scroll(
                self.layout.name(kind), scroll_filter=translation.filter, limit=SCROLL_PAGE, offset=offset,
                with_payload=fetch, with_vectors=False)
            for point in points:
                record = codec.decode(kind, point.payload) if fetch and point.payload else None
                if translation.exact or matches(where, record):
                    yield point.id, record
            if offset is None:
                return

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        key = delegable(kind, order, limit)
        with self._reading():
            if key is not None and limit is not None:
                return ordered_page(kind, where, key, limit, lambda expr: self._records(kind, tenant, expr, vectors),
                                    lambda *batch: self._ordered_batch(kind, tenant, vectors, *batch))
            found = self._records(kind, tenant, where, vectors)
        ordered = sort_records(found, order)
        return ordered if limit is None else ordered[:limit]

    def _records(self, kind: str, tenant: str | None, where: Expr | None, vectors: bool) -> list[Record]:
        return [record for _, record in self._scan(kind, tenant, where, vectors=vectors) if record is not None]

    def _ordered_batch(self, kind: str, tenant: str | None, vectors: bool, where: Expr | None, field: str,
                       descending: bool, start: Any, size: int) -> Batch:
        """Up to `size` points of a Qdrant-filtered superset of `where`, by `field` from `start` (inclusive)."""
        from qdrant_client import models

        translation = self._translate(kind, tenant, where)
        if translation.empty or not self.layout.exists(kind):
            return Batch([], [], True)
        order_by = models.OrderBy(key=codec.field_key(field),
                                  direction=models.Direction.DESC if descending else models.Direction.ASC,
                                  start_from=None if start is None else order_value(start))
        points, _ = self._client.scroll(
            self.layout.name(kind), scroll_filter=translation.filter, limit=size, order_by=order_by,
            with_payload=codec.WITH_VECTOR if vectors else codec.WITHOUT_VECTOR, with_vectors=False)
        records = [codec.decode(kind, point.payload or {}) for point in points]
        kept = [True] * len(records) if translation.exact else [matches(where, r) for r in records]
        return Batch(records, kept, len(points) < size)

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        with self._reading():
            if not self.layout.exists(kind):
                return []
            found = self._client.retrieve(self.layout.name(kind), [point_id(tenant, i) for i in ids],
                                          with_payload=codec.WITH_VECTOR if vectors else codec.WITHOUT_VECTOR)
        return [codec.decode(kind, p.payload) for p in found if p.payload]  # point ids fold in the tenant

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._reading():
            if not self.layout.exists(kind):
                return 0
            translation = self._translate(kind, tenant, where)
            if translation.empty:
                return 0
            if translation.exact:
                return self._client.count(self.layout.name(kind), count_filter=translation.filter, exact=True).count
            return sum(1 for _ in self._scan(kind, tenant, where, payload=False))

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        from qdrant_client import models

        with self._reading():
            if not self.layout.has_vector(kind):
                return []
            translation = self._translate(kind, tenant, where)
            if translation.empty:
                return []
            query_filter = translation.filter
            if not translation.exact:  # the exact matches, by id (point ids fold in the tenant)
                ids = [pid for pid, _ in self._scan(kind, tenant, where, payload=False)]
                if not ids:
                    return []
                query_filter = models.Filter(must=[models.HasIdCondition(has_id=ids)])
            search_params = models.SearchParams(exact=True) if self.qdrant_options.exact else None
            limit = first_request(k)
            while True:
                points = self._client.query_points(
                    self.layout.name(kind), query=vector.tolist(), using=VECTOR, query_filter=query_filter,
                    limit=limit, with_payload=SEARCH_PAYLOAD, with_vectors=False,
                    search_params=search_params).points
                candidates = Candidates(points, vector, self.params.metric, limit)
                best = candidates.best(k)
                if best is not None:
                    break
                limit *= 4
        return [Hit(codec.decode(kind, candidates.payloads[i], vectors), score) for i, score in best]

    def describe(self) -> dict[str, Any]:
        import qdrant_client

        where = self.location.path if self.location.mode == "disk" else (
            self.url.masked if self.location.mode == "server" else f"memory {self.location.name or '(private)'}")
        return {
            "mode": self.location.mode,
            "location": where,
            "collection_prefix": self.qdrant_options.prefix,
            "qdrant_client": getattr(qdrant_client, "__version__", "unknown"),
            "ordering": "Qdrant order_by for one number or datetime key with a limit (plus the edge ties, "
                        "sorted by id); other orderings client-side over every match",
            "string_ranges": "checked in Python over a Qdrant-filtered superset",
            "search": "exact brute force (local engine)" if self.location.mode != "server"
            else ("exact full scan" if self.qdrant_options.exact else "HNSW index, rescored exactly"),
        }


class QdrantServerBackend(QdrantBackend):
    """A Qdrant server (`qdrant+http://host:6333`, `qdrant+https://...`).

    Several processes may write; each point upsert is atomic, but Qdrant has no transactions
    nor increments, so `update` is atomic only among the Stores of one process.
    """

    name: ClassVar[str] = "qdrant-server"
    auto_migrate: ClassVar[bool] = False
    """A shared server: opening a store never migrates it behind its other users' backs."""
    schemes: ClassVar[tuple[str, ...]] = ("qdrant+http", "qdrant+https")
    # large_state stays undeclared until a server run proves 5 MB payloads pass (gRPC limits).
    capabilities: ClassVar[frozenset[Capability]] = (
        _COMMON - {Capability.LARGE_STATE}) | {Capability.PERSISTENT, Capability.MULTI_PROCESS}
