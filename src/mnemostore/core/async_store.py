"""`AsyncStore`: the store awaited from asyncio code, whose coroutines are also the sync `Store`'s logic.

Validation and planning live here once; a store differs only in its `Calls` (see `core/calls.py`).
`mnemostore.open_async` (in `core/async_open.py`) builds one on an executor or a native async driver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from .async_checkpoints import AsyncCheckpoints
from .async_collection import AsyncAntiPatterns, AsyncCollection, AsyncHeuristics, AsyncOutcomes
from .calls import Calls, DirectCalls
from .capabilities import VECTOR_METRICS, Capability
from .collection import Where, bind_where
from .declarations import ensure_declared
from .errors import ConfigError, SchemaMismatch, StoreClosed, UnsupportedCapability, UnsupportedFilter, ValidationError
from .filters import Expr, walk
from .jsonvalues import forget_proven
from .kinds import KindRef, kinds, record_type
from .protocol import PARAMS_KEY, Backend, Hit, StoreParams
from .records import AntiPattern, Checkpoint, Embedding, Heuristic, Outcome, Record, utcnow
from .vectors import as_vector

_FIXED_FIELDS = frozenset({"id", "tenant_id", "created_at", "kind"})
_KIND_CALLS = frozenset({"put", "put_missing", "put_keeping_created", "query", "count", "delete", "update", "get",
                         "query_values", "query_shape", "search", "prepare"})
"""Backend calls whose first argument is a kind: an application's kind is checked against the store's
recorded declaration before its first such call (`_declared_call`)."""
_WRITES = frozenset({"put", "put_missing", "put_keeping_created", "prepare"})
_loaded = kinds.loaded


class AsyncStore:
    """One store awaited from asyncio code: typed collections over a backend, scoped to one tenant.

    Open it with `await mnemostore.open_async(url, ...)`; close it with `await store.aclose()`
    or `async with`. Belongs to the event loop that opened it."""

    def __init__(self, calls: Calls, *, tenant: str | None = None) -> None:
        self._calls = calls
        self.backend: Backend = calls.backend
        self._capabilities = self.backend.capabilities_for(self.backend.url)
        self.tenant = tenant
        self._closed = False
        self.outcomes: AsyncOutcomes = AsyncOutcomes(self, Outcome)
        self.heuristics: AsyncHeuristics = AsyncHeuristics(self, Heuristic)
        self.anti_patterns: AsyncAntiPatterns = AsyncAntiPatterns(self, AntiPattern)
        self.checkpoints: AsyncCheckpoints = AsyncCheckpoints(self, Checkpoint)
        self.embeddings: AsyncCollection[Embedding] = AsyncCollection(self, Embedding)
        self._collections: dict[str, AsyncCollection[Any]] = {
            c.kind: c for c in (self.outcomes, self.heuristics, self.anti_patterns,
                                self.checkpoints, self.embeddings)
        }
        self._declared: dict[str, type[Record]] = {c.kind: c.record_cls for c in self._collections.values()}
        """Kind -> the class checked against the store's recorded declaration: a kind is checked
        again if its class changes (a definition run again)."""
        self._unrecorded: set[str] = set()
        """Kinds checked by a read whose declaration the store has not recorded: a write records it."""

    # lifecycle ------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the backend and release the store's threads or async pools; idempotent."""
        if not self._closed:
            try:
                await self._calls.close()
            finally:
                self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        tenant = f", tenant={self.tenant!r}" if self.tenant else ""
        return f"<{type(self).__name__} {self.backend.name} {self.backend.url.masked}{tenant}>"

    # facts ----------------------------------------------------------------------
    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this store promises: its backend's declaration for this URL."""
        return self._capabilities

    @property
    def params(self) -> StoreParams:
        return self.backend.params

    def collection(self, kind: KindRef) -> AsyncCollection[Any]:
        """The collection of a kind, given by name or registered class (an application's kind too)."""
        cls = record_type(kind)
        found = self._collections.get(cls.kind)
        if found is None or found.record_cls is not cls:  # new, or its definition was run again
            found = self._collections[cls.kind] = AsyncCollection(self, cls)
        return found

    def require(self, capability: Capability, what: str) -> None:
        if capability not in self._capabilities:
            raise UnsupportedCapability(
                f"{what} needs the {capability.value!r} capability, which the "
                f"{self.backend.name} backend does not declare"
            )

    # search ---------------------------------------------------------------------
    async def search(self, kind: KindRef, vector: Any, k: int = 10, *, where: Where = None,
                     vectors: bool = True) -> list[Hit]:
        """The k records of `kind` (a name or registered class) nearest to `vector` that match `where`, best first."""
        cls = record_type(kind)
        metric = self.params.metric
        self.require(VECTOR_METRICS[metric], f"{metric} vector search")
        if type(k) is not int or k < 1:
            raise ValidationError.one("k", "must be a positive integer")
        query = as_vector(vector, "vector", self.params.dimension)
        bound = self._bind(cls, where)
        if bound is not None:
            self.require(Capability.VECTOR_FILTERED, "filtered vector search")
        if self.params.dimension is None:
            async with self._calls.lock:  # another instance may have written the first embedding since
                await self._settle_params(None, None)
            if self.params.dimension is None:
                return []  # nothing with an embedding was ever written
            as_vector(query, "vector", self.params.dimension)
        hits: list[Hit] = await self._backend_call("search", cls.kind, self.tenant, query, k, bound, vectors)
        return hits

    # helpers for collections --------------------------------------------------------
    def _bind(self, cls: type[Record], where: Where) -> Expr | None:
        bound = bind_where(cls, where)
        caps = self._capabilities
        for cmp in walk(bound):
            if cmp.field[0] == "metadata" and Capability.FILTER_METADATA not in caps:
                raise UnsupportedFilter(f"the {self.backend.name} backend cannot filter on metadata keys")
            if cmp.op in ("lt", "le", "gt", "ge") and Capability.FILTER_RANGE not in caps:
                raise UnsupportedFilter(f"the {self.backend.name} backend cannot filter by ranges ({cmp!r})")
        return bound

    def _admit(self, cls: type[Record], item: Record | Mapping[str, Any]) -> Any:
        """Validate one record for this store: its type, tenant and embedding dimension."""
        if type(item) is dict:  # keyword fields (`add`, a save): the common case, checked first
            record = cls(**item)
        elif isinstance(item, Record):
            if type(item) is not cls:
                raise ValidationError.one("", f"expected a {cls.__name__}, got {type(item).__name__}")
            forget_proven()  # its state may have changed since its validation: its document dumps it again
            record = item
        elif isinstance(item, Mapping):
            record = cls(**item)
        else:
            raise ValidationError.one("", f"expected a {cls.__name__} or a mapping, got {type(item).__name__}")
        if record.tenant_id != self.tenant:
            if record.tenant_id is not None:
                raise ValidationError.one(
                    "tenant_id", f"is {record.tenant_id!r} but this store is scoped to tenant {self.tenant!r}")
            record = record.model_copy(update={"tenant_id": self.tenant})
        if record.embedding is not None and self.params.dimension is not None:
            as_vector(record.embedding, "embedding", self.params.dimension)
        return record

    async def _settle_dimension(self, batch: Sequence[Record]) -> None:
        """Fix the store's dimension from the first embedding ever written."""
        dims = {r.embedding.shape[0] for r in batch if r.embedding is not None}
        if not dims:
            return
        if len(dims) > 1:
            first = next(r.embedding.shape[0] for r in batch if r.embedding is not None)
            index, odd = next((i, r.embedding.shape[0]) for i, r in enumerate(batch)
                              if r.embedding is not None and r.embedding.shape[0] != first)
            raise ValidationError.one(
                f"records[{index}].embedding",
                f"has dimension {odd}, but earlier records of this batch have {first}; one store holds one dimension")
        if self.params.dimension is None:
            async with self._calls.lock:
                await self._settle_params(dims.pop(), None)

    async def _check_update(self, cls: type[Record], set: Mapping[str, Any],
                            inc: Mapping[str, Any]) -> dict[str, Any]:
        """Validate update field names against the kind's allow-lists and values against the model."""
        if not set and not inc:
            raise ValidationError.one("update", "nothing to update: give set= or inc=")
        changes: dict[str, Any] = {}
        for name, value in set.items():
            if name not in cls.model_fields or name in _FIXED_FIELDS:
                raise ValidationError.one(f"set.{name}", "is not a field that can be updated")
            if name in inc:
                raise ValidationError.one(f"set.{name}", "is both set and incremented")
            changes[name] = _validate_field(cls, name, value)
        for name, amount in inc.items():
            if name not in cls.incrementable:
                allowed = ", ".join(sorted(cls.incrementable)) or "none"
                raise ValidationError.one(f"inc.{name}", f"is not an incrementable counter (allowed: {allowed})")
            if type(amount) is not int or not 0 <= amount < 2**62:
                raise ValidationError.one(f"inc.{name}", "increments must be non-negative integers")
        if "embedding" in changes and changes["embedding"] is not None:
            as_vector(changes["embedding"], "set.embedding", self.params.dimension)
            await self._settle_dimension([cls.model_construct(embedding=changes["embedding"])])
        changes.update(cls.derived_updates(changes))
        changes.setdefault("updated_at", utcnow())
        return changes

    def _backend_call(self, method: str, *args: Any) -> Awaitable[Any]:
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        if method in _KIND_CALLS and not self._checked(args[0], method):
            return self._declared_call(method, args)
        return self._calls(method, *args)  # a driver's error is a BackendError (DRIVER_CALLS)

    def _checked(self, kind: str, method: str) -> bool:
        """Whether a call of `kind` goes to the backend as it is: the kind's declaration is checked
        against the store's (and recorded, for a write)."""
        return self._declared.get(kind) is _loaded(kind) and not (kind in self._unrecorded and method in _WRITES)

    def _callable_now(self, kind: str, method: str) -> bool:
        """Whether `_backend_call(method, kind, ...)` would call the backend straight in the caller's
        thread (an open store with direct calls, the sync facade's; the kind checked): a hot sync
        write may then call it without a coroutine to drive."""
        return not self._closed and type(self._calls) is DirectCalls and self._checked(kind, method)

    async def _declared_call(self, method: str, args: tuple[Any, ...]) -> Any:
        """A kind's call once the store's recorded declaration of it matches the code's (KindChanged
        if not); a first write records it, so the store knows the layout its records were written in."""
        cls = record_type(args[0])
        recorded = await self._calls.run(ensure_declared, self.backend, cls, method in _WRITES)
        self._declared[cls.kind] = cls
        if recorded:
            self._unrecorded.discard(cls.kind)
        else:
            self._unrecorded.add(cls.kind)
        return await self._calls(method, *args)

    async def _settle_params(self, dimension: int | None, metric: str | None, model: str | None = None) -> None:
        """Check configured parameters against the store's, then persist what is new."""
        stored = await self._backend_call("read_meta", PARAMS_KEY) or {}
        stored_dim, stored_metric = stored.get("dimension"), stored.get("metric")
        stored_model = stored.get("embedding_model")
        if model is not None and stored_model is not None and model != stored_model:
            raise SchemaMismatch(
                f"this store's embeddings were made by {stored_model!r} but {model!r} was configured; "
                "open it with the stored model or re-embed it with a migration")
        if dimension is not None and stored_dim is not None and dimension != stored_dim:
            raise SchemaMismatch(
                f"this store holds {stored_dim}-dimensional embeddings but {dimension} was configured; "
                "open it with the stored dimension or re-embed it with a migration")
        if metric is not None and stored_metric is not None and metric != stored_metric:
            raise SchemaMismatch(
                f"this store was created with the {stored_metric!r} metric but {metric!r} was configured")
        chosen = stored_metric or metric or "cosine"
        if chosen not in VECTOR_METRICS:
            raise ConfigError(f"unknown metric {chosen!r}; use cosine, dot or l2")
        params = StoreParams(dimension=stored_dim or dimension, metric=chosen,  # type: ignore[arg-type]
                             embedding_model=stored_model or model)
        wanted: dict[str, Any] = {"dimension": params.dimension, "metric": params.metric}
        if params.embedding_model is not None:
            wanted["embedding_model"] = params.embedding_model
        if wanted != stored:
            await self._backend_call("write_meta", PARAMS_KEY, wanted)
        self.backend.params = params


def _validate_field(cls: type[Record], name: str, value: Any) -> Any:
    """One field's value validated by the model's own rules."""
    try:
        probe = cls.model_construct()
        probe.__pydantic_validator__.validate_assignment(probe, name, value)
    except PydanticValidationError as exc:
        from .records import convert_validation_error

        raise convert_validation_error(exc).prefixed("set") from None
    return probe.__dict__[name]
