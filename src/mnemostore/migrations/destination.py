"""The receiving end of a copy or an archive import: parameters, emptiness, position, writes.

A destination must end up with the source's parameters (dimension, metric, embedding model),
checked before any record is written. It must be empty, unless it holds a partial copy of the
same origin (then the copy resumes after the saved position) or the caller asked to overwrite.
The position lives in the destination's meta under `copy_progress` and is removed when done;
the destination's migration lock is held throughout, so two copies never interleave.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..core.declarations import is_application_kind, record_declaration
from ..core.errors import MigrationError, SchemaMismatch
from ..core.protocol import StoreParams
from ..core.records import Record
from .locking import LockInfo, MigrationLock, holding
from .streams import Position, all_tenants, kind_count

if TYPE_CHECKING:
    from ..core.protocol import Backend
    from ..core.store import Store

COPY_PROGRESS_KEY = "copy_progress"
PROBE_KEY = "copy_probe"
FORMAT = 1


@dataclass(frozen=True)
class Origin:
    """What is copied into a destination: a store (by masked URL) or an archive (by checksums)."""

    type: str
    """"store" or "archive"."""
    name: str
    """The masked URL of the source store, or the archive's path (for messages)."""
    identity: str
    """What must match for a re-run to resume: the masked URL, or the archive's footer digest."""
    kinds: tuple[str, ...]
    params: StoreParams

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "identity": self.identity, "kinds": list(self.kinds),
                "params": asdict(self.params)}

    def same_as(self, saved: Any) -> bool:
        mine = self.to_json()
        return isinstance(saved, dict) and all(saved.get(key) == mine[key]
                                               for key in ("type", "identity", "kinds", "params"))


def describe_params(params: StoreParams) -> str:
    model = f", embedding model {params.embedding_model!r}" if params.embedding_model else ""
    dimension = f"{params.dimension}-dimensional" if params.dimension else "no dimension set"
    return f"{dimension}, {params.metric}{model}"


@contextmanager
def opened(target: str | Store, params: StoreParams | None = None, *, create: bool = True) -> Iterator[Store]:
    """A Store for `target`: opened from a URL (and closed afterwards), or the given Store.

    With `params`, the store must have (or take, if it is new) exactly those parameters; a
    store that disagrees raises SchemaMismatch before anything is written to it. With
    `create=False` (a source) a URL naming no store raises StoreNotFound, creating nothing.
    """
    from ..core.store import Store, open

    if isinstance(target, Store):
        if params is not None:
            settle(target, params)
        yield target
        return
    settings: dict[str, Any] = {}
    if params is not None:
        settings = {key: value for key, value in asdict(params).items() if value is not None}
    try:
        store = open(target, create=create, **settings)
    except SchemaMismatch as exc:
        if params is None:
            raise
        raise _differs(_masked(target), params, exc) from None
    try:
        if params is not None:
            settle(store, params)
        yield store
    finally:
        store.close()


def settle(store: Store, params: StoreParams) -> None:
    """Give `store` the parameters `params`, or raise SchemaMismatch if it has others."""
    from ..core.store import Store

    where = store.backend.url.masked
    try:
        Store(store.backend, dimension=params.dimension, metric=params.metric,
              embedding_model=params.embedding_model)
    except SchemaMismatch as exc:
        raise _differs(where, params, exc) from None
    if store.backend.params != params:
        raise _differs(where, params, f"it holds {describe_params(store.backend.params)}")


def _differs(where: str, params: StoreParams, problem: object) -> SchemaMismatch:
    return SchemaMismatch(f"cannot copy into {where}: its parameters differ from the source's "
                          f"({describe_params(params)}): {problem}. Copy into a new store")


def same_store(source: Backend, destination: Backend) -> bool:
    """Whether two open backends are one store (two URLs may name one file): a token written to
    the destination's meta is read back through the source."""
    if source is destination:
        return True
    token = uuid.uuid4().hex
    destination.write_meta(PROBE_KEY, token)
    try:
        return bool(source.read_meta(PROBE_KEY) == token)
    finally:
        destination.write_meta(PROBE_KEY, None)


def _masked(url: str) -> str:
    from ..core.url import mask_password

    return mask_password(url)


class Destination:
    """Writes batches into a store, saving the position after each; a context manager that
    holds the destination's migration lock and decides where to start (see the module doc)."""

    def __init__(self, store: Store, origin: Origin, *, resume: bool = True, overwrite: bool = False,
                 lock_wait: float = 60.0) -> None:
        self.store = store
        self.backend = store.backend
        self.origin = origin
        self.resume = resume
        self.overwrite = overwrite
        self.lock_wait = lock_wait
        self.position: Position | None = None
        """Where a resumed copy continues (None: from the start)."""
        self.resumed = False
        self._stack = ExitStack()
        self._lock: MigrationLock | None = None
        self._lock_info: LockInfo | None = None
        self._started_at = datetime.now(UTC).isoformat()
        self._declared: set[str] = set()

    def __enter__(self) -> Destination:
        self._lock = self.backend.migration_lock()
        self._lock_info = self._stack.enter_context(holding(self._lock, self.lock_wait))
        try:
            self._prepare()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.close()

    @property
    def name(self) -> str:
        return self.backend.url.masked

    def _prepare(self) -> None:
        saved = self.backend.read_meta(COPY_PROGRESS_KEY)
        saved = saved if isinstance(saved, dict) else None
        held = {kind: n for kind in self.origin.kinds
                if (n := kind_count(self.backend, kind))}
        if saved is not None and self.origin.same_as(saved.get("origin")) and self.resume and not self.overwrite:
            self.position = Position.from_json(saved.get("position"))
            self.resumed = True
            return
        if saved is not None and held and not self.overwrite:
            other = saved.get("origin", {}).get("name", "?") if isinstance(saved.get("origin"), dict) else "?"
            if self.origin.same_as(saved.get("origin")):
                raise MigrationError(
                    f"{self.name} holds an unfinished copy of {other}; resume it (leave resume on, drop "
                    "--no-resume) or start over with overwrite=True (--overwrite)")
            raise MigrationError(
                f"{self.name} holds an unfinished copy of {other}, not of {self.origin.name}; finish that copy, "
                "or start over with overwrite=True (--overwrite), which deletes what the destination holds")
        if held and not self.overwrite:
            counts = ", ".join(f"{kind}: {n}" for kind, n in held.items())
            raise MigrationError(
                f"{self.name} already holds records ({counts}); copy into an empty store, or pass overwrite=True "
                "(--overwrite) to delete the destination's records of the copied kinds first")
        for kind in held:
            for tenant in all_tenants(self.backend, kind):
                self.backend.delete(kind, tenant, None)
        self._save(None)

    def _save(self, position: Position | None) -> None:
        self.backend.write_meta(COPY_PROGRESS_KEY, {
            "format": FORMAT, "origin": self.origin.to_json(), "started_at": self._started_at,
            "position": None if position is None else position.to_json()})

    def write(self, kind: str, tenant: str | None, records: Sequence[Record]) -> None:
        """Put one batch of one tenant's records (ids ascending) and save the position after it."""
        if not records:
            return
        self._check_dimension(records)
        if kind not in self._declared:  # the destination records an application kind's declaration
            record_cls = type(records[0])
            if is_application_kind(record_cls):
                record_declaration(self.backend, record_cls)
            self._declared.add(kind)
        self.backend.put(kind, records)
        self._save(Position(kind, tenant, records[-1].id))
        assert self._lock is not None and self._lock_info is not None, "use the Destination in a with block"
        self._lock_info = self._lock.refresh(self._lock_info)

    def _check_dimension(self, records: Sequence[Record]) -> None:
        if self.backend.params.dimension is None:
            self.store._settle_dimension(records)
        dimension = self.backend.params.dimension
        for record in records:
            if record.embedding is not None and record.embedding.shape[0] != dimension:
                raise SchemaMismatch(
                    f"{record.kind} {record.id!r} has a {record.embedding.shape[0]}-dimensional embedding but "
                    f"{self.name} holds {dimension}-dimensional ones; nothing of this batch was written")

    def finish(self) -> None:
        """The copy is complete and verified: forget the position."""
        self.backend.write_meta(COPY_PROGRESS_KEY, None)
