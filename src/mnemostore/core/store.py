"""`Store`: the facade an application uses, and `open()`, which builds one from config."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from .async_store import AsyncStore
from .calls import DirectCalls, Runner, run_sync
from .capabilities import Capability
from .checkpoints import Checkpoints
from .collection import AntiPatterns, Collection, Heuristics, Outcomes, Where
from .config import StoreConfig, naming_source, resolve
from .errors import BackendNotInstalled, ConfigError, MnemostoreError, StoreNotFound
from .kinds import KindRef
from .protocol import PARAMS_KEY, Backend, Hit, StoreParams, backend_error
from .records import Embedding, Record
from .registry import ensure_driver, registry
from .url import StoreURL

if TYPE_CHECKING:
    from ..migrations.model import Migration


class Store:
    """One store: typed collections over a backend, scoped to one tenant.

    Its logic is the `AsyncStore`'s, written once: each method drives that coroutine with direct
    backend calls (`run_sync`), which never suspend, so no event loop is involved."""

    def __init__(self, backend: Backend, *, tenant: str | None = None, dimension: int | None = None,
                 metric: str | None = None, embedding_model: str | None = None) -> None:
        self._drive(AsyncStore(DirectCalls(backend), tenant=tenant), run_sync)
        run_sync(self._async._settle_params(dimension, metric, embedding_model))

    @classmethod
    def driving(cls, store: AsyncStore, run: Runner) -> Store:
        """A sync Store over an open AsyncStore, each call finished by `run` (e.g. on the store's
        event loop from another thread): how the conformance suite tests the async facade."""
        self = cls.__new__(cls)
        self._drive(store, run)
        return self

    def _drive(self, store: AsyncStore, run: Runner) -> None:
        self._async = store
        self._run = run
        self.backend = store.backend
        self.tenant = store.tenant
        self.outcomes: Outcomes = Outcomes(store.outcomes, run)
        self.heuristics: Heuristics = Heuristics(store.heuristics, run)
        self.anti_patterns: AntiPatterns = AntiPatterns(store.anti_patterns, run)
        self.checkpoints: Checkpoints = Checkpoints(store.checkpoints, run)
        self.embeddings: Collection[Embedding] = Collection(store.embeddings, run)
        self._collections: dict[str, Collection[Any]] = {
            c.kind: c for c in (self.outcomes, self.heuristics, self.anti_patterns,
                                self.checkpoints, self.embeddings)
        }

    # lifecycle ------------------------------------------------------------------
    def close(self) -> None:
        self._run(self._async.aclose())

    @property
    def closed(self) -> bool:
        return self._async.closed

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
        return self._async.capabilities

    @property
    def params(self) -> StoreParams:
        return self.backend.params

    def collection(self, kind: KindRef) -> Collection[Any]:
        """The collection of a kind, given by name or registered class (an application's kind too)."""
        twin = self._async.collection(kind)
        found = self._collections.get(twin.kind)
        if found is None or found._async is not twin:  # new, or its definition was run again
            found = self._collections[twin.kind] = Collection(twin, self._run)
        return found

    def require(self, capability: Capability, what: str) -> None:
        self._async.require(capability, what)

    # search ---------------------------------------------------------------------
    def search(self, kind: KindRef, vector: Any, k: int = 10, *, where: Where = None,
               vectors: bool = True) -> list[Hit]:
        """The k records of `kind` (a name or registered class) nearest to `vector` that match `where`, best first."""
        return self._run(self._async.search(kind, vector, k, where=where, vectors=vectors))

    def _settle_dimension(self, batch: Sequence[Record]) -> None:
        """Fix the store's dimension from the first embedding ever written (for copies' destinations)."""
        self._run(self._async._settle_dimension(batch))


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
    config = store_config(url, tenant=tenant, dimension=dimension, metric=metric, embedding_model=embedding_model,
                          migrate=migrate, options=options)
    return open_config(config, migrations, create=create)


def store_config(url: str | None, *, tenant: str | None, dimension: int | None, metric: str | None,
                 embedding_model: str | None, migrate: str | None, options: dict[str, Any]) -> StoreConfig:
    """The configuration `open` and `open_async` resolve from their arguments, the environment and files."""
    settings: dict[str, Any] = {"options": options}
    for key, value in (("tenant", tenant), ("dimension", dimension), ("metric", metric),
                       ("embedding_model", embedding_model), ("migrate", migrate)):
        if value is not None:
            settings[key] = value
    return resolve(url, **settings)


def open_config(config: StoreConfig, migrations: Sequence[Migration] = (), *, create: bool = True) -> Store:
    """A Store for `config`: the backend opened, migrated (or refused), and wrapped."""
    backend = prepared_backend(config, migrations, create=create)
    with closed_on_failure(backend):
        return Store(backend, tenant=config.tenant, dimension=config.dimension, metric=config.metric,
                     embedding_model=config.embedding_model)


def prepared_backend(config: StoreConfig, migrations: Sequence[Migration] = (), *, create: bool = True) -> Backend:
    """The backend for `config`, opened and migrated (or refused): what a Store or AsyncStore wraps."""
    from ..migrations.runner import migrate_on_open

    with naming_source(config):
        backend = open_backend(config.url, config.options, create=create)
    with closed_on_failure(backend):
        migrate_on_open(backend, migrations, None if config.migrate is None else config.migrate == "auto")
    return backend


@contextmanager
def closed_on_failure(backend: Backend) -> Iterator[None]:
    """Close `backend` if the block fails; a driver's error there is a BackendError of "open"."""
    try:
        yield
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
