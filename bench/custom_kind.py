"""A kind declared as an application declares one, with the built-in heuristic's fields, filters,
counters and indexes: the put and search rows time it beside `heuristic` on equal records, so the
ratio is what the generic kind path costs against the built-in one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import AwareDatetime, Field

import mnemostore

Count = Annotated[int, Field(ge=0)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0)]


@mnemostore.register_kind
class Lesson(mnemostore.Record):
    """`Heuristic`'s shape, declared with plain annotations (an application's kind)."""

    kind: ClassVar[str] = "lesson"
    filterable: ClassVar[dict[str, type]] = {
        "condition": str, "strategy": str, "confidence": float, "occurrence_count": int, "success_count": int,
        "last_validated": datetime,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset({"occurrence_count", "success_count"})
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("agent",),)

    condition: str
    strategy: str
    confidence: Confidence = 0.5
    occurrence_count: Count = 0
    success_count: Count = 0
    last_validated: AwareDatetime | None = None
    prior_confidence: Confidence | None = None


def lessons(dicts: list[dict[str, Any]]) -> list[Lesson]:
    """The same records as `Heuristic(**d)` would be, as lessons (same ids: a store keeps kinds apart)."""
    return [Lesson(**d) for d in dicts]
