"""Exact top-k over Qdrant's candidates: rescored with core's numpy scoring, ties by id.

Qdrant scores in float32 with its own summation order (and a server's HNSW is approximate),
so identical vectors may score a few ulps apart and near-ties may swap. The backend asks
Qdrant for more than k candidates, rescores them from the original float32 embeddings with
`core.vectorsearch`, and widens the request when the k-th exact score is too close to the
worst candidate's Qdrant score to be sure nothing beyond it could rank higher.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.protocol import Hit
from ...core.records import Record
from ...core.vectors import Vector
from ...core.vectorsearch import scores, top_k

MARGIN = 1e-3
"""How far (relative) Qdrant's score may stray from the exact one; a generous float32 bound."""


def first_request(k: int) -> int:
    return k + max(k, 10)


def rank(records: Sequence[Record], query: Vector, k: int, metric: str) -> list[Hit]:
    """The k best of `records` (all with embeddings), best first, ties broken by id."""
    import numpy as np

    if not records:
        return []
    matrix = np.stack([r.embedding for r in records])
    values = scores(matrix, query, metric)
    best = top_k(values, [r.id for r in records], k, metric)
    return [Hit(records[i], score) for i, score in best]


def settled(hits: Sequence[Hit], k: int, worst_candidate: float, metric: str) -> bool:
    """Whether no point scored below `worst_candidate` by Qdrant could beat the k-th hit."""
    if len(hits) < k:
        return False
    kth = hits[k - 1].score
    slack = MARGIN * max(1.0, abs(kth), abs(worst_candidate))
    if metric == "l2":
        return kth < worst_candidate - slack
    return kth > worst_candidate + slack


def qdrant_score(point: Any) -> float:
    return float(point.score)
