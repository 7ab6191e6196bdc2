"""LangGraph long-term memory through `MnemostoreStore` (sqlite) vs LangGraph's `InMemoryStore` and `SqliteStore`.

Each store gets the same n items (value {"text", "topic", "n"}, the text indexed for query search) put
one call at a time, as agents write memories, then in one batch; then filtered searches and query
searches (top 10). Embeddings come from a precomputed table, so embedding costs nothing for anyone.
`SqliteStore` needs `langgraph-checkpoint-sqlite` (and `sqlite-vec` for query search); without them its
rows are skipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from harness import Results, Row, median, per_call, timed

import mnemostore

DIMS = 64
K = 10
TOPICS = [f"topic-{i}" for i in range(10)]
LgStore = Any
"""A LangGraph `BaseStore` (LangGraph is optional: not imported at module level)."""


def _items(n: int) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(("memories", f"user-{i % 20}"), f"m{i}", {"text": f"memory number {i}", "topic": TOPICS[i % 10], "n": i})
            for i in range(n)]


def _index(n: int) -> Any:
    """LangGraph's index config over a precomputed embedding table."""
    rng = np.random.default_rng(7)
    table = {f"memory number {i}": v.tolist() for i, v in enumerate(rng.normal(size=(n, DIMS)))}
    table.update({f"query {i}": v.tolist() for i, v in enumerate(rng.normal(size=(n, DIMS)))})

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [table[text] for text in texts]

    return {"dims": DIMS, "embed": embed, "fields": ["text"]}


@contextmanager
def _stores(tmp: Path, name: str, n: int) -> Iterator[dict[str, LgStore]]:
    """Fresh stores: ours on a new sqlite file, InMemoryStore, and SqliteStore if installed."""
    from langgraph.store.memory import InMemoryStore

    from mnemostore.integrations.langgraph import MnemostoreStore

    index = _index(n)
    with ExitStack() as stack:
        ours = stack.enter_context(mnemostore.open(f"sqlite:///{tmp / f'lgstore-{name}.db'}"))
        stores: dict[str, LgStore] = {"ours": MnemostoreStore(ours, index=index),
                                      "InMemoryStore": InMemoryStore(index=index)}
        for attempt, with_index in enumerate((True, False)):
            try:
                from langgraph.store.sqlite import SqliteStore

                path = tmp / f"lgstore-{name}-theirs{attempt}.db"
                conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                stack.callback(conn.close)
                theirs = SqliteStore(conn, index=index if with_index else None)
                theirs.setup()
                conn.execute("PRAGMA journal_mode = WAL")  # as mnemostore's sqlite backend runs
                conn.execute("PRAGMA synchronous = NORMAL")
                stores["SqliteStore"] = theirs
                break
            except Exception as exc:  # not installed, or no sqlite-vec (or no extension loading) for query search
                stores["SqliteStore"] = exc
                if with_index:
                    stores["SqliteStore without index"] = exc
        yield stores


def bench_langgraph_store(results: Results, n: int, repeat: int, tmp: Path, queries: int = 50) -> None:
    items = _items(n)
    ops: dict[str, Callable[[LgStore], Callable[[int], object]]] = {
        "filter": lambda s: lambda i: s.search(("memories",), filter={"topic": TOPICS[i % 10]}, limit=K),
        "query": lambda s: lambda i: s.search(("memories",), query=f"query {i}", limit=K),
    }
    t: dict[str, list[float]] = {}
    skipped: dict[str, str] = {}
    for r in range(repeat):
        with _stores(tmp, f"{r}-single", n) as single, _stores(tmp, f"{r}-batch", n) as batch:
            for who, store in single.items():  # interleaved, so drift hits all alike
                if isinstance(store, Exception):
                    skipped[who] = f"{type(store).__name__}: {store}"[:200]
                    continue
                indexed = f"{who} without index" not in single
                t.setdefault(f"{who}_put", []).append(timed(partial(_put_each, store, items)))
                t.setdefault(f"{who}_batch", []).append(timed(partial(_put_batch, batch[who], items)))
                for what, op in ops.items():
                    if what != "query" or indexed:
                        t.setdefault(f"{who}_{what}", []).append(per_call(op(store), queries))
                _check(who, store, items, indexed)
    m = {key: median(values) for key, values in t.items()}
    rows = (("put", f"put x{n:,}, one call each", "rec/s", n), ("batch", f"put x{n:,} in one batch", "rec/s", n),
            ("filter", f"search by filter, top {K} of {n:,}", "ms", 1),
            ("query", f"search by query, top {K} of {n:,}", "ms", 1))
    for baseline in ("InMemoryStore", "SqliteStore"):
        if baseline in skipped:
            results.skipped(f"langgraph store vs {baseline}", skipped[baseline])
            continue
        for what, label, unit, per in rows:
            if f"{baseline}_{what}" not in m:
                reason = skipped.get(f"{baseline} without index", "not run")
                results.skipped(f"langgraph store: {label} vs {baseline}", reason)
                continue
            results.add(Row(f"langgraph store (sqlite): MnemostoreStore {label}", m[f"ours_{what}"],
                            m[f"{baseline}_{what}"], unit=unit, per=per, baseline_name=baseline))


def _put_each(store: LgStore, items: list[tuple[tuple[str, ...], str, dict[str, Any]]]) -> None:
    for item in items:
        store.put(*item)


def _put_batch(store: LgStore, items: list[tuple[tuple[str, ...], str, dict[str, Any]]]) -> None:
    from langgraph.store.base import PutOp

    store.batch([PutOp(*item) for item in items])


def _check(who: str, store: LgStore, items: list[tuple[tuple[str, ...], str, dict[str, Any]]], indexed: bool) -> None:
    """Every store found the same things: the first item by key, ten of a topic, ten by query."""
    namespace, key, value = items[0]
    assert store.get(namespace, key).value == value, f"{who}: wrong item"
    found = store.search(("memories",), filter={"topic": TOPICS[3]}, limit=K)
    assert len(found) == K and all(x.value["topic"] == TOPICS[3] for x in found), f"{who}: wrong filter search"
    if indexed:
        hits = store.search(("memories",), query="query 1", limit=K)
        assert len(hits) == K and hits[0].score is not None, f"{who}: wrong query search"


if __name__ == "__main__":
    import sys
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
    found = Results()
    with tempfile.TemporaryDirectory(prefix="mnemostore-bench-") as directory:
        bench_langgraph_store(found, count, 3, Path(directory))
    print()
    print(found.table())
