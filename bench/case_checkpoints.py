"""Checkpoint save and load of a 50 KB state vs raw sqlite3 insert/select of the same JSON in WAL mode."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

from data import checkpoint_state
from harness import Results, Row, median, timed
from rawsqlite import connect, latest_checkpoint, load_checkpoint, save_checkpoint

import mnemostore


def timed_clean(fn: Callable[[], object]) -> float:
    """`timed` after a full garbage collection: both sides keep ~1,000 decoded 50 KB states
    alive, and how many full collections that costs depends on the heap's history (up to 2x)."""
    gc.collect()
    return timed(fn)


def bench_checkpoints(results: Results, n: int, repeat: int, tmp: Path) -> None:
    state = checkpoint_state()
    few = max(1, n // 5)  # the context rows: a run of n/5 checkpoints, n/5 lookups
    timings: dict[str, list[float]] = {key: [] for key in
                                       ("save", "save_latest", "load", "latest", "raw_save", "raw_load", "raw_latest")}
    for r in range(repeat):
        # Alternate who goes first: the first side of a repeat grows the heap that the
        # second then reuses, which moved a side's load time by up to 2x.
        sides = (_ours, _raw) if r % 2 == 0 else (_raw, _ours)
        for side in sides:
            side(timings, state, n, few, tmp, r)
    m = {key: median(values) for key, values in timings.items()}
    size = f"{len(mnemostore.Checkpoint(run_id='r', state=state).model_dump_json()) // 1000} KB"
    rows = [
        Row(f"checkpoint save {size} x{n:,} (parent=None)", m["save"], m["raw_save"], per=n,
            baseline_name="sqlite3 INSERT + commit", target=">= 1.00x"),
        Row(f"checkpoint save {size} x{few:,} (default parent: latest)", m["save_latest"], m["raw_save"] / n * few,
            per=few, baseline_name="sqlite3 INSERT + commit",
            note="also looks up the run's latest checkpoint per save"),
        Row(f"checkpoint load by id {size} x{n:,}", m["load"], m["raw_load"], per=n,
            baseline_name="sqlite3 SELECT by id", target=">= 1.00x"),
        Row(f"checkpoint latest(run) {size} x{few:,}, run of {few:,}", m["latest"], m["raw_latest"], per=few,
            baseline_name="sqlite3 ORDER BY seq DESC LIMIT 1"),
    ]
    for row in rows:
        if row.target:
            row.met = row.ratio is not None and row.ratio >= 1.0
        results.add(row)


def _ours(timings: dict[str, list[float]], state: dict[str, object], n: int, few: int, tmp: Path, r: int) -> None:
    with mnemostore.open(f"sqlite:///{tmp / f'checkpoints-{r}.db'}") as store:
        ids: list[str] = []
        cps = store.checkpoints

        def save_roots() -> None:
            ids.extend(cps.save("run-a", state, parent=None, node_id=f"n{i}").id for i in range(n))

        timings["save"].append(timed_clean(save_roots))
        timings["save_latest"].append(timed_clean(lambda: [cps.save("run-b", state) for _ in range(few)]))
        timings["load"].append(timed_clean(lambda: [cps.get(i) for i in ids]))
        timings["latest"].append(timed_clean(lambda: [cps.latest("run-b") for _ in range(few)]))


def _raw(timings: dict[str, list[float]], state: dict[str, object], n: int, few: int, tmp: Path, r: int) -> None:
    conn = connect(tmp / f"checkpoints-raw-{r}.db")
    timings["raw_save"].append(timed_clean(lambda: [save_checkpoint(conn, f"c{i}", "run-a", i, state)
                                                    for i in range(n)]))
    timings["raw_load"].append(timed_clean(lambda: [load_checkpoint(conn, f"c{i}") for i in range(n)]))
    for i in range(few):
        save_checkpoint(conn, f"b{i}", "run-b", i, state)
    timings["raw_latest"].append(timed_clean(lambda: [latest_checkpoint(conn, "run-b") for _ in range(few)]))
    conn.close()
