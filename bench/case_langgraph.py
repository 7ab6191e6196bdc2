"""LangGraph checkpoints through `MnemostoreSaver` vs LangGraph's own `SqliteSaver` and `PostgresSaver`.

Each saver puts the same run of checkpoints of a 50 KB state (every channel new at every
step, so every put writes the whole state) into its own tables on the same engine: one
SQLite file each (WAL, synchronous=NORMAL, as mnemostore's sqlite backend runs), and one
PostgreSQL started with pgserver for the run. Then each reads every checkpoint back by id,
and the thread's latest checkpoint (no id) a few times.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
from case_checkpoints import timed_clean
from case_postgres import postgres_server
from data import checkpoint_state
from harness import Results, Row, median

import mnemostore

Saver = Any
"""A LangGraph `BaseCheckpointSaver` (LangGraph is optional: not imported at module level)."""


def checkpoints(saver: Saver, n: int, state: dict[str, Any]) -> list[tuple[Any, dict[str, Any], dict[str, str]]]:
    """(checkpoint, metadata, new versions) of n steps, versions by the saver's own scheme."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    versions: dict[str, str] = {}
    steps = []
    for i in range(n):
        new = {channel: saver.get_next_version(versions.get(channel), None) for channel in state}
        versions.update(new)
        checkpoint = empty_checkpoint()
        checkpoint.update(id=str(uuid6(clock_seq=i)), channel_values=dict(state), channel_versions=dict(versions),
                          updated_channels=list(state))
        steps.append((checkpoint, {"source": "loop", "step": i, "parents": {}}, new))
    return steps


def _thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def put_run(saver: Saver, thread_id: str, steps: list[tuple[Any, dict[str, Any], dict[str, str]]]) -> list[Any]:
    """Put the steps in order, each with its parent's config, as a graph run does; their configs."""
    config: Any = _thread(thread_id)
    configs = []
    for checkpoint, metadata, new_versions in steps:
        config = saver.put(config, checkpoint, metadata, new_versions)
        configs.append(config)
    return configs


@contextmanager
def _sqlite_savers(tmp: Path) -> Iterator[dict[str, Saver]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from mnemostore.integrations.langgraph import MnemostoreSaver

    with mnemostore.open(f"sqlite:///{tmp / 'langgraph-ours.db'}") as store:
        conn = sqlite3.connect(tmp / "langgraph-sqlitesaver.db", check_same_thread=False)
        try:
            theirs = SqliteSaver(conn)
            theirs.setup()  # WAL
            conn.execute("PRAGMA synchronous = NORMAL")
            yield {"ours": MnemostoreSaver(store), "theirs": theirs}
        finally:
            conn.close()


@contextmanager
def _postgres_savers(tmp: Path) -> Iterator[dict[str, Saver]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from mnemostore.integrations.langgraph import MnemostoreSaver

    with postgres_server(tmp) as base, mnemostore.open(f"{base}&schema=langgraph") as store, \
            PostgresSaver.from_conn_string(base) as theirs:
        theirs.setup()
        yield {"ours": MnemostoreSaver(store), "theirs": theirs}


def bench_langgraph(results: Results, n: int, repeat: int, tmp: Path) -> None:
    engines: list[tuple[str, str, Callable[[Path], Any]]] = [
        ("sqlite", "SqliteSaver", _sqlite_savers), ("postgres", "PostgresSaver", _postgres_savers)]
    for engine, theirs_name, savers in engines:
        with ExitStack() as stack:
            try:
                pair = stack.enter_context(savers(tmp))
            except Exception as exc:  # LangGraph's saver or pgserver missing, a server that would not start
                results.skipped(f"langgraph checkpoints on {engine}", f"{type(exc).__name__}: {exc}"[:200])
                continue
            _bench_pair(results, engine, theirs_name, pair, n, repeat)


def _bench_pair(results: Results, engine: str, theirs_name: str, pair: dict[str, Saver], n: int, repeat: int) -> None:
    state = checkpoint_state()
    few = max(1, n // 5)
    t: dict[str, list[float]] = {f"{who}_{what}": [] for who in pair for what in ("put", "get", "latest")}
    for who, saver in pair.items():  # warm up: tables, pool, prepared statements
        configs = put_run(saver, "warm-up", checkpoints(saver, 2, state))
        loaded = saver.get_tuple(configs[-1])
        assert loaded.checkpoint["channel_values"] == state, f"{who} did not give the state back"
    for r in range(repeat):
        for who, saver in pair.items():  # interleaved, so drift hits both alike
            thread = f"thread-{r}"
            steps = checkpoints(saver, n, state)
            configs: list[Any] = []
            t[f"{who}_put"].append(timed_clean(lambda saver=saver, steps=steps, thread=thread, configs=configs:
                                               configs.extend(put_run(saver, thread, steps))))
            t[f"{who}_get"].append(timed_clean(lambda saver=saver, configs=configs:
                                               [saver.get_tuple(c) for c in configs]))
            t[f"{who}_latest"].append(timed_clean(lambda saver=saver, thread=thread:
                                                  [saver.get_tuple(_thread(thread)) for _ in range(few)]))
            latest = saver.get_tuple(_thread(thread))
            assert latest.config["configurable"]["checkpoint_id"] == steps[-1][0]["id"], f"{who}: wrong latest"
    m = {key: median(values) for key, values in t.items()}
    size = f"{len(orjson.dumps(state)) // 1000} KB"
    for what, label, count in (("put", f"put {size} state x{n:,}", n), ("get", f"get by id {size} x{n:,}", n),
                               ("latest", f"get latest (no id) x{few:,}, thread of {n:,}", few)):
        results.add(Row(f"langgraph {engine}: MnemostoreSaver {label}", m[f"ours_{what}"], m[f"theirs_{what}"],
                        unit="rec/s", per=count, baseline_name=theirs_name))
