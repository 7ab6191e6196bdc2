"""Syncs a file through a descriptor this process already holds on it (SQLite's), never one of its own.

POSIX advisory locks belong to a process and a file: closing any descriptor of a file drops every lock the
process holds on it, SQLite's included (`shm_descriptors`). So a sync of a database file beside SQLite's
connections looks up a descriptor one of them opened and leaves it open. If that connection closes it between
the lookup and the sync, and the number is reused, the sync lands on another file: a sync harms no file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

_LISTINGS = ("/proc/self/fd", "/dev/fd")
"""Where the process's open descriptors are listed (Linux, then the BSDs and macOS)."""
_sync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def sync_open_file(path: str) -> bool:
    """Write the file at `path`'s dirty pages to disk through a descriptor of it open in this process; False
    if none is (or the platform lists none), and nothing is synced."""
    try:
        seen = os.stat(path)
    except OSError:
        return False
    for fd in _open_descriptors():
        try:
            opened = os.fstat(fd)
            if opened.st_ino == seen.st_ino and opened.st_dev == seen.st_dev:
                _sync(fd)
                return True
        except OSError:  # closed since it was listed, or not a file that syncs
            continue
    return False


def _open_descriptors() -> Iterator[int]:
    for listing in _LISTINGS:
        try:
            names = os.listdir(listing)
        except OSError:
            continue
        for name in names:
            if name.isdigit():
                yield int(name)
        return
