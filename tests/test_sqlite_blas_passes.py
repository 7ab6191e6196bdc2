"""Concurrent searches share BLAS passes (`backends/sqlite/blas_passes.py`) and stay exact."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mnemostore
from mnemostore.backends.sqlite import blas_passes
from mnemostore.testing.factories import make


def test_queries_waiting_for_one_matrix_are_answered_by_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((3_000, 32)).astype(np.float32)
    other = rng.standard_normal((3_000, 32)).astype(np.float32)
    queries = rng.standard_normal((6, 32)).astype(np.float32)
    passes: list[int] = []
    run = blas_passes._run
    monkeypatch.setattr(blas_passes, "_run", lambda batch: (passes.append(len(batch)), run(batch)))
    monkeypatch.setattr(blas_passes, "BLOCK_BYTES", 700 * 32 * 4)  # blocks of 700 rows, the last one shorter
    with blas_passes._turn:  # a pass is under way: every query below waits for its turn
        blas_passes._busy = True
    with ThreadPoolExecutor(7) as pool:
        waiting = [pool.submit(blas_passes.products, matrix[:], q) for q in queries]  # views of one matrix
        waiting.append(pool.submit(blas_passes.products, other, queries[0]))
        while len(blas_passes._waiting) < 7:
            threading.Event().wait(0.001)
        with blas_passes._turn:
            blas_passes._busy = False
            blas_passes._turn.notify_all()
        found = [f.result(timeout=30) for f in waiting]
    assert sorted(passes) == [1, 6]
    expected = [matrix @ q for q in queries] + [other @ queries[0]]
    for got, want in zip(found, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_failing_pass_raises_in_every_query_it_served(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = np.ones((10, 4), dtype=np.float32)
    with pytest.raises(ValueError):
        blas_passes.products(matrix, np.ones(5, dtype=np.float32))  # the shapes do not fit
    assert blas_passes.products(matrix, np.ones(4, dtype=np.float32)).tolist() == [4.0] * 10  # not stuck


def test_concurrent_searches_give_the_sequential_answers(tmp_path: Path) -> None:
    """Many threads searching one store at once (passes shared) find exactly what one at a time finds."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((2_000, 24)).astype(np.float32)
    vectors[1_000:1_010] = vectors[5]  # exact ties: broken by id, whatever the pass
    queries: list[Any] = [*rng.standard_normal((30, 24)).astype(np.float32), vectors[5]]
    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.heuristics.put([make("heuristic", i, embedding=v) for i, v in enumerate(vectors)])

        def ids(q: Any) -> list[tuple[str, float]]:
            return [(h.record.id, h.score) for h in store.heuristics.search(q, k=12, vectors=False)]

        one_at_a_time = [ids(q) for q in queries]
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(ids, queries * 3))
    assert together == one_at_a_time * 3
