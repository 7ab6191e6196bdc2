"""Instructions per saver call on the bench's graph: the `put` and `put_writes` calls a 150-step graph (`case_graph`)
makes, recorded once, then replayed on new threads by `MnemostoreSaver` and `SqliteSaver`, counted by callgrind.

    python bench/profile_graph_calls.py                    # put and put_writes, both savers (~6 minutes)
    python bench/profile_graph_calls.py --calls put_writes --sides ours

Where `profile_graph.py` counts whole graph steps (LangGraph's own work, and our WAL checkpoint thread's, which
moves from run to run), this counts the saver calls alone, on the main thread, with the WAL checkpoint thread
never woken and the garbage collector off: a side counts alike run after run (within ~1%), so a change to the
write path shows as what it saves a call.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path
from typing import Any

SIDES = ("ours", "theirs")
CALLS = ("put", "put_writes")
WARM = 40
"""Recorded calls replayed before the counted ones (on a thread of their own)."""


def _recorded(where: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Each call's arguments as the graph made them (the configurable alone: the rest is LangGraph's callbacks)."""
    from case_graph import build_graph, run_graph
    from case_langgraph import _sqlite_savers

    recorded: dict[str, list[tuple[Any, ...]]] = {name: [] for name in CALLS}
    (where / "recording").mkdir(parents=True)
    with _sqlite_savers(where / "recording") as pair:
        saver = pair["theirs"]
        for name in CALLS:
            method = getattr(saver, name)

            def record(*args: Any, _method: Any = method, _name: str = name) -> Any:
                conf = {key: args[0]["configurable"][key] for key in ("thread_id", "checkpoint_ns", "checkpoint_id")
                        if key in args[0]["configurable"]}
                recorded[_name].append(({"configurable": conf}, *args[1:]))
                return _method(*args)

            setattr(saver, name, record)
        run_graph(build_graph(150).compile(checkpointer=saver), "recorded", 150)
    return recorded


def _on_thread(args: tuple[Any, ...], thread_id: str) -> tuple[Any, ...]:
    return ({"configurable": {**args[0]["configurable"], "thread_id": thread_id}}, *args[1:])


def _run(side: str, name: str, rounds: int, where: Path) -> None:
    """WARM calls, then `rounds` rounds of every recorded `name` call on `side`'s saver (what callgrind counts)."""
    from case_langgraph import _sqlite_savers

    from mnemostore.backends.sqlite import wal_checkpoints

    wal_checkpoints.START = wal_checkpoints.LIMIT = 1 << 40  # the thread's work is not a call's
    recorded = _recorded(where)[name]
    (where / "replay").mkdir()
    with _sqlite_savers(where / "replay") as pair:
        call = getattr(pair[side], name)
        for args in recorded[:WARM]:
            call(*_on_thread(args, "warm-up"))
        todo = [_on_thread(args, f"round-{r}") for r in range(rounds) for args in recorded]
        gc.collect()
        gc.disable()
        for args in todo:
            call(*args)


def main() -> None:
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    from profile_save import print_sides_per

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--calls", default=",".join(CALLS))
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--call", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _run(args.run, args.call, args.rounds, Path(args.dir))
        return
    with tempfile.TemporaryDirectory() as tmp:
        per_round = {name: len(calls) for name, calls in _recorded(Path(tmp)).items()}
    for name in args.calls.split(","):

        def script(side: str, rounds: int, out: Path, name: str = name) -> list[str]:
            return [__file__, "--run", side, "--call", name, "--rounds", str(rounds), "--dir", str(out)]

        with tempfile.TemporaryDirectory() as tmp:
            print(f"instructions per {name} ({args.rounds} rounds of the graph's {per_round[name]} calls less 0)")
            print_sides_per(args.sides.split(","), script, args.rounds, args.rounds * per_round[name], Path(tmp))


if __name__ == "__main__":
    main()
