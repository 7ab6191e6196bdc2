"""What the answer should be: the reference semantics applied to the records written.

Filters are evaluated with `core.filters.matches`, orderings with the memory backend's
`sort_records`, and vector search with numpy in float64 over the stored float32 vectors.
Equality is strict: `True` is not `1`, `1` is not `1.0`, `-0.0` is not `0.0`, and a
datetime keeps its UTC offset.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ..core.collection import OrderBy, Where, bind_where
from ..core.filters import matches
from ..core.kinds import record_type
from ..core.query import parse_order, sort_records
from ..core.records import Record
from ..core.store import Store
from ..core.store import open as open_store


def json_difference(actual: Any, expected: Any, path: str = "") -> str | None:
    """Where two values differ under strict equality (types, float bits, offsets), or None."""
    if type(actual) is not type(expected):
        return f"{path or 'value'}: {actual!r} ({type(actual).__name__}) != {expected!r} ({type(expected).__name__})"
    if isinstance(expected, float):
        same = actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)
        return None if same or (math.isnan(actual) and math.isnan(expected)) else f"{path}: {actual!r} != {expected!r}"
    if isinstance(expected, datetime):
        if actual != expected or actual.utcoffset() != expected.utcoffset():
            return f"{path}: {actual.isoformat()} != {expected.isoformat()}"
        return None
    if isinstance(expected, dict):
        if set(actual) != set(expected):
            return f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            found = json_difference(actual[key], expected[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(expected, list):
        if len(actual) != len(expected):
            return f"{path}: length {len(actual)} != {len(expected)}"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found = json_difference(a, e, f"{path}[{index}]")
            if found:
                return found
        return None
    if isinstance(expected, np.ndarray):
        if actual.dtype != np.float32 or not np.array_equal(actual, expected):
            return f"{path}: vector {actual!r} != {expected!r}"
        return None
    return None if actual == expected else f"{path}: {actual!r} != {expected!r}"


def record_difference(actual: Record | None, expected: Record, *, vectors: bool = True) -> str | None:
    """The first field where a record read back differs from the one written, or None."""
    if actual is None:
        return f"{expected.kind} {expected.id!r} was not found"
    if type(actual) is not type(expected):
        return f"read a {type(actual).__name__}, wrote a {type(expected).__name__}"
    for name in type(expected).model_fields:
        mine, theirs = getattr(actual, name), getattr(expected, name)
        if name == "embedding":
            if not vectors and mine is None:
                continue
            if mine is None or theirs is None:
                if mine is not theirs:
                    return f"embedding: {mine!r} != {theirs!r}"
                continue
            mine = np.asarray(mine)
        found = json_difference(mine, theirs, name)
        if found:
            return f"{expected.kind} {expected.id!r}: {found}"
    return None


def assert_same_records(actual: Sequence[Record | None], expected: Sequence[Record], *,
                        vectors: bool = True) -> None:
    """Records read back equal those written, in the same order, under strict equality."""
    assert [r.id if r is not None else None for r in actual] == [r.id for r in expected]
    for got, wanted in zip(actual, expected, strict=True):
        problem = record_difference(got, wanted, vectors=vectors)
        assert problem is None, problem


def expected_ids(kind: str, records: Iterable[Record], where: Where) -> set[str]:
    """Ids of the records that the reference semantics say match `where`."""
    bound = bind_where(record_type(kind), where)
    return {record.id for record in records if matches(bound, record)}


def expected_order(kind: str, records: Iterable[Record], where: Where = None, order_by: OrderBy = None) -> list[str]:
    """Ids of the matching records in the reference order (ending in the id tie-breaker)."""
    cls = record_type(kind)
    bound = bind_where(cls, where)
    chosen = [record for record in records if matches(bound, record)]
    return [record.id for record in sort_records(chosen, parse_order(order_by, cls))]


def reference_scores(matrix: np.ndarray[Any, Any], query: np.ndarray[Any, Any], metric: str) -> np.ndarray[Any, Any]:
    """Scores in float64: cosine similarity, dot product, or Euclidean distance."""
    rows = np.asarray(matrix, dtype=np.float64)
    q = np.asarray(query, dtype=np.float32).astype(np.float64)
    if metric == "l2":
        return np.asarray(np.linalg.norm(rows - q, axis=1))
    if metric == "dot":
        return rows @ q
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(q)
    return np.asarray((rows @ q) / np.where(norms == 0, 1.0, norms))


def reference_search(records: Sequence[Record], query: Any, k: int, metric: str,
                     where: Where = None) -> list[tuple[str, float]]:
    """(id, score) of the k best matching records with an embedding: best first, ties by id."""
    if not records:
        return []
    bound = bind_where(type(records[0]), where)
    chosen = [r for r in records if r.embedding is not None and matches(bound, r)]
    if not chosen:
        return []
    values = reference_scores(np.stack([r.embedding for r in chosen]), query, metric)
    sign = 1.0 if metric == "l2" else -1.0
    ranked = sorted(range(len(chosen)), key=lambda i: (sign * float(values[i]), chosen[i].id))
    return [(chosen[i].id, float(values[i])) for i in ranked[:k]]


def reference_store(kind: str, records: Sequence[Record], **options: Any) -> Store:
    """A fresh memory store holding `records`: the reference backend as a live oracle."""
    store = open_store("memory://", **options)
    store.collection(kind).put(records)
    return store
