"""LangGraph through mnemostore vs LangGraph's own savers and stores, on sqlite and postgres.

The group's rows: `MnemostoreSaver` beside `SqliteSaver` and `PostgresSaver` (put, get_tuple by id
and latest, list, put_writes) for the 50 KB repeated-text state and the varied-text one; a compiled
graph run with each saver (`case_graph`); `MnemostoreStore` beside `SqliteStore` and `PostgresStore`
(`case_langgraph_store`). Each saver writes into its own tables on the same engine: one SQLite file
each (WAL, synchronous=NORMAL, as mnemostore's sqlite backend runs), and one PostgreSQL started with
pgserver for the group.
"""

from __future__ import annotations

import gc
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from case_graph import bench_graph
from case_langgraph_store import bench_langgraph_store
from case_postgres import postgres_server
from data import checkpoint_state, varied_state
from harness import MIN_RUNS, Results, Row, at_least, median, record_turns, timed_clean, turns_note

import mnemostore

Saver = Any
"""A LangGraph `BaseCheckpointSaver` (LangGraph is optional: not imported at module level)."""
Step = tuple[Any, dict[str, Any], dict[str, str]]
LIST_LIMIT = 10
STATES: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (("", checkpoint_state),
                                                                (", varied text", varied_state))
"""(label suffix, state): the repeated-sentence 50 KB state of the targets, then varied text."""


def checkpoints(saver: Saver, n: int, state: dict[str, Any]) -> list[Step]:
    """(checkpoint, metadata, new versions) of n steps, versions by the saver's own scheme."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    versions: dict[str, str] = {}
    steps = []
    for i in range(n):
        new = {channel: saver.get_next_version(versions.get(channel), None) for channel in state}
        versions.update(new)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=i))
        checkpoint["channel_values"] = dict(state)
        checkpoint["channel_versions"] = dict(versions)
        checkpoint["updated_channels"] = list(state)
        steps.append((checkpoint, {"source": "loop", "step": i, "parents": {}}, new))
    return steps


def _thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def put_run(saver: Saver, thread_id: str, steps: list[Step]) -> list[Any]:
    """Put the steps in order, each with its parent's config, as a graph run does; their configs."""
    config: Any = _thread(thread_id)
    configs = []
    for checkpoint, metadata, new_versions in steps:
        config = saver.put(config, checkpoint, metadata, new_versions)
        configs.append(config)
    return configs


def task_writes(state: dict[str, Any], i: int) -> list[tuple[str, Any]]:
    """What one task of a step writes: two of the state's messages, a counter and a ~1.5 KB tool result."""
    messages = state["messages"]
    first = i % (len(messages) - 1)
    return [("messages", messages[first:first + 2]), ("step", i),
            ("tool_result", {"ok": True, "call": f"call-{i}", "output": messages[first]["content"] * 4})]


@contextmanager
def sqlite_saver(path: Path) -> Iterator[Saver]:
    """LangGraph's `SqliteSaver` on its own file: WAL (its `setup()` sets it) and synchronous=NORMAL."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        conn.execute("PRAGMA synchronous = NORMAL")
        yield saver
    finally:
        conn.close()


@contextmanager
def _sqlite_savers(tmp: Path) -> Iterator[dict[str, Saver]]:
    from mnemostore.integrations.langgraph import MnemostoreSaver

    with mnemostore.open(f"sqlite:///{tmp / 'langgraph-ours.db'}") as store, \
            sqlite_saver(tmp / "langgraph-sqlitesaver.db") as theirs:
        yield {"ours": MnemostoreSaver(store), "theirs": theirs}


@contextmanager
def _postgres_savers(base: str) -> Iterator[dict[str, Saver]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from mnemostore.integrations.langgraph import MnemostoreSaver

    with mnemostore.open(f"{base}&schema=langgraph") as store, PostgresSaver.from_conn_string(base) as theirs:
        theirs.setup()
        yield {"ours": MnemostoreSaver(store), "theirs": theirs}


def bench_langgraph(results: Results, n: int, graph_steps: int, store_n: int, repeat: int, tmp: Path,
                    queries: int) -> None:
    """Every row of the group, sqlite first, then postgres on one server started for the group."""
    with ExitStack() as stack:
        base: str | None = None
        try:
            base = stack.enter_context(postgres_server(tmp))
        except Exception as exc:  # pgserver missing, a server that would not start
            pg_problem = f"{type(exc).__name__}: {exc}"[:200]
        engines: list[tuple[str, str, Callable[[], Any]]] = [
            ("sqlite", "SqliteSaver", lambda: _sqlite_savers(tmp))]
        if base is not None:
            engines.append(("postgres", "PostgresSaver", lambda: _postgres_savers(base)))
        for engine, theirs_name, savers in engines:
            with ExitStack() as pair_stack:
                try:
                    pair = pair_stack.enter_context(savers())
                except Exception as exc:  # LangGraph's saver missing
                    results.skipped(f"langgraph checkpoints on {engine}", f"{type(exc).__name__}: {exc}"[:200])
                    pair = None
                if pair is not None:
                    for kind, make_state in STATES:
                        _bench_pair(results, engine, theirs_name, pair, make_state(), kind, n, repeat)
                    bench_graph(results, engine, theirs_name, pair, graph_steps, repeat)
            bench_langgraph_store(results, engine, store_n, repeat, tmp, queries, base)
        if base is None:
            results.skipped("langgraph on postgres", pg_problem)


def _bench_pair(results: Results, engine: str, theirs_name: str, pair: dict[str, Saver], state: dict[str, Any],
                kind: str, n: int, repeat: int) -> None:
    few = max(1, n // 5)
    t: dict[str, list[float]] = {}
    for who, saver in pair.items():  # warm up: tables, pool, prepared statements
        configs = put_run(saver, f"warm-up{kind}", checkpoints(saver, 2, state))
        saver.put_writes(configs[-1], task_writes(state, 0), str(uuid.uuid4()))
        loaded = saver.get_tuple(configs[-1])
        assert loaded.checkpoint["channel_values"] == state, f"{who} did not give the state back"
        assert len(list(saver.list(_thread(f"warm-up{kind}")))) == 2, f"{who}: wrong list"
    sides = list(pair.items())
    for r in range(max(repeat, MIN_RUNS)):
        # Alternate who goes first: the first side of a repeat grows the heap the second reuses.
        _time_savers(t, dict(sides if r % 2 == 0 else sides[::-1]), state, f"thread{kind}-{r}", n, few)
    m = {key: median(values) for key, values in t.items()}
    size = f"{len(orjson.dumps(state)) // 1000} KB{kind}"
    writes = len(orjson.dumps(task_writes(state, 0))) // 100 / 10
    rows = (("put", f"put {size} state x{n:,}", "rec/s", n),
            ("get", f"get_tuple by id {size} x{n:,}", "rec/s", n),
            ("latest", f"get_tuple latest (no id) {size} x{few:,}, thread of {n:,}", "rec/s", few),
            ("list", f"list a thread of {n:,} ({size})", "rec/s", n),
            ("list10", f"list limit={LIST_LIMIT} ({size}) x{few:,}, thread of {n:,}", "ms", few),
            ("writes", f"put_writes x{n:,} (3 channels, {writes:.1f} KB{kind})", "rec/s", n))
    for what, label, unit, per in rows:
        by_mean = what in MEANS
        note = turns_note(m, f"ours_{what}", f"theirs_{what}", by_mean=by_mean) if what in READS + MEANS else ""
        by = "_mean" if by_mean else ""
        results.add(at_least(Row(f"langgraph {engine}: MnemostoreSaver {label}", m[f"ours_{what}{by}"],
                                 m[f"theirs_{what}{by}"], unit=unit, per=per, baseline_name=theirs_name, note=note)))


READS = ("get", "latest", "list10")
"""The saver rows whose calls take turns between the sides (`_time_savers`), compared by a call's median."""
MEANS = ("writes",)
"""The saver rows whose calls take turns, compared by a call's mean: what some calls pay for the others
(SqliteSaver checkpoints its WAL inside a commit) counts."""


def _time_savers(t: dict[str, list[float]], pair: dict[str, Saver], state: dict[str, Any], thread: str,
                 n: int, few: int) -> None:
    """One repeat of the pair, in its order: each writes a thread of n puts (timed as a block, one side then
    the other: a block holds what some calls pay for the others, SqliteSaver's WAL checkpoints); then the reads
    of `READS` take turns call by call (`harness.interleaved_samples`: a block of one side's reads caught the load
    of its moment), a call's median and mean times the calls; then each lists the thread (a block), and they
    add one task's writes per checkpoint in turns (`MEANS`: a block of a commit's flushes swung a postgres
    row by +-15% from run to run)."""
    steps = {who: checkpoints(saver, n, state) for who, saver in pair.items()}
    writes = [(task_writes(state, i), str(uuid.uuid4())) for i in range(n)]
    configs: dict[str, list[Any]] = {who: [] for who in pair}
    listed: dict[str, list[Any]] = {who: [] for who in pair}
    for who, saver in pair.items():
        t.setdefault(f"{who}_put", []).append(timed_clean(partial(_extend, configs[who], put_run, saver, thread,
                                                                   steps[who])))
    reads: dict[str, Callable[[Saver, list[Any]], Callable[[int], object]]] = {
        "get": lambda saver, configs: lambda i: saver.get_tuple(configs[i]),
        "latest": lambda saver, configs: lambda i: saver.get_tuple(_thread(thread)),
        "list10": lambda saver, configs: lambda i: list(saver.list(_thread(thread), limit=LIST_LIMIT)),
    }
    for what, read in reads.items():
        calls = n if what == "get" else few
        gc.collect()
        record_turns(t, {f"{who}_{what}": read(saver, configs[who]) for who, saver in pair.items()}, calls)
    for who, saver in pair.items():
        t.setdefault(f"{who}_list", []).append(timed_clean(partial(_extend, listed[who], saver.list, _thread(thread))))
    gc.collect()
    record_turns(t, {f"{who}_writes": partial(_put_writes, saver, configs[who], writes) for who, saver in pair.items()},
                 n)
    for who, saver in pair.items():
        _check(who, saver, steps[who], configs[who], listed[who], writes, state)


def _extend(into: list[Any], call: Callable[..., Any], *args: Any) -> None:
    into.extend(call(*args))


def _put_writes(saver: Saver, configs: list[Any], writes: list[tuple[list[tuple[str, Any]], str]], i: int) -> None:
    """The i-th checkpoint's task's writes."""
    task, task_id = writes[i]
    saver.put_writes(configs[i], task, task_id)


def _check(who: str, saver: Saver, steps: list[Step], configs: list[Any], listed: list[Any],
           writes: list[tuple[list[tuple[str, Any]], str]], state: dict[str, Any]) -> None:
    """What a side wrote and listed is what it was given."""
    assert [c.config["configurable"]["checkpoint_id"] for c in listed] == [s[0]["id"] for s in reversed(steps)], \
        f"{who}: wrong list"
    last = saver.get_tuple(configs[-1])
    assert last.checkpoint["channel_values"] == state, f"{who}: wrong state"
    assert [(c, v) for _, c, v in last.pending_writes] == writes[-1][0], f"{who}: wrong writes"
