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
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, cast

import orjson

from ...core.approximate_ranking import approximate, rank_approximate, rank_exact
from ...core.batching import chunks
from ...core.capabilities import Capability
from ...core.errors import BackendError, MnemostoreError, SchemaMismatch
from ...core.filters import And, Cmp, Expr, matches
from ...core.kinds import record_type
from ...core.protocol import Backend, Hit, OrderKey, apply_update
from ...core.records import Record
from ...core.vectors import Vector
from ...core.vectorsearch import scores
from ...migrations.locking import FileLock, MigrationLock
from .connect import acquire, max_batch_size, process_migration_lock, release, write_lock
from .lock import ChromaRowLock
from .options import ChromaOptions, Location, locate
from .registry import TenantRegistry
from .rows import (
    chroma_vector,
    document_of,
    index_vector,
    metadata_of,
    metadata_vector,
    placeholders,
    record_of,
    stored_vector,
    vector_matrix,
    view_of,
)
from .where import translate

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

SPACES = {"cosine": "cosine", "dot": "ip", "l2": "l2"}
_Row = tuple[str, Any, str, dict[str, Any]]
"""(id, index vector or None, document, metadata) of one row to write."""
LIST_PAGE = 1000
"""Collections asked per `list_collections` request."""


def _replacing(collection: Any, ids: list[str], metadatas: list[dict[str, Any]]) -> list[Any]:
    """`metadatas` with every key an existing row has and the new one lacks set to None: Chroma's
    upsert merges metadata, so a key left out would stay behind and keep matching filters."""
    found = collection.get(ids=ids, include=["metadatas"])
    old = {id: meta or {} for id, meta in zip(found["ids"], found["metadatas"] or [], strict=True)}
    result: list[Any] = []
    for id, metadata in zip(ids, metadatas, strict=True):
        stale = old.get(id, {}).keys() - metadata.keys()
        result.append({**metadata, **dict.fromkeys(stale)} if stale else metadata)
    return result


class _Pair(NamedTuple):
    main: Collection
    plain: Collection


class _Match(NamedTuple):
    id: str
    in_main: bool
    view: SimpleNamespace | None


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
        self._pairs: dict[tuple[str, str | None], _Pair] = {}
        self._max_batch = 1000
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
            with self._errors("looking for the store"):
                names = {getattr(c, "name", c) for c in client.list_collections()}
            return self.options.prefix + "meta" in names
        finally:
            release(key)

    def open(self) -> None:
        import chromadb

        options = self.options
        self._client, self._client_key = acquire(self.url, self._location, options)
        self._lock = write_lock((*self._location.key, options.chroma_tenant, options.database, options.prefix))
        with self._errors("opening"):
            self._max_batch = max_batch_size(self._client_key)
            self._meta = self._client.get_or_create_collection(
                options.prefix + "meta", embedding_function=None, metadata={"mnemostore": "store parameters"})
            self._registry = TenantRegistry(self._meta, self.write_meta)
            self._registry.mark_if_new()
        self._version = chromadb.__version__

    def close(self) -> None:
        client, self._client = self._client, None
        self._pairs.clear()
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
            with self._errors("dropping the store"):
                if not self._registry.complete():
                    self._registry.adopt(self._listed_tenants())
                names = [self.collection_name(kind, tenant) for kind, tenant in self._registry.entries()]
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
        with self._errors("reading store parameters"):
            found = self._meta.get(ids=[key], include=["documents"])
        documents = found["documents"] or []
        return orjson.loads(documents[0]) if found["ids"] and documents[0] is not None else None

    def write_meta(self, key: str, value: Any) -> None:
        """Set `key`'s row in the meta collection (None deletes it)."""
        with self._errors("writing store parameters"):
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
        with self._errors(f"listing the tenants of {kind} records"):
            if not self._registry.complete():
                with self._lock:
                    self._registry.adopt(self._listed_tenants())
            found: list[str | None] = []
            for tenant in self._registry.tenants(kind):
                pair = self._pair(kind, tenant, create=False)
                if pair is not None and (pair.main.count() or pair.plain.count()):
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

    def _pair(self, kind: str, tenant: str | None, create: bool) -> _Pair | None:
        """The kind's collections for a tenant; None when they do not exist and `create` is False."""
        pair = self._pairs.get((kind, tenant))
        if pair is not None:
            return pair
        if self._client is None:
            raise BackendError(f"{self!r} is closed")
        options, metric = self.options, self.params.metric
        name = self.collection_name(kind, tenant)
        labels = {"mnemostore": "records", "kind": kind, "tenant": tenant or "", "metric": metric}
        if create:
            main = self._client.get_or_create_collection(
                name, embedding_function=None, metadata=labels,
                configuration=cast(Any, {"hnsw": {"space": SPACES[metric], "ef_search": options.ef_search,
                                                  "ef_construction": options.ef_construction,
                                                  "max_neighbors": options.max_neighbors}}))
            plain = self._client.get_or_create_collection(
                name + "-novec", embedding_function=None, metadata={**labels, "mnemostore": "records, no vectors"})
        else:
            try:
                main = self._client.get_collection(name, embedding_function=None)
                plain = self._client.get_collection(name + "-novec", embedding_function=None)
            except Exception as exc:
                if _is_not_found(exc):
                    return None  # nothing was ever written here (or a writer is creating it right now)
                raise
        self._check(main, tenant)
        pair = self._pairs[(kind, tenant)] = _Pair(main, plain)
        return pair

    def _check(self, main: Collection, tenant: str | None) -> None:
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

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Chroma's errors as BackendError naming the store (masked) and what was being done."""
        try:
            yield
        except MnemostoreError:
            raise
        except Exception as exc:
            raise BackendError(
                f"Chroma at {self.url.masked} failed while {action}: {type(exc).__name__}: {self.url.scrub(str(exc))}"
            ) from exc

    # writing -------------------------------------------------------------------------------
    def put(self, kind: str, records: Sequence[Record]) -> None:
        by_tenant: dict[str | None, list[Record]] = {}
        for record in records:
            by_tenant.setdefault(record.tenant_id, []).append(record)
        with self._lock, self._errors(f"writing {kind} records"):
            self._registry.register((kind, tenant, self.collection_name(kind, tenant)) for tenant in by_tenant)
            for tenant, batch in by_tenant.items():
                pair = self._pair(kind, tenant, create=True)
                assert pair is not None
                self._write(pair, batch)

    def _write(self, pair: _Pair, records: Sequence[Record]) -> None:
        import numpy as np

        metric = self.params.metric
        exact_vector = metric == "cosine"
        with_vectors: list[_Row] = []
        without: list[_Row] = []
        for record in records:
            document = document_of(record)
            if record.embedding is not None:
                with_vectors.append((record.id, index_vector(record.embedding, metric), document,
                                     metadata_of(record, exact_vector)))
            else:
                without.append((record.id, None, document, metadata_of(record, False)))
        for rows, target, other in ((with_vectors, pair.main, pair.plain), (without, pair.plain, pair.main)):
            for chunk in self._chunks(rows):
                ids = [row[0] for row in chunk]
                embeddings = np.stack([row[1] for row in chunk]) if target is pair.main else placeholders(len(chunk))
                target.upsert(ids=ids, embeddings=embeddings, documents=[row[2] for row in chunk],
                              metadatas=_replacing(target, ids, [row[3] for row in chunk]))
                moved = other.get(ids=ids, include=[])["ids"]  # records that gained or lost their vector
                if moved:
                    other.delete(ids=moved)

    def _chunks(self, rows: list[_Row]) -> Iterator[list[_Row]]:
        """Rows in requests of at most Chroma's batch size and `max_request_bytes` of documents."""
        def size(row: _Row) -> int:
            return len(row[2]) if row[2].isascii() else len(row[2].encode("utf-8"))

        return chunks(rows, self._max_batch, self.options.max_request_bytes, size)

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._lock, self._errors(f"deleting {kind} records"):
            pair = self._pair(kind, tenant, create=False)
            if pair is None:
                return 0
            found = self._matching(kind, pair, where, views=False)
            for collection, in_main in ((pair.main, True), (pair.plain, False)):
                doomed = [match.id for match in found if match.in_main == in_main]
                for start in range(0, len(doomed), self._max_batch):
                    collection.delete(ids=doomed[start:start + self._max_batch])
            return len(found)

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        with self._lock, self._errors(f"updating a {kind} record"):
            pair = self._pair(kind, tenant, create=False)
            found = self._records(kind, pair, [(id, True), (id, False)], True) if pair is not None else []
            if not found or pair is None:
                return None
            record = apply_update(found[0], set, inc)
            self._write(pair, [record])
            return record

    # reading -------------------------------------------------------------------------------
    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        with self._errors(f"reading {kind} records"):
            pair = self._pair(kind, tenant, create=False)
            if pair is None:
                return []
            return self._records(kind, pair, [(i, True) for i in ids] + [(i, False) for i in ids], vectors)

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        with self._errors(f"querying {kind} records"):
            pair = self._pair(kind, tenant, create=False)
            if pair is None:
                return []
            found = self._matching(kind, pair, where, views=True)
            for key in reversed(order):
                found.sort(key=_sort_key(key.field), reverse=key.descending)
            if limit is not None:
                found = found[:limit]
            return self._records(kind, pair, [(match.id, match.in_main) for match in found], vectors)

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._errors(f"counting {kind} records"):
            pair = self._pair(kind, tenant, create=False)
            return 0 if pair is None else len(self._matching(kind, pair, where, views=False))

    def _matching(self, kind: str, pair: _Pair, where: Expr | None, views: bool) -> list[_Match]:
        """Rows matching `where`: Chroma filters by the translation, Python re-checks what it
        could not express exactly. One row per record."""
        cls = record_type(kind)
        ids, rest = _split_ids(where)
        translation = translate(rest, cls)
        if translation.clause is False or ids == []:
            return []
        clause = translation.clause if translation.clause is not True else None
        need_views = views or not translation.exact
        found: dict[str, _Match] = {}
        for collection, in_main in ((pair.main, True), (pair.plain, False)):
            for chunk in _batches(ids, self._max_batch):
                result = collection.get(ids=chunk, where=cast(Any, clause),
                                        include=["metadatas"] if need_views else [])
                metadatas = result["metadatas"] if need_views else None
                for index, found_id in enumerate(result["ids"]):
                    if found_id in found:
                        continue
                    view = view_of(cls, dict(metadatas[index])) if metadatas is not None else None
                    if not translation.exact and not matches(rest, view):
                        continue
                    found[found_id] = _Match(found_id, in_main, view)
        return list(found.values())

    def _records(self, kind: str, pair: _Pair, wanted: Sequence[tuple[str, bool]], vectors: bool) -> list[Record]:
        """Records for (id, in main collection) pairs, in that order, missing ones left out."""
        rows: dict[str, tuple[str, bytes | None]] = {}
        cosine = self.params.metric == "cosine"
        for collection, in_main in ((pair.main, True), (pair.plain, False)):
            ids = list(dict.fromkeys(i for i, main in wanted if main == in_main and i not in rows))
            include: list[str] = ["documents"]
            if vectors and in_main:
                include.append("metadatas" if cosine else "embeddings")
            for chunk in _batches(ids, self._max_batch):
                if not chunk:
                    continue
                result = collection.get(ids=chunk, include=cast(Any, include))
                documents = result["documents"] or []
                for index, found_id in enumerate(result["ids"]):
                    vector = None
                    if vectors and in_main:
                        vector = (metadata_vector((result["metadatas"] or [])[index]) if cosine
                                  else chroma_vector(_at(result["embeddings"], index)))
                    rows.setdefault(found_id, (documents[index], vector))
        records: list[Record] = []
        for record_id in dict.fromkeys(i for i, _ in wanted):
            row = rows.get(record_id)
            if row is not None:
                records.append(record_of(kind, *row))
        return records

    # search ---------------------------------------------------------------------------------
    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        import numpy as np

        cls = record_type(kind)
        metric = self.params.metric
        translation = translate(where, cls)
        if translation.clause is False:
            return []
        clause = translation.clause if translation.clause is not True else None
        query = np.asarray(vector, dtype=np.float32)
        probe = index_vector(query, metric)
        wide_query = query.astype(np.float64)
        cosine = metric == "cosine"
        # Chroma reads a row's metadata with its document (no extra cost); distances come free
        include = ["documents", "metadatas", "distances"] if cosine else \
            ["documents", "metadatas", "distances", "embeddings"]
        asked = k + 1  # one beyond k shows whether the k-th is clear of what was not fetched
        with self._errors(f"searching {kind} records"):
            pair = self._pair(kind, tenant, create=False)
            if pair is None:
                return []
            while True:
                result = pair.main.query(query_embeddings=cast(Any, [probe]), n_results=asked, where=cast(Any, clause),
                                         include=cast(Any, include))
                found = _Candidates(result, cosine, wide_query, metric)
                ids = found.ids
                if not ids:
                    return []
                kept = range(len(ids)) if translation.exact else \
                    [i for i in range(len(ids)) if matches(where, view_of(cls, dict(found.metadatas[i])))]
                complete = len(ids) < asked
                approx = approximate(found.distances, metric)
                best = rank_exact(found.rescore(list(range(len(ids)))), kept, ids, k, metric, complete) \
                    if approx is None else rank_approximate(approx, kept, ids, k, metric, complete, len(query),
                                                            found.rescore)
                if best is not None:
                    break
                asked *= 4
        return [Hit(record_of(kind, found.documents[i], found.exact(i) if vectors else None), score)
                for i, score in best]


class _Candidates:
    """One search request's answer, in Chroma's order; exact vectors decoded on demand."""

    def __init__(self, result: Any, cosine: bool, query: Any, metric: str) -> None:
        self.ids: list[str] = result["ids"][0]
        self.documents: list[str] = (result["documents"] or [[]])[0]
        self.metadatas: list[Any] = (result["metadatas"] or [[]])[0]
        self.distances: list[float] = (result["distances"] or [[]])[0]
        self._embeddings = _at(result["embeddings"], 0)
        self._cosine, self._query, self._metric = cosine, query, metric

    def exact(self, position: int) -> bytes:
        return stored_vector(self.metadatas[position], _at(self._embeddings, position), self._cosine)

    def rescore(self, positions: list[int]) -> Any:
        """Core's exact scores of the candidates at `positions` (float64 in, as the memory backend)."""
        matrix = vector_matrix([self.exact(p) for p in positions]).astype("float64")
        return scores(matrix, self._query, self._metric)


_DEFAULT_SCOPE = (ChromaOptions.model_fields["chroma_tenant"].default, ChromaOptions.model_fields["database"].default)


def _at(values: Any, index: int) -> Any:
    return None if values is None else values[index]


def _is_not_found(exc: Exception) -> bool:
    from chromadb.errors import NotFoundError

    return isinstance(exc, NotFoundError) or "does not exist" in str(exc)


def _sort_key(field: str) -> Any:
    def key(match: _Match) -> tuple[bool, Any]:
        value = getattr(match.view, field)
        return (value is not None, value if value is not None else 0)  # None first ascending

    return key


def _split_ids(where: Expr | None) -> tuple[list[str] | None, Expr | None]:
    """An `id` equality or membership at the top of `where` becomes ids to fetch directly."""
    def ids_of(expr: Expr) -> list[str] | None:
        if isinstance(expr, Cmp) and expr.field == ("id",):
            if expr.op == "in":
                return [value for value in expr.value if value is not None]
            if expr.op == "eq":
                return [] if expr.value is None else [expr.value]
        return None

    if where is None:
        return None, None
    found = ids_of(where)
    if found is not None:
        return found, None
    if isinstance(where, And):
        for index, item in enumerate(where.items):
            found = ids_of(item)
            if found is not None:
                rest = where.items[:index] + where.items[index + 1:]
                return found, (rest[0] if len(rest) == 1 else And(rest)) if rest else None
    return None, where


def _batches(ids: list[str] | None, size: int) -> Iterator[list[str] | None]:
    if ids is None:
        yield None
        return
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


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
