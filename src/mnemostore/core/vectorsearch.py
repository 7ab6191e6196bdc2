"""Exact vector search with numpy: scoring and top-k, shared by the embedded backends.

Scores are cosine similarity or dot product (higher is better) or Euclidean distance
(lower is better). Results are best first, ties broken by id.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def normalise_rows(matrix: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero), for cosine as a dot product."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32, copy=False)
    return normalised


def prepare_query(vector: npt.NDArray[Any], metric: str) -> npt.NDArray[np.float32]:
    import numpy as np

    query = np.asarray(vector, dtype=np.float32)
    if metric == "cosine":
        norm = float(np.linalg.norm(query))
        if norm:
            query = query / np.float32(norm)
    return query


def scores(matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32], metric: str,
           prepared: bool = False) -> npt.NDArray[np.float32]:
    """Score every row of `matrix` against `query`.

    With `prepared=True`, `matrix` rows are already unit-length for cosine (see
    `normalise_rows`) and `query` came from `prepare_query`.
    """
    import numpy as np

    # einsum, not `@`: BLAS gemv may round identical rows differently by position,
    # which breaks exact ties (and so the tie-break by id).
    result: npt.NDArray[np.float32]
    if metric == "l2":
        diff = matrix - query
        result = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    elif metric == "cosine" and not prepared:
        result = np.einsum("ij,j->i", normalise_rows(matrix), prepare_query(query, "cosine"))
    else:
        result = np.einsum("ij,j->i", matrix, query)
    return result


SORTED_BELOW = 64
"""Fewer values than this are ordered by Python's sort: numpy's calls would cost more than the work."""


def top_k(values: npt.NDArray[Any], ids: Sequence[str], k: int, metric: str) -> list[tuple[int, float]]:
    """(row index, score) of the k best rows, best first, ties broken by id."""
    import numpy as np

    n = len(values)
    if n == 0:
        return []
    if n < SORTED_BELOW:
        return _sorted_top_k(values.tolist(), ids, k, metric)
    signed = values if metric == "l2" else -values
    if k < n:
        candidates = np.argpartition(signed, k - 1)[:k]
        kth = signed[candidates].max()
        candidates = np.nonzero(signed <= kth)[0]  # keep every row tied with the k-th
    else:
        candidates = np.arange(n)
    keys = signed[candidates]
    order = np.argsort(keys, kind="stable")
    ordered: list[int] = candidates[order].tolist()
    if len(order) > 1 and bool((keys[order[1:]] == keys[order[:-1]]).any()):  # ties: ids decide
        ordered.sort(key=lambda i: (float(signed[i]), ids[i]))
    best = ordered[:k]
    return list(zip(best, values[best].tolist(), strict=True))


def _sorted_top_k(values: list[float], ids: Sequence[str], k: int, metric: str) -> list[tuple[int, float]]:
    """`top_k` of a few values: sorted by score, then by id where scores tie (NaN sorts last)."""
    signed = [v if v == v else math.inf for v in values] if metric == "l2" else [
        -v if v == v else math.inf for v in values]
    order = sorted(range(len(values)), key=signed.__getitem__)
    if any(signed[a] == signed[b] for a, b in itertools.pairwise(order)):  # ties: ids decide
        order.sort(key=lambda i: (signed[i], ids[i]))
    return [(i, values[i]) for i in order[:k]]
