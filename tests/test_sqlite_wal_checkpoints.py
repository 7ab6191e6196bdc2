"""The WAL is checkpointed beside the writers (`sqlite/wal_checkpoints.py`), stays bounded, and a
process killed while a checkpoint runs leaves a whole store."""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import mnemostore
from mnemostore.backends.sqlite import connections, open_descriptors, shm_descriptors, wal_checkpoints
from mnemostore.core.flocks import Flock

KB = 1024


def wal_size(db: Path) -> int:
    try:
        return os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        return 0


def test_the_store_s_connections_leave_checkpoints_to_the_background(tmp_path: Path) -> None:
    with mnemostore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.outcomes.add(task_type="t", success=True)
        pool = store.backend._db  # type: ignore[attr-defined]
        with pool.connection() as conn:
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
            kept = conn.execute("PRAGMA journal_size_limit").fetchone()[0]
            assert kept == wal_checkpoints.JOURNAL_SIZE_LIMIT
            # a WAL a run of commits took past LIMIT is reset in place, not truncated (that cost the next commit ~11 ms)
            assert kept >= wal_checkpoints.LIMIT + wal_checkpoints.START


def test_the_thread_copies_the_wal_into_the_database_beside_the_writers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the writers' own checkpoint out of reach (LIMIT huge), only the thread can bring the
    records into the database file."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "BESIDE", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 2**40)
    db = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{db}") as store:
        for batch in range(150):
            store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "x" * 2_000,
                                 "id": f"{batch}-{i}"} for i in range(4)])
        deadline = time.monotonic() + 10
        while os.stat(db).st_size < 600 * 2_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.stat(db).st_size >= 600 * 2_000
        assert store.outcomes.count() == 600


def wal_frames_and_copied(db: Path) -> tuple[int, int]:
    """(mxFrame, nBackfill) from the WAL-index in the `-shm` file (https://sqlite.org/walformat.html)."""
    fd = shm_descriptors.descriptor(f"{db}-shm")  # not a file of its own: its close would drop the store's locks
    assert fd is not None
    header = os.pread(fd, 100, 0)
    return int.from_bytes(header[16:20], sys.byteorder), int.from_bytes(header[96:100], sys.byteorder)


def test_once_the_writers_pause_the_thread_copies_every_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint beside commits leaves their frames behind; when the writers pause, the thread copies
    the rest, so readers skip the WAL (without the catch-up, the frames after its last wake stay uncopied)."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "BESIDE", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 2**40)
    monkeypatch.setattr(wal_checkpoints, "IDLE", 0.3)
    db = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{db}") as store:
        reader = sqlite3.connect(db)  # an old snapshot: the checkpoints beside the writes cannot copy past it
        for batch in range(60):
            store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "x" * 2_000,
                                 "id": f"{batch}-{i}"} for i in range(4)])
            if batch == 10:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM mnemo_outcome").fetchone()
        time.sleep(0.1)  # the checkpoint of the thread's last wake runs while the reader holds frames back
        reader.execute("COMMIT")
        reader.close()
        frames, copied = wal_frames_and_copied(db)
        deadline = time.monotonic() + 10
        while copied < frames and time.monotonic() < deadline:
            time.sleep(0.01)
            frames, copied = wal_frames_and_copied(db)
        assert frames > 0 and copied == frames
        assert store.outcomes.count() == 240


def test_below_beside_the_thread_waits_for_the_writers_to_pause(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken past START while commits keep coming, the thread copies nothing (a checkpoint's syncs would hold
    the commits back) until the WAL passes BESIDE; once the writers pause it copies every frame."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "BESIDE", 2**40)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 2**41)
    monkeypatch.setattr(wal_checkpoints, "IDLE", 2.0)
    db = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{db}") as store:
        seen: list[tuple[int, int]] = []
        for batch in range(60):
            store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "x" * 2_000,
                                 "id": f"{batch}-{i}"} for i in range(4)])
            seen.append(wal_frames_and_copied(db))
        assert seen[-1][0] > 64 * KB // 4096 * 4  # woken many times over
        assert all(copied == 0 for _, copied in seen)
        deadline = time.monotonic() + 20
        frames, copied = seen[-1]
        while copied < frames and time.monotonic() < deadline:
            time.sleep(0.05)
            frames, copied = wal_frames_and_copied(db)
        assert frames > 0 and copied == frames
        assert store.outcomes.count() == 240


def test_past_beside_the_thread_finishes_the_wal_with_the_writers_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits that never pause and a LIMIT out of reach: only the thread, copying the last frames with this
    process's writers held, can bring a checkpoint to the WAL's end, and SQLite then resets the WAL."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "BESIDE", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 2**40)
    monkeypatch.setattr(wal_checkpoints, "IDLE", 30.0)
    monkeypatch.setattr(wal_checkpoints, "FINISH", 2**40)
    held: list[int] = []
    holding = connections.Connections._holding_writers

    def counted(pool: connections.Connections) -> threading.RLock:
        held.append(1)
        return holding(pool)

    monkeypatch.setattr(connections.Connections, "_holding_writers", counted)
    db = tmp_path / "store.db"
    counted_bytes: list[int] = []
    with mnemostore.open(f"sqlite:///{db}") as store:
        deadline = time.monotonic() + 20
        batch = 0
        while time.monotonic() < deadline:
            store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "x" * 2_000,
                                 "id": f"{batch}-{i}"} for i in range(4)])
            fd = shm_descriptors.descriptor(f"{db}-shm")
            counted_bytes.append(-1 if fd is None else (wal_checkpoints.wal_bytes(fd) or 0))
            batch += 1
            if held and any(after < before for before, after in itertools.pairwise(counted_bytes)):
                break
        assert held  # the thread finished with the writers held
        assert any(after < before for before, after in itertools.pairwise(counted_bytes))  # and the WAL was reset
        assert store.outcomes.count() == 4 * batch
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def read_calls() -> int:
    """This process's read system calls so far (Linux's `/proc/self/io`); reading it counts one or two."""
    return int(Path("/proc/self/io").read_text().split("syscr:")[1].split()[0])


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts read system calls in /proc/self/io (Linux)")
def test_a_read_after_the_thread_s_checkpoints_goes_through_the_memory_map(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite sizes a connection's memory map at its first read of the file and maps anew only after another
    connection's commit: the states the thread's checkpoints appended to the file since are then read with a
    system call per page, unless the reading connection maps the file anew (`Connections._map_anew`)."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 2**40)  # no checkpoint of the writer's own, which would map anew
    monkeypatch.setattr(wal_checkpoints, "IDLE", 0.01)
    db = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{db}") as store:
        cps = store.checkpoints

        def save_copied(states: int) -> list[str]:
            """Save `states` of 40 KB, then wait until the thread copied them into the file."""
            ids = [cps.save("run", {"text": os.urandom(20_000).hex()}, parent=None).id for _ in range(states)]
            deadline = time.monotonic() + 10
            while (wal := wal_frames_and_copied(db))[1] < wal[0] and time.monotonic() < deadline:
                time.sleep(0.01)
            frames, copied = wal
            assert copied == frames
            return ids

        early = save_copied(2)
        assert cps.get(early[0]) is not None  # the writer connection maps the file, two states long
        ids = save_copied(500)  # 20 MB: the first ones are no longer in the writer's page cache (16 MB)
        counting = read_calls()
        counting = read_calls() - counting  # what reading the count itself adds
        before = read_calls()
        loaded = cps.get(ids[15])
        calls = read_calls() - before - counting
        assert loaded is not None and len(loaded.state["text"]) == 40_000
        assert calls <= 2, f"{calls} read system calls for a 40 KB state"


@pytest.mark.parametrize("thread", ["running", "stalled", "no shared memory read"])
def test_writers_keep_the_wal_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread: str) -> None:
    """Past LIMIT a writer checkpoints itself with the process's writers held back, so SQLite resets
    the WAL: it never grows past LIMIT and a commit, whether the thread runs beside them or not, and
    also when the WAL-index header cannot be read (the WAL file's size stands in for its frames)."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 256 * KB)
    if thread == "stalled":
        monkeypatch.setattr(wal_checkpoints.WalCheckpoints, "_start", lambda self: None)
    if thread == "no shared memory read":
        monkeypatch.setattr(wal_checkpoints, "wal_bytes", lambda fd: None)
    db = tmp_path / "store.db"
    biggest = 0
    with mnemostore.open(f"sqlite:///{db}") as store:
        for batch in range(120):
            store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "x" * 2_000,
                                 "id": f"{batch}-{i}"} for i in range(4)])
            biggest = max(biggest, wal_size(db))
    assert biggest < 256 * KB + 64 * KB


def test_a_reset_wal_is_reused_in_place_and_its_frames_still_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite resets the WAL after the writers' checkpoints without truncating the file (writing it
    anew cost more CPU than the commits), so its size stays while `wal_bytes`, read from the WAL-index
    header, drops back: the writers still see each reset and keep the WAL bounded."""
    monkeypatch.setattr(wal_checkpoints, "START", 64 * KB)
    monkeypatch.setattr(wal_checkpoints, "LIMIT", 256 * KB)
    db = tmp_path / "store.db"
    sizes: list[int] = []
    counted: list[int] = []
    with mnemostore.open(f"sqlite:///{db}") as store:
        for batch in range(120):
            store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "x" * 2_000,
                                 "id": f"{batch}-{i}"} for i in range(4)])
            sizes.append(wal_size(db))
            fd = shm_descriptors.descriptor(f"{db}-shm")
            frames = None if fd is None else wal_checkpoints.wal_bytes(fd)
            assert frames is not None and frames <= sizes[-1]
            counted.append(frames)
    assert sizes == sorted(sizes)  # never truncated
    assert max(sizes) < 256 * KB + 64 * KB
    resets = sum(1 for before, after in itertools.pairwise(counted) if after < before)
    assert resets >= 3  # 120 batches of ~8 KB went through a 256 KB WAL several times
    assert shm_descriptors.descriptor(str(tmp_path / "missing-shm")) is None



def test_the_kept_header_descriptor_finds_a_shared_memory_file_made_anew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers read the WAL-index header through the process's descriptor of the `-shm` file; one deleted
    and made anew (its last connection closed, another opened) is read within `REOPEN` commits, a
    missing one reads as unknown, and the deleted one's descriptor is closed."""
    monkeypatch.setattr(wal_checkpoints, "REOPEN", 4)
    db = tmp_path / "store.db"
    shm = Path(f"{db}-shm")

    def header(frames: int) -> bytes:
        return bytes(14) + (4096).to_bytes(2, sys.byteorder) + frames.to_bytes(4, sys.byteorder)

    checkpoints = wal_checkpoints.WalCheckpoints(db, lambda: sqlite3.connect(db))
    assert checkpoints._wal_bytes() is None
    shm.write_bytes(header(10))
    assert checkpoints._wal_bytes() == 32 + 10 * (4096 + 24)
    first = shm.stat().st_ino
    shm.unlink()
    shm.write_bytes(header(3))
    seen = [checkpoints._wal_bytes() for _ in range(4)]
    assert seen[-1] == 32 + 3 * (4096 + 24)
    kept = checkpoints._header_fd
    assert kept is not None and os.fstat(kept).st_ino == shm.stat().st_ino != first
    shm_descriptors.close_unlinked()
    assert all(os.fstat(fd).st_nlink > 0 for fd in shm_descriptors._opened)  # the deleted file's is closed
    checkpoints.close()
    assert checkpoints._header_fd is None
    assert checkpoints._wal_bytes() == 32 + 3 * (4096 + 24)  # closed: looked up again


_CHECKPOINT_TRUNCATE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("INSERT INTO t VALUES (2)")
print(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
"""


def held_snapshot(db: Path) -> sqlite3.Connection:
    """A connection to a new WAL database `db` (a table `t` of one row) holding an open read: a snapshot the
    WAL must keep, so another process's TRUNCATE checkpoint (`_CHECKPOINT_TRUNCATE`) stays busy."""
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("PRAGMA journal_mode = WAL")
    reader.execute("CREATE TABLE t (x)")
    reader.execute("INSERT INTO t VALUES (1)")
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (1,)
    return reader


def test_reading_the_wal_index_header_keeps_this_process_s_sqlite_locks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """POSIX locks go with any close of a descriptor of their file: a header read that closed its own
    descriptor of the `-shm` file let another process reset the WAL under this process's open read
    (seen as "database disk image is malformed"). A snapshot held here must keep another process's
    TRUNCATE checkpoint busy through header reads, re-lookups and the close of a store on the file."""
    monkeypatch.setattr(wal_checkpoints, "REOPEN", 2)
    db = tmp_path / "store.db"
    reader = held_snapshot(db)

    def truncate_elsewhere() -> str:
        return subprocess.run([sys.executable, "-c", _CHECKPOINT_TRUNCATE, str(db)], capture_output=True,
                              text=True, timeout=60, check=True).stdout.strip()

    assert truncate_elsewhere() == "1"  # busy: the snapshot holds it back
    checkpoints = wal_checkpoints.WalCheckpoints(db, lambda: sqlite3.connect(db))
    assert all(checkpoints._wal_bytes() is not None for _ in range(5))
    checkpoints.close()
    with mnemostore.open(f"sqlite:///{db.parent / 'other.db'}"):
        pass
    shm_descriptors.close_unlinked()
    assert truncate_elsewhere() == "1"  # still busy: none of this dropped the reader's locks
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (1,)
    reader.execute("COMMIT")
    reader.close()

@pytest.mark.skipif(not any(os.path.isdir(d) for d in ("/proc/self/fd", "/dev/fd")),
                    reason="no listing of the process's descriptors here")
def test_a_sync_beside_sqlite_uses_its_descriptor_and_keeps_its_locks(tmp_path: Path) -> None:
    """The thread syncs the database file through a descriptor SQLite opened: it finds one while a connection
    has the file open, opens and closes none (a close would drop SQLite's locks: another process's TRUNCATE
    checkpoint must stay busy behind a snapshot held here), and finds none once every connection closed."""
    db = tmp_path / "store.db"
    reader = held_snapshot(db)
    listing = next(d for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d))
    before = set(os.listdir(listing))
    assert open_descriptors.sync_open_file(str(db))
    assert set(os.listdir(listing)) == before
    truncate = subprocess.run([sys.executable, "-c", _CHECKPOINT_TRUNCATE, str(db)], capture_output=True,
                              text=True, timeout=60, check=True)
    assert truncate.stdout.strip() == "1"  # busy: the reader's locks held
    reader.execute("COMMIT")
    reader.close()
    assert not open_descriptors.sync_open_file(str(db))
    assert not open_descriptors.sync_open_file(str(tmp_path / "missing.db"))


_WRITER = """
import sys
import mnemostore
from mnemostore.backends.sqlite import connections, open_descriptors, shm_descriptors, wal_checkpoints
wal_checkpoints.START = 32 * 1024
wal_checkpoints.LIMIT = 1024 * 1024
with mnemostore.open(f"sqlite:///{sys.argv[1]}") as store:
    batch = 0
    while True:  # commits until killed, the thread checkpointing beside it
        store.outcomes.put([{"task_type": "t", "success": True, "strategy_used": "y" * 3_000,
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


def _checkpoints_run(statements: list[str]) -> int:
    return sum(1 for statement in statements if "wal_checkpoint" in statement)


def test_no_checkpoint_starts_on_a_wal_whose_every_frame_is_copied(tmp_path: Path) -> None:
    """A checkpoint started on a fully copied WAL, beside a writer that resets it, copies stale frames
    into the database (SQLite's WAL-reset bug, 3.7.0 to 3.51.2): the thread and the writers past LIMIT
    start a checkpoint only while the WAL-index shows frames left to copy."""
    db = tmp_path / "store.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (x)")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    checkpoints = wal_checkpoints.WalCheckpoints(db, lambda: sqlite3.connect(db))
    try:
        assert checkpoints.checkpoint(conn)
        assert _checkpoints_run(statements) == 1 and wal_frames_and_copied(db)[1] == wal_frames_and_copied(db)[0]
        assert checkpoints.checkpoint(conn)
        assert _checkpoints_run(statements) == 1  # every frame copied: none started
        conn.execute("INSERT INTO t VALUES (1)")
        frames, copied = wal_frames_and_copied(db)
        assert copied < frames
        assert checkpoints.checkpoint(conn)
        assert _checkpoints_run(statements) == 2 and wal_frames_and_copied(db) == (frames, frames)
    finally:
        checkpoints.close()
        conn.close()


def test_a_checkpoint_waits_while_another_store_s_holds_the_file_s_checkpoint_lock(tmp_path: Path) -> None:
    """Every store's checkpoints on a file, in any process, hold one lock file: no other checkpoint can
    complete between a checkpoint's reading of the WAL-index and its start."""
    db = tmp_path / "store.db"
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (x)")
    checkpoints = wal_checkpoints.WalCheckpoints(db, lambda: sqlite3.connect(db))
    other = Flock(Path(f"{db}{wal_checkpoints.CHECKPOINT_LOCK}"))  # another store's: its own open file description
    other.open()
    done: list[bool] = []
    try:
        with other.exclusive():
            waiting = threading.Thread(target=lambda: done.append(checkpoints.checkpoint(conn)))
            waiting.start()
            waiting.join(0.3)
            assert waiting.is_alive() and done == []
            frames, copied = wal_frames_and_copied(db)
            assert copied < frames
        waiting.join(10)
        assert done == [True] and wal_frames_and_copied(db) == (frames, frames)
    finally:
        other.close()
        checkpoints.close()
        conn.close()
