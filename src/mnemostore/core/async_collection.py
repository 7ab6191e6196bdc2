"""Typed collections awaited from asyncio code; their coroutines are also the sync `Collection`'s logic.

Written once over `Calls` (see `core/calls.py`): the sync facade drives these same coroutines with
direct backend calls, so both facades validate, plan and fail alike.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, cast

from .collection import OrderBy, Page, R, Where, check_ids
from .errors import NotFound, ValidationError
from .field_puts import complete, has_field_puts, records_of
from .filters import Expr, F, all_of
from .jsonvalues import forget_proven
from .protocol import Hit
from .query import after, decode_cursor, encode_cursor, parse_order
from .records import utcnow

if TYPE_CHECKING:
    from .async_store import AsyncStore
    from .shapes import QueryShape

BATCH_PAUSE = 64
"""Records validated between two `Calls.pause()`: a big batch does not hold the event loop."""


class AsyncCollection(Generic[R]):
    """All records of one kind in one `AsyncStore` (and tenant); every method is awaited."""

    def __init__(self, store: AsyncStore, record_cls: type[R]) -> None:
        self._store = store
        self.record_cls = record_cls
        self.kind = record_cls.kind

    # writing ------------------------------------------------------------------
    async def put(self, records: Iterable[R | Mapping[str, Any]], *, keep_existing: bool = False,
                  keep_created: bool = False) -> list[R]:
        """Insert or replace records (by id) in one batch; validates all before writing any.

        With `keep_existing=True` a record whose id is already stored is left as it is; with
        `keep_created=True` it is replaced but keeps its stored `created_at` (the records returned
        are those given)."""
        batch = await self._validate_batch(records)
        if batch:
            call = "put_missing" if keep_existing else "put_keeping_created" if keep_created else "put"
            await self._store._backend_call(call, self.kind, batch)
        return batch

    async def _put_built(self, records: Sequence[R], *, keep_existing: bool = False,
                         keep_created: bool = False) -> None:
        """`put` of records this package built and validated for this call (an integration's, from parts
        it checked), each id once: no second facade pass. A record this path cannot take as it is (another
        type, tenant or an embedding) goes through `put`'s validation with the rest."""
        call = self._built_call(records, keep_existing, keep_created)
        if call is None:
            if records:
                await self.put(records, keep_existing=keep_existing, keep_created=keep_created)
            return
        forget_proven()  # a state proven by an earlier validation is no business of these records
        await self._store._backend_call(call, self.kind, records)

    async def _put_fields(self, common: dict[str, Any], each: Sequence[dict[str, Any]], *,
                          keep_existing: bool = False, keep_created: bool = False) -> None:
        """`_put_built` of the records `common` and `each` stand for (`field_puts`: the fields the records
        share, then each one's own; none of them `tenant_id` or `embedding`: the store's tenant, no
        vector), handed to the backend as fields (`field_puts.put_fields`: no record object where the
        backend takes fields). Fields `field_puts.complete` refuses (a name missing, an id twice) go
        through `put`'s validation, which names what is wrong."""
        store = self._store
        call = "put_missing" if keep_existing else "put_keeping_created" if keep_created else "put"
        shared = {**common, "tenant_id": store.tenant, "embedding": None}
        if not complete(self.record_cls, shared, each):
            if each:
                await self.put([{**common, **fields} for fields in each], keep_existing=keep_existing,
                               keep_created=keep_created)
            return
        if not (has_field_puts(type(store.backend)) and store._checked(self.kind, call)) or store.closed:
            # records, through the store's calls (a native async side's own put; the declaration recorded;
            # StoreClosed), as `_put_built` hands them over
            await self._put_built(cast("list[R]", records_of(self.record_cls, shared, each)),
                                  keep_existing=keep_existing, keep_created=keep_created)
            return
        forget_proven()  # as `_put_built`
        await store._calls.run(store.backend.put_fields, self.kind, call, shared, each)  # type: ignore[attr-defined]

    def _built_call(self, records: Sequence[R], keep_existing: bool, keep_created: bool) -> str | None:
        """The backend call `_put_built` makes with these records as they are, or None if there are
        none or they need `put`'s validation (another type, tenant, an embedding, an id twice)."""
        tenant, cls = self._store.tenant, self.record_cls
        count = len(records)
        if count == 1:  # a saver's or a lone store put's one record: no generator to run, no id to compare
            record = records[0]
            if type(record) is not cls or record.tenant_id != tenant or record.embedding is not None:
                return None
        elif not count or not all(type(record) is cls and record.tenant_id == tenant and record.embedding is None
                                  for record in records) or len({record.id for record in records}) != count:
            return None
        return "put_missing" if keep_existing else "put_keeping_created" if keep_created else "put"

    async def add(self, record: R | Mapping[str, Any] | None = None, /, **fields: Any) -> R:
        """Insert or replace one record, given as a model, a mapping or keyword fields."""
        admitted = await self._admit_one(record if record is not None else fields)
        await self._store._backend_call("put", self.kind, [admitted])
        return admitted

    async def _admit_one(self, item: R | Mapping[str, Any]) -> R:
        """`_validate_batch` of one item, without the batch's loop and id check (a checkpoint save's
        hot path): the same checks, errors named `records[0]...` as in a batch of one."""
        store = self._store
        try:
            record: R = store._admit(self.record_cls, item)
        except ValidationError as exc:
            raise exc.prefixed("records[0]") from None
        if record.embedding is not None:
            await store._settle_dimension([record])
        return record

    async def _validate_batch(self, records: Iterable[R | Mapping[str, Any]]) -> list[R]:
        store = self._store
        batch: list[R] = []
        errors: list[tuple[str, str]] = []
        for index, item in enumerate(records):
            if index and not index % BATCH_PAUSE:
                await store._calls.pause()
            try:
                batch.append(store._admit(self.record_cls, item))
            except ValidationError as exc:
                errors.extend(exc.prefixed(f"records[{index}]").errors)
        if errors:
            raise ValidationError(errors)
        ids = [record.id for record in batch]
        if len(set(ids)) != len(ids):
            first: dict[str, int] = {}
            for index, id in enumerate(ids):
                if id in first:
                    raise ValidationError.one(
                        f"records[{index}].id",
                        f"{id!r} is also the id of records[{first[id]}]; one batch holds each id once")
                first[id] = index
        await store._settle_dimension(batch)
        return batch

    async def update(self, id: str, set: Mapping[str, Any] | None = None,
                     inc: Mapping[str, int | float] | None = None) -> R:
        """Atomically set fields and increment counters of one record; NotFound if absent."""
        check_ids([id], "id")
        changes = await self._store._check_update(self.record_cls, set or {}, inc or {})
        updated = await self._store._backend_call(
            "update", self.kind, self._store.tenant, id, changes, dict(inc or {}))
        if updated is None:
            raise NotFound(f"no {self.kind} with id {id!r}")
        return cast(R, updated)

    async def delete(self, ids: Sequence[str] | str | None = None, *, where: Where = None) -> int:
        """Delete by ids, by filter, or both (ANDed); return how many were deleted.

        Deleting everything needs an explicit `where={}`; calling with nothing is an error."""
        if ids is None and where is None:
            raise ValidationError.one("delete", "give ids or where= (where={} deletes every record)")
        if isinstance(ids, str):
            ids = [ids]
        if ids is not None:
            check_ids(ids, "ids")
        expr = all_of(F.id.in_(list(dict.fromkeys(ids))) if ids is not None else None, self._bind(where))
        return int(await self._store._backend_call("delete", self.kind, self._store.tenant, expr))

    # reading ------------------------------------------------------------------
    async def get(self, id: str) -> R | None:
        """The record with this id, or None."""
        found = await self._store._backend_call("get", *self._get_args(id))
        return cast(R, found[0]) if found else None

    def _get_args(self, id: str) -> tuple[Any, ...]:
        """`get`'s id checked, and its backend call's arguments (the sync `Collection.get` calls it straight)."""
        check_ids((id,), "ids")
        return self.kind, self._store.tenant, [id], True

    async def get_many(self, ids: Sequence[str], *, vectors: bool = True) -> list[R]:
        """Records with these ids, in the order asked, missing ones left out."""
        if isinstance(ids, str):
            ids = [ids]
        check_ids(ids, "ids")
        if not ids:
            return []
        found = await self._store._backend_call(
            "get", self.kind, self._store.tenant, list(dict.fromkeys(ids)), vectors)
        by_id = {record.id: record for record in found}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

    async def query(self, where: Where = None, *, order_by: OrderBy = None, limit: int | None = None,
                    cursor: str | None = None, vectors: bool = True) -> Page[R]:
        """Records matching `where`, ordered (default: `created_at`, then `id`), paged by cursor."""
        _check_limit(limit)
        order = parse_order(order_by, self.record_cls)
        bound = self._bind(where)
        effective = bound
        if cursor is not None:
            effective = all_of(bound, after(order, decode_cursor(cursor, order, bound, self.record_cls)))
        fetch = None if limit is None else limit + 1
        rows: list[R] = await self._store._backend_call(
            "query", self.kind, self._store.tenant, effective, order, fetch, vectors)
        if limit is not None and len(rows) > limit:
            rows = rows[:limit]
            return Page(rows, encode_cursor(rows[-1], order, bound))
        return Page(rows, None)

    async def first(self, where: Where = None, *, order_by: OrderBy = None, vectors: bool = True) -> R | None:
        """The first matching record in this order, or None (fetches exactly one)."""
        rows: list[R] = await self._store._backend_call(
            "query", self.kind, self._store.tenant, self._bind(where),
            parse_order(order_by, self.record_cls), 1, vectors)
        return rows[0] if rows else None

    async def fetch(self, shape: QueryShape, values: Mapping[str, Any], *, limit: int | None = None,
                    vectors: bool = True) -> list[R]:
        """Records matching a prepared `shape` with these values for its params, in its order, at
        most `limit`: `query` of the same filter, without binding and compiling it on each call."""
        rows: list[R] = await self._store._backend_call("query_shape", *self._fetch_args(shape, values, limit, vectors))
        return rows

    def _fetch_args(self, shape: QueryShape, values: Mapping[str, Any], limit: int | None,
                    vectors: bool) -> tuple[Any, ...]:
        """`fetch`'s shape, values and limit checked, and its backend call's arguments (the sync
        `Checkpoints.latest` calls it straight)."""
        if shape.record_cls is not self.record_cls:
            raise ValidationError.one("shape", f"is a shape of {shape.kind} records, not {self.kind}")
        _check_limit(limit)
        store = self._store
        checked = shape.check(values)
        if not shape.needs <= store._capabilities:
            store._bind(self.record_cls, shape.where_with(checked))  # raises UnsupportedFilter
        return self.kind, store.tenant, shape, checked, limit, vectors

    async def iterate(self, where: Where = None, *, order_by: OrderBy = None, batch_size: int = 500,
                      vectors: bool = True) -> AsyncGenerator[R, None]:
        """Every matching record, fetched page by page: `async for record in ....iterate()`."""
        cursor: str | None = None
        while True:
            page = await self.query(where, order_by=order_by, limit=batch_size, cursor=cursor, vectors=vectors)
            for record in page.items:
                yield record
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def _values(self, where: Where, fields: Sequence[str], *, order_by: OrderBy = None,
                      limit: int | None = None) -> list[tuple[Any, ...]]:
        """Just these fields of the matching records, in order: no document is decoded where the
        backend can avoid it (see `Backend.query_values`)."""
        return list(await self._store._backend_call(
            "query_values", self.kind, self._store.tenant, self._bind(where),
            parse_order(order_by, self.record_cls), limit, tuple(fields)))

    async def all(self, where: Where = None, *, order_by: OrderBy = None) -> list[R]:
        """Every matching record, in one list."""
        return (await self.query(where, order_by=order_by)).items

    async def prepare(self) -> None:
        """Make this kind's storage in the store now rather than at its first write (a table, collections:
        `Backend.prepare`), its declaration recorded as a first write records it."""
        await self._store._backend_call("prepare", self.kind, self._store.tenant)

    async def count(self, where: Where = None) -> int:
        """How many records match `where`."""
        return int(await self._store._backend_call("count", self.kind, self._store.tenant, self._bind(where)))

    async def search(self, vector: Any, k: int = 10, *, where: Where = None, vectors: bool = True) -> list[Hit]:
        """The k nearest records of this kind that match `where`, best first."""
        return await self._store.search(self.kind, vector, k, where=where, vectors=vectors)

    def _bind(self, where: Where) -> Expr | None:
        return self._store._bind(self.record_cls, where)


class AsyncOutcomes(AsyncCollection[Any]):
    async def record(self, task_type: str, success: bool, **fields: Any) -> Any:
        """Record one task attempt."""
        return await self.add(task_type=task_type, success=success, **fields)


class AsyncHeuristics(AsyncCollection[Any]):
    prior_weight: float = 2.0
    """How many observations a heuristic's confidence counts for before its first reinforce."""

    async def reinforce(self, id: str, success: bool = True) -> Any:
        """Count one more use of a heuristic (atomically) and refresh its confidence.

        Confidence is (prior_confidence * prior_weight + s) / (prior_weight + n), at most 1, from
        the counters this call produced (see `Heuristics.reinforce`)."""
        inc = {"occurrence_count": 1, "success_count": 1 if success else 0}
        updated = await self.update(id, set={"last_validated": utcnow()}, inc=inc)
        prior = updated.confidence if updated.prior_confidence is None else updated.prior_confidence
        weight = self.prior_weight
        confidence = (prior * weight + updated.success_count) / (weight + updated.occurrence_count)
        return await self.update(id, set={"confidence": min(1.0, confidence), "prior_confidence": prior})


class AsyncAntiPatterns(AsyncCollection[Any]):
    async def seen(self, id: str) -> Any:
        """Count one more sighting of an anti-pattern (atomically) and stamp `last_seen`."""
        return await self.update(id, set={"last_seen": utcnow()}, inc={"occurrence_count": 1})


def _check_limit(limit: int | None) -> None:
    """`limit` of `query` and `fetch`: a positive int or None."""
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValidationError.one("limit", "must be a positive integer or None")
