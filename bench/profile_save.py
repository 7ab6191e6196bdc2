"""Instructions per checkpoint save, counted by callgrind (deterministic where wall and CPU times on a
shared machine are not): `checkpoints.save` beside `SqliteSaver.put` and parts of the save on their own.

    python bench/profile_save.py                     # every side, the varied 50 KB state
    python bench/profile_save.py --state repeated --sides save,saver

Each side runs twice under `valgrind --tool=callgrind --separate-threads=yes`, with 0 and `--n` calls
after the same warm-up; the difference divided by `--n` is one call's instructions, on the main
thread and on every other thread (the WAL checkpoint thread: its share moves from run to run with
when it wakes). memcpy of large buffers counts one
instruction a byte (`rep movsb`), so copies weigh more here than in time. Needs valgrind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import Any

WARM = 30
SIDES = ("save", "save_latest", "saver", "raw", "validate", "encode", "insert", "saver_insert")
"""What a call is: `checkpoints.save(parent=None)`, `save` with the default parent, `SqliteSaver.put`, an
orjson dump and INSERT in raw sqlite3 (`rawsqlite`); then parts of `save`: the `Checkpoint` validation, it
plus the row encoding, the one-statement write of an encoded row; and SqliteSaver's INSERT and commit of
an already serialized checkpoint."""


def _run(side: str, state: dict[str, Any], n: int, where: Path) -> None:
    """`side`'s call WARM + n times, in this process (what callgrind counts)."""
    calls = WARM + n
    if side in ("saver", "saver_insert"):
        from case_langgraph import checkpoints, put_run, sqlite_saver

        with sqlite_saver(where / "saver.db") as saver:
            steps = checkpoints(saver, calls, state)
            if side == "saver":
                put_run(saver, "run", steps)
                return
            kind, blob = saver.serde.dumps_typed(steps[0][0])
            sql = ("INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                   "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)")
            for i in range(calls):
                with saver.cursor() as cursor:
                    cursor.execute(sql, ("run", "", f"c{i}", f"c{i - 1}", kind, blob, b"{}"))
        return
    if side == "raw":
        from rawsqlite import connect, save_checkpoint

        with contextlib.closing(connect(where / "raw.db")) as conn:
            for i in range(calls):
                save_checkpoint(conn, f"c{i}", "run", i, state)
        return
    import mnemostore
    from mnemostore.core.records import Checkpoint

    with mnemostore.open(f"sqlite:///{where / 'ours.db'}") as store:
        saves, backend = store.checkpoints, store.backend
        prepared = backend._written_kind("checkpoint")  # type: ignore[attr-defined]
        loops: dict[str, Callable[[int], object]] = {
            "save": lambda i: saves.save("run", state, parent=None, node_id=f"n{i}"),
            "save_latest": lambda i: saves.save("run", state),
            "validate": lambda i: Checkpoint(run_id="run", state=state),
            "encode": lambda i: prepared.encode(Checkpoint(run_id="run", state=state)),
        }
        if side == "insert":
            row = list(prepared.encode(Checkpoint(run_id="run", state=state)))
            for i in range(calls):
                row[1] = f"c{i}"  # the id: each row new
                backend.db.one_write(partial(_insert, prepared.insert, tuple(row)))
            return
        call = loops[side]
        for i in range(calls):
            call(i)


def _insert(sql: str, row: tuple[Any, ...], conn: Any) -> None:
    conn.execute(sql, row).close()


def _count(script: str, side: str, which: str, n: int, where: Path) -> tuple[int, int]:
    """(main thread, other threads) instructions of a run of `side` with n calls (`script --run side`)."""
    out = where / f"{side}-{n}"
    out.mkdir()
    return callgrind_instructions([script, "--run", side, "--state", which, "--n", str(n), "--dir", str(out)], out)


def callgrind_instructions(script: list[str], out: Path) -> tuple[int, int]:
    """(main thread, other threads) instructions of `python *script` under callgrind, its dumps in `out`."""
    subprocess.run([*callgrind_prefix(out), sys.executable, *script], check=True, capture_output=True,
                   env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    return callgrind_totals(out)


@cache
def compile_first() -> None:
    """Write mnemostore's and the bench's bytecode caches before any measured run: in a fresh tree (a git
    worktree) or after an edit, the first run compiles those modules, ~2-5M instructions, and `instructions_per`
    took them off the calls' count (its run of 0 calls goes first): a side looked ~40k a call cheaper at 60."""
    import compileall

    import mnemostore

    for root in (Path(mnemostore.__file__).parent, Path(__file__).parent):
        compileall.compile_dir(root, quiet=1)


def instructions_per(script: Callable[[int], list[str]], n: int, per: int, where: Path) -> tuple[float, float]:
    """(main thread, other threads) instructions per unit: `python *script(runs)` under callgrind with 0 and
    `n` as its count (dumps in `where/0` and `where/<n>`), the difference divided by `per`."""
    counts = []
    for runs in (0, n):
        out = where / str(runs)
        out.mkdir(parents=True)
        counts.append(callgrind_instructions(script(runs), out))
    (main0, other0), (main1, other1) = counts
    return (main1 - main0) / per, (other1 - other0) / per


def print_sides_per(sides: list[str], script: Callable[[str, int, Path], list[str]], n: int, per: int, tmp: Path,
                    after: Callable[[str, Path], None] | None = None) -> None:
    """Each side's instructions per unit (`instructions_per` of `script(side, count, out)`), main thread and
    others, a line a side; `after(side, where)` runs after its line (its dumps are in `where`)."""
    width = max(map(len, sides))
    for side in sides:
        where = tmp / side

        def side_script(count: int, side: str = side, where: Path = where) -> list[str]:
            return script(side, count, where / str(count))

        main_per, other_per = instructions_per(side_script, n, per, where)
        print(f"  {side:{width}s}  main {main_per:11,.0f}  other threads {other_per:9,.0f}  "
              f"total {main_per + other_per:11,.0f}", flush=True)
        if after is not None:
            after(side, where)


def callgrind_prefix(out: Path) -> list[str]:
    """The command that runs what follows it under callgrind, a dump per thread in `out` (the bytecode
    caches written first: `compile_first`)."""
    compile_first()
    return ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}/cg.%p"]


def callgrind_totals(out: Path) -> tuple[int, int]:
    """(main thread, other threads) instructions of the callgrind dumps in `out`."""
    main = other = 0
    for dump in out.glob("cg.*-*"):
        total = int(re.search(r"^summary: (\d+)", dump.read_text(), re.M).group(1))  # type: ignore[union-attr]
        if dump.name.endswith("-01"):
            main += total
        else:
            other += total
    return main, other


def callgrind_arguments(doc: str | None, n: int, sides: str, state: str | None = "varied") -> argparse.ArgumentParser:
    """The options of a tool that counts sides under callgrind: `--n` calls, `--sides`, the bench's `--state`
    (unless `state` is None), and the hidden `--run` and `--dir` its own runs under callgrind are given."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if state is not None:
        parser.add_argument("--state", choices=("varied", "repeated"), default=state)
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--sides", default=sides)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = callgrind_arguments(__doc__, 200, ",".join(SIDES)).parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from data import checkpoint_state, varied_state

    state = varied_state() if args.state == "varied" else checkpoint_state()
    if args.run:
        _run(args.run, state, args.n, Path(args.dir))
        return
    print_per_call(args.sides.split(","), args.state, args.n, partial(_count, __file__))


def print_per_call(sides: list[str], state: str, n: int,
                   count: Callable[[str, str, int, Path], tuple[int, int]]) -> None:
    """Each side's instructions per call, main thread and others: `count(side, state, calls, dir)` of n
    calls less that of 0 (the warm-up's), divided by n."""
    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per call, {state} 50 KB state ({n} calls less 0, after {WARM})")
        for side in sides:
            (main0, other0), (main1, other1) = (count(side, state, calls, Path(tmp)) for calls in (0, n))
            main_per, other_per = (main1 - main0) / n, (other1 - other0) / n
            print(f"  {side:14s} main {main_per:11,.0f}  other threads {other_per:9,.0f}  "
                  f"total {main_per + other_per:11,.0f}", flush=True)


if __name__ == "__main__":
    main()
