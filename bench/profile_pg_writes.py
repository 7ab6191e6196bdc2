"""Where a lone postgres write's time goes, ours beside LangGraph's: `MnemostoreSaver.put_writes` beside
`PostgresSaver.put_writes` (3 channels, each state of the langgraph group) and `MnemostoreStore.put`
beside `PostgresStore.put` (one item, indexed as in the group), next to the floors they stand on: a
`fdatasync` of a 3 KB overwrite in a file of the temporary directory (the disk), the commit of a bare
one-row INSERT (its WAL flush) and a `SELECT 1` round trip.

    python bench/profile_pg_writes.py                  # starts a server as the bench does
    python bench/profile_pg_writes.py --url URL --n 300

Per call: the wall time with the sides taking turns call by call (`interleaved_samples`: the load of
a shared machine hits both alike), as mean, median and 90th percentile; then each side's client CPU
and server CPU (the server's processes, `server_cpu`) over `CPU_ROUNDS` x n calls of its own, and the
WAL bytes it wrote. Every call writes a new row (a new task id, a new key), as the group's rows do.
Where a call is one commit, its wall time is mostly the WAL flush's: on a disk whose flushes come
in steps of a few ms, a median moves by a whole step between runs; compare means and CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from itertools import count
from pathlib import Path
from typing import Any

Call = Callable[[int], object]
WARM = 20
"""Calls of each side before measuring: tables, pools and prepared statements."""
CPU_ROUNDS = 4
"""As `case_postgres.CPU_ROUNDS` (imported with the bench's modules at run time)."""
LSN = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"


@contextmanager
def _floor(base: str, where: Path) -> Iterator[dict[str, Call]]:
    """A 3 KB overwrite and `fdatasync` of a file in `where`, a bare one-row INSERT into an unindexed
    table (one commit: one WAL flush) and a `SELECT 1`."""
    import psycopg

    fd = os.open(where / "profile-floor.bin", os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, bytes(1 << 20), 0)
        os.fsync(fd)
        block = os.urandom(3000)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS profile_floor (i bigint)")
            yield {"fdatasync": lambda i: (os.pwrite(fd, block, i * 3000 % (1 << 20)), os.fdatasync(fd)),
                   "insert": lambda i: conn.execute("INSERT INTO profile_floor VALUES (%s)", (i,), prepare=True),
                   "select 1": lambda i: conn.execute("SELECT 1", prepare=True)}
    finally:
        os.close(fd)


@contextmanager
def _savers(base: str, state: dict[str, Any], tag: str) -> Iterator[dict[str, Call]]:
    """put_writes of one task's writes (`task_writes`) to one checkpoint per side, a new task each call."""
    from case_langgraph import checkpoints, put_run, task_writes
    from langgraph.checkpoint.postgres import PostgresSaver

    import mnemostore
    from mnemostore.integrations.langgraph import MnemostoreSaver

    with mnemostore.open(f"{base}&schema=profile_{tag}") as store, PostgresSaver.from_conn_string(base) as theirs:
        theirs.setup()
        calls: dict[str, Call] = {}
        for who, saver in (("ours", MnemostoreSaver(store)), ("theirs", theirs)):
            config = put_run(saver, f"profile-{tag}", checkpoints(saver, 1, state))[-1]
            calls[who] = partial(_put_writes, saver, config, [task_writes(state, i) for i in range(50)])
        yield calls


@contextmanager
def _stores(base: str, tag: str, n: int) -> Iterator[dict[str, Call]]:
    """`put` of a new item per call into each store, both indexing its text (`case_langgraph_store`)."""
    from case_langgraph_store import _index, _items, _ours, _postgres_store

    items = _items(WARM + (1 + CPU_ROUNDS) * n)
    index = _index(len(items))
    with _ours(lambda t: f"{base}&schema=profile_{t}", index, f"{tag}_ours") as ours, \
            _postgres_store(base, index, f"profile_{tag}") as theirs:
        yield {"ours": partial(_put, ours, items, count()), "theirs": partial(_put, theirs, items, count())}


def _put_writes(saver: Any, config: Any, writes: list[Any], i: int) -> None:
    saver.put_writes(config, writes[i % len(writes)], str(uuid.uuid4()))


def _put(store: Any, items: list[Any], new: Iterator[int], i: int) -> None:
    store.put(*items[next(new)])


def _wal(base: str) -> Callable[[], float]:
    import psycopg

    conn = psycopg.connect(base, autocommit=True)

    def read() -> float:
        row = conn.execute(LSN).fetchone()
        assert row is not None
        return float(row[0])
    return read


def _profile(name: str, calls: dict[str, Call], n: int, server: Callable[[], float], wal: Callable[[], float]) -> None:
    from case_postgres import cpu_per_call
    from harness import interleaved_samples

    for fn in calls.values():  # warm up: tables, prepared statements
        for i in range(WARM):
            fn(i)
    walls = {who: sorted(samples) for who, samples in interleaved_samples(calls, n).items()}
    means = {who: statistics.fmean(samples) for who, samples in walls.items()}
    for who, fn in calls.items():
        before = wal()
        client, served = cpu_per_call(fn, n, server)
        written = (wal() - before) / (CPU_ROUNDS * n)
        ratio = f"  theirs/ours (mean) {means['theirs'] / means['ours']:.3f}x" if who == "ours" else ""
        wall = walls[who]
        print(f"  {name:20s} {who:9s} wall mean {means[who] * 1e6:6.0f} median {wall[n // 2] * 1e6:6.0f} "
              f"p90 {wall[9 * n // 10] * 1e6:6.0f} us  CPU client {client * 1e6:4.0f} server {served * 1e6:5.0f} us  "
              f"WAL {written:6.0f} B{ratio}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="calls per side and measure")
    parser.add_argument("--url", help="a running server's base URL (default: start one as the bench does)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # tests.pgserver_portable, as run.py does
    from case_postgres import CPU_ROUNDS as rounds
    from case_postgres import postgres_server, server_cpu
    from data import checkpoint_state, varied_state

    assert rounds == CPU_ROUNDS, "CPU_ROUNDS here must be case_postgres's"
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        base = args.url or stack.enter_context(postgres_server(tmp))
        server, wal, tag = server_cpu(base), _wal(base), uuid.uuid4().hex[:8]
        print(f"per call: wall of {args.n} calls, the sides taking turns; CPU and WAL over more calls of each alone")
        with _floor(base, tmp) as floor:
            _profile("floor", floor, args.n, server, wal)
        for kind, state in (("repeated", checkpoint_state(50_000)), ("varied", varied_state())):
            with _savers(base, state, f"{tag}_{kind}") as savers:
                _profile(f"put_writes {kind}", savers, args.n, server, wal)
        with _stores(base, tag, args.n) as stores:
            _profile("store put", stores, args.n, server, wal)


if __name__ == "__main__":
    main()
