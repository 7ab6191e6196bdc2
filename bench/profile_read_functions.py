"""Where one read of a `profile_read.py` side spends its instructions, function by function: callgrind's
own (exclusive) cost of each C function on the main thread, in a run of `--n` reads less a run of 0, per
read. Python code shows as the interpreter's functions; what differs between two sides (a copy in
`__memmove_*`, a statement in `sqlite3VdbeExec`, a decode in `ormsgpack`/`orjson`) is what to cut.

    python bench/profile_read_functions.py --sides saver_latest,sqlitesaver_latest --state varied
    python bench/profile_read_functions.py --sides saver_list10,sqlitesaver_list10 --n 40 --top 30

Each side's table lists the `--top` functions by cost per read; with two or more sides, a last table gives
each function's cost per read beside the first side's.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from profile_read import read_arguments
from profile_save import callgrind_instructions

_LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")


def function_costs(dump: Path) -> dict[str, int]:
    """Each function's own instructions in a callgrind dump (`callgrind_annotate`, no threshold)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no",
                           "--show-percs=no", str(dump)], check=True, capture_output=True, text=True).stdout
    costs: dict[str, int] = {}
    body = text.split("file:function", 1)[-1]
    for line in body.splitlines():
        found = _LINE.match(line)
        if found:
            name = found.group(2).strip()
            costs[name] = costs.get(name, 0) + int(found.group(1).replace(",", ""))
    return costs


def _side_costs(side: str, args: argparse.Namespace, n: int, where: Path) -> dict[str, int]:
    out = where / f"{side}-{n}"
    out.mkdir()
    script = Path(__file__).resolve().parent / "profile_read.py"
    callgrind_instructions([str(script), "--run", side, "--state", args.state, "--n", str(n),
                            "--written", str(args.written), "--memo", args.memo, "--dir", str(out)], out)
    (dump,) = out.glob("cg.*-01")
    return function_costs(dump)


def per_read(side: str, args: argparse.Namespace, where: Path) -> dict[str, float]:
    """Each function's instructions per read of `side` (main thread)."""
    full, empty = (_side_costs(side, args, n, where) for n in (args.n, 0))
    return {name: (full.get(name, 0) - empty.get(name, 0)) / args.n for name in full.keys() | empty.keys()}


def _short(name: str) -> str:
    file, _, function = name.rpartition(":")
    return f"{function} [{Path(file).name}]" if file else function


def main() -> None:
    parser = read_arguments(__doc__, 100, "saver_latest,sqlitesaver_latest")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    sides = args.sides.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        costs = {side: per_read(side, args, Path(tmp)) for side in sides}
    for side, per in costs.items():
        print(f"{side}: {sum(per.values()):,.0f} instructions per read (main thread), {args.state} state")
        for name, cost in sorted(per.items(), key=lambda item: -abs(item[1]))[:args.top]:
            print(f"  {cost:11,.0f}  {_short(name)}")
    if len(sides) > 1:
        first = costs[sides[0]]
        names = sorted(set().union(*costs.values()), key=lambda name: -max(abs(per.get(name, 0) - first.get(name, 0))
                                                                          for per in costs.values()))
        print("per read, " + "  ".join(f"{side:>18s}" for side in sides))
        for name in names[:args.top]:
            print("  " + "  ".join(f"{costs[side].get(name, 0):18,.0f}" for side in sides) + f"  {_short(name)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
