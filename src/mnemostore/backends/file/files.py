"""Small durable-file helpers: atomic replacement and directory fsync."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ...core.private_files import mode_for_replacement


def fsync_directory(directory: Path) -> None:
    """Make renames and creations in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, parts: Iterable[bytes | memoryview]) -> None:
    """Write every byte of `parts` (os.writev may write less than asked)."""
    pending = [memoryview(p) for p in parts if len(p)]
    while pending:
        written = os.writev(fd, pending)
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            pending.pop(0)
        if written:
            pending[0] = pending[0][written:]


def replace_atomically(path: Path, chunks: Iterable[Iterable[bytes | memoryview]], durable: bool = True) -> None:
    """Write `chunks` to a temporary sibling, fsync it, and rename it over `path`.

    Readers see the old file or the new one, never a mix; a crash leaves at most a stale
    `*.tmp` file, which the next replacement overwrites. The new file keeps the old one's mode
    (owner-only if there was none).
    """
    tmp = path.with_name(path.name + ".tmp")
    mode = mode_for_replacement(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # exactly the old file's mode (or owner-only), whatever the umask
        for parts in chunks:
            write_all(fd, parts)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_directory(path.parent)
