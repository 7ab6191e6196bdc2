"""Kind layout steps: an application kind a store holds, grown to the code's declaration.

The runner plans one step per kind whose recorded declaration (`core.declarations`) differs from
the code's by what a layout change can give (filterable fields, indexes, bytes fields added); a
field removed or retyped is refused (`KindChanged`): that is a record migration the application
writes. A step runs `Backend.evolve_kind`, then records the new declaration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.declarations import (
    KindChange,
    backfill_value,
    kind_changed,
    pending_changes,
    stored_declarations,
    write_declarations,
)
from ..core.kinds import record_type
from .model import KindMigration
from .streams import batches

if TYPE_CHECKING:
    from ..core.protocol import Backend

BATCH_SIZE = 500


def kind_steps(backend: Backend, loaded_only: bool = False) -> list[KindMigration]:
    """The steps that bring the kinds a store holds to the code's declarations; KindChanged if a
    difference is not a layout change."""
    changes = pending_changes(backend, loaded_only)
    refused = [change for change in changes if change.refused]
    if refused:
        raise kind_changed(refused, backend.url.masked)
    return [KindMigration(change.id, description=f"kind {change.kind}: {change.describe()}", change=change)
            for change in changes]


def apply_kind_step(backend: Backend, step: KindMigration) -> None:
    """Run one step (the caller holds the store's migration lock), then record the new declaration."""
    change = step.change
    assert change is not None
    backend.evolve_kind(change)
    declarations = stored_declarations(backend)
    declarations[change.kind] = change.declared
    write_declarations(backend, declarations)


def rewrite_records(backend: Backend, change: KindChange) -> None:
    """`Backend.evolve_kind`'s default: every record of the kind put again as the code now declares
    it, so a store that keeps filterable values beside the document (a payload, a metadata map)
    holds the new fields' values (from the stored document, else the field's default)."""
    if not change.added:
        return
    cls = record_type(change.kind)
    for _tenant, page in batches(backend, change.kind, BATCH_SIZE):
        for record in page:
            for name in change.added:
                backfill_value(cls, name, record.__dict__, record.id)
        backend.put(change.kind, page)
