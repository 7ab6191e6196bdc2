"""The chroma backend: embedded (`chroma:///dir`, `chroma://memory`) or a server (`chroma+http://`).

Layout: per kind and tenant, a collection `<prefix><kind>` (`<prefix><kind>.t<hash>` for a
named tenant, so tenants are isolated by Chroma itself and an unfiltered search needs no
where clause) holding the records with an embedding, indexed with the store's metric,
and `<name>-novec` for records without one (Chroma needs a vector per row: they get a
constant 1-d placeholder and are never searched); `<prefix>meta` holds store parameters,
the migration ledger, the tenant registry (registry.py) and, on a server, the migration lock
row (lock.py). An embedded
store on disk keeps its migration lock file `[<scope>.]<prefix>migrate.lock` in the directory.
Embedding records keep `namespace` as a filter field in the kind's collection: a search
or query across namespaces stays one Chroma call. Rows: rows.py. Filters: where.py.

Costs, since Chroma has no server-side ordering, transactions or increments:
- query reads the metadata of every matching row, filters and sorts it in Python, then
  reads documents for the requested page only: O(matching rows) per page;
- writes, and the read-modify-write of `update`, hold a process-wide lock per store, so
  increments are atomic among the store instances of one process (not across processes:
  `multi_process` is not declared);
- search asks Chroma's HNSW index for k + 1 candidates with the filter inside the query,
  keeps Chroma's order where its float32 distances are clearly apart and rescores near-ties
  exactly from the stored float32 vectors (ranking.py), widening the candidate set until
  the k-th result is clear of the candidates not fetched; recall is HNSW's (`ef_search`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import orjson

from ...core.async_sides import Direct
from ...core.calls import ThreadLock, run_sync
from ...core.capabilities import Capability
from ...core.errors import BackendError, MnemostoreError, SchemaMismatch
from ...core.filters import Expr
from ...core.kinds import record_type
from ...core.protocol import Backend, Hit, OrderKey
from ...core.records import Record
from ...core.vectors import Vector
from ...migrations.locking import FileLock, MigrationLock
from .connect import acquire, max_batch_size, process_migration_lock, release, write_lock
from .lock import ChromaRowLock
from .native import ChromaAsyncSide
from .operations import SPACES, Io, Operations
from .options import ChromaOptions, Location, locate
from .registry import TenantRegistry
from .rows import placeholders

if TYPE_CHECKING:
    from chromadb.api import AsyncClientAPI, ClientAPI
    from chromadb.api.models.AsyncCollection import AsyncCollection

LIST_PAGE = 1000
"""Collections asked per `list_collections` request."""


class ChromaBackend(Backend):
    """Records in Chroma collections; see the module docstring for the layout and costs."""

    name: ClassVar[str] = "chroma"
    schemes: ClassVar[tuple[str, ...]] = ("chroma",)
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.PERSISTENT,
        Capability.ATOMIC_UPDATE,
        Capability.FILTER_RANGE,
        Capability.FILTER_METADATA,
        Capability.VECTOR_COSINE,
        Capability.VECTOR_DOT,
        Capability.VECTOR_L2,
        Capability.VECTOR_FILTERED,
        Capability.LARGE_STATE,
    })
    options_model: ClassVar[type[ChromaOptions]] = ChromaOptions
    requires: ClassVar[tuple[str, ...]] = ("chromadb",)
    extra: ClassVar[str | None] = "chroma"

    options: ChromaOptions

    def __init__(self, url: Any, options: Any) -> None:
        super().__init__(url, options)
        self._location: Location = locate(url)
        self._client: ClientAPI | None = None
        self._client_key: tuple[object, ...] = ()
        self._operations: Operations | None = None
        self.max_batch = 1000
        self._version = ""

    def __repr__(self) -> str:
        return f"<ChromaBackend {self.url.masked} prefix={self.options.prefix!r}>"

    # lifecycle ---------------------------------------------------------------------------
    def exists(self) -> bool | None:
        """In-process (ephemeral): always (a fresh store). Embedded: not without its directory (else
        core opens it to look). A server: whether the store's meta collection is there."""
        location = self._location
        if location.mode == "ephemeral":
            return True
        if location.mode == "persistent":
            return None if location.path is not None and Path(location.path).is_dir() else False
        client, key = acquire(self.url, location, self.options)
        try:
            with self.errors("looking for the store"):
                names = {getattr(c, "name", c) for c in client.list_collections()}
            return self.options.prefix + "meta" in names
        finally:
            release(key)

    def open(self) -> None:
        import chromadb

        options = self.options
        self._client, self._client_key = acquire(self.url, self._location, options)
        self._lock = write_lock(self.lock_key)
        with self.errors("opening"):
            self.max_batch = max_batch_size(self._client_key)
            self._meta = self._client.get_or_create_collection(
                options.prefix + "meta", embedding_function=None, metadata={"mnemostore": "store parameters"})
            self.registry = TenantRegistry(self._meta, self.write_meta)
            self.registry.mark_if_new()
        self._version = chromadb.__version__
        locked = ThreadLock(self._lock)
        self._operations = Operations(self, Io(client=cast("AsyncClientAPI", Direct(self._client)),
                                               collection=lambda found: cast("AsyncCollection", Direct(found)),
                                               writing=lambda: locked, blocking=_direct))

    @property
    def location(self) -> Location:
        return self._location

    @property
    def lock_key(self) -> tuple[object, ...]:
        """What the writes of this store's opens in one process serialise on (its Chroma and collection set)."""
        options = self.options
        return (*self._location.key, options.chroma_tenant, options.database, options.prefix)

    @property
    def is_open(self) -> bool:
        return self._client is not None

    @property
    def operations(self) -> Operations:
        """The record calls (`operations.py`), driven here over the sync client."""
        if self._operations is None:
            raise BackendError(f"{self!r} is closed")
        return self._operations

    def close(self) -> None:
        client, self._client = self._client, None
        self._operations = None
        if client is not None:
            release(self._client_key)

    def drop(self) -> None:
        """Delete the store's collections (every kind and tenant in its registry, an application's kind
        too, with and without vectors, then the meta collection) and, embedded, its migration lock file."""
        from chromadb.errors import NotFoundError

        self.open()
        try:
            assert self._client is not None
            client = self._client
            with self.errors("dropping the store"):
                if not self.registry.complete():
                    self.registry.adopt(self._listed_tenants())
                names = [self.collection_name(kind, tenant) for kind, tenant in self.registry.entries()]
                for name in [*names, *(name + "-novec" for name in names), self.options.prefix + "meta"]:
                    with suppress(NotFoundError):
                        client.delete_collection(name)
            lock = self.migration_lock()
            if isinstance(lock, FileLock):
                lock.path.unlink(missing_ok=True)
        finally:
            self.close()

    def describe(self) -> dict[str, Any]:
        options = self.options
        facts: dict[str, Any] = {"url": self.url.masked, "mode": self._location.mode, "prefix": options.prefix,
                                 "chroma_tenant": options.chroma_tenant, "database": options.database,
                                 "chromadb_version": self._version}
        if self._location.path:
            facts["path"] = self._location.path
        return facts

    def read_meta(self, key: str) -> Any:
        with self.errors("reading store parameters"):
            found = self._meta.get(ids=[key], include=["documents"])
        documents = found["documents"] or []
        return orjson.loads(documents[0]) if found["ids"] and documents[0] is not None else None

    def write_meta(self, key: str, value: Any) -> None:
        """Set `key`'s row in the meta collection (None deletes it)."""
        with self.errors("writing store parameters"):
            if value is None:
                self._meta.delete(ids=[key])
            else:
                self._meta.upsert(ids=[key], embeddings=placeholders(1), documents=[orjson.dumps(value).decode()])

    # migrations ----------------------------------------------------------------------------
    def migration_lock(self) -> MigrationLock:
        """A lock file in the store's directory; `chroma://memory`: a lock shared by its opens in
        this process; a server: a lock row taken with Chroma's insert-if-absent (lock.py)."""
        options, location = self.options, self._location
        if location.mode == "persistent":
            assert location.path is not None
            scope = (options.chroma_tenant, options.database)
            tag = "" if scope == _DEFAULT_SCOPE else hashlib.sha256("\0".join(scope).encode()).hexdigest()[:12] + "."
            return FileLock(Path(location.path) / f"{tag}{options.prefix}migrate.lock")
        if location.mode == "ephemeral":
            return process_migration_lock((*location.key, options.chroma_tenant, options.database, options.prefix))
        return ChromaRowLock(self._meta)

    def tenants(self, kind: str) -> list[str | None]:
        """The tenants whose collections of `kind` hold rows: the registry's (registry.py) plus a
        count or two per tenant. A store from before the registry lists the server's collections
        once, and registers what it finds."""
        record_type(kind)
        if self._client is None:
            raise BackendError(f"{self!r} is closed")
        with self.errors(f"listing the tenants of {kind} records"):
            if not self.registry.complete():
                with self._lock:
                    self.registry.adopt(self._listed_tenants())
            found: list[str | None] = []
            for tenant in self.registry.tenants(kind):
                pair = run_sync(self.operations.pair(kind, tenant, create=False))
                if pair is not None and (run_sync(pair.main.count()) or run_sync(pair.plain.count())):
                    found.append(tenant)
            return found

    def _listed_tenants(self) -> Iterator[tuple[str, str | None, str]]:
        """(kind, tenant, collection name) of every main record collection of this store,
        from a listing of all the server's collections (labels name the kind and tenant)."""
        assert self._client is not None
        offset = 0
        while True:
            page = self._client.list_collections(limit=LIST_PAGE, offset=offset)
            for collection in page:
                labels = collection.metadata or {}
                kind = labels.get("kind")
                if labels.get("mnemostore") != "records" or not isinstance(kind, str):
                    continue
                tenant = None if collection.name == self.collection_name(kind, None) else labels.get("tenant")
                if tenant is not None and collection.name != self.collection_name(kind, str(tenant)):
                    continue  # another store's (another prefix) or not a main collection
                yield kind, None if tenant is None else str(tenant), collection.name
            if len(page) < LIST_PAGE:
                return
            offset += LIST_PAGE

    # collections ---------------------------------------------------------------------------
    def collection_name(self, kind: str, tenant: str | None) -> str:
        """`<prefix><kind>`, or `<prefix><kind>.t<hash>` for a named tenant (any string)."""
        base = self.options.prefix + kind
        if tenant is None:
            return base
        return f"{base}.t{hashlib.sha256(tenant.encode()).hexdigest()[:24]}"

    def check_collection(self, main: Any, tenant: str | None) -> None:
        """The collection is this tenant's, with the store's metric and dimension."""
        if (main.metadata or {}).get("tenant", "") != (tenant or ""):
            raise SchemaMismatch(f"the Chroma collection {main.name!r} belongs to another tenant")
        hnsw = main.configuration_json.get("hnsw") or {}
        space = hnsw.get("space")
        if space is not None and space != SPACES[self.params.metric]:
            raise SchemaMismatch(
                f"the Chroma collection {main.name!r} at {self.url.masked} indexes with the {space!r} space, "
                f"but this store's metric is {self.params.metric!r}; open it with its own metric")
        dimension = main.get_model().dimension
        if dimension is not None and self.params.dimension is not None and dimension != self.params.dimension:
            raise SchemaMismatch(
                f"the Chroma collection {main.name!r} holds {dimension}-dimensional vectors, "
                f"but this store's dimension is {self.params.dimension}")

    # records: written once in `operations.py`, driven here over the sync client ------------
    def put(self, kind: str, records: Sequence[Record]) -> None:
        run_sync(self.operations.put(kind, records))

    def prepare(self, kind: str, tenant: str | None) -> None:
        run_sync(self.operations.prepare(kind, tenant))

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return run_sync(self.operations.delete(kind, tenant, where))

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        return run_sync(self.operations.update(kind, tenant, id, set, inc))

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        return run_sync(self.operations.get(kind, tenant, ids, vectors))

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        return run_sync(self.operations.query(kind, tenant, where, order, limit, vectors))

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        return run_sync(self.operations.count(kind, tenant, where))

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        return run_sync(self.operations.search(kind, tenant, vector, k, where, vectors))

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Chroma's errors as BackendError naming the store (masked) and what was being done."""
        try:
            yield
        except MnemostoreError:
            raise
        except Exception as exc:
            raise BackendError(
                f"Chroma at {self.url.masked} failed while {action}: {type(exc).__name__}: {self.url.scrub(str(exc))}"
            ) from exc


_DEFAULT_SCOPE = (ChromaOptions.model_fields["chroma_tenant"].default, ChromaOptions.model_fields["database"].default)


class ChromaServerBackend(ChromaBackend):
    """A Chroma server (`chroma+http://host:port`, `chroma+https://...`).

    Other processes reach the same server, and Chroma has neither transactions nor
    increments, so `atomic_update` (a lock inside this process) is not promised here.
    """

    name: ClassVar[str] = "chroma-server"
    auto_migrate: ClassVar[bool] = False
    """A shared server: opening a store never migrates it behind its other users' backs."""
    schemes: ClassVar[tuple[str, ...]] = ("chroma+http", "chroma+https")
    capabilities: ClassVar[frozenset[Capability]] = ChromaBackend.capabilities - {Capability.ATOMIC_UPDATE}
    async_backend = ChromaAsyncSide
    """`open_async` awaits the record calls on chromadb's `AsyncHttpClient` (`native.py`); embedded
    Chroma has no async client, its stores keep the executor."""


async def _direct(call: Any, *args: Any) -> Any:
    return call(*args)
