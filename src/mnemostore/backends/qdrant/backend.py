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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from pydantic import BaseModel

from ...core.async_sides import Direct
from ...core.calls import ThreadLock, run_sync
from ...core.capabilities import Capability
from ...core.filters import Expr
from ...core.kinds import kind_names, record_type
from ...core.protocol import PARAMS_KEY, Backend, Hit, OrderKey, StoreParams
from ...core.records import Record
from ...core.url import StoreURL
from ...core.vectors import Vector
from ...migrations.locking import FileLock, MigrationLock
from . import payload as codec
from .handles import Handle, acquire, held_locations, release
from .ids import meta_point_id
from .layout import Layout
from .native import QdrantAsyncSide
from .operations import Io, Operations
from .options import QdrantOptions, parse_location

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient, QdrantClient

    from ...core.declarations import KindChange

_COMMON = frozenset({
    Capability.FILTER_RANGE, Capability.FILTER_METADATA, Capability.VECTOR_COSINE, Capability.VECTOR_DOT,
    Capability.VECTOR_L2, Capability.VECTOR_FILTERED, Capability.LARGE_STATE,
})


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
        self._operations: Operations | None = None

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
            self._operations = self.operations_over(self._sync_io(handle))
            stored = self.read_meta(PARAMS_KEY)
            if stored:
                layout.check(StoreParams.from_meta(stored))
        except BaseException:
            self._handle = self._layout = self._operations = None
            release(handle)
            raise

    def _sync_io(self, handle: Handle) -> Io:
        """The sync side's calls: the shared client's methods as they are, under the handle's lock."""
        locked = ThreadLock(handle.lock)
        unlocked = contextlib.nullcontext()
        return Io(client=cast("AsyncQdrantClient", Direct(handle.client)), writing=lambda: locked,
                  reading=(lambda: unlocked) if self.location.mode == "server" else (lambda: locked),
                  blocking=_direct)

    def operations_over(self, io: Io) -> Operations:
        """This open store's record calls through `io` (the sync side's, or a native async side's)."""
        assert self._handle is not None and self._layout is not None, "the store is closed"
        return Operations(self._handle, self._layout, self.qdrant_options, self.location, lambda: self.params, io)

    def close(self) -> None:
        handle, self._handle, self._layout, self._operations = self._handle, None, None, None
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
    def handle(self) -> Handle:
        """The client and lock this store shares with the other opens of its location in this process."""
        assert self._handle is not None, "the store is closed"
        return self._handle

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
            found = run_sync(self.operations.tenant_values(name))
            if self.location.mode != "server":
                assert self._handle is not None
                self._handle.tenants[name] = set(found)  # exact now: sharpens `_sole_tenant`'s guess
        return [value or None for value in found]

    # records: written once in `operations.py`, driven here over the sync client ----------
    @property
    def operations(self) -> Operations:
        assert self._operations is not None, "the store is closed"
        return self._operations

    def put(self, kind: str, records: Sequence[Record]) -> None:
        run_sync(self.operations.put(kind, records))

    def prepare(self, kind: str, tenant: str | None) -> None:
        run_sync(self.operations.prepare(kind, tenant))

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        return run_sync(self.operations.update(kind, tenant, id, set, inc))

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return run_sync(self.operations.delete(kind, tenant, where))

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        return run_sync(self.operations.query(kind, tenant, where, order, limit, vectors))

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return run_sync(self.operations.get(kind, tenant, ids, vectors))

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return run_sync(self.operations.count(kind, tenant, where))

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        return run_sync(self.operations.search(kind, tenant, vector, k, where, vectors))

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
    async_backend = QdrantAsyncSide
    """`open_async` awaits the record calls on `AsyncQdrantClient` (`native.py`); the local engine's
    stores keep the executor (see there why)."""


async def _direct(call: Any, *args: Any) -> Any:
    return call(*args)
