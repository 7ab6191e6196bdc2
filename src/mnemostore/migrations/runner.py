"""The runner: status, plan, up, down, stamp, accept and break-lock on one store.

Every change to the ledger happens under the store's migration lock, after re-reading the
ledger, so two runners never apply one migration twice. A layout step and its ledger entry
commit together where the engine allows (`Backend.run_layout`); record steps are batched
and resumable (`records.run_records`) and recorded when complete.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.declarations import KindChange, accept_declaration, kind_changed, pending_changes
from ..core.errors import ChecksumMismatch, MigrationError, MnemostoreError, PendingMigrations, StoreTooNew
from ..core.protocol import PARAMS_KEY
from .kind_layout import apply_kind_step, kind_steps
from .ledger import LEDGER_KEY, Ledger, LedgerEntry
from .locking import LockInfo, MigrationLock, holding
from .model import Direction, KindMigration, LayoutMigration, Migration, RecordMigration, RecordMove
from .plan import Status, compare, known_migrations
from .progress import Progress, Silent
from .records import run_moves, run_records

if TYPE_CHECKING:
    from ..core.protocol import Backend

BASE = "base"
"""`down` target meaning "revert everything"."""


@dataclass(frozen=True)
class Step:
    """One planned action: apply or revert a migration, with the SQL it runs on this store."""

    migration: Migration
    direction: Direction
    sql: tuple[str, ...] = ()

    def describe(self) -> str:
        verb = "apply" if self.direction == "up" else "revert"
        note = "" if self.migration.transactional else " (not transactional)"
        return f"{verb} {self.migration.id} [{self.migration.layer}]{note}"


class Runner:
    """Migrates one open backend. `migrations` adds record (or layout) migrations to the
    backend's own and those plugins contribute through the `mnemostore_add_migrations` hook."""

    def __init__(self, backend: Backend, migrations: Sequence[Migration] = (), *, lock_wait: float = 60.0,
                 progress: Progress | None = None) -> None:
        self.backend = backend
        self.migrations = known_migrations(type(backend), migrations)
        self.lock_wait = lock_wait
        self.progress: Progress = progress or Silent()
        self._lock: MigrationLock | None = None

    @property
    def lock(self) -> MigrationLock:
        if self._lock is None:
            self._lock = self.backend.migration_lock()
        return self._lock

    # reading --------------------------------------------------------------------------
    def status(self) -> Status:
        return compare(self.migrations, Ledger.read(self.backend))

    def lock_holder(self) -> LockInfo | None:
        return self.lock.holder()

    def kind_steps(self) -> list[KindMigration]:
        """The steps that bring the application kinds this store holds to the code's declarations
        (`migrations.kind_layout`); KindChanged if a difference is not a layout change."""
        return kind_steps(self.backend)

    def plan(self, target: str | None = None, direction: Direction = "up") -> list[Step]:
        """What `up(target)` or `down(target)` would do, without doing it (`--dry-run`)."""
        status = self.status()
        self._check_sound(status)
        chosen = self._up_steps(status, target) if direction == "up" else self._applied_after(status, target)
        return [Step(m, direction, tuple(self.backend.layout_sql(m, direction))
                     if isinstance(m, LayoutMigration) else ()) for m in chosen]

    # changing -------------------------------------------------------------------------
    def up(self, target: str | None = None, *, kinds: bool = True) -> list[str]:
        """Apply pending migrations in order (through `target`), then the kind layout steps (unless
        `kinds` is False: what opening a store applies); return the ids applied."""
        with holding(self.lock, self.lock_wait) as info:
            ledger = self._adopt(Ledger.read(self.backend))
            status = compare(self.migrations, ledger)
            self._check_sound(status)
            new = self._is_new(status)
            done: list[str] = []
            chosen = self._up_steps(status, target) if kinds else self._pending_through(status, target)
            for migration in chosen:
                if isinstance(migration, KindMigration):
                    self._run_kind(migration)
                    info = self.lock.refresh(info)
                else:
                    ledger, info = self._run(migration, "up", ledger, info, new)
                done.append(migration.id)
            if not ledger.exists:
                self.backend.write_meta(LEDGER_KEY, ledger.to_json())
            return done

    def down(self, target: str | None = None) -> list[str]:
        """Revert applied migrations, newest first, until `target` is the newest left
        (`"base"`: all of them; None: just the newest); return the ids reverted."""
        with holding(self.lock, self.lock_wait) as info:
            ledger = Ledger.read(self.backend)
            status = compare(self.migrations, ledger)
            self._check_sound(status)
            steps = self._applied_after(status, target)
            done: list[str] = []
            for migration in steps:
                ledger, info = self._run(migration, "down", ledger, info)
                done.append(migration.id)
            return done

    def stamp(self, target: str | None = None) -> list[str]:
        """Record pending migrations (through `target`) as applied without running them:
        for adopting a store whose layout was already brought up to date by other means."""
        with holding(self.lock, self.lock_wait):
            ledger = self._adopt(Ledger.read(self.backend))
            status = compare(self.migrations, ledger)
            self._check_sound(status)
            stamped = self._pending_through(status, target)
            for migration in stamped:
                ledger = ledger.adding(LedgerEntry.of(migration, how="stamped"))
            self.backend.write_meta(LEDGER_KEY, ledger.to_json())
            return [m.id for m in stamped]

    def accept(self, id: str) -> LedgerEntry:
        """Record the current checksum of an applied migration whose content was edited."""
        with holding(self.lock, self.lock_wait):
            ledger = Ledger.read(self.backend)
            entry = ledger.get(id)
            migration = self._known(id)
            if entry is None:
                raise MigrationError(f"migration {id!r} has not been applied to this store; nothing to accept")
            accepted = dataclasses.replace(entry, checksum=migration.checksum,
                                           how=f"{entry.how}; accepted a change (was {entry.checksum[:12]})")
            self.backend.write_meta(LEDGER_KEY, ledger.replacing(accepted).to_json())
            return accepted

    def accept_kind(self, name: str) -> KindChange:
        """Record the code's declaration of an application kind whose stored fields it no longer declares
        (`core.declarations.accept_declaration`): what `accept kind.NAME` does."""
        with holding(self.lock, self.lock_wait):
            return accept_declaration(self.backend, name)

    def break_lock(self) -> LockInfo | None:
        """Free the migration lock whoever holds it; return the holder it had."""
        return self.lock.force_release()

    def ensure_current(self, auto: bool) -> None:
        """On open: nothing to do (the common case, one metadata read), or apply what is
        pending when `auto` or the store is new, or refuse with the command to run."""
        status = self.status()
        self._check_sound(status)
        if status.ledger_exists and not status.pending:
            return
        if auto or self._is_new(status) or not status.pending or self._only_layout_adoption(status):
            self.up(kinds=False)
            return
        status = self._settled_status()
        self._check_sound(status)
        if not status.pending:
            return
        names = ", ".join(m.id for m in status.pending)
        raise PendingMigrations(
            f"this store needs migrations before it can be used: {names}. Apply them with: mnemostore migrate up "
            f"{self.backend.url.masked} (or open the store with migrate='auto')")

    def ensure_kinds_current(self, auto: bool) -> None:
        """On open: the application kinds this process has loaded match what the store recorded (one
        metadata read), or, with `auto`, are brought to it; else KindChanged names the command."""
        changes = pending_changes(self.backend, loaded_only=True)
        if changes and auto and not any(change.refused for change in changes):
            self.up()
        elif changes:
            raise kind_changed(changes, self.backend.url.masked)

    # internals ------------------------------------------------------------------------
    def _up_steps(self, status: Status, target: str | None) -> list[Migration]:
        """What `up(target)` runs: the pending migrations with the kind layout steps before the first
        record migration (one may write a field a kind step adds), through `target` if given."""
        pending = list(status.pending)
        at = next((i for i, migration in enumerate(pending) if migration.layer == "records"), len(pending))
        steps: list[Migration] = [*pending[:at], *self.kind_steps(), *pending[at:]]
        ids = [migration.id for migration in steps]
        if target is None or target in ids:
            return steps if target is None else steps[:ids.index(target) + 1]
        self._known(target)
        return []  # already applied

    def _run_kind(self, step: KindMigration) -> None:
        try:
            apply_kind_step(self.backend, step)
        except MnemostoreError:
            raise
        except Exception as exc:
            raise MigrationError(f"kind migration {step.id!r} failed: {type(exc).__name__}: {exc}; the store "
                                 "keeps its recorded declaration, and the step can run again") from exc

    def _is_new(self, status: Status) -> bool:
        """No ledger and never opened as a store: every open by any mnemostore version writes the
        store's parameters, so a store without them holds nothing (one metadata read)."""
        if status.ledger_exists or self.backend.legacy_layout() is not None:
            return False
        return self.backend.read_meta(PARAMS_KEY) is None

    def _settled_status(self) -> Status:
        """The status once no live runner holds the lock (waiting at most `lock_wait`): a
        concurrent first open half-way through laying the store out is not a pending migration."""
        deadline = time.monotonic() + self.lock_wait
        while (holder := self.lock.holder()) is not None and not holder.expired() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.status()

    def _only_layout_adoption(self, status: Status) -> bool:
        """A pre-ledger store whose layout is complete: adopting it changes nothing."""
        legacy = self.backend.legacy_layout()
        if status.ledger_exists or legacy is None:
            return False
        ids = [m.id for m in self.migrations]
        return legacy in ids and all(ids.index(m.id) <= ids.index(legacy) for m in status.pending)

    def _known(self, id: str) -> Migration:
        for migration in self.migrations:
            if migration.id == id:
                return migration
        raise MigrationError(f"no migration {id!r} is known here; known: {', '.join(m.id for m in self.migrations)}")

    def _check_sound(self, status: Status) -> None:
        if status.too_new:
            names = ", ".join(e.id for e in status.too_new)
            raise StoreTooNew(
                f"this store's layout was migrated by a newer mnemostore ({names}); upgrade mnemostore to use it")
        if status.changed:
            names = ", ".join(m.id for m, _ in status.changed)
            raise ChecksumMismatch(
                f"applied migration(s) changed since they ran: {names}. Restore the original, or if the change is "
                "intended and already reflected in the store, record it with: mnemostore migrate accept URL ID")

    def _adopt(self, ledger: Ledger) -> Ledger:
        """A store from before the ledger: record the layout it already has as adopted."""
        if ledger.exists:
            return ledger
        legacy = self.backend.legacy_layout()
        if legacy is None:
            return ledger
        adopted = Ledger()
        for migration in self.migrations:
            if not isinstance(migration, LayoutMigration):
                continue
            adopted = adopted.adding(LedgerEntry.of(migration, how="adopted"))
            if migration.id == legacy:
                break
        else:
            raise MigrationError(f"this store's layout ({legacy}) is not in this backend's history")
        self.backend.write_meta(LEDGER_KEY, adopted.to_json())
        return adopted

    def _pending_through(self, status: Status, target: str | None) -> list[Migration]:
        pending = list(status.pending)
        if target is None:
            return pending
        self._known(target)
        ids = [m.id for m in pending]
        if target not in ids:
            return []  # already applied
        return pending[: ids.index(target) + 1]

    def _applied_after(self, status: Status, target: str | None) -> list[Migration]:
        applied = [e.id for e in status.applied]
        if target is None:
            chosen = applied[-1:]
        elif target == BASE:
            chosen = applied
        else:
            if target not in applied:
                raise MigrationError(f"migration {target!r} is not applied to this store; applied: "
                                     f"{', '.join(applied) or 'none'}")
            chosen = applied[applied.index(target) + 1:]
        steps = [self._known(id) for id in reversed(chosen)]
        fixed = [m.id for m in steps if not m.reversible]
        if fixed:
            raise MigrationError(f"cannot revert {', '.join(fixed)}: not reversible (no down step)")
        return steps

    def _run(self, migration: Migration, direction: Direction, ledger: Ledger,
             info: LockInfo, new_store: bool = False) -> tuple[Ledger, LockInfo]:
        """Apply or revert one layout or record migration and record it; a record migration that new
        stores do not need (`RecordStep.new_stores`) is only recorded on a brand-new store."""
        after = ledger.adding(LedgerEntry.of(migration)) if direction == "up" else ledger.removing(migration.id)
        if isinstance(migration, LayoutMigration):
            try:
                self.backend.run_layout(migration, direction, after.to_json())
            except MigrationError:
                raise
            except Exception as exc:
                raise MigrationError(f"layout migration {migration.id!r} failed ({direction}): "
                                     f"{type(exc).__name__}: {exc}") from exc
        else:
            assert isinstance(migration, RecordMigration | RecordMove)
            holder = [info]

            def keep_alive() -> None:
                holder[0] = self.lock.refresh(holder[0])

            if new_store and not migration.new_stores:
                pass
            elif isinstance(migration, RecordMove):
                run_moves(self.backend, migration, direction, keep_alive, self.progress)
            else:
                run_records(self.backend, migration, direction, keep_alive, self.progress)
            info = holder[0]
            self.backend.write_meta(LEDGER_KEY, after.to_json())
        return after, self.lock.refresh(info)


def migrate_on_open(backend: Backend, migrations: Sequence[Migration], auto: bool | None) -> None:
    """What `mnemostore.open` does: bring the store up to date, or refuse (see `ensure_current`).
    A kind's grown declaration is applied only when asked (`migrate="auto"`), never by default."""
    runner = Runner(backend, migrations)
    runner.ensure_current(type(backend).auto_migrate if auto is None else auto)
    runner.ensure_kinds_current(auto is True)

