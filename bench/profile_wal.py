"""What a WAL checkpoint design costs per call, on every thread: callgrind instructions and process CPU
(user + sys, which counts the page writes and fsyncs of checkpoints callgrind does not see), for
`MnemostoreSaver` on sqlite beside LangGraph's `SqliteSaver`.

    python bench/profile_wal.py                          # every op, both sides, callgrind and CPU
    python bench/profile_wal.py --ops put,read --how cpu --n 2000

Ops: `put` (a varied 50 KB state), `writes` (`put_writes` of one task), `read` (`get_tuple` by id right
after a phase of 300 puts), `graph` (a compiled 150-step graph run, `case_graph`). Each side runs in a
process of its own twice, with 0 and n calls after the same warm-up; the difference divided by n is one
call's cost, the checkpoints the calls cause included (the store is closed, and its thread joined, inside
what is counted). Under callgrind threads run one at a time, so a thread's timing differs from a free run.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from profile_save import callgrind_prefix, callgrind_totals, compile_first

OPS = ("put", "writes", "read", "graph")
WARM = 20
WRITE_PHASE = 300
"""Puts before a `read` run's reads: what a read right after an agent's steps finds in the WAL."""
GRAPH_STEPS = 150


@contextmanager
def _saver(side: str, where: Path) -> Iterator[Any]:
    from case_langgraph import sqlite_saver

    if side == "theirs":
        with sqlite_saver(where / "theirs.db") as saver:
            yield saver
        return
    import mnemostore
    from mnemostore.integrations.langgraph import MnemostoreSaver

    with mnemostore.open(f"sqlite:///{where / 'ours.db'}") as store:
        yield MnemostoreSaver(store)


def _run(side: str, op: str, n: int, where: Path) -> None:
    """`op` WARM + n times (n graph runs) on `side`'s saver, in this process; prints wall and CPU seconds
    of the n calls through the store's close."""
    from case_graph import build_graph, run_graph
    from case_langgraph import checkpoints, put_run, task_writes
    from data import varied_state

    state = varied_state()
    with _saver(side, where) as saver:
        if op == "graph":
            graph = build_graph(GRAPH_STEPS).compile(checkpointer=saver)
            run_graph(graph, "warm", GRAPH_STEPS)
            began, cpu = time.perf_counter(), _cpu()
            for i in range(n):
                run_graph(graph, f"run-{i}", GRAPH_STEPS)
        else:
            ahead = WARM + (WRITE_PHASE if op == "read" else 0)
            steps = checkpoints(saver, ahead + (n if op == "put" else 0), state)
            configs = put_run(saver, "run", steps[:ahead])
            rest = steps[ahead:]
            writes = [(task_writes(state, i), str(uuid.uuid4())) for i in range(n)]
            began, cpu = time.perf_counter(), _cpu()
            if op == "put":
                put_run(saver, "run", rest) if rest else None
            elif op == "writes":
                for task, task_id in writes:
                    saver.put_writes(configs[-1], task, task_id)
            else:
                for i in range(n):
                    saver.get_tuple(configs[-1 - i % 50])
    user, sys_ = _cpu()
    print(f"{time.perf_counter() - began} {user - cpu[0]} {sys_ - cpu[1]}")


def _cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of every thread of the process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _child(side: str, op: str, n: int, where: Path, valgrind: bool) -> tuple[float, float, float, int]:
    """(wall s, user CPU s, system CPU s, instructions on every thread, 0 without valgrind) of one run."""
    out = where / f"{side}-{op}-{n}-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    command = [sys.executable, __file__, "--run", side, "--ops", op, "--n", str(n), "--dir", str(out)]
    compile_first()  # no run's CPU holds compiling
    if valgrind:
        command = [*callgrind_prefix(out), *command]
    done = subprocess.run(command, check=True, capture_output=True, text=True,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    wall, user, system = (float(x) for x in done.stdout.split()[-3:])
    return wall, user, system, sum(callgrind_totals(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--sides", default="ours,theirs")
    parser.add_argument("--n", type=int, default=0, help="calls (graph: runs); default 200 (graph 2)")
    parser.add_argument("--how", choices=("both", "callgrind", "cpu"), default="both")
    parser.add_argument("--repeat", type=int, default=3, help="CPU runs of each side, the median kept")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.run:
        _run(args.run, args.ops, args.n, Path(args.dir))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for op in args.ops.split(","):
            n = args.n or (2 if op == "graph" else 200)
            for side in args.sides.split(","):
                line = f"{op:7s} {side:7s}"
                if args.how in ("both", "callgrind"):
                    base, full = (_child(side, op, k, Path(tmp), True)[3] for k in (0, n))
                    line += f"  instructions/call {(full - base) / n:12,.0f}"
                if args.how in ("both", "cpu"):
                    runs = [_child(side, op, n, Path(tmp), False)[:3] for _ in range(args.repeat)]
                    for what, column in (("wall", 0), ("user", 1), ("sys", 2)):
                        values = sorted(r[column] for r in runs)
                        line += f"  {what} {values[len(values) // 2] / n * 1e6:7,.0f}"
                    totals = sorted(r[1] + r[2] for r in runs)
                    line += f"  cpu {totals[len(totals) // 2] / n * 1e6:7,.0f} us/call"
                print(line, flush=True)


if __name__ == "__main__":
    main()
