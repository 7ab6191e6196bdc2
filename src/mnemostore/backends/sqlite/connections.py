"""Connections to one SQLite file: a small pool, transactions, and retries on a busy lock.

A connection is checked out for one call and returned, never tied to a thread, so any
thread (or an executor behind an async twin) may run any call. Writers of one process queue
on a lock per file (`_writer_lock`), handed over at once; writers of other processes meet at
SQLite's lock, taken up front (`BEGIN IMMEDIATE`) so they wait in its busy handler (which
sleeps 1 ms and more between tries) instead of failing on a lock upgrade; a lock still busy
is retried until `busy_timeout` runs out. Writes keep one connection (the writer); a read borrows it
when no write has it, as its page cache outlives the writes' commits.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from ...core.errors import BackendError, ConfigError, StoreClosed
from . import shm_descriptors, sql_functions
from .wal_checkpoints import PRAGMAS as WAL_PRAGMAS
from .wal_checkpoints import WalCheckpoints

T = TypeVar("T")

MMAP_SIZE = 256 * 1024 * 1024
"""Bytes of the file each connection reads through a memory map: scans of ~2 KB rows read 3x faster, and a
50 KB state's load ~15% faster, than through a system call per page."""
_MAP_ANEW = ("PRAGMA mmap_size = 0", f"PRAGMA mmap_size = {MMAP_SIZE}")
"""Drops a connection's memory map; its next read maps the file at its size then (`Connections._map_anew`)."""
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_forks = 0
"""How many forks made this process (0 in the original one): cheaper to compare than getpid."""


_writer_locks: dict[str, threading.RLock] = {}
_writer_locks_guard = threading.Lock()


def _count_fork() -> None:
    global _forks
    _forks += 1
    _writer_locks.clear()  # a parent's thread may have held one: the child starts with fresh ones


def _writer_lock(key: str) -> threading.RLock:
    """The lock this process's writers to one file take in turn (reentrant: a write may nest)."""
    lock = _writer_locks.get(key)
    if lock is None:
        with _writer_locks_guard:
            lock = _writer_locks.setdefault(key, threading.RLock())
    return lock


os.register_at_fork(after_in_child=_count_fork)


def is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(exc) or "busy" in str(exc)


def _busy_with(conn: sqlite3.Connection) -> bool:
    """Whether a connection is unfit for reuse (left inside a transaction, or closed)."""
    try:
        return conn.in_transaction
    except sqlite3.ProgrammingError:
        return True


class Connections:
    """A pool of connections to `path`, each used by one call at a time."""

    def __init__(self, path: Path, busy_timeout: float, synchronous: str) -> None:
        self.path = path
        self._file_key = os.path.realpath(path)
        self.busy_timeout = busy_timeout
        self._pragmas = (
            f"PRAGMA synchronous = {'FULL' if synchronous == 'full' else 'NORMAL'}",
            "PRAGMA temp_store = MEMORY",
            "PRAGMA cache_size = -16384",
            f"PRAGMA mmap_size = {MMAP_SIZE}",
            *WAL_PRAGMAS,
        )
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._forks = _forks
        self._closed = False
        self._checkpoints = WalCheckpoints(path, self._connect, self._holding_writers)
        self._writer: sqlite3.Connection | None = None
        """The connection writes use, touched only under the file's writer lock (`_take_writer`); reads borrow
        it when no write has it (`_borrow_writer`)."""
        self._writer_forks = _forks
        self._writer_mapped = 0
        """`WalCheckpoints.copies` when the writer connection last mapped the file anew (`_map_anew`)."""

    def _holding_writers(self) -> threading.RLock:
        """This process's writers to the file, held back while the lock is (`WalCheckpoints`)."""
        return _writer_lock(self._file_key)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False, cached_statements=256)
        try:
            for pragma in self._pragmas:
                conn.execute(pragma)
            sql_functions.install(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for the duration of one call."""
        conn = self._checkout()
        try:
            yield conn
        finally:
            self._checkin(conn)

    def _checkout(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StoreClosed(f"the SQLite store at {self.path} is closed")
            if _forks != self._forks:  # forked: the parent's connections and thread are not ours to use
                self._idle, self._forks = [], _forks
                self._checkpoints = WalCheckpoints(self.path, self._connect, self._holding_writers)
            conn = self._idle.pop() if self._idle else None
        return self._connect() if conn is None else conn

    def _checkin(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            keep = not self._closed and _forks == self._forks and not _busy_with(conn)
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        with _writer_lock(self._file_key):  # no write of this process runs: the writer connection is idle
            writer, self._writer = self._writer, None
        if writer is not None and self._writer_forks == _forks:
            idle.append(writer)
        self._checkpoints.close()
        for conn in idle:
            conn.close()
        shm_descriptors.close_unlinked()  # the `-shm` file is gone if these were its last connections

    # transactions ---------------------------------------------------------------------
    def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in one write transaction (all-or-nothing), retrying while busy."""
        with _writer_lock(self._file_key):
            result = self._transaction("BEGIN IMMEDIATE", work, writing=True)
        self._committed()
        return result

    def one_write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` that issues a single writing statement: SQLite makes it atomic by itself
        (autocommit), so no BEGIN and COMMIT around it. Tried once on the writer connection with no
        busy retries set up (`one_read`'s saving, for a lone put); a failed statement wrote nothing,
        so a busy one is retried as every write is (`_transaction`)."""
        with _writer_lock(self._file_key):  # `_tried_once`, spelled out: no callables made for a lone put
            conn = self._take_writer()
            try:
                result = work(conn)
            except sqlite3.Error as exc:
                self._give_writer(conn)
                if not (isinstance(exc, sqlite3.OperationalError) and is_busy(exc)):
                    raise self.error(exc) from exc
                result = self._transaction(None, work, writing=True)
            except BaseException:
                self._give_writer(conn)
                raise
            else:
                self._give_writer(conn)
        self._committed()
        return result

    def _tried_once(self, conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T],
                    give_back: Callable[[sqlite3.Connection], None], retry: Callable[[], T]) -> T:
        """`work`'s single statement on `conn` (handed back by `give_back` after it) with no busy retries
        set up: a busy statement did nothing, so it goes to `retry` (`_transaction`'s retries); any other
        SQLite error becomes the backend's (`one_read`, `one_write`)."""
        try:
            result = work(conn)
        except sqlite3.Error as exc:
            give_back(conn)
            if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
                return retry()
            raise self.error(exc) from exc
        except BaseException:
            give_back(conn)
            raise
        give_back(conn)
        return result

    def _committed(self) -> None:
        """Hand the WAL to the background checkpoints (`wal_checkpoints`), or, far behind, checkpoint it
        here with this process's writers held back, so the checkpoint reaches the end and SQLite resets the WAL."""
        checkpoints = self._checkpoints
        if checkpoints.after_commit():
            with _writer_lock(self._file_key):
                self._transaction(None, checkpoints.checkpoint, writing=True)

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` on one consistent snapshot."""
        return self._transaction("BEGIN", work)

    def one_read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` that issues a single reading statement: it is its own snapshot.

        It runs on the writer connection when no write has it (`_borrow_writer`, as every read does): its page
        cache stays valid across its own commits, where a pooled one's is dropped by each commit (a read
        after a write, an agent's every step, cost ~15 us more on a pooled one). Else on an idle pooled
        connection, taken without the pool's lock (a list's pop is atomic). Either way the busy retries are
        set up only if the statement fails: ~7k instructions of a read's ~12k in the pool. A fork, a closed
        pool, an empty one or a failed statement take `_transaction`."""
        if _forks == self._forks:
            lock = _writer_locks.get(self._file_key)  # `_borrow_writer`, inline: none made yet, no writer to borrow
            if lock is not None and self._writer is not None and lock.acquire(blocking=False):
                writer = self._writer
                if writer is not None and not self._closed and self._writer_forks == _forks:
                    self._writer = None
                    lock.release()
                    try:  # `_tried_once`, inline: no callables made, no frame (~1.2 us of a read's ~5 in the pool)
                        if self._checkpoints.copies != self._writer_mapped:
                            self._map_anew(writer)
                        result = work(writer)
                    except sqlite3.Error as exc:
                        self._return_writer(writer)
                        if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
                            return self._transaction(None, work)
                        raise self.error(exc) from exc
                    except BaseException:
                        self._return_writer(writer)
                        raise
                    if lock.acquire(blocking=False):  # `_return_writer`, inline: the writer is ours, not closed
                        if self._writer is None and not self._closed and not writer.in_transaction:
                            self._writer, self._writer_forks = writer, _forks
                            lock.release()
                            return result
                        lock.release()
                    self._checkin(writer)
                    return result
                lock.release()
            try:
                conn = self._idle.pop()
            except IndexError:
                return self._transaction(None, work)
            if self._closed:  # `close` swapped the list after this pop, or before: either way not ours to use
                self._checkin(conn)
                return self._transaction(None, work)
            return self._tried_once(conn, work, self._checkin, lambda: self._transaction(None, work))
        return self._transaction(None, work)

    def one_row(self, sql: str, args: Sequence[Any]) -> Any:
        """The first row of a single reading statement (its own snapshot), or None: a hot read by a unique key
        or with LIMIT 1 (`one_read`; the cursor is freed, its statement reset, before the connection goes back)."""
        return self.one_read(partial(_first_row, sql, args))

    def _take_writer(self) -> sqlite3.Connection:
        """The writer connection, for a caller holding the file's writer lock (so no lock of the pool's
        is taken, ~6k instructions a write); a pooled one while a nested write has it, or before the first."""
        conn = self._writer
        if conn is None or self._closed or self._writer_forks != _forks:  # forked: the parent's, not ours
            self._writer = None
            return self._checkout()
        self._writer = None
        return conn

    def _borrow_writer(self) -> sqlite3.Connection | None:
        """The writer connection for one read, if no write holds the file's writer lock and one is kept; the
        lock is held only to take it, not through the read: a write that comes meanwhile takes a pooled
        connection (`_take_writer`), so a read never holds a write back."""
        if self._writer is None:
            return None
        lock = _writer_lock(self._file_key)
        if not lock.acquire(blocking=False):
            return None
        try:
            conn = self._writer
            if conn is None or self._closed or self._writer_forks != _forks:
                return None
            self._writer = None
        finally:
            lock.release()
        if self._checkpoints.copies != self._writer_mapped:
            self._map_anew(conn)
        return conn

    def _map_anew(self, writer: sqlite3.Connection) -> None:
        """Have the writer connection, borrowed for a read, map the file again at its size now: SQLite sizes a
        connection's memory map at its first read of the file and renews it only after another connection's
        commit, which the writer never sees, so every page our checkpoints (`WalCheckpoints`) appended since was
        read with a system call (a 50 KB state's load by id measured 0.82-0.87x raw sqlite3's, 0.96-1.02x mapped
        anew). Once per checkpoint at most."""
        copies = self._checkpoints.copies
        try:
            for pragma in _MAP_ANEW:
                writer.execute(pragma)
        except sqlite3.Error:
            return  # a connection that cannot run a pragma fails the read itself, which says why
        self._writer_mapped = copies

    def _return_writer(self, conn: sqlite3.Connection) -> None:
        """Give back what `_borrow_writer` lent: the writer connection again if no write holds the lock
        (`_give_writer`), else to the pool (the write's connection is kept as the writer)."""
        lock = _writer_lock(self._file_key)
        if not lock.acquire(blocking=False):
            self._checkin(conn)
            return
        try:  # `_give_writer`, inline, the pool's lock not taken under this one
            kept = self._writer is None and not self._closed and not _busy_with(conn)
            if kept:
                self._writer, self._writer_forks = conn, _forks
        finally:
            lock.release()
        if not kept:
            self._checkin(conn)

    def _give_writer(self, conn: sqlite3.Connection) -> None:
        """Keep `conn` as the writer connection if it is fit and none is kept; else check it in."""
        if self._writer is None and not self._closed and not _busy_with(conn):
            self._writer, self._writer_forks = conn, _forks
        else:
            self._checkin(conn)

    def _transaction(self, begin: str | None, work: Callable[[sqlite3.Connection], T], writing: bool = False) -> T:
        """Run `work` on a pooled connection (the writer connection when `writing`, under the writer lock; a
        read borrows it when no write has it, as `one_read` does). It must not return a cursor: the cursor
        would reset its statement whenever it is freed, maybe while another thread has the connection."""
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.001
        give_back = self._give_writer if writing else self._return_writer
        conn = self._take_writer() if writing else self._borrow_writer()
        if conn is None:  # not `with self.connection()`: ~3 us
            conn, give_back = self._checkout(), self._checkin
        try:
            while True:
                try:
                    if begin is None:
                        return work(conn)
                    conn.execute(begin)
                    try:
                        result = work(conn)
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                    return result
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc) or time.monotonic() >= deadline:
                        raise self.error(exc) from exc
                except sqlite3.Error as exc:
                    raise self.error(exc) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        finally:
            give_back(conn)

    def error(self, exc: sqlite3.Error) -> BackendError:
        if is_busy(exc):
            return BackendError(
                f"the SQLite database {self.path} stayed locked by another writer for more than "
                f"{self.busy_timeout:g} s; raise the busy_timeout option if writers hold it that long")
        return BackendError(f"SQLite error on {self.path}: {exc}")


def _first_row(sql: str, args: Sequence[Any], conn: sqlite3.Connection) -> Any:
    return conn.execute(sql, args).fetchone()


def open_file(path: Path, busy_timeout: float) -> None:
    """Switch the file to WAL mode (creating it), or fail with an error naming the file."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open the SQLite database {path}: {exc}") from exc
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigError(f"cannot switch {path} to WAL mode (it stays in {mode!r} mode); "
                                  "is it on a network file system?")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise ConfigError(f"cannot open the SQLite database {path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{path} is not a usable SQLite database: {exc}") from exc
        finally:
            conn.close()
        time.sleep(0.01)
