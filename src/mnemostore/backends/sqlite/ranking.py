"""Exact top-k at BLAS speed: a fast pass picks candidates, core's scorer ranks them.

`vectorsearch.scores` is exact and position-independent (identical rows score
identically, so ties break by id) but runs at about half the speed of a BLAS
matrix-vector product, whose rounding depends on a row's position. So a BLAS pass
keeps every row whose score is within a proven float32 error bound of the k-th best,
and only those are scored by `scores` and ordered by `top_k`: the result is what
`top_k(scores(all rows))` gives, at the cost of one BLAS pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...core.vectorsearch import scores, top_k
from . import blas_passes
from .vector_cache import IdsAt

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

EXACT_BELOW = 1024
"""Pools this small are scored exactly at once; a preselection pass would not pay."""


def rank(matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], query: npt.NDArray[np.float32],
         ids: Sequence[str], k: int, metric: str, rows: npt.NDArray[np.intp] | None = None,
         gathered: npt.NDArray[np.float32] | None = None) -> list[tuple[int, float]]:
    """(row, score) of the k best rows of `matrix` (only `rows`, if given), best first, ties by id.

    `matrix` rows are prepared for `metric` (unit length for cosine), `norms` are their
    Euclidean norms (for cosine, 1 will do), and `query` came from `prepare_query`.
    `gathered` is what `gather(matrix, rows)` gave, if the caller kept it.
    """
    if rows is None and len(matrix) < EXACT_BELOW:
        return top_k(scores(matrix, query, metric, prepared=True), ids, k, metric)
    if rows is not None and gathered is None:
        gathered = gather(matrix, rows)
    if rows is not None and len(rows) < EXACT_BELOW and gathered is not None:
        best = top_k(scores(gathered, query, metric, prepared=True), IdsAt(ids, rows), k, metric)
        return [(int(rows[i]), score) for i, score in best]
    if gathered is not None and rows is not None:
        coarse = _coarse(gathered, norms[rows] if metric == "l2" else norms, query, metric)
    else:
        coarse = _coarse(matrix, norms, query, metric)
        if rows is not None:
            coarse = coarse[rows]
    # cosine rows and query are unit length (or zero): 1 bounds both norms
    max_norm = 1.0 if metric == "cosine" else float((norms if rows is None else norms[rows]).max())
    query_norm = 1.0 if metric == "cosine" else math.sqrt(float(query @ query))
    keep = _candidates(coarse, k, metric, _slack(matrix.shape[1], max_norm, query_norm, metric))
    pool = keep if rows is None else rows[keep]
    best = top_k(scores(matrix[pool], query, metric, prepared=True), IdsAt(ids, pool), k, metric)
    return [(int(pool[i]), score) for i, score in best]


def gather(matrix: npt.NDArray[np.float32], rows: npt.NDArray[np.intp]) -> npt.NDArray[np.float32] | None:
    """The vectors of `rows` copied out, to be scored apart from the other rows; None when they are
    so many that one pass over the whole matrix costs less."""
    if len(rows) >= EXACT_BELOW and 4 * len(rows) > len(matrix):
        return None
    gathered: npt.NDArray[np.float32] = matrix[rows]
    return gathered


def _coarse(matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], query: npt.NDArray[np.float32],
            metric: str) -> npt.NDArray[np.float32]:
    """BLAS scores: similarity for cosine/dot, squared distance less |query|^2 for l2."""
    products = blas_passes.products(matrix, query)
    if metric == "l2":
        return norms * norms - 2 * products
    return products


def _slack(dimension: int, max_norm: float, query_norm: float, metric: str) -> float:
    """An upper bound on |coarse - exact| for one row (float32 dot-product error bound, x2)."""
    gamma = 2.0 * dimension * 2.0**-24
    if metric == "l2":
        return 4 * gamma * (max_norm + query_norm) ** 2
    return 2 * gamma * max_norm * query_norm


def _candidates(coarse: npt.NDArray[np.float32], k: int, metric: str, slack: float) -> npt.NDArray[np.intp]:
    """Positions whose exact score could be among the k best."""
    import numpy as np

    n = len(coarse)
    if n <= k or not math.isfinite(slack):
        return np.arange(n)
    if metric == "l2":
        kth = float(np.partition(coarse, k - 1)[k - 1])
        found: npt.NDArray[np.intp] = np.nonzero(coarse <= kth + 2 * slack)[0]
    else:
        kth = float(np.partition(coarse, n - k)[n - k])
        found = np.nonzero(coarse >= kth - 2 * slack)[0]
    return found
