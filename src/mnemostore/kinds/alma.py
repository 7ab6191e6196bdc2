"""The other kinds ALMA stores that the five built-in ones do not cover: users' preferences, facts
about a domain, and the handoff one session leaves the next.

Declared as an application declares a kind; importing this module registers them. The agent and
project are the fields every kind shares (`agent`, `project_id`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar

from pydantic import AfterValidator, AwareDatetime, Field

from mnemostore import Record, register_kind

from .values import Fraction, Name, one_of

SESSION_OUTCOMES = ("success", "failure", "interrupted")


@register_kind
class UserPreference(Record):
    """Something a user wants (or does not), in a category, and how sure we are of it."""

    kind: ClassVar[str] = "user_preference"
    filterable: ClassVar[dict[str, type]] = {"user_id": str, "category": str, "confidence": float}
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("user_id", "category"),)

    user_id: Name
    category: Name
    preference: Annotated[str, Field(min_length=1)]
    source: str = ""
    """Where it came from: "explicit", "inferred", a conversation id, ..."""
    confidence: Fraction = 1.0

    def embedding_text(self) -> str | None:
        return self.preference


@register_kind
class DomainKnowledge(Record):
    """A fact about a domain an agent works in, where it came from, and when it was last checked."""

    kind: ClassVar[str] = "domain_knowledge"
    filterable: ClassVar[dict[str, type]] = {"domain": str, "confidence": float, "last_verified": datetime}
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("domain",),)

    domain: Name
    fact: Annotated[str, Field(min_length=1)]
    source: str = ""
    confidence: Fraction = 1.0
    last_verified: AwareDatetime | None = None

    def embedding_text(self) -> str | None:
        return self.fact


@register_kind
class SessionHandoff(Record):
    """What a session leaves the next one: where it stopped, what it decided, what blocks, what is next."""

    kind: ClassVar[str] = "session_handoff"
    filterable: ClassVar[dict[str, type]] = {"session_id": str, "last_outcome": str}
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("session_id",),)

    session_id: Name
    last_action: str = ""
    last_outcome: Annotated[str, AfterValidator(one_of(*SESSION_OUTCOMES))] = "success"
    current_goal: str = ""
    key_decisions: list[str] = Field(default_factory=list)
    blockers: list[str] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)

    def embedding_text(self) -> str | None:
        return self.current_goal or None


KINDS: tuple[type[Record], ...] = (UserPreference, DomainKnowledge, SessionHandoff)
