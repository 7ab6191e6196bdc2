"""ALMA 0.7's workflow kinds: how a run of a workflow went, and the artifacts it produced.

Declared as an application declares a kind (a `Record` subclass and `register_kind`); importing
this module registers them. The tenant, agent and project are the fields every kind shares
(`tenant_id`, `agent`, `project_id`); embed a `WorkflowOutcome`'s summary to find runs like one.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field

from mnemostore import Record, register_kind

from .values import Checksum, Count, Name, Seconds, Uri, one_of

RESULTS = ("success", "failure", "partial", "cancelled", "timeout")
ARTIFACT_TYPES = ("file", "screenshot", "log", "report", "code", "data", "other")


@register_kind
class WorkflowOutcome(Record):
    """One run of a workflow: its result, what was tried, what worked and failed, what was learned."""

    kind: ClassVar[str] = "workflow_outcome"
    filterable: ClassVar[dict[str, type]] = {
        "workflow_id": str, "run_id": str, "result": str, "duration_seconds": float, "node_count": int,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset({"node_count"})
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("workflow_id", "created_at"), ("run_id",))

    workflow_id: Name
    run_id: Name
    result: Annotated[str, AfterValidator(one_of(*RESULTS))]
    summary: str = ""
    strategies_used: list[str] = Field(default_factory=list)
    successful_patterns: list[str] = Field(default_factory=list)
    failed_patterns: list[str] = Field(default_factory=list)
    extracted_heuristic_ids: list[str] = Field(default_factory=list)
    """Heuristics learned from this run (ids in the store's `heuristic` kind)."""
    extracted_anti_pattern_ids: list[str] = Field(default_factory=list)
    duration_seconds: Seconds | None = None
    node_count: Count = 0
    """Nodes the run executed; `update(id, inc={"node_count": 1})` as it goes."""
    error_message: str | None = None

    def embedding_text(self) -> str | None:
        """Re-embedding recomputes an outcome's vector from its summary."""
        return self.summary or None


@register_kind
class ArtifactRef(Record):
    """Where an artifact a run produced lives (by URI), what it is, and how to check it is intact."""

    kind: ClassVar[str] = "artifact_ref"
    filterable: ClassVar[dict[str, type]] = {
        "run_id": str, "node_id": str, "artifact_type": str, "uri": str, "size_bytes": int, "checksum": str,
    }
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("run_id", "node_id"),)

    run_id: Name
    node_id: str | None = None
    artifact_type: Annotated[str, AfterValidator(one_of(*ARTIFACT_TYPES))] = "other"
    uri: Uri
    size_bytes: Count | None = None
    checksum: Checksum | None = None
    """`algorithm:hexdigest`, e.g. `sha256:` and 64 hex digits (stored lowercase)."""
    mime_type: str | None = None


KINDS: tuple[type[Record], ...] = (WorkflowOutcome, ArtifactRef)
