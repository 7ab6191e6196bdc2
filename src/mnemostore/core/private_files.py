"""Owner-only files and directories for embedded stores, as ssh and gpg keep theirs.

An agent's memory holds prompts, code and user data, so everything a store creates on disk
is 0600 (files) or 0700 (directories). What already exists keeps its mode: a directory
mnemostore did not create is left alone, and a file replaced by a new one (compaction, a
rewritten parameter file) takes the old file's mode, so a mode the user chose survives.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


def make_directories(directory: Path) -> None:
    """Create `directory` and its missing parents, each owner-only; existing ones are untouched."""
    missing: list[Path] = []
    current = directory
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIRECTORY_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue
        os.chmod(path, DIRECTORY_MODE)  # mkdir's mode is narrowed by the umask; this is exact


def create_file(path: Path) -> None:
    """Create `path` empty and owner-only unless it exists (another process may win the race)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def open_file(path: Path, flags: int) -> int:
    """`os.open(path, flags | O_CREAT)`; a file it creates is owner-only, an existing one keeps its mode."""
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)


def mode_for_replacement(path: Path) -> int:
    """The mode a file written to replace `path` takes: `path`'s own, or owner-only for a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return FILE_MODE
