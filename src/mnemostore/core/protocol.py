"""The backend protocol: the few generic operations every store implements.

Everything kind-specific lives in the facade (`core/store.py`), written once on top of
this. Core validates every argument before a backend sees it: records are validated
models with `tenant_id` set, filters are bound to the kind's fields, update field names
come from the kind's allow-list, and vectors have the store's dimension.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict

from .capabilities import Capability
from .codec import trusted_record
from .errors import BackendError, MnemostoreError, UnsupportedCapability, ValidationError
from .filters import Expr, F
from .jsonvalues import INT64_MAX
from .records import Checkpoint, Record

if TYPE_CHECKING:
    from ..migrations.locking import MigrationLock
    from ..migrations.model import LayoutMigration
    from .async_protocol import AsyncBackend
    from .declarations import KindChange
    from .shapes import QueryShape
    from .url import StoreURL
    from .vectors import Vector

Metric = Literal["cosine", "dot", "l2"]
R = TypeVar("R", bound=Record)


class OrderKey(NamedTuple):
    """One ordering term. Missing values (None) sort as the smallest value: first when
    ascending, last when descending (the order `core.query.after` pages through)."""

    field: str
    descending: bool = False


ID_ORDER = OrderKey("id")
"""The tie-breaker core appends to every ordering, so pagination is stable."""
LATEST_CHECKPOINT_ORDER = (OrderKey("sequence", True), OrderKey("created_at", True), ID_ORDER)
"""A run's checkpoints newest first: the first is the run's latest, the default parent of the next."""


class Hit(NamedTuple):
    """A search result: the record and its score (similarity for cosine/dot, distance for l2)."""

    record: Record
    score: float


PARAMS_KEY = "params"
"""The meta key under which a store keeps its `StoreParams`."""


@dataclass(frozen=True)
class StoreParams:
    """Parameters fixed for the life of a store, persisted in it and checked on open."""

    dimension: int | None = None
    metric: Metric = "cosine"
    embedding_model: str | None = None

    @classmethod
    def from_meta(cls, value: Any) -> StoreParams:
        """The parameters as persisted under the meta key "params" (defaults if absent)."""
        if not isinstance(value, dict):
            return cls()
        return cls(value.get("dimension"), value.get("metric", "cosine"), value.get("embedding_model"))


class NoOptions(BaseModel):
    """Options model of a backend that takes none."""

    model_config = ConfigDict(extra="forbid")


class Backend(ABC):
    """What a backend implements. A plugin subclasses this and registers the class.

    Tenancy: every operation receives `tenant` (None for the default tenant) and must
    see only records whose `tenant_id` equals it. Ids are unique per (kind, tenant).
    """

    name: ClassVar[str]
    """Registry name, e.g. "sqlite"."""
    schemes: ClassVar[tuple[str, ...]]
    """URL schemes this backend opens, e.g. ("postgresql", "postgres")."""
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    options_model: ClassVar[type[BaseModel]] = NoOptions
    requires: ClassVar[tuple[str, ...]] = ()
    """Importable driver modules; checked before open so a missing one names `extra`."""
    extra: ClassVar[str | None] = None
    """The pip extra that installs `requires` (`pip install "mnemostore[<extra>]"`)."""
    layout_migrations: ClassVar[tuple[LayoutMigration, ...]] = ()
    """This backend's layout history, oldest first; a fresh store gets all of it on open."""
    auto_migrate: ClassVar[bool] = True
    """Whether opening a store applies pending migrations by default (embedded stores) or
    refuses and names the command to run (shared servers)."""
    async_backend: ClassVar[type[AsyncBackend] | None] = None
    """The backend's native async side (`core.async_protocol`), awaited by `open_async`; None: the
    sync calls run in the store's executor, which every backend gets without writing a line."""
    executor_workers: ClassVar[int | None] = None
    """Threads of an `open_async` store's executor unless `workers=` is given (None: `ThreadPoolExecutor`'s
    default): calls that are mostly CPU work in this process gain nothing from more threads than CPUs,
    only contention for the interpreter's lock; calls that wait on a server gain from more."""

    params: StoreParams

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every protocol method a backend defines raises its driver's errors as `BackendError`."""
        super().__init_subclass__(**kwargs)
        for name in DRIVER_CALLS:
            if name in cls.__dict__:
                setattr(cls, name, raising_backend_errors(cls.__dict__[name]))

    def __init__(self, url: StoreURL, options: BaseModel) -> None:
        self.url = url
        self.options = options
        self.params = StoreParams()

    @classmethod
    def capabilities_for(cls, url: StoreURL) -> frozenset[Capability]:
        """What a store at `url` declares: the class's set, narrowed where a mode gives less
        (an in-memory mode is not persistent). The Store and the suite both use this."""
        return cls.capabilities

    # lifecycle -----------------------------------------------------------------
    def exists(self) -> bool | None:
        """Whether the store this backend's URL names was created by mnemostore; called before
        `open` (on an unopened instance) by `mnemostore.open(url, create=False)` and by the
        commands that read a store (`info`, `export`, `copy`'s source, `migrate status`/`plan`).
        It must create nothing. None (the default) means the backend cannot tell without opening:
        core then opens the store and looks for its migration ledger."""
        return None

    @abstractmethod
    def open(self) -> None:
        """Connect and create what is missing (tables, directories, collections)."""

    @abstractmethod
    def close(self) -> None:
        """Release every resource; idempotent."""

    def drop(self) -> None:
        """Destroy the store this backend's URL names and everything in it (its files, tables or
        collections, nothing else), on an instance that is not open. Core calls it only where
        `exists()` did not say False; the conformance suite does after each test, for the stores
        it made. The default raises UnsupportedCapability: such stores are left behind."""
        raise UnsupportedCapability(f"the {self.name} backend cannot drop a store")

    @abstractmethod
    def read_meta(self, key: str) -> Any:
        """A small persistent JSON value stored with the store, or None."""

    @abstractmethod
    def write_meta(self, key: str, value: Any) -> None:
        """Persist a small JSON value (store parameters, ledger state)."""

    # records ---------------------------------------------------------------------
    @abstractmethod
    def put(self, kind: str, records: Sequence[Record]) -> None:
        """Insert or replace records by (tenant_id, id); one batch, all-or-nothing if the
        backend declares `transactions`."""

    @abstractmethod
    def query(
        self,
        kind: str,
        tenant: str | None,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int | None,
        vectors: bool = True,
    ) -> list[Record]:
        """Records matching `where`, sorted by `order` (always ending in `id`), at most `limit`.

        Cursor pagination arrives as range comparisons on the ordered fields, so a backend
        must evaluate those even if it does not declare `filter.range` (in Python if need be).
        With `vectors=False` a backend may leave `embedding` out (it is a read hint)."""

    @abstractmethod
    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        """How many records match `where`."""

    @abstractmethod
    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        """Delete matching records (all of the tenant's, if `where` is None); return how many."""

    @abstractmethod
    def update(
        self,
        kind: str,
        tenant: str | None,
        id: str,
        set: Mapping[str, Any],
        inc: Mapping[str, int | float],
    ) -> Record | None:
        """Atomically set fields and add to counters of one record; return it, or None if absent."""

    def put_missing(self, kind: str, records: Sequence[Record]) -> None:
        """Insert the records whose (tenant_id, id) is not stored yet and leave stored ones as they
        are: `put(..., keep_existing=True)`, for writes that may be retried (a LangGraph task's
        writes). The default reads the ids, then puts the rest: two calls, so two racing calls may
        both write a record; override with the engine's insert-or-ignore to make it one step."""
        by_tenant: dict[str | None, list[Record]] = {}
        for record in records:
            by_tenant.setdefault(record.tenant_id, []).append(record)
        for tenant, batch in by_tenant.items():
            stored = {r.id for r in self.get(kind, tenant, [r.id for r in batch], vectors=False)}
            missing = [r for r in batch if r.id not in stored]
            if missing:
                self.put(kind, missing)

    def put_keeping_created(self, kind: str, records: Sequence[Record]) -> None:
        """`put`, but a record whose (tenant_id, id) is stored keeps the stored `created_at`:
        `put(..., keep_created=True)`, for items overwritten in place (a LangGraph store's puts).
        The default reads the stored ones, then puts: two calls, so a record deleted or written
        between them may get the wrong `created_at`; override with the engine's upsert (`ON
        CONFLICT DO UPDATE` leaving `created_at`) or a read inside the write's transaction."""
        self.put(kind, self._created_kept(kind, records))

    def _created_kept(self, kind: str, records: Sequence[Record]) -> list[Record]:
        """`records`, those stored with the stored `created_at` (read with `get`)."""
        stored: dict[tuple[str | None, str], Any] = {}
        by_tenant: dict[str | None, list[str]] = {}
        for record in records:
            by_tenant.setdefault(record.tenant_id, []).append(record.id)
        for tenant, ids in by_tenant.items():
            stored.update(((tenant, r.id), r.created_at) for r in self.get(kind, tenant, ids, vectors=False))
        return [record if (created := stored.get((record.tenant_id, record.id))) is None
                else with_created(record, created) for record in records]

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        """Records with these ids, in any order, missing ones left out. Override for speed."""
        return self.query(kind, tenant, F.id.in_(ids), (ID_ORDER,), None, vectors)

    def query_values(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
                     limit: int | None, fields: Sequence[str]) -> list[tuple[Any, ...]]:
        """The values of `fields` of the records `query` would return, as tuples in its order.

        A light query (e.g. a checkpoint's id and sequence, without its state). The default
        reads whole records; override to read only the fields' columns."""
        records = self.query(kind, tenant, where, order, limit, False)
        return [tuple(getattr(record, name) for name in fields) for record in records]

    def query_shape(self, kind: str, tenant: str | None, shape: QueryShape, values: Mapping[str, Any],
                    limit: int | None, vectors: bool = True) -> list[Record]:
        """`query` of a prepared shape (`core.shapes`) with these values (checked by core, one per param).

        The default substitutes the values and calls `query`. Override to compile the shape once
        (a shape compares by identity and lives long) and bind the values to that statement."""
        return self.query(kind, tenant, shape.where_with(values), shape.order, limit, vectors)

    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        """Write `record` (parent_ids empty, sequence 0) as the child of the latest checkpoint of its
        tenant, run and branch, as `link_parent` links it, or as a root if there is none; return
        it as written: `checkpoints.save` with its default parent.

        Core always passes `latest`, the bound filter `run_id == record.run_id AND branch_id ==
        record.branch_id`, and `order`, `LATEST_CHECKPOINT_ORDER`: the latest is the first
        record they select. They are given so a backend can compile them as it compiles any
        query; one with its own equivalent (a stored function, say) may ignore them. The default
        looks the parent up with `query_values`, then puts: two calls, and two saves racing on
        one run and branch may take the same parent. Override to look up and write in one round
        trip, and to serialise racing appends if the engine can."""
        found = self.query_values("checkpoint", record.tenant_id, latest, order, 1, ("id", "sequence"))
        linked = link_parent(record, found[0] if found else None)
        self.put("checkpoint", [linked])
        return linked

    def search(
        self,
        kind: str,
        tenant: str | None,
        vector: Vector,
        k: int,
        where: Expr | None,
        vectors: bool = True,
    ) -> list[Hit]:
        """The k nearest records with an embedding that match `where`, best first, ties by id.

        Uses `self.params.metric`. The filter must be applied inside the search.
        """
        raise UnsupportedCapability(f"the {self.name} backend does not support vector search")

    def prepare(self, kind: str, tenant: str | None) -> None:
        """Make the storage `kind`'s records of `tenant` are written to (a table, collections) now, not at
        their first write: a LangGraph saver's or store's `setup()`. The default makes nothing, leaving it
        to the first write (the memory and file backends: their first write costs no more for it)."""
        return None

    def tenants(self, kind: str) -> list[str | None]:
        """Every tenant holding records of `kind` (None is the default tenant), for record
        migrations and copies, which must reach every tenant."""
        raise UnsupportedCapability(f"the {self.name} backend cannot list its tenants")

    # migrations --------------------------------------------------------------------
    def migration_lock(self) -> MigrationLock:
        """The lock that keeps two runners from migrating this store at once. The default is a
        lock record with holder and expiry in the store's metadata; override with the engine's
        own lock (a lock file, an advisory lock) where there is one."""
        from ..migrations.locking import MetaLock

        return MetaLock(self)

    def legacy_layout(self) -> str | None:
        """For a store written before it had a ledger: the id of the last layout migration its
        layout already has (it is adopted as applied). None for a fresh store."""
        return None

    def layout_sql(self, migration: LayoutMigration, direction: Literal["up", "down"] = "up") -> list[str]:
        """A layout step's SQL as it runs on this store (for `plan --sql`); override when the
        steps are templates filled in per store (schema, table prefix)."""
        return migration.sql(direction)

    def run_layout(self, migration: LayoutMigration, direction: Literal["up", "down"],
                   ledger: Mapping[str, Any]) -> None:
        """Run one layout step and persist `ledger` (the meta key "ledger"), in one transaction
        where the engine allows. The default runs a function step, then writes the ledger; SQL
        backends override it to run statements and the ledger write in one transaction."""
        from ..migrations.ledger import LEDGER_KEY

        step = migration.step(direction)
        if not callable(step):
            raise UnsupportedCapability(f"the {self.name} backend cannot run SQL layout steps ({migration.id})")
        step(self)
        self.write_meta(LEDGER_KEY, dict(ledger))

    def evolve_kind(self, change: KindChange) -> None:
        """Bring an application kind this store holds to its grown declaration (`change`: filterable
        fields, indexes or bytes fields added), so filters on an added field are exact for records
        written before too. The runner calls it under the migration lock, then records the
        declaration; it must be safe to run again after a failure. The default puts every record
        again (a payload or metadata map gains the fields); SQL backends add columns and indexes."""
        from ..migrations.kind_layout import rewrite_records

        rewrite_records(self, change)

    def describe(self) -> dict[str, Any]:
        """Backend facts for `mnemostore info` (paths, server versions); no secrets."""
        return {}


DRIVER_CALLS = ("close", "drop", "read_meta", "write_meta", "put", "put_missing", "put_keeping_created", "query",
                "count", "delete", "update", "get", "query_values", "query_shape", "append_checkpoint", "search",
                "prepare", "tenants", "migration_lock", "legacy_layout", "evolve_kind", "describe")
"""The protocol methods whose non-mnemostore errors core turns into `BackendError`, on every path
(the facade, the migration runner, copy, export). `exists` and `open` are wrapped where core calls
them (`core.store.open_backend`: a missing driver module names the extra there), and `run_layout`
by the migration runner (a failed step is a `MigrationError` naming the migration)."""


DOCUMENT_READS = ("query_shape_documents", "query_shapes_documents")
"""Optional reads beside the protocol's: a shape's records as their stored fields, one shape or several at once
(`integrations.langgraph.reads.DocumentReads`, the LangGraph saver's flat reads). A native async side that has
them serves them too (`AsyncBackend.native_calls`)."""


def raising_backend_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` with any exception that is not a `MnemostoreError` raised as `backend_error`."""
    if getattr(method, "__raises_backend_errors__", False):
        return method

    @functools.wraps(method)
    def call(self: Backend, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MnemostoreError:
            raise
        except Exception as exc:
            raise backend_error(self, method.__name__, exc) from exc

    call.__raises_backend_errors__ = True  # type: ignore[attr-defined]
    return call


def backend_error(backend: Backend, action: str, exc: Exception) -> BackendError:
    """A driver's error as a `BackendError` naming the backend, the store (masked) and the call;
    secrets of the URL are scrubbed from the driver's message. Backends may use it too."""
    message = backend.url.scrub(str(exc).strip())
    return BackendError(f"the {backend.name} backend failed in {action} on {backend.url.masked}: "
                        f"{type(exc).__name__}{': ' + message if message else ''}")


for _name in DRIVER_CALLS:  # the defaults of the base class too (`get`, `append_checkpoint`, ...)
    if not getattr(Backend.__dict__[_name], "__isabstractmethod__", False):
        setattr(Backend, _name, raising_backend_errors(Backend.__dict__[_name]))


def apply_update(record: Record, set: Mapping[str, Any], inc: Mapping[str, int | float]) -> Record:
    """`record` with `set` applied and `inc` added: the read-modify-write step of `Backend.update`.

    The arguments were validated by core; a counter pushed past 64 bits is a ValidationError.
    """
    data = {**record.__dict__, **set}
    for name, amount in inc.items():
        data[name] += amount
        if data[name] > INT64_MAX:
            raise ValidationError.one(f"inc.{name}", "the counter would exceed a 64-bit integer")
    return trusted_record(type(record), data)


def link_parent(record: Checkpoint, parent: tuple[str, int] | None) -> Checkpoint:
    """`record` as the child of `parent` (its id and sequence): `parent_ids` [that id] and
    `sequence` one past its own; as a root (no parents, sequence 0) if `parent` is None."""
    parent_id, sequence = (None, -1) if parent is None else parent
    if sequence >= INT64_MAX:
        raise ValidationError.one("sequence", f"would exceed a 64-bit integer (the parent's is {sequence})")
    data = {**record.__dict__, "parent_ids": [] if parent_id is None else [parent_id], "sequence": sequence + 1}
    linked = trusted_record(type(record), data)
    assert isinstance(linked, Checkpoint)
    return linked


def with_created(record: R, created_at: datetime) -> R:
    """`record` with another `created_at` (a stored one, already validated), without re-validating it."""
    return trusted_record(type(record), {**record.__dict__, "created_at": created_at})  # type: ignore[return-value]
