"""`Store`: the facade an application uses, and `open()`, which builds one from config."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from .capabilities import VECTOR_METRICS, Capability
from .checkpoints import Checkpoints
from .collection import AntiPatterns, Collection, Heuristics, Outcomes, Where, bind_where
from .config import StoreConfig, naming_source, resolve
from .errors import (
    BackendNotInstalled,
    ConfigError,
    MnemostoreError,
    SchemaMismatch,
    StoreClosed,
    StoreNotFound,
    UnsupportedCapability,
    UnsupportedFilter,
    ValidationError,
)
from .filters import Expr, walk
from .kinds import KindRef, record_type
from .protocol import PARAMS_KEY, Backend, Hit, StoreParams, backend_error
from .records import AntiPattern, Checkpoint, Embedding, Heuristic, Outcome, Record, utcnow
from .registry import ensure_driver, registry
from .url import StoreURL
from .vectors import as_vector

if TYPE_CHECKING:
    from ..migrations.model import Migration

_FIXED_FIELDS = frozenset({"id", "tenant_id", "created_at", "kind"})


class Store:
    """One store: typed collections over a backend, scoped to one tenant."""

    def __init__(self, backend: Backend, *, tenant: str | None = None, dimension: int | None = None,
                 metric: str | None = None, embedding_model: str | None = None) -> None:
        self.backend = backend
        self._capabilities = backend.capabilities_for(backend.url)
        self.tenant = tenant
        self._closed = False
        self._lock = threading.Lock()
        self.outcomes: Outcomes = Outcomes(self, Outcome)
        self.heuristics: Heuristics = Heuristics(self, Heuristic)
        self.anti_patterns: AntiPatterns = AntiPatterns(self, AntiPattern)
        self.checkpoints: Checkpoints = Checkpoints(self, Checkpoint)
        self.embeddings: Collection[Embedding] = Collection(self, Embedding)
        self._collections: dict[str, Collection[Any]] = {
            c.kind: c for c in (self.outcomes, self.heuristics, self.anti_patterns,
                                self.checkpoints, self.embeddings)
        }
        self._settle_params(dimension, metric, embedding_model)

    # lifecycle ------------------------------------------------------------------
    def close(self) -> None:
        if not self._closed:
            try:
                self._backend_call("close")
            finally:
                self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        tenant = f", tenant={self.tenant!r}" if self.tenant else ""
        return f"<Store {self.backend.name} {self.backend.url.masked}{tenant}>"

    # facts ----------------------------------------------------------------------
    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this store promises: its backend's declaration for this URL."""
        return self._capabilities

    @property
    def params(self) -> StoreParams:
        return self.backend.params

    def collection(self, kind: KindRef) -> Collection[Any]:
        """The collection of a kind, given by name or registered class (an application's kind too)."""
        cls = record_type(kind)
        found = self._collections.get(cls.kind)
        if found is None or found.record_cls is not cls:  # new, or its definition was run again
            found = self._collections[cls.kind] = Collection(self, cls)
        return found

    def require(self, capability: Capability, what: str) -> None:
        if capability not in self._capabilities:
            raise UnsupportedCapability(
                f"{what} needs the {capability.value!r} capability, which the "
                f"{self.backend.name} backend does not declare"
            )

    # search ---------------------------------------------------------------------
    def search(self, kind: KindRef, vector: Any, k: int = 10, *, where: Where = None,
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
            with self._lock:  # another instance may have written the first embedding since
                self._settle_params(None, None)
            if self.params.dimension is None:
                return []  # nothing with an embedding was ever written
            as_vector(query, "vector", self.params.dimension)
        hits: list[Hit] = self._backend_call("search", cls.kind, self.tenant, query, k, bound, vectors)
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
        if isinstance(item, Record):
            if type(item) is not cls:
                raise ValidationError.one("", f"expected a {cls.__name__}, got {type(item).__name__}")
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

    def _settle_dimension(self, batch: Sequence[Record]) -> None:
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
            with self._lock:
                self._settle_params(dims.pop(), None)

    def _check_update(self, cls: type[Record], set: Mapping[str, Any], inc: Mapping[str, Any]) -> dict[str, Any]:
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
            self._settle_dimension([cls.model_construct(embedding=changes["embedding"])])
        changes.update(cls.derived_updates(changes))
        changes.setdefault("updated_at", utcnow())
        return changes

    def _backend_call(self, method: str, *args: Any) -> Any:
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        return getattr(self.backend, method)(*args)  # a driver's error is a BackendError (DRIVER_CALLS)

    def _settle_params(self, dimension: int | None, metric: str | None, model: str | None = None) -> None:
        """Check configured parameters against the store's, then persist what is new."""
        stored = self._backend_call("read_meta", PARAMS_KEY) or {}
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
            self._backend_call("write_meta", PARAMS_KEY, wanted)
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


def open(url: str | None = None, *, tenant: str | None = None, dimension: int | None = None,
         metric: str | None = None, embedding_model: str | None = None, migrate: str | None = None,
         migrations: Sequence[Migration] = (), create: bool = True, **options: Any) -> Store:
    """Open a store by URL, `MNEMOSTORE_URL`, config file, or the embedded default.

    Backend options may be given as keyword arguments or in the URL's query string;
    each backend validates them with its own model. `migrations` adds the application's
    record migrations to those of the backend and plugins; `migrate` says whether pending
    ones are applied on open ("auto") or refused ("refuse"). With `create=False` a store
    that does not exist yet raises StoreNotFound and nothing is created (for reading).
    """
    settings: dict[str, Any] = {"options": options}
    for key, value in (("tenant", tenant), ("dimension", dimension), ("metric", metric),
                       ("embedding_model", embedding_model), ("migrate", migrate)):
        if value is not None:
            settings[key] = value
    config = resolve(url, **settings)
    return open_config(config, migrations, create=create)


def open_config(config: StoreConfig, migrations: Sequence[Migration] = (), *, create: bool = True) -> Store:
    """A Store for `config`: the backend opened, migrated (or refused), and wrapped."""
    from ..migrations.runner import migrate_on_open

    with naming_source(config):
        backend = open_backend(config.url, config.options, create=create)
    try:
        migrate_on_open(backend, migrations, None if config.migrate is None else config.migrate == "auto")
        return Store(backend, tenant=config.tenant, dimension=config.dimension, metric=config.metric,
                     embedding_model=config.embedding_model)
    except BaseException as exc:
        backend.close()
        if isinstance(exc, Exception) and not isinstance(exc, MnemostoreError):
            raise backend_error(backend, "open", exc) from exc
        raise


def open_backend(url: str, options: Mapping[str, Any] | None = None, *, create: bool = True) -> Backend:
    """The backend for `url`, opened but not migrated: for the migration runner and tools.
    With `create=False` a store that does not exist raises StoreNotFound, creating nothing."""
    backend = _unopened(url, options)
    known = None
    if not create:
        known = _exists(backend)
        if known is False:
            raise _not_found(backend)
    try:
        backend.open()
    except ImportError as exc:
        raise BackendNotInstalled(
            f"the {backend.name} backend could not import its driver ({exc.name}); "
            + (f'install it with: pip install "mnemostore[{backend.extra}]"' if backend.extra else "")
        ) from exc
    except MnemostoreError:
        raise
    except Exception as exc:
        raise backend_error(backend, "open", exc) from exc
    from ..migrations.ledger import LEDGER_KEY

    try:  # migrations run before a Store settles the parameters: give them the stored ones
        stored = backend.read_meta(PARAMS_KEY)
        if known is None and not create and stored is None and backend.read_meta(LEDGER_KEY) is None:
            raise _not_found(backend)  # the backend could not tell before opening: nothing of ours is there
        backend.params = StoreParams.from_meta(stored)
    except BaseException:
        backend.close()
        raise
    return backend


def drop_store(url: str, options: Mapping[str, Any] | None = None) -> None:
    """Destroy the store at `url` and everything in it (`Backend.drop`), if `exists()` does not
    say there is none; for the conformance suite's cleanup. UnsupportedCapability if the backend
    cannot drop stores."""
    backend = _unopened(url, options)
    if _exists(backend) is not False:
        backend.drop()


def _unopened(url: str, options: Mapping[str, Any] | None) -> Backend:
    """The backend instance for `url`, its options validated, not opened."""
    parsed = StoreURL.parse(url)
    cls = registry.for_scheme(parsed.scheme)
    ensure_driver(cls)
    return cls(parsed, _backend_options(cls, parsed, options or {}))


def _exists(backend: Backend) -> bool | None:
    try:
        return backend.exists()
    except (MnemostoreError, ImportError):
        raise
    except Exception as exc:
        raise backend_error(backend, "exists", exc) from exc


def _not_found(backend: Backend) -> StoreNotFound:
    url = backend.url.masked
    return StoreNotFound(f"no mnemostore store at {url}: nothing there, or not a mnemostore store (nothing was "
                         f"created or changed); check the URL, or `mnemostore migrate up {shlex.quote(url)}` makes "
                         "it one")


def _backend_options(cls: type[Backend], url: StoreURL, options: Mapping[str, Any]) -> BaseModel:
    merged = {**url.query, **options}
    try:
        return cls.options_model.model_validate(merged)
    except PydanticValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))
        raise ConfigError(f"invalid options for the {cls.name} backend ({url.masked}): {problems}") from None
