"""LangGraph long-term memory through `MnemostoreStore` vs LangGraph's `SqliteStore`, `PostgresStore`
and `InMemoryStore`.

Each store gets the same n items (value {"text", "topic", "n"}) put one call at a time, as agents write
memories, then each put again over its key with a changed `n` (an agent updating a memory: the stored
item replaced, its `created_at` kept), then (a second fresh store) in one `batch` of `PutOp`s; then
filtered searches and, where both sides index the text, query searches (top 10). Embeddings come from a
precomputed table, so embedding costs nothing for anyone. Both sides of a comparison index alike:
`SqliteStore` indexes through sqlite-vec, which needs a sqlite3 able to load extensions; without one
both sides run without an index (the row says so). Fresh stores every repeat: a new SQLite file, or a
new PostgreSQL schema on the group's server.
"""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from harness import Results, Row, at_least, median, per_call, timed_clean

import mnemostore

DIMS = 64
K = 10
TOPICS = [f"topic-{i}" for i in range(10)]
LgStore = Any
"""A LangGraph `BaseStore` (LangGraph is optional: not imported at module level)."""
Item = tuple[tuple[str, ...], str, dict[str, Any]]
Maker = Callable[[str], AbstractContextManager[LgStore]]
"""A fresh store named after a tag (unique per repeat and use)."""


@dataclass(frozen=True)
class _Peer:
    """One comparison: our store beside `name`, both made fresh by their makers."""

    name: str
    ours: Maker
    theirs: Maker
    indexed: bool
    targets: bool
    note: str = ""


def _items(n: int) -> list[Item]:
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
def _ours(url: Callable[[str], str], index: Any, tag: str) -> Iterator[LgStore]:
    """`MnemostoreStore` on a fresh mnemostore store at `url(tag)`, set up (its table made) before any timing,
    as LangGraph's stores are."""
    from mnemostore.integrations.langgraph import MnemostoreStore

    with mnemostore.open(url(tag)) as store:
        ours = MnemostoreStore(store, index=index)
        ours.setup()
        yield ours


@contextmanager
def _sqlite_store(tmp: Path, index: Any, tag: str) -> Iterator[LgStore]:
    """LangGraph's `SqliteStore` on its own file, WAL and synchronous=NORMAL as mnemostore's backend runs."""
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp / f"lgstore-{tag}-theirs.db", check_same_thread=False, isolation_level=None)
    try:
        theirs = SqliteStore(conn, index=index)
        theirs.setup()
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        yield theirs
    finally:
        conn.close()


@contextmanager
def _in_memory(index: Any, tag: str) -> Iterator[LgStore]:
    from langgraph.store.memory import InMemoryStore

    yield InMemoryStore(index=index)


@contextmanager
def _postgres_store(base: str, index: Any, tag: str) -> Iterator[LgStore]:
    """LangGraph's `PostgresStore` (one connection, as `from_conn_string` makes it) in a schema of its own."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    schema = f"lgstore_theirs_{tag}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # in public, before search_path names the schema
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    with PostgresStore.from_conn_string(f"{base}&options=-csearch_path%3D{schema},public", index=index) as theirs:
        theirs.setup()
        yield theirs


def _peers(engine: str, tmp: Path, index: Any, base: str | None) -> Iterator[_Peer | tuple[str, str]]:
    """The comparisons to run on `engine`, or (name, why skipped)."""
    if engine == "sqlite":
        def sqlite_url(tag: str) -> str:
            return f"sqlite:///{tmp / f'lgstore-{tag}.db'}"

        yield _Peer("InMemoryStore", partial(_ours, sqlite_url, index), partial(_in_memory, index),
                    indexed=True, targets=False)
        try:
            with _sqlite_store(tmp, index, "probe"):
                pass
            with_index, note = index, ""
        except ImportError as exc:
            yield "SqliteStore", f"{type(exc).__name__}: {exc}"[:200]
            return
        except Exception as exc:  # no sqlite-vec, or a sqlite3 that cannot load extensions
            with_index, note = None, f"both without an index (SqliteStore's needs sqlite-vec: {exc})"[:200]
        yield _Peer("SqliteStore", partial(_ours, sqlite_url, with_index), partial(_sqlite_store, tmp, with_index),
                    indexed=with_index is not None, targets=True, note=note)
    elif base is not None:
        try:
            import langgraph.store.postgres  # noqa: F401
        except ImportError as exc:
            yield "PostgresStore", f"{type(exc).__name__}: {exc}"[:200]
            return
        def postgres_url(tag: str) -> str:  # HNSW built as PostgresStore builds it (pgvector's defaults)
            return f"{base}&schema=lgstore_{tag}&hnsw_m=16&hnsw_ef_construction=64"

        yield _Peer("PostgresStore", partial(_ours, postgres_url, index), partial(_postgres_store, base, index),
                    indexed=True, targets=True,
                    note="both index the text (HNSW, pgvector) with pgvector's build defaults (m 16, ef_construction "
                         "64), as PostgresStore does; mnemostore's own default builds at ef_construction 128")


def bench_langgraph_store(results: Results, engine: str, n: int, repeat: int, tmp: Path, queries: int = 50,
                          base: str | None = None) -> None:
    """MnemostoreStore on `engine` (sqlite, or postgres at `base`) beside LangGraph's stores."""
    items, index = _items(n), _index(n)
    for peer in _peers(engine, tmp, index, base):
        if isinstance(peer, tuple):
            results.skipped(f"langgraph store ({engine}) vs {peer[0]}", peer[1])
        else:
            _bench_peer(results, engine, peer, items, repeat, queries)


def _bench_peer(results: Results, engine: str, peer: _Peer, items: list[Item], repeat: int, queries: int) -> None:
    ops: dict[str, Callable[[LgStore], Callable[[int], object]]] = {
        "filter": lambda s: lambda i: s.search(("memories",), filter={"topic": TOPICS[i % 10]}, limit=K)}
    if peer.indexed:
        ops["query"] = lambda s: lambda i: s.search(("memories",), query=f"query {i}", limit=K)
    t: dict[str, list[float]] = {}
    changed = [(namespace, key, {**value, "n": -value["n"]}) for namespace, key, value in items]
    sides = [("ours", peer.ours), ("theirs", peer.theirs)]
    name = peer.name.lower()
    for r in range(repeat):
        with ExitStack() as stack:
            for who, make in sides if r % 2 == 0 else sides[::-1]:  # alternate who goes first
                single = stack.enter_context(make(f"{name}_{r}_{who}_single"))
                batch = stack.enter_context(make(f"{name}_{r}_{who}_batch"))
                t.setdefault(f"{who}_put", []).append(timed_clean(partial(_put_each, single, items)))
                t.setdefault(f"{who}_overwrite", []).append(timed_clean(partial(_put_each, single, changed)))
                t.setdefault(f"{who}_batch", []).append(timed_clean(partial(_put_batch, batch, items)))
                for what, op in ops.items():
                    gc.collect()
                    t.setdefault(f"{who}_{what}", []).append(per_call(op(single), queries))
                _check(f"{who} ({peer.name})", single, items, peer.indexed)
    m = {key: median(values) for key, values in t.items()}
    n = len(items)
    scope = engine if peer.indexed or not peer.targets else f"{engine}, no index"
    rows = (("put", f"put x{n:,}, one call each", "rec/s", n, True),
            ("overwrite", f"put x{n:,} over stored keys, one call each", "rec/s", n, True),
            ("batch", f"put x{n:,} in one batch", "rec/s", n, True),
            ("filter", f"search by filter, top {K} of {n:,}", "ms", 1, True),
            ("query", f"search by query, top {K} of {n:,}", "ms", 1, False))
    for what, label, unit, per, target in rows:
        if f"ours_{what}" not in m:
            continue
        row = Row(f"langgraph store ({scope}): MnemostoreStore {label}", m[f"ours_{what}"], m[f"theirs_{what}"],
                  unit=unit, per=per, baseline_name=peer.name, note=peer.note if what == "put" else "")
        results.add(at_least(row) if target and peer.targets else row)


def _put_each(store: LgStore, items: list[Item]) -> None:
    for item in items:
        store.put(*item)


def _put_batch(store: LgStore, items: list[Item]) -> None:
    from langgraph.store.base import PutOp

    store.batch([PutOp(*item) for item in items])


def _check(who: str, store: LgStore, items: list[Item], indexed: bool) -> None:
    """Every store found the same things: the first item by key (as its overwrite left it), ten of a topic,
    ten by query."""
    namespace, key, value = items[0]
    assert store.get(namespace, key).value == {**value, "n": -value["n"]}, f"{who}: wrong item"
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
        bench_langgraph_store(found, "sqlite", count, 3, Path(directory))
    print()
    print(found.table())
