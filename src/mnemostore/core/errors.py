"""The error hierarchy: every error mnemostore raises derives from `MnemostoreError`."""

from __future__ import annotations

from collections.abc import Sequence


class MnemostoreError(Exception):
    """Base class of every error raised by mnemostore."""


class ConfigError(MnemostoreError):
    """A URL, option or config file is wrong; the message says which and how to fix it."""


class UnknownBackend(ConfigError):
    """No installed backend handles the requested URL scheme."""


class BackendNotInstalled(ConfigError):
    """The backend is known but its driver is missing; the message names the extra."""


class PluginLoadError(ConfigError):
    """A plugin's entry point failed to load; the cause is chained."""


class DuplicateBackend(ConfigError):
    """Two plugins claim the same backend name or URL scheme."""


class DuplicateKind(ConfigError):
    """Two classes (registered in code or by packages' entry points) claim the same record kind name."""


class StoreNotFound(ConfigError):
    """A store that was to be read, not created, does not exist (`open(url, create=False)`)."""


class ValidationError(MnemostoreError, ValueError):
    """Input was rejected before anything was written. `errors` lists (field, message)."""

    def __init__(self, errors: Sequence[tuple[str, str]]) -> None:
        self.errors: list[tuple[str, str]] = list(errors)
        lines = [f"{field}: {message}" if field else message for field, message in self.errors]
        super().__init__("; ".join(lines) if len(lines) < 4 else "\n  " + "\n  ".join(lines))

    @classmethod
    def one(cls, field: str, message: str) -> ValidationError:
        return cls([(field, message)])

    def prefixed(self, prefix: str) -> ValidationError:
        """The same errors with `prefix` in front of every field name (e.g. `records[3]`)."""
        return ValidationError(
            [(f"{prefix}.{field}" if field else prefix, message) for field, message in self.errors]
        )


class ReducerError(ValidationError):
    """A checkpoint reducer refused a value; `field`, `reducer` and `node` say where. Nothing was written."""

    def __init__(self, field: str, reducer: str, node: str, problem: str) -> None:
        self.field, self.reducer, self.node = field, reducer, node
        super().__init__([(field, f"reducer {reducer!r} at node {node!r}: {problem}")])


class MergeConflict(MnemostoreError):
    """Branches changed a last-write-wins field to different values since their common ancestor.

    `conflicts` maps each such field to the branches that changed it; nothing was written."""

    def __init__(self, conflicts: dict[str, list[str]], ancestor: str) -> None:
        self.conflicts, self.ancestor = conflicts, ancestor
        self.field, self.branches = next(iter(conflicts.items()))
        lines = [f"field {field!r} changed to different values on {' and '.join(branches)}"
                 for field, branches in conflicts.items()]
        super().__init__("; ".join(lines) + f" since their common ancestor {ancestor!r}: choose a reducer for "
                         "the field (reducers={...}), or default='last' to let the last branch win")


class UnsupportedFilter(MnemostoreError):
    """The backend cannot honour a filter operator; it never silently drops it."""


class UnsupportedCapability(MnemostoreError):
    """An operation needs a capability the backend does not declare."""


class NotFound(MnemostoreError, KeyError):
    """A record that an operation requires does not exist (in this tenant)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class StoreClosed(MnemostoreError):
    """The store was used after `close()`."""


class SchemaMismatch(MnemostoreError):
    """The store's persisted parameters (dimension, metric, …) differ from the configuration."""


class KindChanged(SchemaMismatch):
    """The code declares a kind differently from what its store recorded; the message names the
    kind, the difference, and the command that migrates the store (or why no command can)."""


class BackendError(MnemostoreError):
    """The engine failed in a way mnemostore could not prevent; the driver error is chained."""


class MigrationError(MnemostoreError):
    """A migration could not be planned or applied; the message names the migration and the fix."""


class PendingMigrations(MigrationError):
    """The store needs migrations that opening it was not allowed to apply."""


class StoreTooNew(MigrationError):
    """The store's layout was written by a newer mnemostore than this one."""


class ChecksumMismatch(MigrationError):
    """An applied migration's content changed since it ran; `migrate accept` records the new one."""


class LockHeld(MigrationError):
    """Another runner holds the store's migration lock; the message names the holder."""

