"""Instructions per checkpoint read, counted by callgrind: `MnemostoreSaver` beside `SqliteSaver` (get_tuple by
id, latest, list) and the facade's `checkpoints.get` / `latest` beside raw sqlite3, after a thread of `--written`
checkpoints (read by id in the order written, as `bench/case_langgraph.py` does).

    python bench/profile_read.py --state repeated
    python bench/profile_read.py --state repeated --memo off --sides saver_get,facade_get

Each side runs twice under callgrind (`profile_save.py` says how), with 0 and `--n` reads after the same
writes and warm-up; the difference divided by `--n` is one read's instructions: all threads, then the main
thread's and the others' (the WAL checkpoint thread, whose share moves from run to run with when it wakes:
compare main threads).
`--memo off` keeps nothing in `compression.INFLATED` (every read inflates: the miss path without a lookup);
`--memo one` keeps one frame (every read of a cycle misses, looks up and evicts: a miss's whole cost).

The bench's "checkpoint load by id" row reads 1,000 distinct checkpoints after writing 2,000: the memo's
`MEMO_BYTES` (16 MiB) holds ~320 inflated 50 KB states, so every one of its reads misses. `--state repeated
--written 1000 --n 300` (all threads, before h-reads' changes): facade_get 1,150k, raw_get 994k; with
`--written 200` (hits) 1,008k against 993k. A miss inflates the repeated-text frame (~125k) where raw
sqlite3 reads its 50 KB plain (its page reads, in the kernel, are not counted here; wall time counts them).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profile_save import WARM, callgrind_arguments, callgrind_instructions

SIDES = ("saver_get", "saver_latest", "saver_list", "saver_list10", "sqlitesaver_get", "sqlitesaver_latest",
         "sqlitesaver_list", "sqlitesaver_list10", "facade_get", "facade_latest", "raw_get", "raw_latest")
"""`<who>_<read>`: who is MnemostoreSaver (sqlite), SqliteSaver, the facade's `checkpoints` or raw sqlite3;
`list` is one item of a list of the whole thread, `list10` a whole `list(limit=10)` of it (the bench's row)."""


def _memo(mode: str) -> None:
    """Set the memo's bounds for this run (`--memo`)."""
    with contextlib.suppress(ImportError, AttributeError):
        from mnemostore.core import compression

        if mode == "off":
            compression.MEMO_RATIO = 1 << 62  # type: ignore[attr-defined]
        elif mode == "one":
            compression.MEMO_ENTRIES = 1  # type: ignore[attr-defined]


def _reads(side: str, state: dict[str, Any], written: int, where: Path) -> tuple[Callable[[int], object], Any]:
    """A function i -> the i-th read of `side`, after writing its thread; and what to close."""
    who, read = side.rsplit("_", 1)
    stack = contextlib.ExitStack()
    if who in ("saver", "sqlitesaver"):
        from case_langgraph import _thread, checkpoints, put_run, sqlite_saver

        if who == "sqlitesaver":
            saver = stack.enter_context(sqlite_saver(where / "theirs.db"))
        else:
            import mnemostore
            from mnemostore.integrations.langgraph import MnemostoreSaver

            saver = MnemostoreSaver(stack.enter_context(mnemostore.open(f"sqlite:///{where / 'ours.db'}")))
        configs = put_run(saver, "run", checkpoints(saver, written, state))
        _checkpointed(where / ("theirs.db" if who == "sqlitesaver" else "ours.db"))
        thread = _thread("run")
        if read == "list":
            items = iter(())

            def one_listed(i: int) -> object:
                nonlocal items
                for item in items:
                    return item
                items = iter(saver.list(thread))
                return next(items)
            return one_listed, stack
        if read == "list10":
            return lambda i: list(saver.list(thread, limit=10)), stack
        if read == "latest":
            return lambda i: saver.get_tuple(thread), stack
        return lambda i: saver.get_tuple(configs[i % written]), stack
    if who == "raw":
        from rawsqlite import connect, latest_checkpoint, load_checkpoint, save_checkpoint

        conn = stack.enter_context(contextlib.closing(connect(where / "raw.db")))
        for i in range(written):
            save_checkpoint(conn, f"c{i}", "run", i, state)
        _checkpointed(where / "raw.db")
        if read == "latest":
            return lambda i: latest_checkpoint(conn, "run"), stack
        return lambda i: load_checkpoint(conn, f"c{i % written}"), stack
    import mnemostore

    cps = stack.enter_context(mnemostore.open(f"sqlite:///{where / 'facade.db'}")).checkpoints
    ids = [cps.save("run", state, node_id=f"n{i}").id for i in range(written)]  # a chain, as the bench's latest row
    _checkpointed(where / "facade.db")
    if read == "latest":
        return lambda i: cps.latest("run"), stack
    return lambda i: cps.get(ids[i % written]), stack


def _checkpointed(path: Path) -> None:
    """Move the file's WAL into it before the reads: whether a read finds its pages in the WAL (read into
    the page cache) or in the file (mapped) otherwise depends on when the WAL checkpoint thread last woke,
    which moved a side's main-thread figure by ~60k instructions between runs."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def _run(side: str, state: dict[str, Any], n: int, written: int, where: Path) -> None:
    """`side`'s reads WARM + n times, in this process (what callgrind counts)."""
    read, stack = _reads(side, state, written, where)
    with stack:
        for i in range(WARM + n):
            read(i)


def _count(side: str, args: argparse.Namespace, n: int, where: Path) -> tuple[int, int]:
    """Instructions (main thread, other threads) of a run of `side` with n reads."""
    out = where / f"{side}-{n}"
    out.mkdir()
    return callgrind_instructions([__file__, "--run", side, "--state", args.state, "--n", str(n),
                                   "--written", str(args.written), "--memo", args.memo, "--dir", str(out)], out)


def read_arguments(doc: str | None, n: int, sides: str, state: str = "varied") -> argparse.ArgumentParser:
    """The options of a tool that counts this script's sides (`callgrind_arguments`, and the thread written
    and the memo's bounds)."""
    parser = callgrind_arguments(doc, n, sides, state)
    parser.add_argument("--written", type=int, default=200, help="checkpoints in the thread read")
    parser.add_argument("--memo", choices=("on", "off", "one"), default="on")
    return parser


def main() -> None:
    args = read_arguments(__doc__, 200, ",".join(SIDES), state="repeated").parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from data import checkpoint_state, varied_state

    _memo(args.memo)
    state = varied_state() if args.state == "varied" else checkpoint_state()
    if args.run:
        _run(args.run, state, args.n, args.written, Path(args.dir))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per read, {args.state} 50 KB state, thread of {args.written}, memo {args.memo} "
              f"({args.n} reads less 0, after {WARM}): all threads, the main thread's, the others'")
        for side in args.sides.split(","):
            (main0, other0), (main1, other1) = (_count(side, args, n, Path(tmp)) for n in (0, args.n))
            main, other = (main1 - main0) / args.n, (other1 - other0) / args.n
            print(f"  {side:20s} {main + other:11,.0f} {main:11,.0f} {other:9,.0f}", flush=True)


if __name__ == "__main__":
    main()
