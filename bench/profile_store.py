"""Instructions per LangGraph store put, counted by callgrind: `MnemostoreStore` beside `SqliteStore`
(both without an index), one `put` call each and one `batch` of `PutOp`s, on the bench's items.

    python bench/profile_store.py                          # every side, 1,000 items
    python bench/profile_store.py --sides ours_batch,theirs_batch --n 300

Each side runs twice under callgrind (`profile_save.callgrind_instructions`), with 0 and `--n` items
after the same warm-up (WARM items, put as the side puts them); the difference divided by `--n` is one
item's instructions, on the main thread and on every other thread (mnemostore's WAL checkpoint thread).
A batch side's count includes its one batch call's fixed cost spread over `--n`. Needs valgrind.

`--parts` also splits each side's main thread by where its instructions go (`PARTS`): SQLite's library,
Python's garbage collector, orjson, SHA-256 (an item's id) and the rest (the interpreter running the code).
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

WARM = 50
SIDES = ("ours_one", "theirs_one", "ours_batch", "theirs_batch")
"""Who (MnemostoreStore on sqlite, LangGraph's SqliteStore) and how: one `put` per item, or one `batch`."""
PARTS = (("sqlite", "libsqlite3"), ("gc", "gcmodule.c"), ("orjson", "orjson"), ("sha256", "sha256module.c"))
"""(part, text naming its functions in `callgrind_annotate`'s file:function [object]); the rest is "python"."""


@contextmanager
def _store(who: str, where: Path) -> Any:
    """A fresh store of `who`'s, set up as `case_langgraph_store` sets it up (WAL, synchronous=NORMAL)."""
    if who == "ours":
        import mnemostore
        from mnemostore.integrations.langgraph import MnemostoreStore

        with mnemostore.open(f"sqlite:///{where / 'ours.db'}") as store:
            yield MnemostoreStore(store)
        return
    from case_langgraph_store import _sqlite_store

    with _sqlite_store(where, None, "theirs") as theirs:
        yield theirs


def _run(side: str, n: int, where: Path) -> None:
    """WARM items, then `n` more, put by `side` (what callgrind counts)."""
    from case_langgraph_store import _items
    from langgraph.store.base import PutOp

    who, how = side.split("_")
    items = _items(WARM + n)
    store_of: AbstractContextManager[Any] = _store(who, where)
    with store_of as store:
        for part in (items[n:], items[:n]):  # the warm-up's items are other keys than the counted ones
            if how == "one":
                for item in part:
                    store.put(*item)
            elif part:
                store.batch([PutOp(*item) for item in part])


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from profile_save import callgrind_arguments

    parser = callgrind_arguments(__doc__, 1_000, ",".join(SIDES), state=None)
    parser.add_argument("--parts", action="store_true", help="split each side's main thread (PARTS)")
    args = parser.parse_args()
    if args.run:
        _run(args.run, args.n, Path(args.dir))
        return
    from profile_save import callgrind_instructions

    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per item ({args.n} items less 0, after {WARM})")
        for side in args.sides.split(","):
            counts = []
            for n in (0, args.n):
                out = Path(tmp) / f"{side}-{n}"
                out.mkdir()
                counts.append(callgrind_instructions([__file__, "--run", side, "--n", str(n), "--dir", str(out)], out))
            (main0, other0), (main1, other1) = counts
            main_per, other_per = (main1 - main0) / args.n, (other1 - other0) / args.n
            print(f"  {side:14s} main {main_per:9,.0f}  other threads {other_per:7,.0f}  "
                  f"total {main_per + other_per:9,.0f}", flush=True)
            if args.parts:
                split = [_parts(Path(tmp) / f"{side}-{n}") for n in (0, args.n)]
                print("  " + " " * 14 + "  ".join(f"{name} {(split[1][name] - split[0][name]) / args.n:,.0f}"
                                                   for name in split[1]), flush=True)


def _parts(out: Path) -> dict[str, int]:
    """The main thread's instructions in a run's dumps, by `PARTS` (and "python" for the rest)."""
    from profile_read_functions import function_costs

    (dump,) = out.glob("cg.*-01")
    split = dict.fromkeys([*(name for name, _ in PARTS), "python"], 0)
    for function, cost in function_costs(dump).items():
        split[next((name for name, text in PARTS if text in function), "python")] += cost
    return split


if __name__ == "__main__":
    main()
