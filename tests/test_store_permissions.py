"""Embedded stores are created owner-only (0600 files, 0700 directories), and keep a mode the user set."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import mnemostore
from mnemostore.testing.factories import make


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The usual umask (022), which would leave new files world-readable."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_new_sqlite_store_and_the_directories_made_for_it_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "nested" / "memory.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        store.heuristics.add(make("heuristic", 1))
        written = sorted(p.name for p in path.parent.iterdir())
        assert {"memory.db", "memory.db-wal", "memory.db-shm"} <= set(written)
        for name in written:
            assert mode(path.parent / name) == 0o600, name
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "nested") == 0o700
    assert mode(tmp_path) == stat.S_IMODE(tmp_path.stat().st_mode)  # an existing directory is left alone


def test_the_default_store_is_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("MNEMOSTORE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    with mnemostore.open() as store:
        path = Path(store.backend.describe()["path"])
    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_a_new_file_store_is_owner_only_and_compaction_keeps_a_mode_the_user_set(tmp_path: Path) -> None:
    directory = tmp_path / "files"
    url = f"file://{directory}"
    with mnemostore.open(url) as store:
        store.heuristics.add(make("heuristic", 1, embedding=[1.0, 0.0, 0.0]))
        store.heuristics.add(make("heuristic", 1, confidence=0.9))  # a dead line for compaction to drop
    assert mode(directory) == 0o700
    for path in directory.iterdir():
        assert mode(path) == 0o600, path.name
    log, meta = directory / "heuristic.jsonl", directory / "meta.json"
    os.chmod(log, 0o640)
    os.chmod(meta, 0o640)
    inodes = (log.stat().st_ino, meta.stat().st_ino)
    with mnemostore.open(url) as store:
        store.backend.compact()  # type: ignore[attr-defined]
        store.backend.write_meta("note", {"rewritten": True})
    assert log.stat().st_ino != inodes[0] and meta.stat().st_ino != inodes[1]  # both were replaced
    assert mode(log) == 0o640 and mode(meta) == 0o640


@pytest.mark.parametrize("scheme", ["chroma", "qdrant"])
def test_embedded_vector_engines_get_an_owner_only_directory(scheme: str, tmp_path: Path) -> None:
    pytest.importorskip("chromadb" if scheme == "chroma" else "qdrant_client")
    directory = tmp_path / "engine" / "store"
    with mnemostore.open(f"{scheme}://{directory}") as store:
        store.outcomes.add(make("outcome", 1))
    assert mode(directory) == 0o700 and mode(directory.parent) == 0o700
