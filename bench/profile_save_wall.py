"""Where a facade save's time goes in its own loop: `checkpoints.save(parent=None)` beside `SqliteSaver.put` of the
same 50 KB state, the sides taking turns (`--rounds` of `--n` calls each), per call: wall time, the calling
thread's user and system CPU time, and the CPU time of the process's other threads (our WAL checkpoint thread).
Callgrind (`profile_save.py`) counts a 50 KB memcpy as 50k instructions and no cache miss; this is the other view.

    python bench/profile_save_wall.py                          # varied text, as the store writes it
    python bench/profile_save_wall.py --without proof-json     # the same, the proof's JSON pass left out

`--without proof-json` is for measuring only: the state's proof packs its msgpack alone (`ormsgpack`, which also
refuses what is not JSON's types) and skips the sorted orjson dump that finds NUL, NaN and the ints JSON cannot
hold and that the state hash is taken of (every state then hashes alike). What it saves is what a one-pass
encoder that proves all of it would save.
"""

from __future__ import annotations

import argparse
import gc
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


def _per_call(run: Callable[[], object], n: int) -> list[float]:
    """`COLUMNS` of `run` (n calls), in microseconds a call."""
    gc.collect()
    before = _usage()
    run()
    wall, user, system, process = ((b - a) / n * 1e6 for a, b in zip(before, _usage(), strict=True))
    return [wall, user, system, process - user - system]


def _saves(saves: Any, state: dict[str, Any], n: int) -> None:
    for i in range(n):
        saves.save("run", state, parent=None, node_id=f"n{i}")


def _without_proof_json() -> None:
    """The state's proof without its JSON pass (measuring only: see the module's doc)."""
    import ormsgpack

    from mnemostore.core import jsonvalues, records

    def packed_only(value: Any, path: str) -> tuple[bytes, memoryview]:
        packed = ormsgpack.packb([[[[[value]]]]], option=jsonvalues._EXACT_TYPES)
        return b"{}", memoryview(packed)[jsonvalues._WRAPPING:]

    records.prove_json_document = packed_only  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", choices=("varied", "repeated"), default="varied")
    parser.add_argument("--n", type=int, default=500,
                        help="calls a round; CPU times count in clock ticks (~4 ms), so keep it in the hundreds")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--without", choices=("proof-json",))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from case_langgraph import checkpoints, put_run, sqlite_saver
    from data import checkpoint_state, varied_state

    import mnemostore

    if args.without == "proof-json":
        _without_proof_json()
    state = varied_state() if args.state == "varied" else checkpoint_state()
    n = args.n
    calls: dict[str, list[list[float]]] = {"save": [], "SqliteSaver.put": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in sorted(calls, reverse=r % 2 == 1):  # taking turns at going first
                if side == "save":
                    with mnemostore.open(f"sqlite:///{tmp}/ours-{r}.db") as store:
                        calls[side].append(_per_call(partial(_saves, store.checkpoints, state, n), n))
                else:
                    with sqlite_saver(Path(tmp) / f"theirs-{r}.db") as saver:
                        calls[side].append(_per_call(partial(put_run, saver, "run", checkpoints(saver, n, state)), n))
    print(f"us per call, {args.state} 50 KB state, medians of {args.rounds} rounds of {n:,}"
          f"{', without the proof JSON pass' if args.without else ''}")
    print(f"  {'':16s}" + "".join(f"{c:>15s}" for c in COLUMNS))
    medians = {side: [statistics.median(run[j] for run in runs) for j in range(len(COLUMNS))]
               for side, runs in calls.items()}
    for side, values in medians.items():
        print(f"  {side:16s}" + "".join(f"{v:15.1f}" for v in values))
    print(f"  wall ratio (SqliteSaver.put / save): {medians['SqliteSaver.put'][0] / medians['save'][0]:.2f}x")


if __name__ == "__main__":
    main()
