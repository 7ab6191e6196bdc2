"""Top-k from an engine's approximate candidates: its order where unambiguous, exact rescoring where not.

Chroma and Qdrant return candidates sorted by a float32 distance or score. For cosine (unit
vectors) and l2 (a sum of squares) its rounding error is bounded relative to the score's scale, so two
candidates whose engine scores differ by more than `slack` are already in the exact order;
only runs of candidates closer than that (near-ties, duplicate vectors) are rescored from
the stored float32 vectors with core's numpy scoring and ordered by (score, id), as the
reference backend orders them. Scores are then the engine's (float32 precision, as every
backend's) or, inside a rescored run, core's. A dot product can cancel (its rounding is
relative to the sum of |a_i b_i|, not to the score), so with `dot` every candidate is rescored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .vectorsearch import top_k

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Rescore = Callable[[list[int]], "npt.NDArray[np.float64]"]
"""Exact scores (core's `scores`) of the candidates at these positions."""

_BASE_SLACK = 1e-5
"""Normalisation and square-root rounding, beyond the sum's own (see `slack`)."""


def approximate(distances: Sequence[float], metric: str) -> list[float] | None:
    """Scores from Chroma's distances (cosine: 1 - d; l2: sqrt of the squared distance), or None
    where they cannot order candidates safely (dot, or a distance that overflowed)."""
    if metric == "cosine":
        found = [1.0 - d for d in distances]
    elif metric == "l2":
        found = [math.sqrt(d) if d > 0 else 0.0 for d in distances]
    else:
        return None
    return found if all(math.isfinite(s) for s in found) else None


def slack(a: float, b: float, dimension: int) -> float:
    """How far apart two engine scores must be to be in the exact order: a float32 sum of
    `dimension` terms errs by at most dimension * 2**-24 of its scale (1 for unit vectors)."""
    return (_BASE_SLACK + 6e-8 * dimension) * (1.0 + abs(a) + abs(b))


def rank_approximate(approx: Sequence[float], kept: Sequence[int], ids: Sequence[str], k: int, metric: str,
                     complete: bool, dimension: int, rescore: Rescore) -> list[tuple[int, float]] | None:
    """(position, score) of the k best kept candidates, best first, ties by id; None when the engine
    must be asked for more (the k-th is not clear of the candidates it did not return).

    `approx` scores every returned candidate in the engine's order, `kept` lists the positions that
    match the filter, and `complete` says whether the engine returned fewer than asked.
    """
    lower_is_better = metric == "l2"

    def apart(better: float, worse: float) -> bool:
        gap = worse - better if lower_is_better else better - worse
        return gap > slack(better, worse, dimension)

    best: list[tuple[int, float]] = []
    last = len(approx) - 1  # the position of the k-th's run's last candidate
    for run in _runs(kept, approx, apart):
        if len(run) == 1:
            best.append((run[0], approx[run[0]]))
        else:
            values = rescore(run)
            best.extend((run[i], score) for i, score in top_k(values, [ids[p] for p in run], len(run), metric))
        last = run[-1]
        if len(best) >= k:
            break
    if not complete and (len(best) < k or not apart(approx[last], approx[-1])):
        return None
    return best[:k]


def _runs(kept: Sequence[int], approx: Sequence[float], apart: Callable[[float, float], bool]) -> Iterator[list[int]]:
    """The kept positions in runs whose neighbours are not `apart` (the engine's order kept)."""
    run: list[int] = []
    for position in kept:
        if run and apart(approx[run[-1]], approx[position]):
            yield run
            run = []
        run.append(position)
    if run:
        yield run


def rank_exact(values: Any, kept: Sequence[int], ids: Sequence[str], k: int, metric: str,
               complete: bool) -> list[tuple[int, float]] | None:
    """`rank_approximate` from exact scores of every returned candidate (`dot`)."""
    best = [(kept[i], score) for i, score in top_k(values[list(kept)], [ids[p] for p in kept], k, metric)]
    if not complete and not (len(best) == k and _clear(best[-1][1], float(values[-1]), metric)):
        return None
    return best


_TOLERANCE = 1e-5


def _clear(kth: float, last_fetched: float, metric: str) -> bool:
    """Whether the k-th score beats every row the engine did not return (all worse than the last it did)."""
    margin = _TOLERANCE * (1.0 + abs(kth) + abs(last_fetched))
    return last_fetched - kth > margin if metric == "l2" else kth - last_fetched > margin
