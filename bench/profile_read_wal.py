"""What a `profile_read.py` side's reads cost once the WAL is fully copied into the database: its writes,
then one PASSIVE checkpoint on a connection of its own (what `WalCheckpoints` does only when a writer
crosses `START`, so the last < 4 MB of a run of puts stay in the WAL), then its reads, counted by callgrind.

    python bench/profile_read_wal.py --state varied --sides saver_latest,saver_list10

A store's connections map the file (`mmap_size`): while any frame is uncopied, SQLite looks every page a
reader fetches up in the WAL first (`sqlite3WalFindFrame`, ~0.7k instructions a page), even one it has;
SqliteSaver's one connection reads without the map, from its page cache. Beside `profile_read.py`'s count
of the same side, the difference is what that lookup costs a read.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import time
from functools import partial
from pathlib import Path

from profile_read import _memo, _reads, read_arguments
from profile_save import WARM, callgrind_instructions, print_per_call


def _run(side: str, state: str, n: int, written: int, where: Path) -> None:
    from data import checkpoint_state, varied_state

    read, stack = _reads(side, varied_state() if state == "varied" else checkpoint_state(), written, where)
    with stack:
        for database in where.glob("*.db"):
            with contextlib.closing(sqlite3.connect(database)) as conn:
                for _ in range(1000):  # the store's own checkpoint thread may be copying: try again
                    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if not busy and copied == frames:
                        break
                    time.sleep(0.01)
                else:
                    raise RuntimeError(f"{database}: the WAL could not be fully copied ({copied} of {frames} frames)")
        for i in range(WARM + n):
            read(i)


def _count(args: argparse.Namespace, side: str, state: str, n: int, where: Path) -> tuple[int, int]:
    out = where / f"{side}-{n}"
    out.mkdir()
    return callgrind_instructions([__file__, "--run", side, "--state", state, "--n", str(n), "--written",
                                   str(args.written), "--memo", args.memo, "--dir", str(out)], out)


def main() -> None:
    args = read_arguments(__doc__, 30, "saver_latest,saver_list10").parse_args()
    _memo(args.memo)
    if args.run:
        _run(args.run, args.state, args.n, args.written, Path(args.dir))
        return
    print_per_call(args.sides.split(","), args.state, args.n, partial(_count, args))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
