"""Where a facade checkpoint read's instructions go, counted by callgrind as `profile_save` splits a save:
the parts of `checkpoints.latest` and `checkpoints.get` (the statement alone, through the pool, the record
rebuilt, its document decoded) beside raw sqlite3's (`rawsqlite`) on the same state. `profile_read.py` counts
whole reads (the savers', the facade's, raw sqlite3's); this splits the facade's.

    python bench/profile_read_parts.py                          # every side, the varied 50 KB state
    python bench/profile_read_parts.py --state repeated --sides latest_sql,raw_latest_sql

A run of RUN checkpoints is saved first (untimed); `get` cycles through its ids.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from profile_save import WARM, _count, callgrind_arguments, print_per_call

RUN = 50
SIDES = ("latest_sql", "raw_latest_sql", "get_sql", "raw_get_sql", "latest_read", "get_read", "decode", "loads")
"""The parts of `checkpoints.latest(run)` and `.get(id)` beside raw sqlite3's (the whole reads are
`profile_read.py`'s `facade_*` and `raw_*` sides): each side's statement alone on a plain sqlite3
connection (`_sql`), ours through the pool (`_read`: `Connections.one_read`), the record rebuilt from a
fetched row (`decode`) and its document's fields alone (`loads`: `codec.stored_fields`, the JSON head and the
state's msgpack of a framed document, as layout 7 stores it)."""


def _run(side: str, state: dict[str, Any], n: int, where: Path) -> None:
    """`side`'s call WARM + n times, in this process (what callgrind counts)."""
    if side.startswith("raw"):
        from rawsqlite import connect, save_checkpoint

        with contextlib.closing(connect(where / "raw.db")) as conn:
            for i in range(RUN):
                save_checkpoint(conn, f"c{i}", "run", i, state)
            latest_sql = "SELECT state FROM checkpoint WHERE run_id = ? ORDER BY seq DESC LIMIT 1"
            raw: dict[str, Callable[[int], object]] = {
                "raw_latest_sql": lambda i: conn.execute(latest_sql, ("run",)).fetchone(),
                "raw_get_sql": lambda i: conn.execute("SELECT state FROM checkpoint WHERE id = ?",
                                                      (f"c{i % RUN}",)).fetchone(),
            }
            _loop(raw[side], n)
        return
    import mnemostore
    from mnemostore.core.codec import stored_fields

    with mnemostore.open(f"sqlite:///{where / 'ours.db'}") as store:
        cps, backend = store.checkpoints, store.backend
        ids = [cps.save("run", state).id for _ in range(RUN)]
        cps.latest("run")  # compiles latest's shape
        ((select, binder),) = backend._shapes.values()  # type: ignore[attr-defined]
        latest_args = binder("", {"run_id": "run"}) * select.repeat
        prepared = backend._kind("checkpoint")  # type: ignore[attr-defined]
        get_sql, db = prepared.get_one[True], backend.db  # type: ignore[attr-defined]
        row = db.one_read(lambda c: c.execute(get_sql, ["", ids[0]]).fetchone())
        decode = prepared.layout.row_decoder
        with contextlib.closing(sqlite3.connect(where / "ours.db")) as plain:
            ours: dict[str, Callable[[int], object]] = {
                "latest_sql": lambda i: plain.execute(select.sql, latest_args).fetchall(),
                "get_sql": lambda i: plain.execute(get_sql, ["", ids[i % RUN]]).fetchall(),
                "latest_read": lambda i: db.one_read(lambda c: c.execute(select.sql, latest_args).fetchall()),
                "get_read": lambda i: db.one_read(lambda c: c.execute(get_sql, ["", ids[i % RUN]]).fetchall()),
                "decode": lambda i: decode(row),
                "loads": lambda i: stored_fields(row[0]),
            }
            _loop(ours[side], n)


def _loop(call: Callable[[int], object], n: int) -> None:
    for i in range(WARM + n):
        call(i)


def main() -> None:
    args = callgrind_arguments(__doc__, 300, ",".join(SIDES)).parse_args()
    from data import checkpoint_state, varied_state

    state = varied_state() if args.state == "varied" else checkpoint_state()
    if args.run:
        _run(args.run, state, args.n, Path(args.dir))
        return
    print_per_call(args.sides.split(","), args.state, args.n, partial(_count, __file__))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
