"""Deterministic record factories and hypothesis strategies for the suite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np

from ..core.records import AntiPattern, Checkpoint, Embedding, Heuristic, Outcome, Record

BASE_TIME = datetime(2025, 1, 1, tzinfo=UTC)


def vectors(n: int, dimension: int = 16, seed: int = 7) -> np.ndarray[Any, np.dtype[np.float32]]:
    """n deterministic float32 vectors (continuous random values: no score ties)."""
    return np.random.default_rng(seed).standard_normal((n, dimension)).astype(np.float32)


def make(kind: str, i: int = 0, **fields: Any) -> Record:
    """A valid record of `kind`, varied by `i`, with `fields` overriding the defaults."""
    common: dict[str, Any] = {
        "id": f"{kind}-{i:05d}",
        "agent": ("coder", "planner", "critic")[i % 3],
        "project_id": ("alpha", "beta")[i % 2],
        "created_at": BASE_TIME + timedelta(minutes=i),
        "updated_at": BASE_TIME + timedelta(minutes=i),
        "metadata": {"i": i, "parity": "even" if i % 2 == 0 else "odd"},
    }
    specific: dict[str, Any]
    if kind == "outcome":
        specific = {"task_type": ("code", "review", "plan")[i % 3], "success": i % 4 != 0,
                    "strategy_used": f"strategy {i % 5}", "duration_ms": 100 * i}
        cls: type[Record] = Outcome
    elif kind == "heuristic":
        specific = {"condition": f"when {i % 7}", "strategy": f"do {i % 5}", "confidence": (i % 11) / 10,
                    "occurrence_count": i % 13, "success_count": i % 5}
        cls = Heuristic
    elif kind == "anti_pattern":
        specific = {"pattern": f"pattern {i}", "why_bad": "it breaks", "better_alternative": "do not"}
        cls = AntiPattern
    elif kind == "checkpoint":
        specific = {"run_id": f"run-{i % 3}", "node_id": f"node-{i}", "sequence": i,
                    "state": {"step": i, "messages": [f"m{j}" for j in range(i % 4)]}}
        cls = Checkpoint
    elif kind == "embedding":
        specific = {"namespace": ("docs", "code")[i % 2], "text": f"text {i}", "model": "test-model"}
        cls = Embedding
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return cls(**{**common, **specific, **fields})


def offset_time(i: int) -> datetime:
    """A datetime with a non-UTC offset that varies with i (offsets must survive storage)."""
    return datetime(2024, 6, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=(i % 25) - 12)))
