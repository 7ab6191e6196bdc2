"""SQLite checkpoints the WAL inside the commits that cross its threshold (`sqlite/wal_checkpoints.py`):
the WAL stays bounded, a reader holding an old snapshot holds it back only until it ends, and a process
killed while a checkpoint runs leaves a whole store."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.backends.sqlite import wal_checkpoints

KB = 1024
PAGE = 4096
THRESHOLD_BYTES = wal_checkpoints.AUTOCHECKPOINT * (PAGE + 24)
"""The WAL's bytes at SQLite's threshold: frames of a 24-byte header and a page."""


def wal_size(db: Path) -> int:
    """The WAL file's size: SQLite reuses it in place after a reset, so it is the most frames it ever held."""
    try:
        return os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        return 0


def put_batches(store: mnemostore.Store, prefix: str, batches: int, size: int) -> None:
    """`batches` commits of four outcomes of about `size` bytes each, of random text (it does not compress)."""
    for batch in range(batches):
        store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": os.urandom(size // 2).hex(),
                             "id": f"{prefix}-{batch:05d}-{i}"} for i in range(4)])


def test_every_connection_checkpoints_at_sqlite_s_threshold(tmp_path: Path) -> None:
    with mnemostore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.outcomes.add(task_type="t", success=True)
        pool = store.backend._db  # type: ignore[attr-defined]
        with pool.connection() as conn:
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == wal_checkpoints.AUTOCHECKPOINT
            assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == wal_checkpoints.JOURNAL_SIZE_LIMIT
            assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE


@settings(max_examples=4, deadline=None)
@given(size=st.integers(min_value=500, max_value=40_000), megabytes=st.integers(min_value=6, max_value=12))
def test_the_wal_stays_near_the_threshold_and_the_records_reach_the_database(
        tmp_path_factory: pytest.TempPathFactory, size: int, megabytes: int) -> None:
    """Commits of any size writing several thresholds' worth of pages: the WAL never holds much more than
    the threshold and one commit, and what was committed is copied into the database file."""
    db = tmp_path_factory.mktemp("wal") / "store.db"
    batches = megabytes * 1024 * KB // (4 * size)
    biggest = 0
    with mnemostore.open(f"sqlite:///{db}") as store:
        for start in range(0, batches, 20):
            put_batches(store, f"b{start}", min(20, batches - start), size)
            biggest = max(biggest, wal_size(db))
        assert store.outcomes.count() == 4 * batches
        copied = os.stat(db).st_size
    written = os.stat(db).st_size  # closed: the last connection copied the rest
    assert written >= megabytes * 1024 * KB
    assert biggest <= THRESHOLD_BYTES + 2 * (4 * size + 64 * KB)  # a commit or two past it
    assert copied >= written - biggest


def test_a_reader_holding_an_old_snapshot_holds_the_wal_back_only_until_it_ends(tmp_path: Path) -> None:
    """While a reader holds its snapshot the WAL cannot start over and grows; once it ends, the next
    commit (past the threshold) copies everything and SQLite starts the WAL over, so it grows by no
    more than that commit's frames."""
    db = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{db}") as store:
        put_batches(store, "before", 1, 1_000)
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM mnemo_outcome").fetchone() == (4,)
        put_batches(store, "held", 150, 20_000)  # ~12 MB: three thresholds' worth
        held = wal_size(db)
        assert held > 2 * THRESHOLD_BYTES
        assert reader.execute("SELECT count(*) FROM mnemo_outcome").fetchone() == (4,)  # its snapshot, exact
        reader.execute("COMMIT")
        reader.close()
        put_batches(store, "after", 300, 20_000)  # ~24 MB more
        assert held <= wal_size(db) < held + 256 * KB  # a commit of ~45 pages
        assert store.outcomes.count() == 4 * 451
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


_CHECKPOINT_TRUNCATE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
print(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
"""


def test_a_store_s_commits_checkpoints_and_close_keep_another_connection_s_locks(tmp_path: Path) -> None:
    """POSIX locks go with any close of a descriptor of their file: a store that closed a descriptor of
    the `-shm` file of its own dropped a reader's locks, and another process then reset the WAL under the
    reader's open read ("database disk image is malformed"). A snapshot held here must keep another
    process's TRUNCATE checkpoint busy through a store's commits, checkpoints and close on the same file."""
    db = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{db}") as store:
        put_batches(store, "first", 1, 1_000)
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM mnemo_outcome").fetchone() == (4,)  # a snapshot the WAL must keep

    def truncate_elsewhere() -> str:
        return subprocess.run([sys.executable, "-c", _CHECKPOINT_TRUNCATE, str(db)], capture_output=True,
                              text=True, timeout=60, check=True).stdout.strip()

    with mnemostore.open(f"sqlite:///{db}") as store:
        put_batches(store, "second", 60, 20_000)  # past the threshold: SQLite checkpoints in the commits
        assert truncate_elsewhere() == "1"  # busy: the snapshot holds it back
    assert truncate_elsewhere() == "1"  # still busy: the store's close did not drop the reader's locks
    assert reader.execute("SELECT count(*) FROM mnemo_outcome").fetchone() == (4,)
    reader.execute("COMMIT")
    reader.close()
    assert truncate_elsewhere() == "0"
    assert wal_size(db) == 0


_WRITER = """
import sys
import mnemostore
with mnemostore.open(f"sqlite:///{sys.argv[1]}") as store:
    batch = 0
    while True:  # commits until killed, one in every ~25 checkpointing
        store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "y" * 40_000,
                             "id": f"{sys.argv[2]}-{batch}-{i}"} for i in range(5)])
        print(batch, flush=True)
        batch += 1
"""


def test_a_process_killed_while_checkpointing_leaves_a_whole_store(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    for round_, delay in enumerate([0.0, 0.05, 0.2, 0.5]):
        process = subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(round_)],
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "0"
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        committed = [line for line in process.stdout.read().split("\n") if line]
        process.wait(30)
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        with mnemostore.open(f"sqlite:///{db}") as store:
            last = int(committed[-1]) if committed else 0
            mine = (mnemostore.F.id >= f"{round_}-") & (mnemostore.F.id < f"{round_}.")
            assert store.outcomes.count(mine) >= 5 * (last + 1)
