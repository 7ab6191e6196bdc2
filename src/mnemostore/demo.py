"""The `mnemostore demo`: a small coding agent's memory, written and recalled through the facade.

Ids are stable (`mnemostore-demo:<kind>:<slug>`), so re-running the demo replaces its own
records instead of piling up copies in the user's store, and prints the same answers every
time. Text is embedded with `HashingEmbedder`: deterministic, no model download.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import BaseModel

from .core.capabilities import VECTOR_METRICS, Capability
from .core.errors import SchemaMismatch
from .core.filters import F
from .core.records import KINDS, AntiPattern, Checkpoint, Heuristic, Outcome
from .core.reducers import Reducer, declared_reducers

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .core.store import Store
    from .kinds.workflow import WorkflowOutcome

DEMO_DIMENSION = 128
"""The demo's embedding dimension, the same on every run (a store holds one dimension)."""
PROJECT = "mnemostore-demo"
RUN_ID = f"{PROJECT}:run:fix-flaky-test"
QUERY = "the CI test suite fails intermittently"

_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbedder:
    """Text to a unit vector by hashing character n-grams and words into `dimension` buckets.

    Texts that share many n-grams score a high cosine similarity: enough to show recall
    without a model. blake2b (not `hash()`) keeps vectors identical across processes.
    """

    def __init__(self, dimension: int = DEMO_DIMENSION, n: int = 3) -> None:
        if dimension < 8 or n < 1:
            raise ValueError("dimension must be >= 8 and n >= 1")
        self.dimension = dimension
        self.n = n

    def features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        grams = [f"w:{word}" for word in words]
        for word in words:
            padded = f" {word} "
            grams.extend(padded[i:i + self.n] for i in range(max(1, len(padded) - self.n + 1)))
        return grams

    def __call__(self, text: str) -> npt.NDArray[np.float32]:
        import numpy as np

        vector = np.zeros(self.dimension, dtype=np.float32)
        for gram in self.features(text):
            digest = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
            vector[digest % self.dimension] += 1.0 if (digest >> 63) & 1 else -1.0
        norm = float(np.linalg.norm(vector))
        return vector / np.float32(norm) if norm else vector


class RunState(BaseModel):
    """The state an agent run checkpoints; restored into this class by `checkpoints.restore`."""

    task: str
    step: Annotated[str, Reducer("last")]
    files_changed: Annotated[list[str], Reducer("union")] = []
    notes: Annotated[list[str], Reducer("append")] = []
    tests_passed: Annotated[int, Reducer("max")] = 0


@dataclass(frozen=True)
class Reinforced:
    heuristic: Heuristic
    confidence_before: float


@dataclass(frozen=True)
class DemoReport:
    """What the demo wrote and found, for the CLI to print (or a test to check)."""

    url: str
    written: dict[str, int]
    counts: dict[str, int]
    coder_successes: int
    coder_attempts: int
    query: str
    heuristic_hits: list[tuple[Heuristic, float]]
    heuristic_filter: str
    anti_pattern_hits: list[tuple[AntiPattern, float]]
    anti_pattern_filter: str
    workflow_hits: list[tuple[WorkflowOutcome, float]]
    workflow_filter: str
    search_skipped: str | None
    reinforced: Reinforced
    seen: AntiPattern
    history: list[Checkpoint]
    lineage: list[Checkpoint]
    ancestor: Checkpoint | None
    restored: RunState | None


def _id(kind: str, slug: str) -> str:
    return f"{PROJECT}:{kind}:{slug}"


_OUTCOMES: list[dict[str, Any]] = [
    {"slug": "flaky-1", "agent": "coder", "task_type": "bugfix", "success": False, "duration_ms": 412_000,
     "task_description": "Fix test_upload, which fails one CI run in five",
     "strategy_used": "added a retry decorator", "error_message": "still failed on the third CI run"},
    {"slug": "flaky-2", "agent": "coder", "task_type": "bugfix", "success": True, "duration_ms": 655_000,
     "task_description": "Fix test_upload, which fails one CI run in five",
     "strategy_used": "reran with a fixed seed and found a shared temp dir"},
    {"slug": "index-1", "agent": "coder", "task_type": "performance", "success": True, "duration_ms": 230_000,
     "task_description": "Speed up the /search endpoint", "strategy_used": "index on the filtered column"},
    {"slug": "upgrade-1", "agent": "coder", "task_type": "maintenance", "success": True, "duration_ms": 98_000,
     "task_description": "Upgrade the HTTP client library", "strategy_used": "read the changelog first"},
    {"slug": "review-1", "agent": "reviewer", "task_type": "review", "success": True, "duration_ms": 61_000,
     "task_description": "Review the flaky-test fix", "strategy_used": "asked for the failing seed",
     "user_feedback": "good catch"},
]

_HEURISTICS: list[dict[str, Any]] = [
    {"slug": "flaky-seed", "agent": "coder", "confidence": 0.75, "occurrence_count": 4, "success_count": 3,
     "condition": "a test fails intermittently on CI but passes locally",
     "strategy": "rerun it in a loop with a fixed random seed to expose the order dependence"},
    {"slug": "import-extras", "agent": "coder", "confidence": 0.6, "occurrence_count": 5, "success_count": 3,
     "condition": "an import error right after adding a dependency",
     "strategy": "reinstall the package in editable mode and check which extra provides it"},
    {"slug": "slow-query", "agent": "coder", "confidence": 0.9, "occurrence_count": 10, "success_count": 9,
     "condition": "a slow database query in a request handler",
     "strategy": "add an index on the filtered column and compare the query plans"},
    {"slug": "upgrade-pin", "agent": "coder", "confidence": 0.7, "occurrence_count": 3, "success_count": 2,
     "condition": "the suite fails after upgrading a library",
     "strategy": "read the changelog and pin the old version while fixing call sites"},
    {"slug": "review-flaky", "agent": "reviewer", "confidence": 0.8, "occurrence_count": 5, "success_count": 4,
     "condition": "a fix for a test that fails intermittently on CI is up for review",
     "strategy": "ask for the failing seed and the CI log before approving"},
    {"slug": "plan-repro", "agent": "planner", "confidence": 0.85, "occurrence_count": 7, "success_count": 6,
     "condition": "the task mentions intermittent CI failures",
     "strategy": "schedule a reproduction step before any fix"},
]

_ANTI_PATTERNS: list[dict[str, Any]] = [
    {"slug": "retry-decorator", "agent": "coder",
     "pattern": "retrying a test that fails intermittently until CI passes",
     "why_bad": "hides the race instead of fixing it; the failure comes back in production",
     "better_alternative": "find the shared state with a fixed seed and isolate it"},
    {"slug": "sleep", "agent": "coder", "pattern": "adding sleep calls to make a test pass",
     "why_bad": "slows the suite and still fails on a loaded CI runner",
     "better_alternative": "wait on the condition itself, with a timeout"},
    {"slug": "skip-ci", "agent": "reviewer", "pattern": "approving a change whose CI run was skipped",
     "why_bad": "nothing checked it", "better_alternative": "require a green run on the final commit"},
]


WORKFLOW = "fix-flaky-test"
_WORKFLOW_OUTCOMES: list[dict[str, Any]] = [
    {"slug": "first-try", "workflow_id": WORKFLOW, "run_id": f"{PROJECT}:run:first-try", "result": "failure",
     "duration_seconds": 412.0, "node_count": 3, "strategies_used": ["retry decorator"],
     "summary": "retried the intermittently failing CI test until it passed; it failed again the next day"},
    {"slug": "fixed", "workflow_id": WORKFLOW, "run_id": RUN_ID, "result": "success", "duration_seconds": 655.0,
     "node_count": 5, "strategies_used": ["fixed seed", "isolated temp dir"],
     "summary": "reproduced the intermittent CI failure with a fixed seed and isolated the temp dir per test"},
    {"slug": "search-index", "workflow_id": "speed-up-search", "run_id": f"{PROJECT}:run:search-index",
     "result": "success", "duration_seconds": 230.0, "node_count": 4, "strategies_used": ["index"],
     "summary": "added an index on the filtered column; the CI suite still passes"},
]


def run(store: Store, embed: HashingEmbedder | None = None) -> DemoReport:
    """Write the demo agent's memory into `store`, then recall from it."""
    embed = embed or HashingEmbedder()
    stored_dimension = store.params.dimension
    if stored_dimension is not None and stored_dimension != embed.dimension:
        raise SchemaMismatch(
            f"the store at {store.backend.url.masked} holds {stored_dimension}-dimensional embeddings, but the "
            f"demo embeds text in {embed.dimension} dimensions; run the demo on a store of its own, "
            "e.g. mnemostore demo --url sqlite:///mnemostore-demo.db")
    written = _write(store, embed)

    coder_attempts = store.outcomes.count({"project_id": PROJECT, "agent": "coder"})
    coder_successes = store.outcomes.count({"project_id": PROJECT, "agent": "coder", "success": True})

    heuristic_where = (F.project_id == PROJECT) & (F.agent == "coder")
    anti_where = {"project_id": PROJECT, "agent": {"$in": ["coder", "reviewer"]}}
    workflow_where = F.workflow_id == WORKFLOW
    heuristic_hits: list[tuple[Heuristic, float]] = []
    anti_hits: list[tuple[AntiPattern, float]] = []
    workflow_hits: list[tuple[WorkflowOutcome, float]] = []
    skipped = _search_unsupported(store)
    if skipped is None:
        query = embed(QUERY)
        heuristic_hits = [(cast(Heuristic, hit.record), hit.score)
                          for hit in store.heuristics.search(query, k=3, where=heuristic_where, vectors=False)]
        anti_hits = [(cast(AntiPattern, hit.record), hit.score)
                     for hit in store.anti_patterns.search(query, k=2, where=anti_where, vectors=False)]
        workflow_hits = [(cast("WorkflowOutcome", hit.record), hit.score)
                         for hit in store.search("workflow_outcome", query, 2, where=workflow_where, vectors=False)]

    target = _id("heuristic", "flaky-seed")
    before = store.heuristics[target].confidence
    reinforced = Reinforced(store.heuristics.reinforce(target, success=True), before)
    seen = store.anti_patterns.seen(_id("anti_pattern", "retry-decorator"))

    merged = _checkpoints(store)
    return DemoReport(
        url=store.backend.url.masked,
        written=written,
        counts={kind: store.collection(kind).count({"project_id": PROJECT}) for kind in (*KINDS, "workflow_outcome")},
        coder_successes=coder_successes,
        coder_attempts=coder_attempts,
        query=QUERY,
        heuristic_hits=heuristic_hits,
        heuristic_filter=f"(F.project_id == {PROJECT!r}) & (F.agent == 'coder')",
        anti_pattern_hits=anti_hits,
        anti_pattern_filter=repr(anti_where),
        workflow_hits=workflow_hits,
        workflow_filter=f"F.workflow_id == {WORKFLOW!r}",
        search_skipped=skipped,
        reinforced=reinforced,
        seen=seen,
        history=store.checkpoints.history(RUN_ID),
        lineage=store.checkpoints.lineage(merged.id),
        ancestor=store.checkpoints.common_ancestor(merged.parent_ids),
        restored=store.checkpoints.restore(RUN_ID, RunState),
    )


def _search_unsupported(store: Store) -> str | None:
    """Why this store cannot run the demo's filtered search, or None if it can."""
    needed = (VECTOR_METRICS[store.params.metric], Capability.VECTOR_FILTERED)
    lacking = [c.value for c in needed if c not in store.capabilities]
    if lacking:
        return f"the {store.backend.name} backend does not declare {', '.join(lacking)}"
    return None


def _write(store: Store, embed: HashingEmbedder) -> dict[str, int]:
    """Upsert the demo's outcomes, heuristics and anti-patterns under stable ids."""
    outcomes = [Outcome(id=_id("outcome", o["slug"]), project_id=PROJECT,
                        **{k: v for k, v in o.items() if k != "slug"}) for o in _OUTCOMES]
    heuristics = [Heuristic(id=_id("heuristic", h["slug"]), project_id=PROJECT, embedding=embed(h["condition"]),
                            metadata={"source": "demo"}, **{k: v for k, v in h.items() if k != "slug"})
                  for h in _HEURISTICS]
    anti_patterns = [AntiPattern(id=_id("anti_pattern", a["slug"]), project_id=PROJECT,
                                 embedding=embed(a["pattern"]), **{k: v for k, v in a.items() if k != "slug"})
                     for a in _ANTI_PATTERNS]
    store.outcomes.put(outcomes)
    store.heuristics.put(heuristics)
    store.anti_patterns.put(anti_patterns)
    from .kinds.workflow import WorkflowOutcome  # importing registers ALMA's workflow kinds

    runs = [WorkflowOutcome(id=_id("workflow_outcome", w["slug"]), project_id=PROJECT, agent="coder",
                            embedding=embed(w["summary"]), **{k: v for k, v in w.items() if k != "slug"})
            for w in _WORKFLOW_OUTCOMES]
    store.collection(WorkflowOutcome).put(runs)
    return {"outcome": len(outcomes), "heuristic": len(heuristics), "anti_pattern": len(anti_patterns),
            "workflow_outcome": len(runs)}


MERGE_REDUCERS = declared_reducers(RunState)
"""How the demo's merge folds its branches' updates: the reducers `RunState` declares on its fields."""


def _checkpoints(store: Store) -> Checkpoint:
    """A run that plans and edits, then tests and documents in parallel branches (each node returning
    only what it changes), then merges them: what both branches inherited counts once."""
    cps = store.checkpoints
    task = "fix the flaky test_upload"
    common: dict[str, Any] = {"project_id": PROJECT, "agent": "coder"}
    plan = cps.save(RUN_ID, RunState(task=task, step="plan", notes=["reproduce with a fixed seed"]),
                    parent=None, node_id="plan", id=_id("checkpoint", "plan"), **common)
    edit = cps.apply(RUN_ID, {"step": "edit", "files_changed": ["tests/test_upload.py"],
                              "notes": ["isolate the temp dir per test"]},
                     parent=plan.id, node_id="edit", model=RunState, id=_id("checkpoint", "edit"), **common)
    tests = cps.apply(RUN_ID, {"step": "test", "tests_passed": 212, "notes": ["200 seeded runs green"]},
                      parent=edit.id, branch="tests", node_id="run_tests", model=RunState,
                      id=_id("checkpoint", "tests"), **common)
    docs = cps.apply(RUN_ID, {"step": "docs", "files_changed": ["CHANGELOG.md"]}, parent=edit.id, branch="docs",
                     node_id="write_docs", model=RunState, id=_id("checkpoint", "docs"), **common)
    return cps.merge(RUN_ID, [tests.id, docs.id], node_id="merge", model=RunState, id=_id("checkpoint", "merge"),
                     **common)
