"""Where a facade save's time goes in its own loop: `checkpoints.save(parent=None)` beside `SqliteSaver.put` of the
same 50 KB state, the sides taking turns (`--rounds` of `--n` calls each), per call: wall time, the calling
thread's user and system CPU time, and the CPU time of the process's other threads (our WAL checkpoint thread).
Callgrind (`profile_save.py`) counts a 50 KB memcpy as 50k instructions and no cache miss; this is the other view.

    python bench/profile_save_wall.py                          # varied text, as the store writes it
    python bench/profile_save_wall.py --n 1000 --without wal-limit   # the bench's burst, no writer checkpoint

Each round's calls are also timed one by one: the mean call of each fifth of the round (where in a burst the
time goes: the bench's 1,000 saves of the varied state pass `wal_checkpoints.LIMIT` near their end) and the
two slowest. Every round starts on files of its own after `os.sync()` and deletes them after: the dirty pages an
earlier round left behind otherwise reach the disk during a later one (it moved a round by up to 2x).

`--without` is for measuring only. `wal-limit`: the writer never checkpoints the WAL itself
(`LIMIT` out of reach), so the WAL grows for as long as the burst lasts; what it saves is the writer's checkpoint.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

COLUMNS = ("wall", "main user", "main sys", "other threads")


def _usage() -> tuple[float, ...]:
    """(wall, this thread's user and system CPU, the process's CPU) seconds so far."""
    own, every = resource.getrusage(resource.RUSAGE_THREAD), resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), own.ru_utime, own.ru_stime, every.ru_utime + every.ru_stime


FIFTHS = 5


def _per_call(run: Callable[[], list[float]], n: int) -> list[float]:
    """`COLUMNS` of `run` (n calls), in microseconds a call, then the mean call of each of `FIFTHS` parts of the
    run and its two slowest calls (from `run`'s one-by-one times)."""
    os.sync()  # the dirty pages of what ran before reach the disk now, not during this run
    gc.collect()
    before = _usage()
    each = run()
    wall, user, system, process = ((b - a) / n * 1e6 for a, b in zip(before, _usage(), strict=True))
    part = n // FIFTHS
    fifths = [statistics.mean(each[i * part:(i + 1) * part]) * 1e6 for i in range(FIFTHS)]
    slowest = sorted(each)[-2:]
    return [wall, user, system, process - user - system, *fifths, slowest[-1] * 1e6, slowest[0] * 1e6]


def _saves(saves: Any, state: dict[str, Any], n: int) -> list[float]:
    each = []
    clock = time.perf_counter
    for i in range(n):
        start = clock()
        saves.save("run", state, parent=None, node_id=f"n{i}")
        each.append(clock() - start)
    return each


def _puts(saver: Any, steps: list[Any]) -> list[float]:
    """`case_langgraph.put_run` of the steps, each put timed (this saver's `put` wrapped for the run)."""
    from case_langgraph import put_run

    each = []
    clock, put = time.perf_counter, saver.put

    def timed_put(*args: Any) -> Any:
        start = clock()
        try:
            return put(*args)
        finally:
            each.append(clock() - start)

    saver.put = timed_put
    try:
        put_run(saver, "run", steps)
    finally:
        del saver.put
    return each


def _without_wal_limit() -> None:
    """No checkpoint by the writer, however large the WAL grows (measuring only: see the module's doc)."""
    from mnemostore.backends.sqlite import wal_checkpoints

    wal_checkpoints.LIMIT = 2**62


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", choices=("varied", "repeated"), default="varied")
    parser.add_argument("--n", type=int, default=500,
                        help="calls a round; CPU times count in clock ticks (~4 ms), so keep it in the hundreds")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--without", choices=("wal-limit",), action="append", default=[])
    args = parser.parse_args()
    if args.n < FIFTHS:
        parser.error(f"--n must be at least {FIFTHS} (a round's calls are shown in fifths)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from case_langgraph import checkpoints, sqlite_saver
    from data import checkpoint_state, varied_state

    import mnemostore

    if "wal-limit" in args.without:
        _without_wal_limit()
    state = varied_state() if args.state == "varied" else checkpoint_state()
    n = args.n
    calls: dict[str, list[list[float]]] = {"save": [], "SqliteSaver.put": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in sorted(calls, reverse=r % 2 == 1):  # taking turns at going first
                with tempfile.TemporaryDirectory(dir=tmp) as files:
                    if side == "save":
                        with mnemostore.open(f"sqlite:///{files}/ours.db") as store:
                            calls[side].append(_per_call(partial(_saves, store.checkpoints, state, n), n))
                    else:
                        with sqlite_saver(Path(files) / "theirs.db") as saver:
                            calls[side].append(_per_call(partial(_puts, saver, checkpoints(saver, n, state)), n))
    print(f"us per call, {args.state} 50 KB state, medians of {args.rounds} rounds of {n:,}"
          + "".join(f", without {part}" for part in args.without))
    columns = (*COLUMNS, *(f"fifth {i + 1}" for i in range(FIFTHS)), "slowest", "next slowest")
    print(f"  {'':16s}" + "".join(f"{c:>14s}" for c in columns))
    medians = {side: [statistics.median(run[j] for run in runs) for j in range(len(columns))]
               for side, runs in calls.items()}
    for side, values in medians.items():
        print(f"  {side:16s}" + "".join(f"{v:14.1f}" for v in values))
    print(f"  wall ratio (SqliteSaver.put / save): {medians['SqliteSaver.put'][0] / medians['save'][0]:.2f}x")


if __name__ == "__main__":
    main()
