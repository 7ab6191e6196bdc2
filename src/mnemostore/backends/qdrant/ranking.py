"""Top-k from Qdrant's candidates: Qdrant's order where it is unambiguous, exact rescoring where not.

Qdrant returns points best first with float32 scores (cosine similarity of the normalised
vectors, dot product, or Euclidean distance). The backend asks for k + 1 points: where
neighbours' scores are clearly apart, Qdrant's order and scores stand; runs of near-ties
(duplicate vectors, ulp-level differences) are rescored from the exact stored vectors (`_vec`)
with core's scoring and ordered by (score, id), as the reference backend orders them. With
`dot` every candidate is rescored. The rules are shared with the chroma backend's `ranking`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...core.approximate_ranking import rank_approximate, rank_exact
from ...core.base64text import from_text
from ...core.vectors import Vector
from ...core.vectorsearch import scores
from .payload import DOC, VEC, field_key

ID = field_key("id")
PAYLOAD = [DOC, VEC, ID]
"""What a search reads of each candidate: the document, the exact vector, and the record id (for ties)."""


def first_request(k: int) -> int:
    """k + 1 candidates: enough to see whether the k-th is clear of the points not fetched."""
    return k + 1


class Candidates:
    """One `query_points` answer, best first; exact vectors are decoded only for the runs rescored."""

    def __init__(self, points: Sequence[Any], query: Vector, metric: str, asked: int) -> None:
        self.payloads: list[dict[str, Any]] = [p.payload or {} for p in points]
        self.ids: list[str] = [payload[ID] for payload in self.payloads]
        self.qdrant_scores = [float(p.score) for p in points]
        self.complete = len(points) < asked
        self._query = query
        self._metric = metric

    def rescore(self, positions: list[int]) -> Any:
        """Core's exact scores of the candidates at `positions` (float64 in, as the memory backend)."""
        import numpy as np

        matrix = np.stack([np.frombuffer(from_text(self.payloads[p][VEC]), dtype=np.float32)
                           for p in positions]).astype(np.float64)
        return scores(matrix, np.asarray(self._query, dtype=np.float64), self._metric)  # type: ignore[arg-type]

    def best(self, k: int) -> list[tuple[int, float]] | None:
        """(position, score) of the k best, best first, ties by id; None when Qdrant must be asked for more."""
        if not self.ids:
            return []
        kept = range(len(self.ids))
        approx = self.qdrant_scores
        if self._metric == "dot" or not all(math.isfinite(s) for s in approx):
            return rank_exact(self.rescore(list(kept)), kept, self.ids, k, self._metric, self.complete)
        return rank_approximate(approx, kept, self.ids, k, self._metric, self.complete, len(self._query),
                                self.rescore)
