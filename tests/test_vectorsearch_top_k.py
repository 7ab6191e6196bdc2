"""`vectorsearch.top_k` orders by score, then by id where scores tie, on both of its paths (Python's sort
below `SORTED_BELOW` values, numpy's selection above)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemostore.core import vectorsearch
from mnemostore.core.vectorsearch import top_k

SCORES = st.sampled_from([-1.5, -0.25, -0.0, 0.0, 0.125, 0.3, 0.30000001192092896, 2.0])
"""Few distinct values, so most draws tie (0.0 and -0.0 tie too; two values one float32 step apart)."""


@settings(max_examples=150, deadline=None)
@given(values=st.lists(SCORES, min_size=1, max_size=2 * vectorsearch.SORTED_BELOW), k=st.integers(1, 140),
       metric=st.sampled_from(["cosine", "dot", "l2"]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_the_k_best_come_best_first_and_ties_by_id(values: list[float], k: int, metric: str, dtype: type,
                                                    seed: int) -> None:
    ids = [f"r{i:03d}" for i in np.random.default_rng(seed).permutation(len(values))]  # ids not in row order
    array = np.array(values, dtype=dtype)
    sign = 1.0 if metric == "l2" else -1.0
    expected = sorted(range(len(values)), key=lambda i: (sign * float(array[i]), ids[i]))[:k]
    found = top_k(array, ids, k, metric)
    assert [i for i, _ in found] == expected
    assert [score for _, score in found] == [float(array[i]) for i in expected]
    assert all(type(i) is int and type(score) is float for i, score in found)
