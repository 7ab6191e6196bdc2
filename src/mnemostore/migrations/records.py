"""Record migrations: run a change over every record of some kinds, on any backend.

Work goes kind by kind, tenant by tenant, in id order and in batches; after each batch the
position is saved in the store's metadata, so an interrupted run resumes after the last
finished batch. Timestamps are left as they were unless the change sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError as PydanticValidationError

from ..core.errors import MigrationError, MnemostoreError, ValidationError
from ..core.filters import F
from ..core.records import KINDS, Record, convert_validation_error
from .ledger import PROGRESS_KEY
from .model import Direction, RecordChange, RecordMigration, RecordMove, describe_step
from .progress import Progress
from .streams import Position, batches, chosen_kinds, kind_count

if TYPE_CHECKING:
    from ..core.protocol import Backend


def changed_record(record: Record, changes: Mapping[str, Any]) -> Record:
    """`record` with `changes` applied, validated like any record written to a store."""
    cls = type(record)
    unknown = [name for name in changes if name not in cls.model_fields or name in ("id", "tenant_id")]
    if unknown:
        raise ValidationError.one(unknown[0], "is not a field a record migration can change")
    try:
        changed: Record = cls.model_validate({**record.__dict__, **changes})
    except PydanticValidationError as exc:
        raise convert_validation_error(exc) from None
    return changed


def brought_up_to_date(record: Record) -> Record:
    """`record` as mnemostore's own record migrations leave a stored one (`plan.library_migrations`):
    for records from an older store that enter a current one without being stored first (an archive).
    Moves to another kind (`RecordMove`) are not made here: the record keeps its kind."""
    from .plan import library_migrations

    for migration in library_migrations():
        if isinstance(migration, RecordMigration) and record.kind in migration.kinds:
            changes = migration.function("up")(record)
            if changes:
                record = changed_record(record, changes)
    return record


def run_records(backend: Backend, migration: RecordMigration, direction: Direction,
                keep_alive: Callable[[], None], progress: Progress) -> int:
    """Apply (or revert) `migration` to every record it covers; return how many changed."""
    function = migration.function(direction)
    positions, start = _saved_position(backend, migration.id, direction)
    if start is not None and start.kind not in migration.kinds:
        start = None  # the migration's kinds were edited since: start again (its change is idempotent)
    changed_count = 0
    for kind in chosen_kinds(migration.kinds):
        if start is not None and start.finished(kind):
            continue
        progress.begin(f"{migration.id} {kind}", kind_count(backend, kind))
        for tenant, page in batches(backend, kind, migration.batch_size, start):
            replaced = [record for record in (_apply(migration, function, r) for r in page) if record is not None]
            if replaced:
                backend.put(kind, replaced)
            changed_count += len(replaced)
            _page_done(backend, positions, migration.id, Position(kind, tenant, page[-1].id), direction)
            keep_alive()
            progress.advance(len(page))
        progress.end()
    _run_done(backend, positions, migration.id)
    return changed_count


def run_moves(backend: Backend, migration: RecordMove, direction: Direction,
              keep_alive: Callable[[], None], progress: Progress) -> int:
    """Move the records `migration` moves (or back); return how many moved. Each batch is put into the
    other kind (leaving a record an interrupted run put there already, or one an earlier record moved to
    the same id), then deleted from its own by the ids it had there; the position after it is saved, so
    a run resumes there. The target kind is registered for the run only, and its declaration recorded
    before its first record (the caller holds the migration lock)."""
    from ..core.declarations import record_declaration
    from ..core.kinds import kinds, register_kind

    function = migration.function(direction)
    known = kinds.applications()  # before the import: importing a kind's module may register it
    target_cls = migration.target_class()
    registered = target_cls.kind in known
    register_kind(target_cls)
    source, target = (migration.source, target_cls.kind) if direction == "up" else (target_cls.kind, migration.source)
    moved_count = 0
    try:
        positions, start = _saved_position(backend, migration.id, direction)
        progress.begin(f"{migration.id} {source}", kind_count(backend, source))
        declared = direction == "down"
        for tenant, page in batches(backend, source, migration.batch_size, start):
            sources: list[str] = []
            moved: dict[str, Record] = {}  # by the id in the other kind: the first of a batch kept, as put_missing
            for record in page:
                found = _moved(migration, function, record)
                if found is not None:
                    sources.append(record.id)
                    moved.setdefault(found.id, found)
            if moved:
                declared = declared or record_declaration(backend, target_cls)
                backend.put_missing(target, list(moved.values()))
                backend.delete(source, tenant, F.id.in_(sources))  # by their own ids: a move may give another
            moved_count += len(sources)
            _page_done(backend, positions, migration.id, Position(source, tenant, page[-1].id), direction)
            keep_alive()
            progress.advance(len(page))
        progress.end()
    finally:
        if not registered:
            kinds.unregister(target_cls.kind)
    _run_done(backend, positions, migration.id)
    return moved_count


def _saved_position(backend: Backend, migration_id: str,
                    direction: Direction) -> tuple[dict[str, Any], Position | None]:
    """Every migration's saved position (the store's metadata), and where this one's run resumes."""
    positions = dict(backend.read_meta(PROGRESS_KEY) or {})
    saved = positions.get(migration_id)
    start = Position.from_json(saved) if isinstance(saved, dict) and saved.get("direction") == direction else None
    return positions, start


def _page_done(backend: Backend, positions: dict[str, Any], migration_id: str, position: Position,
               direction: Direction) -> None:
    """Save the position after a finished page: a run resumes after it."""
    positions[migration_id] = {**position.to_json(), "direction": direction}
    backend.write_meta(PROGRESS_KEY, positions)


def _run_done(backend: Backend, positions: dict[str, Any], migration_id: str) -> None:
    """Forget a finished run's position."""
    positions.pop(migration_id, None)
    backend.write_meta(PROGRESS_KEY, positions or None)


def _moved(migration: RecordMove, function: Callable[[Record], Record | None], record: Record) -> Record | None:
    try:
        return function(record)
    except MnemostoreError:
        raise
    except Exception as exc:
        raise MigrationError(f"record move {migration.id!r} on {record.kind} {record.id!r} failed: "
                             f"{type(exc).__name__}: {exc}; fix it and run `migrate up` again: it resumes after "
                             "the last finished batch") from exc


def _apply(migration: RecordMigration, function: RecordChange, record: Record) -> Record | None:
    where = f"record migration {migration.id!r} on {record.kind} {record.id!r}"
    try:
        changes = function(record)
    except MnemostoreError:
        raise
    except Exception as exc:
        raise MigrationError(f"{where} failed: {type(exc).__name__}: {exc}; fix it and run `migrate up` "
                             "again: it resumes after the last finished batch") from exc
    if not changes:
        return None
    try:
        return changed_record(record, changes)
    except ValidationError as exc:
        raise MigrationError(f"{where} produced an invalid record: {exc}") from None


def add_metadata_default(id: str, key: str, value: Any, *, kinds: Sequence[str] = KINDS,
                         after: Sequence[str] = ()) -> RecordMigration:
    """Give every record without metadata `key` the value `value` (reverting removes it)."""

    def change(record: Record) -> dict[str, Any] | None:
        return None if key in record.metadata else {"metadata": {**record.metadata, key: value}}

    def revert(record: Record) -> dict[str, Any] | None:
        if record.metadata.get(key, _MISSING) != value:
            return None
        return {"metadata": {k: v for k, v in record.metadata.items() if k != key}}

    return RecordMigration(id, after=tuple(after), kinds=tuple(kinds), change=change, revert=revert,
                           parameters=("add_metadata_default", key, value),
                           description=f"metadata[{key!r}] defaults to {value!r}")


def rename_metadata_key(id: str, old: str, new: str, *, kinds: Sequence[str] = KINDS,
                        after: Sequence[str] = ()) -> RecordMigration:
    """Move metadata key `old` to `new` wherever `new` is not already set (reversible)."""

    def move(source: str, target: str) -> RecordChange:
        def change(record: Record) -> dict[str, Any] | None:
            if source not in record.metadata or target in record.metadata:
                return None
            metadata = {k: v for k, v in record.metadata.items() if k != source}
            return {"metadata": {**metadata, target: record.metadata[source]}}
        return change

    return RecordMigration(id, after=tuple(after), kinds=tuple(kinds), change=move(old, new), revert=move(new, old),
                           parameters=("rename_metadata_key", old, new),
                           description=f"metadata key {old!r} renamed to {new!r}")


def recompute(id: str, field: str, function: Callable[[Record], Any], *, kinds: Sequence[str] = KINDS,
              after: Sequence[str] = ()) -> RecordMigration:
    """Set `field` to `function(record)` on every record (metadata keys as `metadata.KEY`).

    `function` must depend only on fields other than the one it sets, so re-running it is
    harmless; its source is part of the checksum.
    """
    metadata_key = field.removeprefix("metadata.") if field.startswith("metadata.") else None

    def change(record: Record) -> dict[str, Any] | None:
        value = function(record)
        if metadata_key is not None:
            if record.metadata.get(metadata_key, _MISSING) == value:
                return None
            return {"metadata": {**record.metadata, metadata_key: value}}
        return None if getattr(record, field) == value else {field: value}

    return RecordMigration(id, after=tuple(after), kinds=tuple(kinds), change=change,
                           parameters=("recompute", field, describe_step(function)),
                           description=f"{field} recomputed")


_MISSING = object()
