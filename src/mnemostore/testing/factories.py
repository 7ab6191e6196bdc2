"""Deterministic data for the suite: records of every kind, vectors, awkward values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np

from ..core.kinds import record_type
from .specimen import SPECIMEN

BASE_TIME = datetime(2025, 1, 1, tzinfo=UTC)

OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {
    "outcome": ("agent", "project_id", "duration_ms", "error_message", "user_feedback", "embedding"),
    "heuristic": ("agent", "project_id", "last_validated", "embedding"),
    "anti_pattern": ("agent", "project_id", "last_seen", "embedding"),
    "checkpoint": ("agent", "project_id", "embedding"),
    "embedding": ("agent", "project_id", "embedding"),
    SPECIMEN: ("agent", "project_id", "score", "due", "seen_at", "blob", "embedding"),
}
"""Fields of each kind that may hold None."""

TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "outcome": ("task_type", "task_description", "strategy_used", "error_message", "user_feedback"),
    "heuristic": ("condition", "strategy"),
    "anti_pattern": ("pattern", "why_bad", "better_alternative"),
    "checkpoint": ("node_id",),
    "embedding": ("text", "model"),
    SPECIMEN: ("label",),
}
"""Free-text fields of each kind (besides the shared `agent` and `project_id`)."""

DATETIME_FIELDS: dict[str, tuple[str, ...]] = {
    "outcome": ("created_at", "updated_at"),
    "heuristic": ("created_at", "updated_at", "last_validated"),
    "anti_pattern": ("created_at", "updated_at", "last_seen"),
    "checkpoint": ("created_at", "updated_at"),
    "embedding": ("created_at", "updated_at"),
    SPECIMEN: ("created_at", "updated_at", "due", "seen_at"),
}

AWKWARD_TEXT: tuple[str, ...] = (
    "emoji 🧠🤖 and a family 👨‍👩‍👧‍👦 joined by ZWJ",
    "RTL: مرحبا بالعالم — שלום עולם \u200f(mark)",
    "combining: e\u0301 a\u0308 n\u0303 (not normalised to NFC)",
    "astral \U0001d518\U0001d52b\U0001d526 \U0001f600 and BMP-high \uffef\ufb01",
    "quotes ' \" ` backslash \\ newline\n tab\t percent % underscore _ star *",
    "'; DROP TABLE records; --",
    "",
)


def vectors(n: int, dimension: int = 16, seed: int = 7) -> np.ndarray[Any, np.dtype[np.float32]]:
    """n deterministic float32 vectors (continuous random values: no score ties)."""
    return np.random.default_rng(seed).standard_normal((n, dimension)).astype(np.float32)


def fields(kind: str, i: int = 0, **overrides: Any) -> dict[str, Any]:
    """The fields of a valid record of `kind`, varied by `i`, with `overrides` applied.

    A mapping rather than a model, so invalid overrides reach `put` (and its error paths).
    """
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
    elif kind == "heuristic":
        specific = {"condition": f"when {i % 7}", "strategy": f"do {i % 5}", "confidence": (i % 11) / 10,
                    "occurrence_count": i % 13, "success_count": i % 5}
    elif kind == "anti_pattern":
        specific = {"pattern": f"pattern {i}", "why_bad": "it breaks", "better_alternative": "do not"}
    elif kind == "checkpoint":
        specific = {"run_id": f"run-{i % 3}", "node_id": f"node-{i}", "sequence": i,
                    "state": {"step": i, "messages": [f"m{j}" for j in range(i % 4)]}}
    elif kind == "embedding":
        specific = {"namespace": ("docs", "code")[i % 2], "text": f"text {i}", "model": "test-model"}
    elif kind == SPECIMEN:
        specific = {"label": ("red", "green", "blue")[i % 3], "count": (i * 3) % 7,
                    "score": None if i % 4 == 0 else i / 4, "flag": i % 2 == 0,
                    "due": None if i % 3 == 0 else BASE_TIME + timedelta(hours=i), "notes": [f"note {i}"] * (i % 3),
                    "seen_at": offset_time(i), "blob": None if i % 2 else bytes(range(i % 256, 256))}
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return {**common, **specific, **overrides}


def make(kind: str, i: int = 0, **overrides: Any) -> Any:
    """A valid record of `kind`, varied by `i`, with `overrides` overriding the defaults.

    Typed `Any` (it is a `Record` of the kind's class) so it fits every typed collection."""
    return record_type(kind)(**fields(kind, i, **overrides))


def batch(kind: str, n: int, start: int = 0, **overrides: Any) -> list[Any]:
    """n records of `kind` (`make(kind, start)` ... `make(kind, start + n - 1)`)."""
    return [make(kind, i, **overrides) for i in range(start, start + n)]


def offset_time(i: int) -> datetime:
    """A datetime with a non-UTC offset that varies with i (offsets must survive storage)."""
    return datetime(2024, 6, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=(i % 25) - 12)))


ODD_OFFSETS: tuple[timezone, ...] = (
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(hours=-9, minutes=-30)),
    timezone(timedelta(hours=14)),
    timezone(timedelta(hours=-12)),
    timezone(timedelta(hours=12, minutes=45)),
)


def nested_metadata() -> dict[str, Any]:
    """JSON that stresses a store's encoding: nesting, None, bools, int64 limits, awkward floats."""
    return {
        "none": None,
        "true": True,
        "false": False,
        "zero": 0,
        "one": 1,
        "one_float": 1.0,
        "int64_max": 2**63 - 1,
        "int64_min": -(2**63),
        "above_2_53": 2**53 + 1,
        "neg_zero": -0.0,
        "tiny": 1e-300,
        "subnormal": 5e-324,
        "huge": 1.7976931348623157e308,
        "tenth": 0.1,
        "third": 1 / 3,
        "empty_str": "",
        "empty_list": [],
        "empty_dict": {},
        "list": [1, "two", 3.0, None, True, [False, [0]], {"k": "v"}],
        "nested": {"a": {"b": {"c": {"d": [{"e": None}, {"f": -1.5e-10}]}}}},
        "unicode 🧠 key": "مرحبا e\u0301",
        "numeric-looking": "123",
        "bool-looking": "true",
        "null-looking": "null",
    }


def all_none(kind: str, i: int = 0) -> dict[str, Any]:
    """Fields of a record of `kind` with every optional field None."""
    return fields(kind, i, **dict.fromkeys(OPTIONAL_FIELDS[kind]))


def payload_bytes(repeats: int = 1) -> bytes:
    """Opaque bytes holding every byte value (0-255), `repeats` times, each pass shifted by one."""
    one = bytes(range(256))
    return b"".join(one[i % 256:] + one[:i % 256] for i in range(repeats))


def large_state(megabytes: float = 5.5) -> dict[str, Any]:
    """A deterministic checkpoint state of at least `megabytes` MB of JSON."""
    chunk = "state ✓ " * 128  # 1 KiB of text with a non-ASCII character
    count = int(megabytes * 1024 * 1024 / len(chunk.encode())) + 1
    return {
        "messages": [{"n": n, "text": chunk, "score": n / 7} for n in range(count)],
        "summary": "large state",
    }


