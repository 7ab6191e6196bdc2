"""One Qdrant client per store location in this process, shared by every Store opened on it.

Qdrant's local engine locks its directory against a second client (even in the same
process), and a private in-memory client is invisible to any other; sharing the client
lets several Store instances use one store, as the protocol expects. The handle's lock
serialises this process's writes and read-modify-write updates; its `migration_lock` is the
migration runners' lock of an in-memory store (every open of it shares it). A shared in-memory store
lives as long as the process (like `memory://NAME`); a directory is released when its
last Store closes, so another process may open it.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError
from ...core.private_files import make_directories
from ...migrations.locking import ProcessLock
from .options import Location, QdrantOptions

if TYPE_CHECKING:
    from qdrant_client import QdrantClient


@dataclass
class Handle:
    client: QdrantClient
    location: Location
    lock: threading.RLock = field(default_factory=threading.RLock)
    collections: dict[str, bool] = field(default_factory=dict)
    """Collections known to exist -> whether they have the embedding vector."""
    tenants: dict[str, set[str]] = field(default_factory=dict)
    """Local engine only (no other process writes): collection -> the `_t` values it may hold."""
    migration_lock: ProcessLock = field(default_factory=ProcessLock)
    """In-memory stores: the migration runners' lock, as shared as the store itself."""
    users: int = 0


_HANDLES: dict[tuple[str, ...], Handle] = {}
_HANDLES_LOCK = threading.Lock()
_CLIENTS: dict[int, QdrantClient] = {}


@atexit.register
def _close_at_exit() -> None:
    """Close clients left open, while imports still work (qdrant's own finaliser fails at shutdown)."""
    for client in list(_CLIENTS.values()):
        with contextlib.suppress(Exception):
            client.close()
    _CLIENTS.clear()


def acquire(location: Location, options: QdrantOptions) -> Handle:
    """The handle for `location`, connecting (or opening the directory) if this process has none."""
    key = location.key()
    with _HANDLES_LOCK:
        handle = _HANDLES.get(key) if key is not None else None
        if handle is None:
            handle = Handle(_connect(location, options), location)
            _CLIENTS[id(handle)] = handle.client
            if key is not None:
                _HANDLES[key] = handle
        handle.users += 1
        return handle


def held_locations() -> set[tuple[str, ...]]:
    """The locations this process holds a handle for (a shared in-memory store lives as long as one)."""
    with _HANDLES_LOCK:
        return set(_HANDLES)


def release(handle: Handle) -> None:
    """One Store is done with `handle`; close the client when nothing else uses it."""
    key = handle.location.key()
    with _HANDLES_LOCK:
        handle.users -= 1
        if handle.users > 0 or (handle.location.mode == "memory" and key is not None):
            return
        if key is not None:
            _HANDLES.pop(key, None)
        _CLIENTS.pop(id(handle), None)
    handle.client.close()


def _connect(location: Location, options: QdrantOptions) -> QdrantClient:
    from qdrant_client import QdrantClient

    if location.mode == "memory":
        return QdrantClient(location=":memory:")
    if location.mode == "disk":
        assert location.path is not None
        make_directories(Path(location.path))  # owner-only, before Qdrant writes into it
        try:
            return QdrantClient(path=location.path)
        except RuntimeError as exc:
            if "already accessed" not in str(exc):
                raise
            raise BackendError(
                f"the Qdrant store in {location.path} is open in another process; Qdrant's local mode "
                "allows one process at a time: close the other one, or use a Qdrant server "
                "(qdrant+http://host:6333) for several processes") from exc
    return QdrantClient(**server_options(location, options))


def server_options(location: Location, options: QdrantOptions) -> dict[str, Any]:
    """The arguments of a client (`QdrantClient` or `AsyncQdrantClient`) for a server location."""
    return {"url": location.server_url, "api_key": location.api_key, "prefer_grpc": options.prefer_grpc,
            "grpc_port": options.grpc_port, "timeout": options.timeout}
