"""Finding backends: entry points, pluggy plugins and in-process registration, all lazy.

Built-in backends register under the entry-point group `mnemostore.backends` exactly as
a third-party plugin does (name = backend name, value = `module:BackendClass`). Nothing
is imported until a backend is asked for, and a plugin that fails to load is reported
by name without hiding the others.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from .errors import BackendNotInstalled, ConfigError, DuplicateBackend, PluginLoadError, UnknownBackend

if TYPE_CHECKING:
    import pluggy

    from .protocol import Backend

BACKEND_GROUP = "mnemostore.backends"
PLUGIN_GROUP = "mnemostore.plugins"


@dataclass
class BackendEntry:
    """One registered backend, loaded on first use."""

    name: str
    source: str
    """Where it came from: `module:Class` of an entry point, a plugin, or "register()"."""
    distribution: str | None = None
    version: str | None = None
    entry_point: EntryPoint | None = field(default=None, repr=False)
    cls: type[Backend] | None = field(default=None, repr=False)
    error: PluginLoadError | DuplicateBackend | None = field(default=None, repr=False)
    group: list[BackendEntry] = field(default_factory=list, repr=False)
    """Every registration of this name when there are several (shared by all of them): then none
    of them loads (DuplicateBackend) and every other backend still does."""

    def load(self) -> type[Backend]:
        """The backend class; a failed import raises PluginLoadError with the cause chained, a name
        registered twice DuplicateBackend naming both claimants."""
        if self.error is not None:
            raise self.error
        if self.cls is not None:
            return self.cls
        assert self.entry_point is not None
        try:
            loaded = self.entry_point.load()
        except Exception as exc:
            self.error = PluginLoadError(
                f"backend plugin {self.name!r} ({self.source}, from distribution "
                f"{self.distribution or 'unknown'}) failed to load: {type(exc).__name__}: {exc}"
            )
            self.error.__cause__ = exc
            raise self.error from exc
        try:
            self.cls = _check_backend_class(loaded, self.source)
        except ConfigError as exc:  # not a Backend, or bad declarations: report it like an import failure
            self.error = PluginLoadError(
                f"backend plugin {self.name!r} ({self.source}, from distribution "
                f"{self.distribution or 'unknown'}) is not usable: {exc}")
            self.error.__cause__ = exc
            raise self.error from exc
        return self.cls

    @property
    def claimants(self) -> list[BackendEntry]:
        """Every registration of this entry's name (just this entry, normally)."""
        return self.group or [self]

    @property
    def status(self) -> str:
        """"ok", "not loaded", "missing driver (pip install ...)", "duplicate name" or the load error."""
        if isinstance(self.error, DuplicateBackend):
            return "duplicate name: " + ", ".join(sorted(e.distribution or e.source for e in self.claimants))
        if self.error is not None:
            return f"error: {self.error.__cause__!r}"
        if self.cls is None:
            return "not loaded"
        missing = missing_driver(self.cls)
        return f"missing driver: {missing}" if missing else "ok"


def _check_backend_class(obj: Any, source: str) -> type[Backend]:
    from .protocol import Backend

    if not (isinstance(obj, type) and issubclass(obj, Backend)):
        raise PluginLoadError(f"{source} is not a mnemostore Backend subclass: {obj!r}")
    for attr in ("name", "schemes"):
        if not getattr(obj, attr, None):
            raise PluginLoadError(f"backend class {source} must set `{attr}`")
    from .capabilities import parse_capabilities

    parse_capabilities(obj.capabilities)  # an unknown capability is an error here
    return obj


def group_entry_points(group: str) -> list[EntryPoint]:
    """The entry points of `group`, each once (a distribution seen twice on sys.path is one)."""
    seen: set[tuple[str, str]] = set()
    found = []
    for ep in entry_points(group=group):
        if (ep.name, ep.value) not in seen:
            seen.add((ep.name, ep.value))
            found.append(ep)
    return found


class Registry:
    """The backends known to this process."""

    def __init__(self) -> None:
        self._entries: dict[str, BackendEntry] | None = None
        self._plugins_loaded = False
        self._plugin_errors: list[PluginLoadError] = []
        self._manager: pluggy.PluginManager | None = None

    # discovery ------------------------------------------------------------------
    def _discover(self) -> dict[str, BackendEntry]:
        if self._entries is None:
            entries: dict[str, BackendEntry] = {}
            for ep in group_entry_points(BACKEND_GROUP):
                dist = ep.dist
                entry = BackendEntry(
                    name=ep.name,
                    source=ep.value,
                    distribution=dist.name if dist else None,
                    version=dist.version if dist else None,
                    entry_point=ep,
                )
                self._add(entries, entry)
            self._entries = entries
        return self._entries

    @staticmethod
    def _add(entries: dict[str, BackendEntry], entry: BackendEntry, strict: bool = False) -> None:
        """Add `entry`; a name already taken marks every claimant (only that name then fails to
        load), or raises at once if `strict` (an explicit `register()`)."""
        existing = entries.get(entry.name)
        if existing is None:
            entries[entry.name] = entry
            return
        group = [*existing.claimants, entry]
        duplicate = DuplicateBackend(
            f"{len(group)} plugins register the backend name {entry.name!r}: "
            + " and ".join(f"{e.source} (distribution {e.distribution or 'unknown'})" for e in group)
            + "; uninstall all but one of them (the other backends are not affected)")
        if strict:
            raise duplicate
        for claimant in group:
            claimant.group = group
            claimant.error = duplicate

    def _load_plugins(self) -> None:
        """Run the pluggy hooks of `mnemostore.plugins` entry points (once)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        manager = self.plugin_manager
        entries = self._discover()
        for ep in entry_points(group=PLUGIN_GROUP):
            dist = ep.dist.name if ep.dist else "unknown"
            try:
                manager.register(ep.load(), name=f"{dist}:{ep.name}")
            except Exception as exc:
                error = PluginLoadError(f"plugin {ep.name!r} ({ep.value}, from {dist}) failed to load: {exc}")
                error.__cause__ = exc
                self._plugin_errors.append(error)
        for result in manager.hook.mnemostore_add_backends():
            for cls in result or ():
                checked = _check_backend_class(cls, f"{cls.__module__}:{cls.__qualname__}")
                self._add(entries, BackendEntry(checked.name, f"plugin hook {checked.__module__}", cls=checked))

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        if self._manager is None:
            import pluggy

            from . import hookspecs

            self._manager = pluggy.PluginManager(hookspecs.PROJECT)
            self._manager.add_hookspecs(hookspecs)
        return self._manager

    # public ---------------------------------------------------------------------
    def register(self, cls: type[Backend], *, replace: bool = False) -> None:
        """Register a backend class in this process (tests, notebooks, embedded plugins)."""
        checked = _check_backend_class(cls, f"{cls.__module__}:{cls.__qualname__}")
        entries = self._discover()
        if replace:
            entries.pop(checked.name, None)
        self._add(entries, BackendEntry(checked.name, "register()", cls=checked), strict=True)

    def unregister(self, name: str) -> None:
        self._discover().pop(name, None)

    def entries(self) -> list[BackendEntry]:
        """Every known backend (each claimant of a contested name too), loading each to learn its
        capabilities; errors are kept."""
        self._load_plugins()
        listed = [claimant for entry in self._discover().values() for claimant in entry.claimants]
        for entry in listed:
            with contextlib.suppress(PluginLoadError, DuplicateBackend):
                entry.load()
        return sorted(listed, key=lambda e: e.name)

    def plugin_migrations(self) -> list[Any]:
        """Migrations contributed by plugins through the `mnemostore_add_migrations` hook."""
        self._load_plugins()
        return [migration for result in self.plugin_manager.hook.mnemostore_add_migrations()
                for migration in result or ()]

    @property
    def plugin_errors(self) -> list[PluginLoadError]:
        return list(self._plugin_errors)

    def get(self, name: str) -> type[Backend]:
        entries = self._discover()
        if name not in entries:
            self._load_plugins()
        if name not in entries:
            raise UnknownBackend(f"no backend named {name!r}; installed: {self._names()}")
        return entries[name].load()

    def for_scheme(self, scheme: str) -> type[Backend]:
        """The backend whose `schemes` include `scheme`, trying the likely entry first."""
        entries = self._discover()
        base = scheme.split("+", 1)[0]
        candidate = entries.get(base)
        if candidate is not None:
            cls = candidate.load()
            if scheme in cls.schemes:
                return cls
        self._load_plugins()
        failures: list[PluginLoadError | DuplicateBackend] = []
        for entry in list(entries.values()):
            try:
                cls = entry.load()
            except (PluginLoadError, DuplicateBackend) as exc:
                failures.append(exc)
                continue
            if scheme in cls.schemes:
                return cls
        hint = ""
        if failures:
            hint = "; some plugins failed to load: " + "; ".join(str(f) for f in failures)
        raise UnknownBackend(
            f"no installed backend handles the URL scheme {scheme!r}; installed schemes: "
            f"{self._schemes()}{hint}"
        )

    def _names(self) -> str:
        return ", ".join(sorted(self._discover())) or "none"

    def _schemes(self) -> str:
        schemes: list[str] = []
        for entry in self._discover().values():
            try:
                schemes.extend(entry.load().schemes)
            except (PluginLoadError, DuplicateBackend):
                continue
        return ", ".join(sorted(schemes)) or "none"


def missing_driver(cls: type[Backend]) -> str | None:
    """A message naming the missing driver and the extra to install, or None."""
    missing = [module for module in cls.requires if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    extra = f'pip install "mnemostore[{cls.extra}]"' if cls.extra else f"pip install {' '.join(missing)}"
    return f"the {cls.name} backend needs {', '.join(missing)}; install it with: {extra}"


def ensure_driver(cls: type[Backend]) -> None:
    message = missing_driver(cls)
    if message:
        raise BackendNotInstalled(message)


registry = Registry()
"""The process-wide registry."""
