"""The migration lock: one runner at a time per store, a bounded wait, and a named holder.

A backend returns its lock from `Backend.migration_lock()`: a lock file (`FileLock`) for
stores on a local disk, an advisory lock on Postgres, and by default a lock record with
holder and expiry in the store's metadata (`MetaLock`) for engines that offer nothing
better. `holding()` is the one way to take any of them.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..core.errors import LockHeld
from ..core.private_files import open_file
from .ledger import runner_version, whoami

if TYPE_CHECKING:
    from ..core.protocol import Backend

LOCK_KEY = "migration_lock"


@dataclass(frozen=True)
class LockInfo:
    """Who holds a lock, since when, and (for lock records) until when unless refreshed."""

    holder: str
    token: str
    acquired_at: str
    expires_at: str | None = None
    runner_version: str = ""

    @classmethod
    def mine(cls, ttl: float | None) -> LockInfo:
        now = datetime.now(UTC)
        expires = None if ttl is None else (now + timedelta(seconds=ttl)).isoformat()
        return cls(whoami(), uuid.uuid4().hex, now.isoformat(), expires, runner_version())

    @classmethod
    def from_json(cls, value: Any) -> LockInfo | None:
        if not isinstance(value, dict):
            return None
        try:
            return cls(**value)
        except TypeError:
            return None

    def expired(self) -> bool:
        return self.expires_at is not None and datetime.fromisoformat(self.expires_at) <= datetime.now(UTC)

    def extended(self, ttl: float) -> LockInfo:
        return LockInfo(self.holder, self.token, self.acquired_at,
                        (datetime.now(UTC) + timedelta(seconds=ttl)).isoformat(), self.runner_version)

    def describe(self) -> str:
        until = f", expires {self.expires_at}" if self.expires_at else ""
        return f"{self.holder} (since {self.acquired_at}{until}, mnemostore {self.runner_version or '?'})"


class MigrationLock(ABC):
    """One store's migration lock. `try_acquire` makes one attempt; `holding` waits."""

    ttl: float | None = None
    """Seconds a lock record stays valid without a refresh; None where the engine frees the
    lock of a dead holder by itself (file locks, advisory locks)."""

    @abstractmethod
    def try_acquire(self, info: LockInfo) -> bool:
        """Take the lock for `info` if it is free; never blocks for long."""

    @abstractmethod
    def release(self, info: LockInfo) -> None:
        """Give the lock back (only if `info` still holds it)."""

    @abstractmethod
    def holder(self) -> LockInfo | None:
        """Who holds the lock now, if anyone (as far as the engine can tell)."""

    @abstractmethod
    def force_release(self) -> LockInfo | None:
        """`break-lock`: free the lock whoever holds it; return the holder it had."""

    def refresh(self, info: LockInfo) -> LockInfo:
        """Keep a lock with an expiry alive during long work; returns the refreshed info."""
        return info


@contextmanager
def holding(lock: MigrationLock, wait: float) -> Iterator[LockInfo]:
    """Hold `lock` for the block, waiting at most `wait` seconds; LockHeld names the holder."""
    info = LockInfo.mine(lock.ttl)
    deadline = time.monotonic() + wait
    delay = 0.01
    while not lock.try_acquire(info):
        if time.monotonic() >= deadline:
            current = lock.holder()
            who = current.describe() if current else "another runner"
            raise LockHeld(
                f"another migration runner holds this store's migration lock: {who}; waited {wait:g} s. "
                "If that process is gone, free the lock with: mnemostore migrate break-lock URL")
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
        info = LockInfo.mine(lock.ttl)
    try:
        yield info
    finally:
        lock.release(info)


class FileLock(MigrationLock):
    """`fcntl.flock` on a lock file holding the holder's description.

    The kernel frees the lock when its holder dies, so a crash never leaves a store locked;
    two stores in one process exclude each other as two processes do.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._mutex = threading.Lock()

    def try_acquire(self, info: LockInfo) -> bool:
        with self._mutex:
            if self._fd is not None:
                return False
            fd = open_file(self.path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            os.ftruncate(fd, 0)
            os.pwrite(fd, orjson.dumps(asdict(info)), 0)
            self._fd = fd
            return True

    def release(self, info: LockInfo) -> None:
        with self._mutex:
            if self._fd is None:
                return
            fd, self._fd = self._fd, None
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def holder(self) -> LockInfo | None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    return LockInfo.from_json(orjson.loads(self.path.read_bytes() or b"null"))
                except orjson.JSONDecodeError:  # caught mid-write
                    return LockInfo("another process", "", "")
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None  # a leftover description of a holder that is gone
        finally:
            os.close(fd)

    def force_release(self) -> LockInfo | None:
        """A file lock cannot be taken from a live process; a dead one's is already free."""
        current = self.holder()
        if current is not None:
            raise LockHeld(
                f"the migration lock file {self.path} is held by a live process, {current.describe()}; "
                "it is freed when that process exits (stop it, or wait for it)")
        return None


class ProcessLock(MigrationLock):
    """For stores that live inside one process (memory://): a lock shared by its opens."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._info: LockInfo | None = None

    def try_acquire(self, info: LockInfo) -> bool:
        with self._mutex:
            if self._info is not None:
                return False
            self._info = info
            return True

    def release(self, info: LockInfo) -> None:
        with self._mutex:
            if self._info is not None and self._info.token == info.token:
                self._info = None

    def holder(self) -> LockInfo | None:
        return self._info

    def force_release(self) -> LockInfo | None:
        with self._mutex:
            info, self._info = self._info, None
            return info


class MetaLock(MigrationLock):
    """A lock record (holder, token, expiry) in the store's metadata, for engines without locks.

    A runner writes its record when none is live, waits `settle` seconds and reads it back:
    of two racing writers only the last sees its own token. The record expires unless the
    holder refreshes it, so a crashed holder blocks others for at most `ttl` seconds.
    """

    def __init__(self, backend: Backend, ttl: float = 120.0, settle: float = 0.05) -> None:
        self.backend = backend
        self.ttl = ttl
        self.settle = settle

    def try_acquire(self, info: LockInfo) -> bool:
        current = self.holder()
        if current is not None and not current.expired():
            return False
        self.backend.write_meta(LOCK_KEY, asdict(info))
        time.sleep(self.settle)
        current = self.holder()
        return current is not None and current.token == info.token

    def release(self, info: LockInfo) -> None:
        current = self.holder()
        if current is not None and current.token == info.token:
            self.backend.write_meta(LOCK_KEY, None)

    def holder(self) -> LockInfo | None:
        return LockInfo.from_json(self.backend.read_meta(LOCK_KEY))

    def force_release(self) -> LockInfo | None:
        current = self.holder()
        self.backend.write_meta(LOCK_KEY, None)
        return current

    def refresh(self, info: LockInfo) -> LockInfo:
        current = self.holder()
        if current is None or current.token != info.token:
            raise LockHeld("this runner's migration lock record expired and was taken over; stopping "
                           "(raise the lock ttl if batches take longer than it)")
        refreshed = info.extended(self.ttl or 0)
        self.backend.write_meta(LOCK_KEY, asdict(refreshed))
        return refreshed
