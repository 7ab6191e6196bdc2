"""Checkpoints a SQLite file's WAL in a background thread, so a committing writer does not pay for it.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold: that commit copies the
WAL into the database and syncs both. The store's connections turn it off (`wal_autocheckpoint = 0`).
Measured against it (`bench/profile_wal.py`, callgrind on every thread, varied 50 KB state), the thread
costs more in all: a `MnemostoreSaver.put` 929k instructions against 818k inline, a `put_writes` 310k
against 267k. But the committing thread pays the inline checkpoint, and this one runs on another core:
in wall time, beside SqliteSaver in one run (`bench/run.py --only checkpoints,langgraph`), inline took
a `put` of the varied state from 1.06-1.49x to 0.80-0.82x, a facade save from 0.81-1.07x to 0.74x and
the 150-step graph from 1.02-1.07x to 0.89-0.90x. An agent waits on wall time, so the thread stays.

After a commit the writer reads how many frames the WAL holds from the WAL-index header (`wal_bytes`):
past `START` it wakes this thread, which runs a PASSIVE checkpoint (it blocks no reader and no writer) once
the writers pause (`IDLE`), or at once past `BESIDE`; past `LIMIT` (the thread behind, or a reader holding
old pages) the writer checkpoints itself, as SQLite would have. A WAL that SQLite resets is reused in
place, not truncated (`JOURNAL_SIZE_LIMIT`). A checkpoint cut short by a crash is redone by the next
opener: SQLite's own guarantee, unchanged.

A checkpoint beside commits is not free for them, though it runs on another core: its syncs (the WAL's
before copying, the database's after; `synchronous = NORMAL` keeps a power loss from corrupting the file)
held the committing thread back. Measured (`bench/profile_save_wall.py`, 500 facade saves of the varied
50 KB state in a row, ~26 MB of WAL, beside `SqliteSaver.put`): checkpoints beside the commits from 4 MB on,
0.80-0.92x; none during the run, 1.13-1.46x; the same checkpoints with their syncs off (measuring only),
1.10-1.29x. So the thread waits for a pause, which an agent makes at every step (its model's answer), up
to `BESIDE`: a longer run of commits gets its checkpoints beside it, as before.

A checkpoint that ran beside commits leaves the frames committed since uncopied, and while any frame is
uncopied every page a reader reads is first looked up in the WAL (pages found there are read from the
WAL file, not through the database's memory map). So once woken, the thread catches up: after a
checkpoint that left frames behind, or that commits went on beside, it waits for the writers to
pause (`IDLE`) and copies the rest, at most `CATCH_UPS` times a wake. New readers skip a fully copied
WAL, and the next writer starts it over.

A long run of commits that never pauses still needs one checkpoint that reaches the WAL's end, with no commit
beside it: only then does SQLite sync the database file (a checkpoint cut short leaves the pages it copied
unsynced) and reset the WAL. Past `BESIDE` the thread prepares it: after each checkpoint that commits
outran, it syncs the database file beside them (`open_descriptors`), and once at most `FINISH` bytes are left
it copies them with this process's writers held (`hold_writers`). Measured on runs of facade saves of the
varied 50 KB state (~64 KB of WAL each), before and after, taking turns: left to the writer at `LIMIT`, that
checkpoint held one save 41-61 ms (it synced the ~46 MB the thread had copied); with the syncs beside, the
longest save of 1,000 in a row took 12-35 ms (medians 24 and 32 against 50, two sets of runs) and the run
2-7% less time; with 0.2-0.5 ms between saves the thread finished every cycle itself, the longest save
took 6-13 ms (45 ms before) and the `-wal` file stayed at 30-37 MB (64 MB before).
`bench/profile_save_wall.py --n 1000` beside `SqliteSaver.put`: 0.91-0.94x before, 1.01-1.08x after.

Checkpoints beside writers meet SQLite's WAL-reset bug (3.7.0 to 3.51.2; the tested Python links 3.40.1): a
checkpoint started on a fully copied WAL while a writer starts it over copies stale frames into the
database. So a checkpoint starts only while the WAL-index shows frames left to copy, read under a lock
file every store's checkpoints on the database take (`WalCheckpoints.checkpoint`).
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from ...core.flocks import Flock
from . import shm_descriptors
from .open_descriptors import sync_open_file

_monotonic = time.monotonic

START = 4 * 1024 * 1024
"""WAL bytes (about SQLite's default 1,000 pages) past which the thread is woken."""
BESIDE = 24 * 1024 * 1024
"""WAL bytes past which the woken thread checkpoints beside running commits; below, it waits for the writers
to pause (`IDLE`) first. A larger WAL costs disk (its file is kept up to `JOURNAL_SIZE_LIMIT`) and a little
of each read until it is copied (every page is looked up in it first). At 32 MB, half of `LIMIT`, commits of
~50 KB outran the thread's checkpoints to `LIMIT` before `FINISH` was in reach (the measure in the module's doc);
a run of 500 such saves now meets checkpoints beside it near its end: 1.11-1.16x `SqliteSaver.put` against 1.15x."""
LIMIT = 64 * 1024 * 1024
"""WAL bytes past which the committing writer checkpoints itself (above `BESIDE`). The thread's checkpoints
run beside commits, so they rarely copy the last frames and SQLite seldom resets the WAL after them: a
writer's checkpoint then copies the little that is left, and SQLite resets the WAL at the next commit."""
JOURNAL_SIZE_LIMIT = LIMIT + START
"""A reset WAL larger than this (after a reader held checkpoints back) is truncated to it
(`PRAGMA journal_size_limit`); a smaller one is reused in place. Truncating it at every reset, as
when its file size measured its frames, cost ~16 us of CPU per 50 KB commit (its pages written anew).
Above `LIMIT` by `START`, so a WAL that a run of commits took just past `LIMIT` is kept whole: truncated to
half of it, the reset cost the next commit ~11 ms (`bench/profile_save_wall.py --n 1000`, 1,000 saves of the
varied state: the next slowest save after the writer's checkpoint 10.8 ms, kept 1.1 ms), and the next run
appended to the WAL past the half again. SQLite's own default keeps every WAL whole."""
FINISH = START
"""WAL bytes left to copy at or below which the thread, past `BESIDE`, copies them with this process's writers
held, so the checkpoint reaches the WAL's end: about what SQLite's automatic checkpoint copies inside a commit."""
IDLE = 0.02
"""Seconds without a commit after which the woken thread checkpoints (below `BESIDE`), and after which it
copies the frames its last checkpoint left behind."""
CATCH_UPS = 4
"""Checkpoints a wake may run to catch up (a reader holding an old snapshot keeps frames uncopied)."""
PRAGMAS = ("PRAGMA wal_autocheckpoint = 0", f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
"""What every connection to a file with a `WalCheckpoints` sets."""


_HEADER = 20
"""The start of the WAL-index header read (https://sqlite.org/walformat.html, 2.1): the page size as
u16 at 14 (1 stands for 65,536) and mxFrame, the WAL's last valid frame, as u32 at 16, in the host's
byte order. SQLite zeroes mxFrame when it resets the WAL."""
_PAGE_AND_FRAMES = struct.Struct("=14xHI")
"""Those two fields of the header's first `_HEADER` bytes, unpacked in one call (native order, no padding)."""


CHECKPOINT_LOCK = ".checkpoint-lock"
"""The suffix of the lock file beside the database that its checkpoints hold (`WalCheckpoints.checkpoint`)."""


REOPEN = 256
"""Header reads through one descriptor before the `-shm` file is looked up again (`WalCheckpoints._wal_bytes`)."""


_COPIED = struct.Struct("=14xHI76xI")
"""The page size and mxFrame (as `_PAGE_AND_FRAMES`) and nBackfill, the frames a checkpoint has copied into
the database (u32 at 96, in the checkpoint information after the header's two copies), from the first 100
bytes of the WAL-index."""


def _frame_bytes(page: int) -> int:
    """The bytes of one WAL frame (a 24-byte header and a page) for the WAL-index's page size field (1
    stands for 65,536)."""
    return (65536 if page == 1 else page) + 24


def all_copied(fd: int) -> bool:
    """Whether every frame of the WAL is already in the database (or the WAL-index is unreadable), from
    the WAL-index read through `fd`: a checkpoint has nothing to do then, and must not start
    (`WalCheckpoints.checkpoint`)."""
    return bytes_left(fd) == 0


def bytes_left(fd: int) -> int:
    """The bytes of the WAL's frames not yet copied into the database (0 if the WAL-index is unreadable),
    from the WAL-index read through `fd`."""
    page: int
    frames: int
    copied: int
    try:
        page, frames, copied = _COPIED.unpack(os.pread(fd, _COPIED.size, 0))
    except (OSError, struct.error):
        return 0
    return max(frames - copied, 0) * _frame_bytes(page)


def wal_bytes(fd: int) -> int | None:
    """The bytes of the valid frames in a database's WAL, from the WAL-index header in its `-shm` file
    (a file's size no longer measures them once a reset WAL is reused), read through `fd`
    (`shm_descriptors.descriptor`: never a descriptor of its own, whose close would drop SQLite's
    locks); None if unreadable."""
    page: int
    frames: int
    try:
        page, frames = _PAGE_AND_FRAMES.unpack(os.pread(fd, _HEADER, 0))
    except (OSError, struct.error):  # unreadable, or shorter than the header
        return None
    return 32 + frames * _frame_bytes(page)  # the WAL's 32-byte header, then its frames


class WalCheckpoints:
    """The background checkpoints of one database file, for one `Connections` pool."""

    def __init__(self, path: Path, connect: Callable[[], sqlite3.Connection],
                 hold_writers: Callable[[], AbstractContextManager[object]] = nullcontext) -> None:
        """`hold_writers()` holds this process's writers to the file back while it is entered (`_finish`)."""
        self._database = str(path)
        self._hold_writers = hold_writers
        self._wal = f"{path}-wal"
        self._shm = f"{path}-shm"
        self._connect = connect
        self._wake = threading.Event()
        self._guard = threading.Lock()
        self._running = threading.Lock()  # one checkpoint at a time: a second would only find SQLite busy
        self._lock_path = Path(f"{path}{CHECKPOINT_LOCK}")
        self._lock: Flock | None = None  # opened by the first checkpoint, not at the store's open
        self._thread: threading.Thread | None = None
        self._closed = False
        self._header_lock = threading.Lock()  # writers of several threads read the header after their commits
        self._header_fd: int | None = None
        self._header_reads = 0
        self._size = 0
        self._due = START
        self._last_commit = 0.0
        self.copies = 0
        """How many checkpoints this process ran into the database file, which each may lengthen: a connection
        that mapped the file before the last one maps less than the file now holds (`Connections._map_anew`)."""

    def after_commit(self) -> bool:
        """Called by a writer after its commit: whether it must checkpoint itself (the WAL is past `LIMIT`)."""
        self._last_commit = _monotonic()
        size = self._wal_bytes()
        if size is None:  # no shared-memory file to read: the WAL file's size bounds its frames from above
            try:
                size = os.stat(self._wal).st_size
            except OSError:
                return False
        if size < self._size:  # reset by SQLite: everything before was copied
            self._due = START
        self._size = size
        if size >= LIMIT:
            return True
        if size < self._due:
            return False
        self._due = size + START  # once per START bytes written, as SQLite's own threshold
        self._start()
        self._wake.set()
        return False

    def _wal_bytes(self) -> int | None:
        """`wal_bytes` through the process's descriptor of the `-shm` file, looked up again every `REOPEN`
        reads: a file SQLite deleted (its last connection closed) and a later connection made anew is
        then read."""
        fd = self._shm_descriptor()
        return None if fd is None else wal_bytes(fd)

    def _shm_descriptor(self) -> int | None:
        """The process's descriptor of the `-shm` file (`shm_descriptors`), looked up again every `REOPEN` uses."""
        with self._header_lock:
            fd = self._header_fd
            self._header_reads += 1
            if fd is None or self._header_reads % REOPEN == 0:
                fd = self._header_fd = shm_descriptors.descriptor(self._shm)
            return fd

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._guard:
            if self._closed or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name=f"mnemostore-wal-{self._wal}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error:
            return  # the file is gone or unreadable: writers past LIMIT still checkpoint, and their errors say why
        try:
            while True:
                self._wake.wait()
                catch_ups = 0
                while not self._closed:
                    self._wake.clear()
                    if self._size < BESIDE and not self._writers_paused():
                        continue  # a writer woke it again: still waiting for a pause, or for BESIDE
                    began = time.monotonic()
                    if (self.checkpoint(conn) and self._last_commit < began) or catch_ups == CATCH_UPS:
                        break  # every frame copied and none committed since it began, or enough tries
                    if self._size >= BESIDE and self._finish(conn):
                        break
                    if self._writers_paused():
                        catch_ups += 1
                if self._closed:
                    return
        finally:
            conn.close()

    def _finish(self, conn: sqlite3.Connection) -> bool:
        """After a checkpoint beside commits that outran it: sync the database file beside them and copy what
        they committed meanwhile, then, if at most `FINISH` bytes are left, copy them with this process's
        writers held, so the checkpoint reaches the WAL's end and the next commit resets it. Whether it did."""
        sync_open_file(self._database)
        self.checkpoint(conn)
        fd = self._shm_descriptor()
        if fd is None or bytes_left(fd) > FINISH:
            return False
        with self._hold_writers():
            return self.checkpoint(conn)

    def _writers_paused(self) -> bool:
        """Wait until no commit came for `IDLE` seconds (True), or until a writer past `START` wakes the
        thread or the store closes (False): a long run of commits still gets its checkpoint per `START`."""
        while not self._closed:
            quiet = time.monotonic() - self._last_commit
            if quiet >= IDLE:
                return True
            if self._wake.wait(IDLE - quiet):
                return False
        return False

    def checkpoint(self, conn: sqlite3.Connection) -> bool:
        """Copy what it can of the WAL into the database, blocking no reader and no writer; a busy
        file is left for the next try (real faults surface on the writes themselves). Whether every
        frame is copied (or nothing could be: not in WAL mode).

        No checkpoint starts on a WAL whose every frame is copied: a writer resetting that WAL beside it
        makes it copy stale frames into the database (SQLite's WAL-reset bug, in 3.7.0 to 3.51.2; a
        writer killed beside these checkpoints left a malformed store). The WAL-index is read and the
        checkpoint run under `CHECKPOINT_LOCK`, which every store on the file takes, in any process,
        so no other checkpoint completes between the two."""
        with self._running:
            if self._closed:
                return True  # a writer's checkpoint after `close` (its lock file is closed)
            if self._lock is None:
                lock = Flock(self._lock_path)
                try:
                    lock.open()
                except OSError:
                    return True  # no lock file (the directory turned read-only): the writes will say why
                self._lock = lock
            with self._lock.exclusive():
                fd = self._shm_descriptor()
                if fd is None or all_copied(fd):
                    return True
                try:
                    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:
                    return True
                self.copies += 1
        return bool(frames < 0 or (not busy and copied >= frames))

    def close(self) -> None:
        """Stop the thread (a checkpoint it is running finishes first)."""
        with self._guard:
            self._closed = True
            thread = self._thread
        with self._header_lock:
            self._header_fd = None  # the process's, not ours to close (`shm_descriptors`)
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._running:
            if self._lock is not None:
                self._lock.close()
                self._lock = None

