"""Read-only descriptors of SQLite `-shm` files, one per file for the process, closed only once unlinked.

POSIX advisory locks belong to a process and a file: closing any descriptor of a file drops every lock
the process holds on it, SQLite's included. A reader's snapshot would then no longer hold back another
process's checkpoint, which may reset the WAL under it (https://sqlite.org/howtocorrupt.html, 2.2).
SQLite unlinks a `-shm` file when the last connection to its database closes; only then is the
descriptor kept here closed.
"""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_by_file: dict[tuple[int, int], int] = {}
"""(device, inode) of a `-shm` file -> the descriptor of it handed out."""
_opened: set[int] = set()
"""Every descriptor this module opened and has not closed (a file replaced between `stat` and `open`
may leave two of one file: neither may be closed while it is linked)."""


def descriptor(path: str) -> int | None:
    """The process's read-only descriptor of the file now at `path` (opened once); None if there is none."""
    try:
        seen = os.stat(path)
    except OSError:
        return None
    with _lock:
        fd = _by_file.get((seen.st_dev, seen.st_ino))
        if fd is not None:
            return fd
        _close_unlinked()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        _opened.add(fd)
        opened = os.fstat(fd)
        return _by_file.setdefault((opened.st_dev, opened.st_ino), fd)


def close_unlinked() -> None:
    """Close the descriptors of files SQLite has unlinked (no connection anywhere holds their locks)."""
    with _lock:
        _close_unlinked()


def _close_unlinked() -> None:
    for fd in list(_opened):
        try:
            linked = os.fstat(fd).st_nlink > 0
        except OSError:
            linked = False
        if linked:
            continue
        os.close(fd)
        _opened.discard(fd)
        for file, kept in list(_by_file.items()):
            if kept == fd:
                del _by_file[file]
