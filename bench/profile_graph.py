"""Where a LangGraph graph step's work goes with `MnemostoreSaver` beside `SqliteSaver`: the bench's graph
(`case_graph`, varied text) run on each saver, counted two ways.

    python bench/profile_graph.py                 # instructions per step under callgrind (needs valgrind)
    python bench/profile_graph.py --methods       # CPU time per saver call, by method (no valgrind)

Instructions: each side runs the graph under callgrind after one warm-up run, with 0 and `--runs` runs of
`--steps` steps; the difference divided by the steps is one step's instructions, on the main thread (the
graph's loop: LangGraph's own work, and `get_tuple` once a run) and on the other threads (LangGraph's
executor, where the node, `put` and `put_writes` run with its default "async" durability; mnemostore's WAL
checkpoint thread). Which thread runs a task moves from run to run (a 60-step run once counted 1.51M on our
main thread and 1.79M on SqliteSaver's, with totals of 2.30M and 2.31M): compare totals, and runs of 150 steps.

Methods: both savers' `put`, `put_writes`, `get_tuple` wrapped to add up the calling thread's CPU time
(`time.thread_time`), over `--runs` runs taking turns; the mean per call.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIDES = ("ours", "theirs")
METHODS = ("put", "put_writes", "get_tuple")


def _run(side: str, runs: int, steps: int, where: Path) -> None:
    """A warm-up run, then `runs` runs of the graph on `side`'s saver (what callgrind counts)."""
    from case_graph import build_graph, run_graph
    from case_langgraph import _sqlite_savers

    with _sqlite_savers(where) as pair:
        graph = build_graph(steps).compile(checkpointer=pair[side])
        run_graph(graph, "warm-up", steps)
        for r in range(runs):
            run_graph(graph, f"run-{r}", steps)


def _timed(saver: Any, name: str, spent: dict[str, list[float]]) -> None:
    """Wrap `saver.name` (an instance attribute over the method) to add each call's thread CPU to `spent[name]`."""
    method: Callable[..., Any] = getattr(saver, name)
    totals = spent.setdefault(name, [0, 0.0])

    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            totals[0] += 1
            totals[1] += time.thread_time() - start

    setattr(saver, name, timed)


def print_methods(runs: int, steps: int) -> None:
    """Each saver method's CPU per call in the graph, both savers taking turns run by run."""
    from case_graph import build_graph, run_graph
    from case_langgraph import _sqlite_savers

    with tempfile.TemporaryDirectory() as tmp, _sqlite_savers(Path(tmp)) as pair:
        builder = build_graph(steps)
        graphs = {who: builder.compile(checkpointer=saver) for who, saver in pair.items()}
        for who, graph in graphs.items():
            run_graph(graph, f"warm-up-{who}", steps)
        spent: dict[str, dict[str, list[float]]] = {who: {} for who in pair}
        for who, saver in pair.items():
            for name in METHODS:
                _timed(saver, name, spent[who])
        order = list(graphs)
        for r in range(runs):
            for who in order if r % 2 == 0 else order[::-1]:
                run_graph(graphs[who], f"run-{r}", steps)
        print(f"CPU per call of the calling thread, graph of {steps} steps, {runs} runs each")
        for name in METHODS:
            cells = []
            for who in SIDES:
                calls, seconds = spent[who][name]
                per_call = f"{seconds / calls * 1e6:7.1f} us ({calls / runs:.0f} a run)" if calls else "-"
                cells.append(f"{who} {per_call}")
            print(f"  {name:11s} " + "   ".join(cells))


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from profile_save import print_sides_per

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--methods", action="store_true", help="CPU time per saver call instead (no valgrind)")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _run(args.run, args.runs, args.steps, Path(args.dir))
        return
    if args.methods:
        print_methods(max(args.runs, 6), args.steps)
        return
    def script(side: str, runs: int, out: Path) -> list[str]:
        return [__file__, "--run", side, "--runs", str(runs), "--steps", str(args.steps), "--dir", str(out)]

    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per step, graph of {args.steps} steps ({args.runs} runs less 0, after 1)")
        print_sides_per(args.sides.split(","), script, args.runs, args.runs * args.steps, Path(tmp))

if __name__ == "__main__":
    main()
