"""A lock file held with `fcntl.flock`, shared or exclusive (the file backend's directory lock, the
SQLite backend's checkpoint lock).

flock locks belong to an open file description, so two stores opened in one process
exclude each other exactly as two processes do. Locks held by a killed process are
released by the kernel, so a crash never leaves the store locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .private_files import open_file


class Flock:
    """A reader/writer lock on `path` (created if missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def open(self) -> None:
        self._fd = open_file(self.path, os.O_RDWR)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def reopen(self) -> None:
        """A fresh lock file description (after fork: the parent's is shared with the child)."""
        self.close()
        self.open()

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._held(fcntl.LOCK_SH):
            yield

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._held(fcntl.LOCK_EX):
            yield

    @contextmanager
    def _held(self, mode: int) -> Iterator[None]:
        assert self._fd is not None, "lock used before open()"
        fd = self._fd
        fcntl.flock(fd, mode)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
