"""Top-10 vector search (with and without a filter) vs numpy brute force, and a filtered query vs sqlite3."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from data import AGENTS, heuristic_dicts, unit_vectors
from harness import Results, Row, median, per_call, timed
from rawsqlite import connect, filtered_query, insert_heuristics

import mnemostore

K = 10
FILTER_AGENT = AGENTS[3]


def numpy_top_k(matrix: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Brute force over the whole matrix; a filter masks scores out before the top-k."""
    scores = matrix @ query
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    best = np.argpartition(-scores, k - 1)[:k]
    return best[np.argsort(-scores[best], kind="stable")]


def _load(url: str, n: int, vectors: np.ndarray, raw_path: Path | None) -> None:
    conn = connect(raw_path) if raw_path is not None else None
    with mnemostore.open(url) as store:
        for start in range(0, n, 10_000):
            batch = heuristic_dicts(start, min(n, start + 10_000), vectors[start:])
            store.heuristics.put(batch)
            if conn is not None:
                insert_heuristics(conn, batch)
    if conn is not None:
        conn.close()


def bench_search(results: Results, n: int, repeat: int, tmp: Path, queries: int, with_query: bool) -> None:
    vectors = unit_vectors(n, seed=2)
    url = f"sqlite:///{tmp / f'search-{n}.db'}"
    raw_path = tmp / f"search-raw-{n}.db" if with_query else None
    _load(url, n, vectors, raw_path)
    mask = np.array([AGENTS[i % len(AGENTS)] == FILTER_AGENT for i in range(n)])
    qs = unit_vectors(queries, seed=3)
    where = mnemostore.F.agent == FILTER_AGENT
    with mnemostore.open(url) as store:
        search = store.heuristics.search
        cold = timed(lambda: search(qs[0], k=K, vectors=False))
        mismatches = sum(
            [hit.record.id for hit in search(q, k=K, vectors=False)]
            != [f"h{i:08d}" for i in numpy_top_k(vectors, q, K)] for q in qs)
        filtered = [search(q, k=K, where=where, vectors=False) for q in qs]
        complete = all(len(hits) == K and all(h.record.agent == FILTER_AGENT for h in hits) for hits in filtered)
        ours, base, ours_f, base_f = [], [], [], []
        for _ in range(repeat):
            ours.append(per_call(lambda i: search(qs[i], k=K, vectors=False), queries))
            base.append(per_call(lambda i: numpy_top_k(vectors, qs[i], K), queries))
            ours_f.append(per_call(lambda i: search(qs[i], k=K, where=where, vectors=False), queries))
            base_f.append(per_call(lambda i: numpy_top_k(vectors, qs[i], K, mask), queries))
        if with_query:
            _bench_query(results, store, raw_path, n, repeat, queries)  # type: ignore[arg-type]
    label = f"sqlite top-{K} search {n:,} x384"
    note = f"first search after open (loads the matrix): {cold * 1000:.0f} ms"
    if mismatches:
        note += f"; {mismatches}/{queries} queries differ from numpy's top-{K}"
    row = Row(label, median(ours), median(base), baseline_name="numpy brute force", note=note)
    if n <= 10_000:
        row.target, row.met = "within 2x (>= 0.50x)", row.ratio is not None and row.ratio >= 0.5 and not mismatches
    else:
        row.target, row.met = "<= 25 ms", median(ours) <= 0.025 and not mismatches
    results.add(row)
    results.add(Row(f"{label}, agent filter (10%)", median(ours_f), median(base_f),
                    baseline_name="numpy, masked", target="k results when k match", met=complete,
                    note="" if complete else "a filtered search returned fewer than k matching results"))


def _bench_query(results: Results, store: mnemostore.Store, raw_path: Path, n: int, repeat: int,
                 queries: int) -> None:
    conn = connect(raw_path)
    where = [(mnemostore.F.agent == AGENTS[i % len(AGENTS)]) & (mnemostore.F.confidence >= 0.5)
             for i in range(queries)]
    ours, raw = [], []
    for _ in range(repeat):
        ours.append(per_call(lambda i: store.heuristics.query(where[i], order_by="-confidence", limit=20,
                                                              vectors=False), queries))
        raw.append(per_call(lambda i: filtered_query(conn, AGENTS[i % len(AGENTS)], 0.5, 20), queries))
    conn.close()
    results.add(Row(f"sqlite filtered query over {n:,} (agent & confidence, top 20)", median(ours), median(raw),
                    baseline_name="sqlite3 SELECT + orjson"))
