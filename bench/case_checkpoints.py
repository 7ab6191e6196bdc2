"""Checkpoint save and load of a 50 KB state (repeated text, then varied text) vs LangGraph's
`SqliteSaver.put` of the same state, and vs raw sqlite3 insert/select of the same JSON in WAL mode.
Each save row notes its CPU-time ratio too (this process's threads): on a shared machine the steadier
comparison. The reads (by id, latest) take turns with raw sqlite3's call by call, as the search rows do
(`harness.interleaved_samples`), and compare medians of one call: timed as blocks, one side's, then the
other's, a row caught the load of its moment (one commit's latest row read 0.65x and 1.41x)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from case_langgraph import STATES, checkpoints, put_run, sqlite_saver
from harness import MIN_RUNS, Results, Row, at_least, median, record_turns, timed_both, turns_note
from rawsqlite import connect, latest_checkpoint, load_checkpoint, save_checkpoint

import mnemostore
from mnemostore.core.protocol import LATEST_CHECKPOINT_ORDER

Reads = dict[str, Callable[[int], object]]
"""A side's reads after its writes, by timing key: `fn(i)` makes the i-th call."""
Side = Callable[[dict[str, list[float]], dict[str, Any], int, int, Path, contextlib.ExitStack], Reads]
"""Times a side's writes into `timings` and gives its reads, its store kept open on the stack."""
READS = (("load", "raw_load", False), ("latest", "raw_latest", True), ("latest_roots", "raw_latest_roots", True))
"""(ours, raw sqlite3's, whether it makes `few` calls, not n): the reads that take turns, each pair's own."""


def bench_checkpoints(results: Results, n: int, repeat: int, tmp: Path) -> None:
    for i, (kind, make_state) in enumerate(STATES):
        _bench_state(results, make_state(), kind, n, repeat, tmp / f"checkpoints-{i}")


def _bench_state(results: Results, state: dict[str, Any], kind: str, n: int, repeat: int, tmp: Path) -> None:
    tmp.mkdir()
    few = max(1, n // 5)  # latest(): few lookups on a run of n
    timings: dict[str, list[float]] = {}
    sides: list[Side] = [_ours, _raw]
    try:
        with sqlite_saver(tmp / "probe.db"):
            sides.append(_sqlite_saver)
    except ImportError as exc:
        results.skipped(f"checkpoint save{kind} vs SqliteSaver.put", f"{type(exc).__name__}: {exc}"[:200])
    for r in range(max(repeat, MIN_RUNS)):
        with contextlib.ExitStack() as stack:
            reads: Reads = {}
            # Alternate the order: the first side of a repeat grows the heap that the next ones
            # reuse, which moved a side's time by up to 2x.
            for side in sides if r % 2 == 0 else sides[::-1]:
                reads.update(side(timings, state, n, few, tmp / str(r), stack))
            _read_in_turns(timings, reads, n, few, first=r % 2 == 0)
    m = {key: median(values) for key, values in timings.items()}
    size = f"{len(mnemostore.Checkpoint(run_id='r', state=state).model_dump_json()) // 1000} KB{kind}"
    rows = []
    if "saver_put" in m:
        rows += [at_least(Row(f"checkpoint save {size} x{n:,} (parent=None)", m["save"], m["saver_put"], per=n,
                              baseline_name="SqliteSaver.put", note=_cpu(m, "save", "saver_put"))),
                 at_least(Row(f"checkpoint save {size} x{n:,} (default parent)", m["save_latest"], m["saver_put"],
                              per=n, baseline_name="SqliteSaver.put",
                              note="also links the run's latest checkpoint as parent per save; "
                                   + _cpu(m, "save_latest", "saver_put")))]
    rows += [
        Row(f"checkpoint save {size} x{n:,} (parent=None) vs raw", m["save"], m["raw_save"], per=n,
            baseline_name="sqlite3 INSERT + commit"),
        at_least(Row(f"checkpoint load by id {size} x{n:,}", m["load"], m["raw_load"], per=n,
                     baseline_name="sqlite3 SELECT by id", note=turns_note(m, "load", "raw_load"))),
        at_least(Row(f"checkpoint latest(run) {size} x{few:,}, run of {n:,}", m["latest"], m["raw_latest"], per=few,
                     baseline_name="sqlite3 ORDER BY seq DESC LIMIT 1", note=turns_note(m, "latest", "raw_latest"))),
        at_least(Row(f"checkpoint latest(run) {size} x{few:,}, run of {n:,} roots (parent=None)", m["latest_roots"],
                     m["raw_latest_roots"], per=few, baseline_name="sqlite3 ORDER BY seq DESC LIMIT 1",
                     note="every checkpoint of the run ties on sequence; "
                          + turns_note(m, "latest_roots", "raw_latest_roots"))),
        Row(f"checkpoint apply of a small update to {size} x{n:,}", m["apply"], m["save_latest"], per=n,
            baseline_name="save of the whole state, default parent",
            note="reads the latest checkpoint, folds {step, scratch} (last, merge), keeps the update beside the state"),
        Row(f"checkpoint merge of two {size} branches x{few:,}", m["merge"], m["save_latest"] / n * few, per=few,
            baseline_name="save of the whole state, default parent",
            note="branches of one apply each from a fork (untimed): reads tips, walks to the ancestor, folds, writes"),
    ]
    for row in rows:
        results.add(row)


def _record(timings: dict[str, list[float]], key: str, fn: Callable[[], object]) -> None:
    """Wall and CPU seconds of `fn`, after a full collection (the decoded 50 KB states kept alive
    make how many full collections a run costs depend on the heap's history)."""
    gc.collect()
    wall, cpu = timed_both(fn)
    timings.setdefault(key, []).append(wall)
    timings.setdefault(f"{key}_cpu", []).append(cpu)


def _read_in_turns(timings: dict[str, list[float]], reads: Reads, n: int, few: int, first: bool) -> None:
    """Each of `READS` taking turns with raw sqlite3's (`record_turns`, whose lead moves each call), ours
    leading the first turn if `first` (which changes every repeat)."""
    for ours, raw, is_few in READS:
        gc.collect()
        pair = (ours, raw) if first else (raw, ours)
        record_turns(timings, {key: reads[key] for key in pair}, few if is_few else n)


def _cpu(m: dict[str, float], ours: str, theirs: str) -> str:
    """The CPU-time ratio of two sides (their CPU seconds / ours), for a row's note."""
    return f"CPU time {m[theirs + '_cpu'] / m[ours + '_cpu']:.2f}x"


def _ours(timings: dict[str, list[float]], state: dict[str, Any], n: int, few: int, tmp: Path,
          stack: contextlib.ExitStack) -> Reads:
    cps = stack.enter_context(mnemostore.open(f"sqlite:///{tmp}-ours.db")).checkpoints
    ids: list[str] = []
    _record(timings, "save", lambda: ids.extend(cps.save("run-a", state, parent=None, node_id=f"n{i}").id
                                                 for i in range(n)))
    _record(timings, "save_latest", lambda: [cps.save("run-b", state) for _ in range(n)])
    latest = cps.latest("run-b")
    assert latest is not None and latest.state == state
    assert cps.latest("run-a") == cps.first({"run_id": "run-a"}, order_by=LATEST_CHECKPOINT_ORDER)
    cps.save("run-c", state, parent=None)
    _record(timings, "apply", lambda: [cps.apply("run-c", _small_update(i), reducers=_REDUCERS) for i in range(n)])
    applied = cps.latest("run-c")
    assert applied is not None and applied.state == {
        **state, "step": n - 1, "scratch": {**state.get("scratch", {}), "tokens": 48_000 + n - 1}}
    forks = [(cps.apply("run-c", _small_update(i), parent=applied, branch=f"a{i}", reducers=_REDUCERS),
              cps.apply("run-c", {"step": i}, parent=applied, branch=f"b{i}")) for i in range(few)]
    _record(timings, "merge", lambda: [cps.merge("run-c", pair, reducers=_REDUCERS, default="last")
                                       for pair in forks])
    return {"load": lambda i: cps.get(ids[i]), "latest": lambda i: cps.latest("run-b"),
            "latest_roots": lambda i: cps.latest("run-a")}


_REDUCERS = {"scratch": "merge"}


def _small_update(i: int) -> dict[str, Any]:
    """What one node of the benchmark's graph changes: a counter and one key of a nested object."""
    return {"step": i, "scratch": {"tokens": 48_000 + i}}


def _raw(timings: dict[str, list[float]], state: dict[str, Any], n: int, few: int, tmp: Path,
         stack: contextlib.ExitStack) -> Reads:
    conn = stack.enter_context(contextlib.closing(connect(Path(f"{tmp}-raw.db"))))

    def save_all() -> None:
        for i in range(n):
            save_checkpoint(conn, f"c{i}", "run-a", i, state)

    _record(timings, "raw_save", save_all)
    assert load_checkpoint(conn, f"c{n - 1}") == state
    latest = partial(_latest_of, conn)
    return {"raw_load": lambda i: load_checkpoint(conn, f"c{i}"), "raw_latest": latest, "raw_latest_roots": latest}


def _latest_of(conn: Any, i: int) -> Any:
    return latest_checkpoint(conn, "run-a")


def _sqlite_saver(timings: dict[str, list[float]], state: dict[str, Any], n: int, few: int, tmp: Path,
                  stack: contextlib.ExitStack) -> Reads:
    """LangGraph's SqliteSaver putting a thread of n checkpoints whose channel_values is the state."""
    with sqlite_saver(Path(f"{tmp}-sqlitesaver.db")) as saver:
        steps = checkpoints(saver, n, state)
        configs: list[Any] = []
        _record(timings, "saver_put", lambda: configs.extend(put_run(saver, "run-a", steps)))
        assert saver.get_tuple(configs[-1]).checkpoint["channel_values"] == state
    return {}
