"""Typed collections: the per-kind facade written once over the backend protocol."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .errors import NotFound, ValidationError
from .filters import Expr, F, all_of, bind, from_dict
from .jsonvalues import check_text
from .protocol import Hit, OrderKey
from .query import after, decode_cursor, encode_cursor, parse_order
from .records import Record, utcnow

if TYPE_CHECKING:
    from .store import Store

R = TypeVar("R", bound=Record)
Where = Expr | Mapping[str, Any] | None
OrderBy = str | Sequence[str | OrderKey] | None


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
    """All records of one kind in one store (and tenant)."""

    def __init__(self, store: Store, record_cls: type[R]) -> None:
        self._store = store
        self.record_cls = record_cls
        self.kind = record_cls.kind

    # writing ------------------------------------------------------------------
    def put(self, records: Iterable[R | Mapping[str, Any]], *, keep_existing: bool = False) -> list[R]:
        """Insert or replace records (by id) in one batch; validates all before writing any.

        With `keep_existing=True` a record whose id is already stored is left as it is (insert
        or ignore: a retried write changes nothing)."""
        batch = self._validate_batch(records)
        if batch:
            self._store._backend_call("put_missing" if keep_existing else "put", self.kind, batch)
        return batch

    def add(self, record: R | Mapping[str, Any] | None = None, /, **fields: Any) -> R:
        """Insert or replace one record, given as a model, a mapping or keyword fields."""
        return self.put([record if record is not None else fields])[0]

    def _validate_batch(self, records: Iterable[R | Mapping[str, Any]]) -> list[R]:
        store = self._store
        batch: list[R] = []
        errors: list[tuple[str, str]] = []
        for index, item in enumerate(records):
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
        store._settle_dimension(batch)
        return batch

    def update(self, id: str, set: Mapping[str, Any] | None = None,
               inc: Mapping[str, int | float] | None = None) -> R:
        """Atomically set fields and increment counters of one record; NotFound if absent."""
        check_ids([id], "id")
        changes = self._store._check_update(self.record_cls, set or {}, inc or {})
        updated = self._store._backend_call(
            "update", self.kind, self._store.tenant, id, changes, dict(inc or {}))
        if updated is None:
            raise NotFound(f"no {self.kind} with id {id!r}")
        return cast(R, updated)

    def delete(self, ids: Sequence[str] | str | None = None, *, where: Where = None) -> int:
        """Delete by ids, by filter, or both (ANDed); return how many were deleted.

        Deleting everything needs an explicit `where={}`; calling with nothing is an error.
        """
        if ids is None and where is None:
            raise ValidationError.one("delete", "give ids or where= (where={} deletes every record)")
        if isinstance(ids, str):
            ids = [ids]
        if ids is not None:
            check_ids(ids, "ids")
        expr = all_of(F.id.in_(list(dict.fromkeys(ids))) if ids is not None else None, self._bind(where))
        return int(self._store._backend_call("delete", self.kind, self._store.tenant, expr))

    # reading ------------------------------------------------------------------
    def get(self, id: str) -> R | None:
        """The record with this id, or None."""
        check_ids((id,), "ids")
        found = self._store._backend_call("get", self.kind, self._store.tenant, [id], True)
        return cast(R, found[0]) if found else None

    def __getitem__(self, id: str) -> R:
        found = self.get(id)
        if found is None:
            raise NotFound(f"no {self.kind} with id {id!r}")
        return found

    def get_many(self, ids: Sequence[str], *, vectors: bool = True) -> list[R]:
        """Records with these ids, in the order asked, missing ones left out."""
        if isinstance(ids, str):
            ids = [ids]
        check_ids(ids, "ids")
        if not ids:
            return []
        found = self._store._backend_call("get", self.kind, self._store.tenant, list(dict.fromkeys(ids)), vectors)
        by_id = {record.id: record for record in found}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

    def query(self, where: Where = None, *, order_by: OrderBy = None, limit: int | None = None,
              cursor: str | None = None, vectors: bool = True) -> Page[R]:
        """Records matching `where`, ordered (default: `created_at`, then `id`), paged by cursor."""
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ValidationError.one("limit", "must be a positive integer or None")
        order = parse_order(order_by, self.record_cls)
        bound = self._bind(where)
        effective = bound
        if cursor is not None:
            effective = all_of(bound, after(order, decode_cursor(cursor, order, bound, self.record_cls)))
        fetch = None if limit is None else limit + 1
        rows: list[R] = self._store._backend_call(
            "query", self.kind, self._store.tenant, effective, order, fetch, vectors)
        if limit is not None and len(rows) > limit:
            rows = rows[:limit]
            return Page(rows, encode_cursor(rows[-1], order, bound))
        return Page(rows, None)

    def first(self, where: Where = None, *, order_by: OrderBy = None, vectors: bool = True) -> R | None:
        """The first matching record in this order, or None (fetches exactly one)."""
        rows: list[R] = self._store._backend_call(
            "query", self.kind, self._store.tenant, self._bind(where),
            parse_order(order_by, self.record_cls), 1, vectors)
        return rows[0] if rows else None

    def iterate(self, where: Where = None, *, order_by: OrderBy = None, batch_size: int = 500,
                vectors: bool = True) -> Iterator[R]:
        """Every matching record, fetched page by page."""
        cursor: str | None = None
        while True:
            page = self.query(where, order_by=order_by, limit=batch_size, cursor=cursor, vectors=vectors)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _values(self, where: Where, fields: Sequence[str], *, order_by: OrderBy = None,
                limit: int | None = None) -> list[tuple[Any, ...]]:
        """Just these fields of the matching records, in order: no document is decoded where the
        backend can avoid it (see `Backend.query_values`)."""
        return list(self._store._backend_call(
            "query_values", self.kind, self._store.tenant, self._bind(where),
            parse_order(order_by, self.record_cls), limit, tuple(fields)))

    def all(self, where: Where = None, *, order_by: OrderBy = None) -> list[R]:
        return self.query(where, order_by=order_by).items

    def count(self, where: Where = None) -> int:
        return int(self._store._backend_call("count", self.kind, self._store.tenant, self._bind(where)))

    def search(self, vector: Any, k: int = 10, *, where: Where = None, vectors: bool = True) -> list[Hit]:
        """The k nearest records of this kind that match `where`, best first."""
        return self._store.search(self.kind, vector, k, where=where, vectors=vectors)

    def _bind(self, where: Where) -> Expr | None:
        return self._store._bind(self.record_cls, where)


class Outcomes(Collection[Any]):
    def record(self, task_type: str, success: bool, **fields: Any) -> Any:
        """Record one task attempt."""
        return self.add(task_type=task_type, success=success, **fields)


class Heuristics(Collection[Any]):
    prior_weight: float = 2.0
    """How many observations a heuristic's confidence counts for before its first reinforce."""

    def reinforce(self, id: str, success: bool = True) -> Any:
        """Count one more use of a heuristic (atomically) and refresh its confidence.

        The counters never lose an increment. The confidence the heuristic had before its first
        reinforce (set by the application, or 0.5) is kept as `prior_confidence` and counts as
        `prior_weight` uses: with `n` uses and `s` successes counted, confidence is
        (prior_confidence * prior_weight + s) / (prior_weight + n), at most 1. It is computed
        from the counters this call produced, so racing reinforces agree with the counters.
        """
        inc = {"occurrence_count": 1, "success_count": 1 if success else 0}
        updated = self.update(id, set={"last_validated": utcnow()}, inc=inc)
        prior = updated.confidence if updated.prior_confidence is None else updated.prior_confidence
        weight = self.prior_weight
        confidence = (prior * weight + updated.success_count) / (weight + updated.occurrence_count)
        return self.update(id, set={"confidence": min(1.0, confidence), "prior_confidence": prior})


class AntiPatterns(Collection[Any]):
    def seen(self, id: str) -> Any:
        """Count one more sighting of an anti-pattern (atomically) and stamp `last_seen`."""
        return self.update(id, set={"last_seen": utcnow()}, inc={"occurrence_count": 1})


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
