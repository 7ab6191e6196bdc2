"""One saver call's cost, `MnemostoreSaver` beside LangGraph's saver on the same engine, the two taking turns
call by call (`harness.interleaved_samples`): the bench's rows time blocks of one side's calls, and on a
shared machine a block catches the load of its moment (its runs move by 10-40%); here both sides see it.

    python bench/profile_saver_calls.py                        # sqlite, both states
    python bench/profile_saver_calls.py --engine postgres --rounds 3

Each round writes a thread of `--n` checkpoints on each side as the bench's rows do (`case_langgraph`), then
reads them back, lists the thread (limit 10) and stores one task's writes per checkpoint. Per call it
prints the median and the mean of the rounds' medians and means: the median is the call itself, the mean
also holds what some calls pay for the others (SqliteSaver checkpoints its WAL inside the commit that
crosses SQLite's threshold; mnemostore's sqlite backend does it in a thread of its own: `wal_checkpoints`).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CALLS = ("put", "get", "latest", "list10", "put_writes")


def _round(pair: dict[str, Any], state: dict[str, Any], thread: str, n: int,
           samples: dict[tuple[str, str], list[float]]) -> None:
    """One thread of `n` checkpoints per side, every call of `CALLS` timed with the sides taking turns."""
    from case_langgraph import LIST_LIMIT, _thread, checkpoints, task_writes
    from harness import interleaved_samples

    sides = list(pair)
    steps = {who: checkpoints(saver, n, state) for who, saver in pair.items()}
    configs: dict[str, list[Any]] = {who: [] for who in sides}
    last: dict[str, Any] = {who: _thread(thread) for who in sides}
    writes = [(task_writes(state, i), str(uuid.uuid4())) for i in range(n)]

    def put(who: str) -> Callable[[int], object]:
        def call(i: int) -> None:
            last[who] = pair[who].put(last[who], *steps[who][i])
            configs[who].append(last[who])
        return call

    calls: dict[str, Callable[[str], Callable[[int], object]]] = {
        "put": put,
        "get": lambda who: lambda i: pair[who].get_tuple(configs[who][i]),
        "latest": lambda who: lambda i: pair[who].get_tuple(_thread(thread)),
        "list10": lambda who: lambda i: list(pair[who].list(_thread(thread), limit=LIST_LIMIT)),
        "put_writes": lambda who: lambda i: pair[who].put_writes(configs[who][i], *writes[i]),
    }
    for name in CALLS:
        gc.collect()
        count = n if name in ("put", "get", "put_writes") else max(1, n // 5)
        for who, values in interleaved_samples({who: calls[name](who) for who in sides}, count).items():
            samples.setdefault((name, who), []).extend([statistics.median(values), statistics.mean(values)])


@contextmanager
def _pair(engine: str, tmp: Path) -> Iterator[dict[str, Any]]:
    from case_langgraph import _postgres_savers, _sqlite_savers

    if engine == "sqlite":
        with _sqlite_savers(tmp) as pair:
            yield pair
        return
    from case_postgres import postgres_server

    with postgres_server(tmp) as base, _postgres_savers(base) as pair:
        yield pair


def main() -> None:
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]  # the bench's modules; `tests` for the postgres server
    from data import checkpoint_state, varied_state

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--n", type=int, default=200, help="checkpoints a round writes on each side")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, _pair(args.engine, Path(tmp)) as pair:
        print(f"per call on {args.engine}, sides taking turns call by call, {args.rounds} rounds of {args.n} "
              "checkpoints: median and mean (us), theirs/ours")
        for label, make in (("repeated", checkpoint_state), ("varied", varied_state)):
            state = make()
            samples: dict[tuple[str, str], list[float]] = {}
            for r in range(args.rounds):
                _round(pair, state, f"calls-{label}-{r}", args.n, samples)
            for name in CALLS:
                ours, theirs = samples[(name, "ours")], samples[(name, "theirs")]
                (o_med, o_mean), (t_med, t_mean) = ((statistics.median(values[0::2]), statistics.median(values[1::2]))
                                                    for values in (ours, theirs))
                print(f"  {label:8s} {name:10s} median {o_med * 1e6:8.1f} vs {t_med * 1e6:8.1f}  {t_med / o_med:5.2f}x"
                      f"   mean {o_mean * 1e6:8.1f} vs {t_mean * 1e6:8.1f}  {t_mean / o_mean:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
