"""The chroma backend's record calls, written once for its sync side and its native async side.

Each call is a coroutine over `Io`: the client it awaits (chromadb's `AsyncHttpClient`, or a
sync client as `core.async_sides.Direct`), how a collection it returns is awaited, the lock
writes take, and how the rare sync step of a write (registering a new tenant) runs. Requests
are built and answers decoded here only (rows: rows.py, filters: where.py); the sides differ
in `Io` alone (see `backend.py` and `native.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from ...core.approximate_ranking import approximate, rank_approximate, rank_exact
from ...core.batching import chunks
from ...core.errors import BackendError
from ...core.filters import And, Cmp, Expr, matches
from ...core.kinds import record_type
from ...core.protocol import Hit, OrderKey, apply_update
from ...core.records import Record
from ...core.vectors import Vector
from ...core.vectorsearch import scores
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
    from chromadb.api import AsyncClientAPI
    from chromadb.api.models.AsyncCollection import AsyncCollection

    from .backend import ChromaBackend

SPACES = {"cosine": "cosine", "dot": "ip", "l2": "l2"}
_Row = tuple[str, Any, str, dict[str, Any]]
"""(id, index vector or None, document, metadata) of one row to write."""


@dataclass(frozen=True)
class Io:
    """What one side's calls go through."""

    client: AsyncClientAPI
    collection: Callable[[Any], AsyncCollection]
    """A collection the client returned, as its calls are awaited (the sync side wraps it in `Direct`)."""
    writing: Callable[[], AbstractAsyncContextManager[Any]]
    """Held by writes and the read-modify-write of `update`."""
    blocking: Callable[..., Awaitable[Any]]
    """`blocking(fn, *args)`: a sync step (registering tenants), called directly or in a thread."""


class Pair(NamedTuple):
    main: AsyncCollection
    plain: AsyncCollection


class _Match(NamedTuple):
    id: str
    in_main: bool
    view: SimpleNamespace | None


class Operations:
    """The record calls of one open chroma store, through one side's `Io`."""

    def __init__(self, backend: ChromaBackend, io: Io) -> None:
        self.backend = backend
        self.io = io
        self.pairs: dict[tuple[str, str | None], Pair] = {}

    # collections -------------------------------------------------------------------
    async def pair(self, kind: str, tenant: str | None, create: bool) -> Pair | None:
        """The kind's collections for a tenant; None when they do not exist and `create` is False."""
        pair = self.pairs.get((kind, tenant))
        if pair is not None:
            return pair
        backend = self.backend
        if not backend.is_open:
            raise BackendError(f"{backend!r} is closed")
        options, metric = backend.options, backend.params.metric
        name = backend.collection_name(kind, tenant)
        labels = {"mnemostore": "records", "kind": kind, "tenant": tenant or "", "metric": metric}
        client = self.io.client
        if create:
            main = await client.get_or_create_collection(
                name, embedding_function=None, metadata=labels,
                configuration=cast(Any, {"hnsw": {"space": SPACES[metric], "ef_search": options.ef_search,
                                                  "ef_construction": options.ef_construction,
                                                  "max_neighbors": options.max_neighbors}}))
            plain = await client.get_or_create_collection(
                name + "-novec", embedding_function=None, metadata={**labels, "mnemostore": "records, no vectors"})
        else:
            try:
                main = await client.get_collection(name, embedding_function=None)
                plain = await client.get_collection(name + "-novec", embedding_function=None)
            except Exception as exc:
                if _is_not_found(exc):
                    return None  # nothing was ever written here (or a writer is creating it right now)
                raise
        backend.check_collection(main, tenant)
        pair = self.pairs[(kind, tenant)] = Pair(self.io.collection(main), self.io.collection(plain))
        return pair

    # writing -----------------------------------------------------------------------
    async def put(self, kind: str, records: Sequence[Record]) -> None:
        backend = self.backend
        by_tenant: dict[str | None, list[Record]] = {}
        for record in records:
            by_tenant.setdefault(record.tenant_id, []).append(record)
        async with self.io.writing():
            with backend.errors(f"writing {kind} records"):
                await self._registered(kind, by_tenant)
                for tenant, batch in by_tenant.items():
                    pair = await self.pair(kind, tenant, create=True)
                    assert pair is not None
                    await self._write(pair, batch)

    async def prepare(self, kind: str, tenant: str | None) -> None:
        """The kind's collections for the tenant, made (and registered) as its first put makes them."""
        async with self.io.writing():
            with self.backend.errors(f"making the {kind} collections"):
                await self._registered(kind, [tenant])
                await self.pair(kind, tenant, create=True)

    async def _registered(self, kind: str, tenants: Iterable[str | None]) -> None:
        """The registry lists the kind's collections of these tenants (before they are made: see `registry`)."""
        backend = self.backend
        fresh = backend.registry.fresh((kind, tenant, backend.collection_name(kind, tenant)) for tenant in tenants)
        if fresh:
            await self.io.blocking(backend.registry.register_fresh, fresh)

    async def _write(self, pair: Pair, records: Sequence[Record]) -> None:
        import numpy as np

        metric = self.backend.params.metric
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
                await target.upsert(ids=ids, embeddings=embeddings, documents=[row[2] for row in chunk],
                                    metadatas=await _replacing(target, ids, [row[3] for row in chunk]))
                moved = (await other.get(ids=ids, include=[]))["ids"]  # records that gained or lost their vector
                if moved:
                    await other.delete(ids=moved)

    def _chunks(self, rows: list[_Row]) -> Iterator[list[_Row]]:
        """Rows in requests of at most Chroma's batch size and `max_request_bytes` of documents."""
        def size(row: _Row) -> int:
            return len(row[2]) if row[2].isascii() else len(row[2].encode("utf-8"))

        return chunks(rows, self.backend.max_batch, self.backend.options.max_request_bytes, size)

    async def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        max_batch = self.backend.max_batch
        async with self.io.writing():
            with self.backend.errors(f"deleting {kind} records"):
                pair = await self.pair(kind, tenant, create=False)
                if pair is None:
                    return 0
                found = await self._matching(kind, pair, where, views=False)
                for collection, in_main in ((pair.main, True), (pair.plain, False)):
                    doomed = [match.id for match in found if match.in_main == in_main]
                    for start in range(0, len(doomed), max_batch):
                        await collection.delete(ids=doomed[start:start + max_batch])
                return len(found)

    async def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
                     inc: Mapping[str, int | float]) -> Record | None:
        async with self.io.writing():
            with self.backend.errors(f"updating a {kind} record"):
                pair = await self.pair(kind, tenant, create=False)
                found = await self._records(kind, pair, [(id, True), (id, False)], True) if pair is not None else []
                if not found or pair is None:
                    return None
                record = apply_update(found[0], set, inc)
                await self._write(pair, [record])
                return record

    # reading -----------------------------------------------------------------------
    async def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        with self.backend.errors(f"reading {kind} records"):
            pair = await self.pair(kind, tenant, create=False)
            if pair is None:
                return []
            return await self._records(kind, pair, [(i, True) for i in ids] + [(i, False) for i in ids], vectors)

    async def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        with self.backend.errors(f"querying {kind} records"):
            pair = await self.pair(kind, tenant, create=False)
            if pair is None:
                return []
            found = await self._matching(kind, pair, where, views=True)
            for key in reversed(order):
                found.sort(key=_sort_key(key.field), reverse=key.descending)
            if limit is not None:
                found = found[:limit]
            return await self._records(kind, pair, [(match.id, match.in_main) for match in found], vectors)

    async def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self.backend.errors(f"counting {kind} records"):
            pair = await self.pair(kind, tenant, create=False)
            return 0 if pair is None else len(await self._matching(kind, pair, where, views=False))

    async def _matching(self, kind: str, pair: Pair, where: Expr | None, views: bool) -> list[_Match]:
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
            for chunk in _batches(ids, self.backend.max_batch):
                result = await collection.get(ids=chunk, where=cast(Any, clause),
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

    async def _records(self, kind: str, pair: Pair, wanted: Sequence[tuple[str, bool]],
                       vectors: bool) -> list[Record]:
        """Records for (id, in main collection) pairs, in that order, missing ones left out."""
        rows: dict[str, tuple[str, bytes | None]] = {}
        cosine = self.backend.params.metric == "cosine"
        for collection, in_main in ((pair.main, True), (pair.plain, False)):
            ids = list(dict.fromkeys(i for i, main in wanted if main == in_main and i not in rows))
            include: list[str] = ["documents"]
            if vectors and in_main:
                include.append("metadatas" if cosine else "embeddings")
            for chunk in _batches(ids, self.backend.max_batch):
                if not chunk:
                    continue
                result = await collection.get(ids=chunk, include=cast(Any, include))
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

    # search ------------------------------------------------------------------------
    async def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
                     vectors: bool = True) -> list[Hit]:
        import numpy as np

        cls = record_type(kind)
        metric = self.backend.params.metric
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
        with self.backend.errors(f"searching {kind} records"):
            pair = await self.pair(kind, tenant, create=False)
            if pair is None:
                return []
            while True:
                result = await pair.main.query(query_embeddings=cast(Any, [probe]), n_results=asked,
                                               where=cast(Any, clause), include=cast(Any, include))
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


async def _replacing(collection: AsyncCollection, ids: list[str], metadatas: list[dict[str, Any]]) -> list[Any]:
    """`metadatas` with every key an existing row has and the new one lacks set to None: Chroma's
    upsert merges metadata, so a key left out would stay behind and keep matching filters."""
    found = await collection.get(ids=ids, include=["metadatas"])
    old = {id: meta or {} for id, meta in zip(found["ids"], found["metadatas"] or [], strict=True)}
    result: list[Any] = []
    for id, metadata in zip(ids, metadatas, strict=True):
        stale = old.get(id, {}).keys() - metadata.keys()
        result.append({**metadata, **dict.fromkeys(stale)} if stale else metadata)
    return result


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
