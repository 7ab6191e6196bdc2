"""Which migrations a store knows, in what order, and where its ledger stands against them.

Order comes from explicit dependencies (`after`) and each backend's layout sequence, never
from parsing version strings; ties keep declaration order, layout steps before record steps.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import ConfigError
from .ledger import Ledger, LedgerEntry
from .model import LayoutMigration, Migration


def library_migrations() -> tuple[Migration, ...]:
    """mnemostore's own record migrations: part of every store's history, on every backend."""
    from .langgraph_items import LANGGRAPH_ITEMS_MIGRATION
    from .langgraph_writes import LANGGRAPH_WRITES_MIGRATION
    from .state_hashes import STATE_HASH_MIGRATION

    return (STATE_HASH_MIGRATION, LANGGRAPH_ITEMS_MIGRATION, LANGGRAPH_WRITES_MIGRATION)


def known_migrations(backend_cls: type, extra: Sequence[Migration] = ()) -> list[Migration]:
    """The backend's layout history, mnemostore's record migrations, plugins' migrations for the
    backend, and `extra`, in run order."""
    from ..core.registry import registry

    layout = list(getattr(backend_cls, "layout_migrations", ()))
    name = getattr(backend_cls, "name", "")
    found: list[Migration] = []
    for migration in [*library_migrations(), *registry.plugin_migrations(), *extra]:
        if not isinstance(migration, Migration):
            raise ConfigError(f"not a migration: {migration!r} (use LayoutMigration, RecordMigration or RecordMove)")
        if isinstance(migration, LayoutMigration) and migration.backend != name:
            continue  # another backend's layout
        found.append(migration)
    return order(layout, found)


def order(layout: Sequence[LayoutMigration], others: Sequence[Migration]) -> list[Migration]:
    """Topological order: each migration after its `after` ids; a backend's own layout list
    runs in its sequence; ties keep layout first, then declaration order."""
    everything: dict[str, Migration] = {}
    for migration in [*layout, *others]:
        seen = everything.get(migration.id)
        if seen is not None and seen.checksum != migration.checksum:
            raise ConfigError(f"two different migrations share the id {migration.id!r}")
        everything.setdefault(migration.id, migration)
    deps: dict[str, set[str]] = {id: set(m.after) for id, m in everything.items()}
    for previous, current in itertools.pairwise(layout):
        deps[current.id].add(previous.id)
    for id, needed in deps.items():
        missing = needed - everything.keys()
        if missing:
            raise ConfigError(f"migration {id!r} comes after unknown migration(s): {', '.join(sorted(missing))}")
    rank = {id: (0 if m.layer == "layout" else 1, i) for i, (id, m) in enumerate(everything.items())}
    result: list[Migration] = []
    done: set[str] = set()
    while len(result) < len(everything):
        ready = [id for id in everything if id not in done and deps[id] <= done]
        if not ready:
            cycle = sorted(id for id in everything if id not in done)
            raise ConfigError(f"migrations depend on each other in a cycle: {', '.join(cycle)}")
        chosen = min(ready, key=rank.__getitem__)
        done.add(chosen)
        result.append(everything[chosen])
    return result


@dataclass(frozen=True)
class Status:
    """The ledger compared with the migrations this code knows."""

    applied: tuple[LedgerEntry, ...]
    pending: tuple[Migration, ...]
    """Known, not applied, in run order."""
    changed: tuple[tuple[Migration, LedgerEntry], ...]
    """Applied, but the code's content no longer matches the recorded checksum."""
    unknown: tuple[LedgerEntry, ...]
    """Applied, but not known to this code (a newer mnemostore, or an app's record migration)."""
    ledger_exists: bool

    @property
    def too_new(self) -> tuple[LedgerEntry, ...]:
        """Unknown layout steps: the store was laid out by a newer mnemostore."""
        return tuple(entry for entry in self.unknown if entry.layer == "layout")

    @property
    def current(self) -> bool:
        return not self.pending and not self.changed and not self.too_new


def compare(migrations: Sequence[Migration], ledger: Ledger) -> Status:
    known = {m.id: m for m in migrations}
    applied = set(ledger.ids)
    changed = tuple((known[e.id], e) for e in ledger.entries if e.id in known and known[e.id].checksum != e.checksum)
    unknown = tuple(e for e in ledger.entries if e.id not in known)
    pending = tuple(m for m in migrations if m.id not in applied)
    return Status(ledger.entries, pending, changed, unknown, ledger.exists)
