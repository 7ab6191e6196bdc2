"""Deterministic benchmark data: heuristics with 384-dim embeddings and 50 KB checkpoint states."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson

DIMENSION = 384
AGENTS = tuple(f"agent-{i}" for i in range(10))
"""Ten agents, so `agent == "agent-3"` selects 10% of the rows."""
TOPICS = ("tests", "deploy", "database", "review", "docs")
_BASE_TIME = datetime(2025, 1, 1, tzinfo=UTC)


def unit_vectors(n: int, seed: int) -> np.ndarray:
    """n random float32 rows of unit length."""
    rows = np.random.default_rng(seed).standard_normal((n, DIMENSION)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def heuristic_dicts(start: int, stop: int, vectors: np.ndarray) -> list[dict[str, Any]]:
    """Heuristics `start..stop` as plain dicts; row i gets `vectors[i - start]`."""
    rng = np.random.default_rng(start)
    confidences = rng.random(stop - start)
    out = []
    for offset, i in enumerate(range(start, stop)):
        created = _BASE_TIME + timedelta(seconds=i)
        out.append({
            "id": f"h{i:08d}",
            "agent": AGENTS[i % len(AGENTS)],
            "project_id": f"project-{i % 4}",
            "condition": f"when task {i} touches the {TOPICS[i % 5]} module and the previous attempt failed",
            "strategy": f"split the change, run the {TOPICS[(i + 1) % 5]} checks first and compare with run {i - 1}",
            "confidence": round(float(confidences[offset]), 4),
            "occurrence_count": i % 17,
            "success_count": i % 11,
            "created_at": created,
            "updated_at": created,
            "metadata": {"topic": TOPICS[i % 5], "batch": i // 1000},
            "embedding": vectors[offset],
        })
    return out


def raw_heuristic_row(d: dict[str, Any]) -> tuple[Any, ...]:
    """The row a hand-written sqlite3 schema would store: indexed columns, a JSON document, vector bytes."""
    document = orjson.dumps({k: v for k, v in d.items() if k != "embedding"})
    return (d["id"], d["agent"], d["project_id"], d["confidence"], d["created_at"].isoformat(),
            document, d["embedding"].tobytes())


def checkpoint_state(size: int = 50_000) -> dict[str, Any]:
    """A JSON-able agent state of about `size` bytes: messages, tool results and counters."""
    messages: list[dict[str, Any]] = []
    state: dict[str, Any] = {"task": "refactor the billing module", "step": 17, "messages": messages,
                             "scratch": {"files": [f"src/billing/{i}.py" for i in range(20)], "tokens": 48_213}}
    i = 0
    while len(orjson.dumps(state)) < size:
        messages.append({"role": ("user", "assistant", "tool")[i % 3], "turn": i,
                         "content": f"message {i}: " + "lorem ipsum dolor sit amet " * 8,
                         "meta": {"latency_ms": 120 + i, "ok": i % 7 != 0}})
        i += 1
    return state


def varied_state(size: int = 50_000, seed: int = 7) -> dict[str, Any]:
    """Like `checkpoint_state`, but every message is different text (Zipf-distributed words from a
    5,000-word vocabulary): it compresses ~2x with zlib, as prose does, where the repeated
    lorem ipsum of `checkpoint_state` compresses ~25x."""
    messages: list[dict[str, Any]] = []
    state: dict[str, Any] = {"task": "refactor the billing module", "step": 17, "messages": messages}
    for message in varied_messages(seed):
        if len(orjson.dumps(state)) >= size:
            break
        messages.append(message)
    return state


def varied_messages(seed: int = 7) -> Iterator[dict[str, Any]]:
    """An endless run of agent messages of varied text (~430 bytes of JSON each), the same for a seed."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocabulary = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)))) for _ in range(5_000)]
    for i in itertools.count():
        words = np.minimum(rng.zipf(1.3, size=45), len(vocabulary)) - 1
        yield {"role": ("user", "assistant", "tool")[i % 3], "turn": i,
               "content": " ".join(vocabulary[w] for w in words),
               "meta": {"latency_ms": int(rng.integers(50, 5_000)), "ok": bool(rng.random() < 0.9)}}
