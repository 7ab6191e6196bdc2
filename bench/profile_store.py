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
    from profile_save import print_sides_per

    def script(side: str, n: int, out: Path) -> list[str]:
        return [__file__, "--run", side, "--n", str(n), "--dir", str(out)]

    def parts(side: str, where: Path) -> None:
        split = [_parts(where / str(n)) for n in (0, args.n)]
        print("  " + " " * len(side) + "  ".join(f"{name} {(split[1][name] - split[0][name]) / args.n:,.0f}"
                                                for name in split[1]), flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per item ({args.n} items less 0, after {WARM})")
        print_sides_per(args.sides.split(","), script, args.n, args.n, Path(tmp), parts if args.parts else None)


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
