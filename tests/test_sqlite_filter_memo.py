"""A filtered search reuses the rows its filter selected (`backends/sqlite/filter_memo.py`) only while the
database is unchanged: every write, in place or not, by this store, another store or another process, is
seen by the next search."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.backends.sqlite import filter_memo
from mnemostore.core.vectorsearch import normalise_rows, prepare_query, scores, top_k
from mnemostore.testing.factories import make

DIM = 6
AGENTS = ("a", "b")
VECTORS = np.random.default_rng(3).standard_normal((40, DIM)).astype(np.float32)
VECTORS[30:] = VECTORS[5]  # exact ties: broken by id
OPS = st.lists(st.tuples(st.sampled_from(["put", "update", "delete", "search", "search"]),
                         st.sampled_from(["one", "other"]), st.integers(0, 39), st.sampled_from(AGENTS)),
               min_size=1, max_size=25)


def expected(truth: dict[str, tuple[str, int]], agent: str, query: Any, k: int) -> list[tuple[str, float]]:
    """core's exact ranking over the records with this agent (cosine, ties by id)."""
    ids = sorted(i for i, (a, _) in truth.items() if a == agent)
    if not ids:
        return []
    matrix = normalise_rows(np.stack([VECTORS[truth[i][1]] for i in ids]))
    best = top_k(scores(matrix, prepare_query(query, "cosine"), "cosine", prepared=True), ids, k, "cosine")
    return [(ids[i], score) for i, score in best]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_filtered_searches_see_every_write_of_either_store(tmp_path_factory: pytest.TempPathFactory,
                                                           ops: list[tuple[str, str, int, str]], seed: int) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('memo') / 's.db'}"
    rng = np.random.default_rng(seed)
    with mnemostore.open(url) as one, mnemostore.open(url) as other:
        stores = {"one": one, "other": other}
        truth = {f"h{i:02d}": (AGENTS[i % 2], i) for i in range(0, 40, 2)}
        one.heuristics.put([make("heuristic", i, id=id_, agent=a, embedding=VECTORS[v])
                            for i, (id_, (a, v)) in enumerate(truth.items())])
        for op, name, i, agent in ops:
            store, id_ = stores[name], f"h{i:02d}"
            if op == "put":
                truth[id_] = (agent, i)
                store.heuristics.put([make("heuristic", i, id=id_, agent=agent, embedding=VECTORS[i])])
            elif op == "update" and id_ in truth:  # in place: the same row, no new vector
                truth[id_] = (agent, truth[id_][1])
                store.heuristics.update(id_, set={"agent": agent})
            elif op == "delete":
                truth.pop(id_, None)
                store.heuristics.delete([id_])
            else:
                query = VECTORS[i] if i % 3 else rng.standard_normal(DIM).astype(np.float32)
                for searcher in (store, one):  # the same filter twice: the second may come from the memo
                    hits = searcher.heuristics.search(query, k=4, where=mnemostore.F.agent == agent, vectors=False)
                    assert [(h.record.id, h.score) for h in hits] == expected(truth, agent, query, 4)
                    assert all(h.record.agent == agent for h in hits)


def test_a_repeated_filter_is_picked_once_until_another_process_writes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    picks: list[int] = []
    picked = filter_memo.FilterMemo.picked

    def counting(self: filter_memo.FilterMemo, conn: Any, key: Any, matrix: Any, pick: Any) -> Any:
        return picked(self, conn, key, matrix, lambda: (picks.append(1), pick())[1])

    monkeypatch.setattr(filter_memo.FilterMemo, "picked", counting)
    with mnemostore.open(url) as store:
        store.heuristics.put([make("heuristic", 99, id="h99", agent="a", embedding=VECTORS[0])])
        with monkeypatch.context() as small:  # rows past the budget are picked anew every time
            small.setattr(filter_memo, "BUDGET_BYTES", 1)
            for _ in range(2):
                store.heuristics.search(VECTORS[1], k=3, where=mnemostore.F.agent == "a", vectors=False)
            assert len(picks) == 2
        picks.clear()
        store.heuristics.delete(["h99"])
        store.heuristics.put([make("heuristic", i, id=f"h{i:02d}", agent=AGENTS[i % 2], embedding=VECTORS[i])
                              for i in range(40)])
        where = mnemostore.F.agent == "a"

        def ids() -> list[str]:
            return [h.record.id for h in store.heuristics.search(VECTORS[1], k=3, where=where, vectors=False)]

        first = ids()
        assert ids() == ids() == first and len(picks) == 1  # from the memo
        store.heuristics.search(VECTORS[1], k=3, where=mnemostore.F.agent == "b", vectors=False)
        assert len(picks) == 2  # another filter value is another entry
        script = ("import sys, mnemostore\n"
                  "with mnemostore.open(sys.argv[1]) as s:\n"
                  f"    s.heuristics.update({first[0]!r}, set={{'agent': 'b'}})\n")
        subprocess.run([sys.executable, "-c", script, url], check=True)
        after = ids()
        assert first[0] not in after and len(picks) == 3  # the update in place (same seq, same vector) is seen


def test_a_write_on_the_connection_that_searched_is_seen_by_its_next_search(tmp_path: Path) -> None:
    """SQLite's data_version leaves out the connection's own commits: an update in place, then a search, on
    one pooled connection."""
    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.heuristics.put([make("heuristic", i, id=f"h{i:02d}", agent=AGENTS[i % 2], embedding=VECTORS[i])
                              for i in range(40)])
        where = mnemostore.F.agent == "a"
        first = [h.record.id for h in store.heuristics.search(VECTORS[1], k=3, where=where, vectors=False)]
        store.heuristics.update(first[0], set={"agent": "b"})
        after = [h.record.id for h in store.heuristics.search(VECTORS[1], k=3, where=where, vectors=False)]
        assert first[0] not in after and after[:2] == first[1:]
