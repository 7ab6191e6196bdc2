"""The suite's own record kind: declared and registered as an application's kind is, so each backend
proves it stores a kind nobody told it about (every filterable type, a counter, an index, bytes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import ClassVar

from pydantic import AwareDatetime, Field

from ..core.kinds import kinds
from ..core.records import Record

SPECIMEN = "suite_specimen"


class Specimen(Record):
    """A record of the suite's kind: a field of each filterable type, and fields kept in the document."""

    kind: ClassVar[str] = SPECIMEN
    filterable: ClassVar[dict[str, type]] = {"label": str, "count": int, "score": float, "flag": bool,
                                             "due": datetime}
    incrementable: ClassVar[frozenset[str]] = frozenset({"count"})
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("label", "count"),)

    label: str
    count: int = 0
    score: float | None = None
    flag: bool = False
    due: AwareDatetime | None = None
    notes: list[str] = Field(default_factory=list)
    seen_at: AwareDatetime | None = None
    """Not filterable: a datetime that lives in the document."""
    blob: bytes | None = None


@contextmanager
def registered() -> Iterator[str]:
    """The specimen kind registered for the block (and forgotten after it: copies and listings
    outside the suite's clauses never see it)."""
    kinds.register(Specimen)
    try:
        yield SPECIMEN
    finally:
        kinds.unregister(SPECIMEN)


class GrownSpecimen(Specimen):
    """The suite's kind as an application grows it: `seen_at` (in the document until now) becomes
    filterable, a new filterable `grade` has a default, and an index covers it (a layout change)."""

    filterable: ClassVar[dict[str, type]] = {**Specimen.filterable, "seen_at": datetime, "grade": int}
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("label", "count"), ("grade",))

    grade: int = 3


@contextmanager
def grown() -> Iterator[type[GrownSpecimen]]:
    """For the block, the suite's kind declared as `GrownSpecimen` (the code of a newer release), then
    `Specimen` again: inside `registered()`."""
    kinds.unregister(SPECIMEN)
    kinds.register(GrownSpecimen)
    try:
        yield GrownSpecimen
    finally:
        kinds.unregister(SPECIMEN)
        kinds.register(Specimen)
