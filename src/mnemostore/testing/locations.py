"""Fresh empty stores from one user-given URL: each conformance test gets its own.

Rules, first match wins (documented in docs/writing-a-backend.md):

1. `{test}` in the URL is replaced by a unique name (works for any backend);
2. `memory://[NAME]` (and the URL of any subclass of the memory backend) and
   `qdrant://memory[/NAME]` get a unique store name;
3. a path URL of an embedded built-in (sqlite, file, qdrant, chroma) names a directory under
   which each test gets a fresh sub-directory (without a path: under pytest's `tmp_path`);
4. a backend whose options have a `prefix` or `table_prefix` gets a unique one added;
5. otherwise the URL is refused with a message saying to use `{test}`.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..backends.memory import MemoryBackend
from ..core.capabilities import Capability
from ..core.errors import ConfigError, MnemostoreError, StoreNotFound, UnsupportedCapability
from ..core.protocol import Backend
from ..core.registry import registry
from ..core.url import StoreURL, mask_password

PLACEHOLDER = "{test}"

PATH_BACKENDS: dict[str, str] = {"sqlite": "store.db", "file": "store", "qdrant": "store", "chroma": "store"}
"""Embedded built-ins whose URL path is a location: the leaf each fresh sub-directory holds."""

PREFIX_OPTIONS = ("prefix", "table_prefix")

THROWAWAY_URLS: dict[str, str] = {"memory": "memory://", "sqlite": "sqlite://", "file": "file://",
                                  "qdrant": "qdrant://", "chroma": "chroma://"}
"""Embedded built-ins that can make a throwaway store under tmp_path (`--mnemostore-all-installed`)."""


@dataclass(frozen=True)
class FreshStore:
    """A per-test URL and the unique token in it (a test's stores are named by it)."""

    url: str
    token: str

    def new_directories(self) -> list[Path]:
        """Local paths this URL names by its token that do not exist yet (the path up to the
        component holding the token, read as absolute and as relative, as `sqlite:///` does):
        whatever appears there during the test was made for it, so the suite removes it."""
        path = StoreURL.parse(self.url).path
        start = path.find(self.token)
        if start < 0:
            return []
        end = path.find("/", start)
        named = path if end < 0 else path[:end]
        return [candidate for candidate in {Path(named), Path(named.lstrip("/"))}
                if str(candidate) not in ("", ".") and not candidate.exists()]


def backend_for(url: str) -> type[Backend]:
    """The installed backend class for `url` (placeholders allowed), or a MnemostoreError."""
    return registry.for_scheme(StoreURL.parse(url.replace(PLACEHOLDER, "x")).scheme)


def declared_capabilities(url: str) -> frozenset[Capability]:
    """What the backend declares for this URL; a backend may narrow it per URL (`capabilities_for`)."""
    return backend_for(url).capabilities_for(StoreURL.parse(url.replace(PLACEHOLDER, "x")))


def fresh_store(url: str, tmp_path: Path, token: str | None = None) -> FreshStore:
    """A URL for an empty store derived from `url` by the rules in this module's docstring."""
    token = token or f"t{uuid.uuid4().hex[:12]}"
    if PLACEHOLDER in url:
        return FreshStore(url.replace(PLACEHOLDER, token), token)
    cls = backend_for(url)
    parsed = StoreURL.parse(url)
    base, sep, query = url.partition("?")
    if issubclass(cls, MemoryBackend):  # the reference backend and variants of it
        name = (parsed.host or "") + parsed.path.strip("/")
        return FreshStore(f"{parsed.scheme}://{name + '-' if name else ''}{token}{sep}{query}", token)
    if cls.name == "qdrant" and parsed.host == "memory":
        name = parsed.path.strip("/")
        return FreshStore(f"{parsed.scheme}://memory/{name + '-' if name else ''}{token}{sep}{query}", token)
    if cls.name in PATH_BACKENDS and parsed.host is None:
        leaf = PATH_BACKENDS[cls.name]
        location = parsed.path[1:] if cls.name == "sqlite" else parsed.path  # sqlite:///relative.db
        if location.strip("/"):
            return FreshStore(f"{base.rstrip('/')}/{token}/{leaf}{sep}{query}", token)
        slashes = "///" if cls.name == "sqlite" else "//"
        return FreshStore(f"{parsed.scheme}:{slashes}{tmp_path / token / leaf}{sep}{query}", token)
    fields = cls.options_model.model_fields
    for option in PREFIX_OPTIONS:
        field = next((f for name, f in fields.items() if (f.alias or name) == option), None)
        if field is not None:
            start = parsed.query.get(option) or ""
            rest = "&".join(item for item in query.split("&") if item and item.split("=", 1)[0] != option)
            return FreshStore(f"{base}?{option}={start}{token}_{'&' + rest if rest else ''}", token)
    raise ConfigError(
        f"cannot make a fresh empty store per test from {parsed.masked}: the {cls.name} backend has no "
        f"location, name or prefix the suite knows how to vary; put {PLACEHOLDER} in the URL where a "
        f"unique name goes, e.g. {parsed.scheme}://host/db_{PLACEHOLDER}")


@contextmanager
def fresh_store_url(url: str, tmp_path: Path) -> Iterator[str]:
    """Yield a fresh store's URL; afterwards remove what was made for it (`remove_store`)."""
    store = fresh_store(url, tmp_path)
    directories = store.new_directories()
    try:
        yield store.url
    finally:
        remove_store(store, directories)


def remove_store(store: FreshStore, directories: list[Path]) -> None:
    """Drop the store (`Backend.drop`; a backend without it leaves it, see docs/writing-a-backend.md),
    then remove the local `directories` named by its token that appeared. A failure is a warning:
    the test's own outcome stands."""
    from ..core.store import drop_store

    try:
        drop_store(store.url)
    except UnsupportedCapability:
        pass
    except MnemostoreError as exc:
        warnings.warn(f"mnemostore conformance: could not drop the store {mask_password(store.url)}: {exc}",
                      stacklevel=1)
    for path in directories:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink(missing_ok=True)


def check_reachable(url: str) -> None:
    """Open the store the suite would make first, creating nothing where the backend can tell
    (`Backend.exists`): a server that is down, or a wrong password, is then one error before the
    run instead of the same failure in every clause. Raises the MnemostoreError that stopped it."""
    from ..core.store import open_backend

    with tempfile.TemporaryDirectory(prefix="mnemostore-check-") as tmp:
        store = fresh_store(url, Path(tmp))
        directories = store.new_directories()
        try:
            open_backend(store.url, create=False).close()
        except StoreNotFound:
            pass  # reachable, and empty: what every clause starts from
        except MnemostoreError as exc:
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (f"the conformance suite did not run: {exc.args[0]}", *exc.args[1:])
            raise
        remove_store(store, directories)  # a backend that cannot tell before opening made one
