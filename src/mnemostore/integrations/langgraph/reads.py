"""How the saver's reads reach the store: through its collection, or, for a sync `Store` whose backend
reads documents (sqlite, postgres), straight from the backend's statements with no record built.

The saver's read coroutines fetch through a `Reads`. `reads_for` picks, once per saver, the flat one
for its sync methods: each read then skips the facade's layers (the async twin, the collection, the
backend-call wrapper) and decodes only the row's JSON, not a validated record (~46k instructions
against ~22k a row). `awaited_reads_for` picks the async methods' (`AwaitedFlatReads`): the same reads, each
one awaited call (the backend's native async side where it has them, postgres: a checkpoint and its writes in
one round trip; else in the store's executor). Every other store reads through the collection."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cached_property, partial
from typing import Any, Protocol, runtime_checkable

from ...core.async_collection import AsyncCollection
from ...core.async_store import AsyncStore
from ...core.calls import Runner, run_sync
from ...core.capabilities import Capability
from ...core.errors import StoreClosed
from ...core.shapes import QueryShape
from ...core.store import Store
from ...kinds.langgraph_writes import LangGraphWrite
from .mapping import Stored


class Reads:
    """The saver's shape reads over an `AsyncStore`'s checkpoint collection (records, without vectors)."""

    page = 25
    """Checkpoints per page of `list` by id range (as `saver._LIST_PAGE`, which says why not more)."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        self.ranges = Capability.FILTER_RANGE in store.capabilities
        """Whether the store's id ranges are index ranges (the saver's reads by id range), asked once."""

    @cached_property
    def writes(self) -> AsyncCollection[LangGraphWrite]:
        """The write collection, looked up when a read needs it (an async call makes a `Reads` each time)."""
        return self.store.collection(LangGraphWrite)

    async def fetch(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None = None) -> Sequence[Stored]:
        return await self.store.checkpoints.fetch(shape, values, limit=limit, vectors=False)

    async def fetch_writes(self, shape: QueryShape, values: Mapping[str, Any],
                           limit: int | None = None) -> list[dict[str, Any]]:
        """The fields of the `LangGraphWrite` records a shape of that kind reads (`mapping.pending_writes`)."""
        return [record.__dict__ for record in await self.writes.fetch(shape, values, limit=limit, vectors=False)]

    async def fetch_with_writes(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None,
                                writes: QueryShape, write_values: Mapping[str, Any], write_limit: int | None,
                                write_fields: tuple[str, ...] | None = None,
                                ) -> tuple[Sequence[Stored], list[dict[str, Any]]]:
        """`fetch` and `fetch_writes` of two shapes that do not depend on each other (one statement on a
        flat read); of the writes, `write_fields` are the fields wanted (None: all), a flat read may give no others."""
        return await self.fetch(shape, values, limit), await self.fetch_writes(writes, write_values, write_limit)


ShapeRead = tuple[str, QueryShape, Mapping[str, Any], int | None]
"""(kind, shape, values, limit) of one of the reads `query_shapes_documents` makes in one statement."""


@runtime_checkable
class DocumentReads(Protocol):
    """A backend that reads a shape's records as their stored fields (`SQLiteBackend.query_shape_documents`);
    one that also reads several shapes' at once (one statement, one round trip) has `query_shapes_documents`
    (`SeveralShapes`); one whose reads each cost a round trip names `documents_page` (`FlatReads.page`)."""

    def query_shape_documents(self, kind: str, tenant: str | None, shape: QueryShape, values: Mapping[str, Any],
                              limit: int | None) -> list[dict[str, Any]] | None: ...


SeveralShapes = Callable[[str | None, Sequence[ShapeRead]], list[list[dict[str, Any]]] | None]
"""`SQLiteBackend.query_shapes_documents`: optional beside `query_shape_documents`."""
ShapesRead = Callable[[Sequence[Mapping[str, Any]]], list[list[dict[str, Any]]] | None]
"""A reader of fixed reads given their values (one mapping each): `SeveralShapes`' answer (`ShapesReaderOf`)."""
ShapesReaderOf = Callable[[str | None, Sequence[tuple[str, QueryShape, int | None, tuple[str, ...] | None]]],
                          ShapesRead]
"""`SQLiteBackend.shapes_reader` (its reads are (kind, shape, limit, fields)): optional beside
`query_shapes_documents`."""


class FlatReads(Reads):
    """Shape reads straight from a `DocumentReads` backend (the facade's path where it answers None)."""

    page = 10
    """In-process statements cost little, and a page's payloads (~47 KB each) are still in the CPU's
    caches when they are decoded: listing 200 varied checkpoints cost 5% less CPU than in pages of 25.
    A backend's `documents_page` replaces it (postgres: 25, as a page costs a round trip)."""

    readers_kept = 64
    """Readers kept (`_readers`): the saver's few shapes, by limit (at most `page`), need far fewer."""

    def __init__(self, store: AsyncStore, backend: DocumentReads) -> None:
        super().__init__(store)
        self.page = getattr(backend, "documents_page", FlatReads.page)
        self._documents = backend.query_shape_documents
        self._several: SeveralShapes | None = getattr(backend, "query_shapes_documents", None)
        self._reader_of: ShapesReaderOf | None = getattr(backend, "shapes_reader", None)
        self._readers: dict[tuple[Any, ...], ShapesRead | None] = {}
        """By (shape, limit, ...) of its reads (each shape's kind is its own): a reader made on first use
        (`_reader`); None where the backend reads those shapes one after another."""

    async def fetch(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None = None) -> Sequence[Stored]:
        found = await self._found(*_alone(shape, values, limit))
        if found is None:
            return await super().fetch(shape, values, limit)
        return list(map(StoredFields, found[0]))

    async def fetch_writes(self, shape: QueryShape, values: Mapping[str, Any],
                           limit: int | None = None) -> list[dict[str, Any]]:
        found = await self._found(*_alone(shape, values, limit))
        return await super().fetch_writes(shape, values, limit) if found is None else found[0]

    async def fetch_with_writes(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None,
                                writes: QueryShape, write_values: Mapping[str, Any], write_limit: int | None,
                                write_fields: tuple[str, ...] | None = None,
                                ) -> tuple[Sequence[Stored], list[dict[str, Any]]]:
        found = await self._found(*_with_writes(shape, values, limit, writes, write_values, write_limit, write_fields))
        if found is None:  # the two flat reads, one after the other
            return await super().fetch_with_writes(shape, values, limit, writes, write_values, write_limit)
        return list(map(StoredFields, found[0])), found[1]

    def read(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None, run: Runner) -> Sequence[Stored]:
        """`fetch` by a plain call (a sync method's); `run` drives the collection's read where the backend gives
        None (a value its statement was not compiled for)."""
        found = self._read(*_alone(shape, values, limit))
        return run(Reads.fetch(self, shape, values, limit)) if found is None else list(map(StoredFields, found[0]))

    def read_writes(self, shape: QueryShape, values: Mapping[str, Any], run: Runner) -> list[dict[str, Any]]:
        """`fetch_writes` (no limit) by a plain call, as `read`."""
        found = self._read(*_alone(shape, values, None))
        return run(Reads.fetch_writes(self, shape, values)) if found is None else found[0]

    def read_with_writes(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None,
                         writes: QueryShape, write_values: Mapping[str, Any], write_limit: int | None,
                         write_fields: tuple[str, ...] | None = None,
                         ) -> tuple[Sequence[Stored], list[dict[str, Any]]] | None:
        """`fetch_with_writes` by a plain call (a sync method's: no coroutine to drive); None where the backend
        reads those shapes one after another (then awaited: `fetch_with_writes`)."""
        found = self._read(*_with_writes(shape, values, limit, writes, write_values, write_limit, write_fields))
        return None if found is None else (list(map(StoredFields, found[0])), found[1])

    async def _found(self, key: tuple[Any, ...], reads: tuple[tuple[QueryShape, int | None, tuple[str, ...] | None],
                                                              ...],
                     values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        """`_read` where the fetches await it: a plain call here (`AwaitedFlatReads` awaits the backend)."""
        return self._read(key, reads, values)

    def _read(self, key: tuple[Any, ...], reads: tuple[tuple[QueryShape, int | None, tuple[str, ...] | None], ...],
              values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        """These reads' documents by their reader (kept under `key`), or None: read them the collection's way."""
        store = self.store
        if store.closed:
            raise StoreClosed(f"{store!r} is closed")
        reader = self._readers[key] if key in self._readers else self._reader(key, reads)
        return None if reader is None else reader(values)

    def _reader(self, key: tuple[Any, ...],
                reads: tuple[tuple[QueryShape, int | None, tuple[str, ...] | None], ...]) -> ShapesRead | None:
        """The reader of these (shape, limit, fields) reads (each shape's kind is its own), made and kept under
        `key`: the backend's own (`shapes_reader`), else one over `query_shapes_documents` (or
        `query_shape_documents` for one read), which give whole documents; None for several reads on a backend
        with neither of the first two (read one after another)."""
        tenant = self.store.tenant
        reader: ShapesRead | None = None
        if self._reader_of is not None:
            reader = self._reader_of(tenant, [(shape.kind, shape, limit, fields) for shape, limit, fields in reads])
        elif len(reads) == 1:
            ((shape, limit, _),) = reads
            reader = partial(_one_shape, self._documents, tenant, shape.kind, shape, limit)
        elif self._several is not None:
            reader = partial(_several_shapes, self._several, tenant,
                             [(shape.kind, shape, limit) for shape, limit, _ in reads])
        if len(self._readers) >= self.readers_kept:
            self._readers.clear()
        self._readers[key] = reader
        return reader


class AwaitedFlatReads(FlatReads):
    """`FlatReads` for the saver's async methods: each read one awaited call of the store's, made by the backend's
    native async side where it reads documents (`DOCUMENT_READS`: postgres, the reads pipelined), else by the
    backend's readers in the store's executor (sqlite; a sync `Store`'s twin); never through the collection."""

    def __init__(self, store: AsyncStore, backend: DocumentReads) -> None:
        super().__init__(store, backend)
        self._natively = store._calls.native("query_shapes_documents")

    async def _found(self, key: tuple[Any, ...], reads: tuple[tuple[QueryShape, int | None, tuple[str, ...] | None],
                                                              ...],
                     values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
        store = self.store
        if store.closed:
            raise StoreClosed(f"{store!r} is closed")
        if self._natively:  # whole documents: a read's `fields` may give more than those (`fetch_with_writes`)
            found: list[list[dict[str, Any]]] | None = await store._calls(
                "query_shapes_documents", store.tenant,
                [(shape.kind, shape, part, limit) for (shape, limit, _), part in zip(reads, values, strict=True)])
            return found
        reader = self._readers[key] if key in self._readers else self._reader(key, reads)
        return None if reader is None else await store._calls.run(reader, values)


def _alone(shape: QueryShape, values: Mapping[str, Any], limit: int | None,
           ) -> tuple[tuple[Any, ...], tuple[tuple[QueryShape, int | None, None]], tuple[Mapping[str, Any]]]:
    """The (key, reads, values) `FlatReads._read` takes for one shape's read (its documents whole)."""
    return (shape, limit), ((shape, limit, None),), (values,)


def _with_writes(shape: QueryShape, values: Mapping[str, Any], limit: int | None, writes: QueryShape,
                 write_values: Mapping[str, Any], write_limit: int | None, write_fields: tuple[str, ...] | None,
                 ) -> tuple[tuple[Any, ...], tuple[tuple[QueryShape, int | None, tuple[str, ...] | None], ...],
                            tuple[Mapping[str, Any], ...]]:
    """The (key, reads, values) `FlatReads._read` takes for a checkpoint's read and its writes' together."""
    return ((shape, limit, writes, write_limit, write_fields),
            ((shape, limit, None), (writes, write_limit, write_fields)), (values, write_values))


def _one_shape(documents: Callable[..., list[dict[str, Any]] | None], tenant: str | None, kind: str,
               shape: QueryShape, limit: int | None,
               values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
    """A `ShapesRead` of one shape over `query_shape_documents`."""
    found = documents(kind, tenant, shape, values[0], limit)
    return None if found is None else [found]


def _several_shapes(several: SeveralShapes, tenant: str | None, reads: Sequence[tuple[str, QueryShape, int | None]],
                    values: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]] | None:
    """A `ShapesRead` over `query_shapes_documents`."""
    return several(tenant, [(kind, shape, part, limit)
                            for (kind, shape, limit), part in zip(reads, values, strict=True)])


def reads_for(store: Store | AsyncStore) -> Reads:
    """The reads a saver's sync methods use: flat for a sync `Store` (its calls direct, not on a loop)
    over a backend with document reads and range filters (the saver's id ranges: sqlite, postgres); else the
    collection's."""
    if isinstance(store, AsyncStore):
        return Reads(store)
    backend = store.backend
    if (store._run is run_sync and isinstance(backend, DocumentReads)
            and Capability.FILTER_RANGE in store.capabilities):
        return FlatReads(store._async, backend)
    return Reads(store._async)


def awaited_reads_for(store: AsyncStore) -> Reads:
    """The reads the saver's async methods await over `store` (an `AsyncStore`, or a sync `Store`'s twin on the
    running loop): flat (`AwaitedFlatReads`) over a backend with document reads and range filters, as
    `reads_for`; else the collection's."""
    backend = store.backend
    if isinstance(backend, DocumentReads) and Capability.FILTER_RANGE in store.capabilities:
        return AwaitedFlatReads(store, backend)
    return Reads(store)


class StoredFields:
    """A checkpoint record's stored fields (a dict from `query_shape_documents`) seen as the saver reads a
    record (`mapping.Stored`): the dict is the instance's `__dict__` (no copy; a read takes each field
    several times, as plain attributes); `created_at` is parsed only when asked for."""

    id: str
    run_id: str
    branch_id: str
    node_id: str
    state: dict[str, Any]
    payload: bytes | None
    metadata: dict[str, Any]

    def __init__(self, data: dict[str, Any]) -> None:
        self.__dict__ = data

    @property
    def created_at(self) -> datetime:  # a property: the instance's `created_at` (text) does not hide it
        return datetime.fromisoformat(self.__dict__["created_at"])
