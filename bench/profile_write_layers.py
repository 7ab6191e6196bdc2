"""Instructions per `put_writes` on sqlite, counted by callgrind: `SqliteSaver` beside `MnemostoreSaver`, and
ours with its layers taken off one at a time, down to a write of the same row made straight from the writes
(what this row format costs with no layer around it).

    python bench/profile_write_layers.py                  # the varied state, 100 calls
    python bench/profile_write_layers.py --state repeated --sides theirs,ours,bespoke

Sides, each one layer less than the one before:
  theirs   `SqliteSaver.put_writes` (three rows of its writes table)
  ours     `MnemostoreSaver.put_writes` (its prepared write: `Collection._field_writer`)
  insert   the saver's records (`_writes`' fields as records) through the backend's `_insert`: no facade
  encode   the records encoded by the backend (`encode`, `one_insert`), run on a connection of the script's own:
           no writer lock, pool or WAL bookkeeping (`Connections.one_write`)
  records  the records' fields put into the row by hand: no encoder
  bespoke  the same row (columns and document) made straight from the writes: no records
The write rows are the `langgraph_write` kind's (writes format 5; format 4 wrote a checkpoint row).

Each side runs `--n` calls after `WARM` under callgrind (and once with none), with the garbage collector off
and the WAL checkpoint thread never woken, so that a side counts alike run after run (in the script this
came from, two runs of 100 calls differed by 5 instructions a call); it takes ~10 minutes. The bespoke side
skips the text checks the saver makes (`mapping.write_records`): it is a floor, not a design.
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from langgraph.checkpoint.base import WRITES_IDX_MAP

from mnemostore.core.codec import instant_micros
from mnemostore.integrations.langgraph import mapping
from mnemostore.kinds import langgraph_ids

WARM = 20
SIDES = ("theirs", "ours", "insert", "encode", "records", "bespoke")
_COLUMNS = ("tenant", "id", "thread", "owner", "created_at", "updated_at", "doc", "payload")
"""The columns a write record fills (the others stay NULL), as `records` and `bespoke` insert them."""


def _run(side: str, state: dict[str, Any], n: int, of: int, where: Path) -> None:
    """WARM + n calls of `side` on a thread of WARM + `of` checkpoints (what callgrind counts: the runs of a
    side differ in their calls alone)."""
    from case_langgraph import _sqlite_savers, checkpoints, put_run, task_writes

    from mnemostore.backends.sqlite import wal_checkpoints

    wal_checkpoints.START = wal_checkpoints.LIMIT = 1 << 40  # the thread's work is not a call's
    with _sqlite_savers(where) as pair:
        saver = pair["theirs" if side == "theirs" else "ours"]
        configs = put_run(saver, "run", checkpoints(saver, WARM + of, {"step": 0}))[:WARM + n]  # not read by a write
        writes = [(config, task_writes(state, i), str(uuid.uuid4())) for i, config in enumerate(configs)]
        call = saver.put_writes if side in ("theirs", "ours") else _peeled(side, saver)
        for config, task, task_id in writes[:WARM]:
            call(config, task, task_id)
        gc.collect()
        gc.disable()
        for config, task, task_id in writes[WARM:]:
            call(config, task, task_id)


def _peeled(side: str, saver: Any) -> Callable[..., None]:
    """`put_writes` with the layers above `side` taken off (the module's docstring)."""
    backend = saver._sync.backend
    prepared = backend._written_kind("langgraph_write")
    if side == "insert":
        def insert(config: Any, task: Any, task_id: str) -> None:
            records, keep = _records(saver, config, task, task_id)
            backend._insert(prepared, records, keep)
        return insert
    # The pragmas that bear on a write, spelled out: a connection from the store's own `_connect` counted ~42k
    # instructions more a call on these sides (not found why), where the store's writer spends no more in SQLite.
    conn = sqlite3.connect(backend.db.path, isolation_level=None, check_same_thread=False)
    for pragma in ("PRAGMA synchronous = NORMAL", "PRAGMA cache_size = -16384", "PRAGMA mmap_size = 268435456",
                   "PRAGMA wal_autocheckpoint = 0"):
        conn.execute(pragma)
    if side == "encode":
        def encode(config: Any, task: Any, task_id: str) -> None:
            records, keep = _records(saver, config, task, task_id)
            conn.execute(*prepared.one_insert(prepared.encode(records[0]), keep)).close()
        return encode
    sql = (f"INSERT INTO mnemo_langgraph_write ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
           " ON CONFLICT (tenant, id) DO NOTHING")
    if side == "records":
        return partial(_from_records, saver, conn, sql)
    return partial(_bespoke, saver.serde, conn, sql)


def _records(saver: Any, config: Any, task: Any, task_id: str) -> tuple[list[Any], str]:
    """The write records `put_writes` stores (made of `mapping.write_fields`' fields), and what their INSERT does
    with a stored row (`schema.Conflict`)."""
    groups, keep = saver._writes(config, task, task_id, "")
    return [mapping.write_of_fields(fields, plain) for fields, plain in groups], "keep" if keep else "replace"


def _from_records(saver: Any, conn: sqlite3.Connection, sql: str, config: Any, task: Any, task_id: str) -> None:
    records, _ = _records(saver, config, task, task_id)
    data = records[0].__dict__
    document = data.copy()
    del document["embedding"], document["payload"]
    at = instant_micros(data["created_at"])
    conn.execute(sql, ("", data["id"], data["thread"], data["owner"], at, at, bytearray(orjson.dumps(document)),
                       data["payload"])).close()


def _bespoke(serde: Any, conn: sqlite3.Connection, sql: str, config: Any, task: Any, task_id: str) -> None:
    conf = config["configurable"]
    thread, ns, checkpoint_id = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
    owner = mapping.checkpoint_record_id(thread, ns, checkpoint_id)
    parts, values, idxs = [], [], []
    for position, (channel, value) in enumerate(task):
        idx = WRITES_IDX_MAP.get(channel, position)
        value_type, value_bytes = serde.dumps_typed(value)
        parts.append([idx, channel, value_type, len(value_bytes)])
        values.append(value_bytes)
        idxs.append(idx)
    now = mapping.write_stamp()
    write_id = langgraph_ids.write_id(langgraph_ids.checkpoint_writes_prefix(thread, ns, checkpoint_id), task_id, idxs)
    document = orjson.dumps({
        "id": write_id, "tenant_id": None, "agent": None, "project_id": None, "created_at": now, "updated_at": now,
        "metadata": {}, "thread": thread, "owner": owner, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id,
        "task_id": task_id, "task_path": "", "writes": parts})
    at = instant_micros(now)
    conn.execute(sql, ("", write_id, thread, owner, at, at, bytearray(document), b"".join(values))).close()


def main() -> None:
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    from data import checkpoint_state, varied_state
    from profile_save import callgrind_arguments, print_sides_per

    parser = callgrind_arguments(__doc__, 100, ",".join(SIDES))
    parser.add_argument("--of", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    state = varied_state() if args.state == "varied" else checkpoint_state()
    if args.run:
        _run(args.run, state, args.n, args.of, Path(args.dir))
        return

    def script(side: str, count: int, out: Path) -> list[str]:
        return [__file__, "--run", side, "--state", args.state, "--n", str(count), "--of", str(args.n),
                "--dir", str(out)]

    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per put_writes, {args.state} state ({args.n} calls less 0, after {WARM})")
        print_sides_per(args.sides.split(","), script, args.n, args.n, Path(tmp))


if __name__ == "__main__":
    main()
