"""Typed collections: the per-kind facade, and the helpers its sync and async forms share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .calls import Runner, iterate_sync
from .errors import NotFound, ValidationError
from .field_puts import FieldWriter, complete, fields_fit, has_field_writers, put_fields
from .filters import Expr, bind, from_dict
from .jsonvalues import check_text, forget_proven
from .protocol import Backend, Hit, OrderKey
from .records import Record

if TYPE_CHECKING:
    from .async_collection import AsyncAntiPatterns, AsyncCollection, AsyncHeuristics, AsyncOutcomes
    from .shapes import QueryShape

R = TypeVar("R", bound=Record)
Where = Expr | Mapping[str, Any] | None
OrderBy = str | Sequence[str | OrderKey] | None
RecordsRead = Callable[[Mapping[str, Any]], list[Any]]
"""`Backend.query_shape` of a fixed kind, tenant, shape, limit and `vectors`, given the values (`records_reader`)."""


@dataclass(frozen=True)
class Page(Generic[R]):
    """One page of a query; pass `next_cursor` back to get the next page (None at the end)."""

    items: list[R]
    next_cursor: str | None

    def __iter__(self) -> Iterator[R]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Collection(Generic[R]):
    """All records of one kind in one store (and tenant).

    Its logic is the `AsyncCollection`'s, written once: each method drives that coroutine with
    `run` (`run_sync` over direct backend calls) and returns its result."""

    readers_kept = 64
    """Shape readers kept (`_shape_read`): a program's few hot shapes need far fewer."""

    def __init__(self, twin: AsyncCollection[R], run: Runner) -> None:
        self._async = twin
        self._run = run
        self.record_cls: type[R] = twin.record_cls
        self.kind = twin.kind
        self._readers: dict[tuple[QueryShape, int | None, bool], RecordsRead] = {}

    # writing ------------------------------------------------------------------
    def put(self, records: Iterable[R | Mapping[str, Any]], *, keep_existing: bool = False,
            keep_created: bool = False) -> list[R]:
        """Insert or replace records (by id) in one batch; validates all before writing any.

        With `keep_existing=True` a record whose id is already stored is left as it is (insert
        or ignore: a retried write changes nothing); with `keep_created=True` it is replaced but
        keeps its stored `created_at` (an item updated in place; the records returned are those given)."""
        return self._run(self._async.put(records, keep_existing=keep_existing, keep_created=keep_created))

    def add(self, record: R | Mapping[str, Any] | None = None, /, **fields: Any) -> R:
        """Insert or replace one record, given as a model, a mapping or keyword fields."""
        return self._run(self._async.add(record, **fields))

    def _put_built(self, records: Sequence[R], *, keep_existing: bool = False, keep_created: bool = False) -> None:
        """`AsyncCollection._put_built` from sync code. Over direct calls (`Store`) the backend is
        called straight, as the coroutine would call it, with no coroutine to drive (~6 us a call)."""
        twin = self._async
        call = twin._built_call(records, keep_existing, keep_created)
        if call is not None and twin._store._callable_now(self.kind, call):
            forget_proven()  # as `AsyncCollection._put_built`
            getattr(twin._store.backend, call)(self.kind, records)
            return
        self._run(twin._put_built(records, keep_existing=keep_existing, keep_created=keep_created))

    def _put_fields(self, common: dict[str, Any], each: Sequence[dict[str, Any]], *,
                    keep_existing: bool = False, keep_created: bool = False) -> None:
        """`AsyncCollection._put_fields` from sync code; over direct calls (`Store`) the backend is called
        straight (`field_puts.put_fields`), as the coroutine would call it, with no coroutine to drive."""
        twin = self._async
        store = twin._store
        call = "put_missing" if keep_existing else "put_keeping_created" if keep_created else "put"
        if store._callable_now(self.kind, call):
            shared = {**common, "tenant_id": store.tenant, "embedding": None}
            if complete(self.record_cls, shared, each):
                forget_proven()  # as `AsyncCollection._put_built`
                put_fields(store.backend, self.kind, call, shared, each)
                return
        self._run(twin._put_fields(common, each, keep_existing=keep_existing, keep_created=keep_created))

    def _field_writer(self, common: dict[str, Any], own: Sequence[str], *,
                      keep_existing: bool = False) -> FieldWriter:
        """A function storing one record given as its own fields (named `own`), `common` the others but the
        tenant and the vector, as `_put_fields(common, [fields])` does: over direct calls (`Store`) the
        backend's prepared write (`field_puts.FieldWrites`: its plan made at the first call, not at each); fields
        named otherwise, a call the store cannot make straight (closed, a kind to declare first) and any other
        backend take `_put_fields`. A hot path's write (the LangGraph saver's: ~20k instructions a call less)."""
        store = self._async._store
        kind, backend, call = self.kind, store.backend, "put_missing" if keep_existing else "put"
        shared = {**common, "tenant_id": store.tenant, "embedding": None}

        def fallback(fields: dict[str, Any]) -> None:
            self._put_fields(common, [fields], keep_existing=keep_existing)

        if not (has_field_writers(type(backend)) and fields_fit(self.record_cls, shared, own)):
            return fallback
        prepared: list[FieldWriter | None] = []  # made at the first straight call: the kind's table is there then
        names = set(own)

        def write(fields: dict[str, Any]) -> None:
            if fields.keys() == names and store._callable_now(kind, call):  # other names: `put`'s validation
                if not prepared:
                    prepared.append(backend.field_writer(kind, call, shared, own))  # type: ignore[attr-defined]
                if prepared[0] is not None:
                    forget_proven()  # as `_put_fields`
                    prepared[0](fields)
                    return
            fallback(fields)

        return write

    def update(self, id: str, set: Mapping[str, Any] | None = None,
               inc: Mapping[str, int | float] | None = None) -> R:
        """Atomically set fields and increment counters of one record; NotFound if absent."""
        return self._run(self._async.update(id, set, inc))

    def delete(self, ids: Sequence[str] | str | None = None, *, where: Where = None) -> int:
        """Delete by ids, by filter, or both (ANDed); return how many were deleted.

        Deleting everything needs an explicit `where={}`; calling with nothing is an error.
        """
        return self._run(self._async.delete(ids, where=where))

    # reading ------------------------------------------------------------------
    def get(self, id: str) -> R | None:
        """The record with this id, or None. Over direct calls (`Store`) the backend is called straight
        (`_callable_now`), as the coroutine would call it, with no coroutine to drive."""
        twin = self._async
        if twin._store._callable_now(self.kind, "get"):
            found = twin._store.backend.get(*twin._get_args(id))
            return cast(R, found[0]) if found else None
        return self._run(twin.get(id))

    def __getitem__(self, id: str) -> R:
        found = self.get(id)
        if found is None:
            raise NotFound(f"no {self.kind} with id {id!r}")
        return found

    def get_many(self, ids: Sequence[str], *, vectors: bool = True) -> list[R]:
        """Records with these ids, in the order asked, missing ones left out."""
        return self._run(self._async.get_many(ids, vectors=vectors))

    def query(self, where: Where = None, *, order_by: OrderBy = None, limit: int | None = None,
              cursor: str | None = None, vectors: bool = True) -> Page[R]:
        """Records matching `where`, ordered (default: `created_at`, then `id`), paged by cursor."""
        return self._run(
            self._async.query(where, order_by=order_by, limit=limit, cursor=cursor, vectors=vectors))

    def first(self, where: Where = None, *, order_by: OrderBy = None, vectors: bool = True) -> R | None:
        """The first matching record in this order, or None (fetches exactly one)."""
        return self._run(self._async.first(where, order_by=order_by, vectors=vectors))

    def fetch(self, shape: QueryShape, values: Mapping[str, Any], *, limit: int | None = None,
              vectors: bool = True) -> list[R]:
        """Records matching a prepared `shape` (`mnemostore.QueryShape`) with these values for its
        params, in its order, at most `limit`: `query` of that filter, compiled once per shape."""
        twin = self._async
        if twin._store._callable_now(self.kind, "query_shape"):  # as `get`
            _, _, shape, checked, limit, vectors = twin._fetch_args(shape, values, limit, vectors)
            return cast(list[R], self._shape_read(shape, limit, vectors)(checked))
        return self._run(twin.fetch(shape, values, limit=limit, vectors=vectors))

    def _shape_read(self, shape: QueryShape, limit: int | None, vectors: bool) -> RecordsRead:
        """`query_shape` of this kind and tenant with `shape`, `limit` and `vectors`, given checked values: the
        backend's reader (`records_reader`, optional: its statement and decoder made once) kept per shape, else
        a call of `query_shape`. For the sync facade's straight calls (`_callable_now`)."""
        key = (shape, limit, vectors)
        reader = self._readers.get(key)
        if reader is None:
            store = self._async._store
            backend, tenant = store.backend, store.tenant
            reader_of = getattr(backend, "records_reader", None)
            reader = (partial(_query_shape, backend, self.kind, tenant, shape, limit, vectors)
                      if reader_of is None else reader_of(self.kind, tenant, shape, limit, vectors))
            if len(self._readers) >= self.readers_kept:
                self._readers.clear()
            self._readers[key] = reader
        return reader

    def iterate(self, where: Where = None, *, order_by: OrderBy = None, batch_size: int = 500,
                vectors: bool = True) -> Iterator[R]:
        """Every matching record, fetched page by page."""
        pages = self._async.iterate(where, order_by=order_by, batch_size=batch_size, vectors=vectors)
        return iterate_sync(pages, self._run)

    def all(self, where: Where = None, *, order_by: OrderBy = None) -> list[R]:
        """Every matching record, in one list."""
        return self._run(self._async.all(where, order_by=order_by))

    def prepare(self) -> None:
        """Make this kind's storage in the store now rather than at its first write (a table, collections:
        `Backend.prepare`), its declaration recorded as a first write records it."""
        self._run(self._async.prepare())

    def count(self, where: Where = None) -> int:
        """How many records match `where`."""
        return self._run(self._async.count(where))

    def search(self, vector: Any, k: int = 10, *, where: Where = None, vectors: bool = True) -> list[Hit]:
        """The k nearest records of this kind that match `where`, best first."""
        return self._run(self._async.search(vector, k, where=where, vectors=vectors))


class Outcomes(Collection[Any]):
    _async: AsyncOutcomes

    def record(self, task_type: str, success: bool, **fields: Any) -> Any:
        """Record one task attempt."""
        return self._run(self._async.record(task_type, success, **fields))


class Heuristics(Collection[Any]):
    _async: AsyncHeuristics

    @property
    def prior_weight(self) -> float:
        """How many observations a heuristic's confidence counts for before its first reinforce."""
        return self._async.prior_weight

    @prior_weight.setter
    def prior_weight(self, weight: float) -> None:
        self._async.prior_weight = weight

    def reinforce(self, id: str, success: bool = True) -> Any:
        """Count one more use of a heuristic (atomically) and refresh its confidence.

        The counters never lose an increment. The confidence the heuristic had before its first
        reinforce (set by the application, or 0.5) is kept as `prior_confidence` and counts as
        `prior_weight` uses: with `n` uses and `s` successes counted, confidence is
        (prior_confidence * prior_weight + s) / (prior_weight + n), at most 1. It is computed
        from the counters this call produced, so racing reinforces agree with the counters.
        """
        return self._run(self._async.reinforce(id, success))


class AntiPatterns(Collection[Any]):
    _async: AsyncAntiPatterns

    def seen(self, id: str) -> Any:
        """Count one more sighting of an anti-pattern (atomically) and stamp `last_seen`."""
        return self._run(self._async.seen(id))


def _query_shape(backend: Backend, kind: str, tenant: str | None, shape: QueryShape, limit: int | None,
                 vectors: bool, values: Mapping[str, Any]) -> list[Any]:
    """`Collection._shape_read`'s reader where the backend has no `records_reader`."""
    return backend.query_shape(kind, tenant, shape, values, limit, vectors)


def check_ids(ids: Any, field: str) -> None:
    """Ids are strings: anything else is rejected here, before a backend maps it to a key."""
    if type(ids) not in (list, tuple) and (not isinstance(ids, Sequence | set | frozenset)
                                           or isinstance(ids, bytes)):
        raise ValidationError.one(field, f"must be a list of string ids, not {type(ids).__name__}")
    for i, value in enumerate(ids):
        problem = (f"an id is a string, not {type(value).__name__}" if type(value) is not str
                   else check_text(value))
        if problem is not None:
            raise ValidationError.one(f"{field}[{i}]" if field == "ids" else field, problem)


def bind_where(record_cls: type[Record], where: Where) -> Expr | None:
    """Turn the expression or dict form into a bound expression (None for no filter)."""
    if where is None:
        return None
    if isinstance(where, Mapping):
        if not where:
            return None
        where = from_dict(where)
    return bind(where, record_cls.filterable)
