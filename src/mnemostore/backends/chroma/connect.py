"""Chroma clients for a location, shared by the stores of a process, and the write locks.

Clients on one directory share Chroma's state inside a process (Chroma keys its system
by path), and so do clients of `chroma://memory`; the in-memory one is kept alive for the
life of the process, so reopening it finds what was written (like `memory://NAME`).
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError, ConfigError
from ...core.private_files import make_directories
from ...core.url import StoreURL
from ...migrations.locking import ProcessLock
from .options import ChromaOptions, Location

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

_LOCKS: dict[tuple[object, ...], threading.RLock] = {}
_MIGRATION_LOCKS: dict[tuple[object, ...], ProcessLock] = {}
_LOCKS_LOCK = threading.Lock()
_EPHEMERAL_KEEPER: list[Any] = []


def write_lock(key: tuple[object, ...]) -> threading.RLock:
    """One lock per Chroma collection set in this process: serialises read-modify-write."""
    with _LOCKS_LOCK:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.RLock()
        return lock


def process_migration_lock(key: tuple[object, ...]) -> ProcessLock:
    """The migration lock of `chroma://memory` stores: shared by every open in this process,
    as the in-memory Chroma is."""
    with _LOCKS_LOCK:
        lock = _MIGRATION_LOCKS.get(key)
        if lock is None:
            lock = _MIGRATION_LOCKS[key] = ProcessLock()
        return lock


def http_headers(url: StoreURL, options: ChromaOptions) -> dict[str, str]:
    """Request headers: the configured ones plus credentials (never logged or shown)."""
    headers = dict(options.headers)
    if options.token is not None:
        secret = options.token.get_secret_value()
        headers[options.token_header] = f"Bearer {secret}" if options.token_header == "Authorization" else secret
    elif url.username is not None:
        pair = f"{url.username}:{url.password or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    return headers


class _Shared:
    """A client shared by the stores of this process that open the same Chroma the same way."""

    def __init__(self, client: ClientAPI) -> None:
        self.client = client
        self.users = 0
        self.max_batch: int | None = None


_CLIENTS: dict[tuple[object, ...], _Shared] = {}
_CLIENTS_LOCK = threading.Lock()


def acquire(url: StoreURL, location: Location, options: ChromaOptions) -> tuple[ClientAPI, tuple[object, ...]]:
    """A client for the location, shared with other stores of this process (creating an HTTP
    client costs ~40 ms of TLS setup even for plain http); give the key back to `release`."""
    key = (*location.key, options.chroma_tenant, options.database, options.verify_ssl,
           tuple(sorted(http_headers(url, options).items())))
    with _CLIENTS_LOCK:
        shared = _CLIENTS.get(key)
        if shared is None:
            shared = _CLIENTS[key] = _Shared(connect(url, location, options))
        shared.users += 1
        return shared.client, key


def release(key: tuple[object, ...]) -> None:
    """Give a client back; the last user closes it (an embedded store then releases its files)."""
    with _CLIENTS_LOCK:
        shared = _CLIENTS.get(key)
        if shared is None:
            return
        shared.users -= 1
        if shared.users > 0:
            return
        del _CLIENTS[key]
    close = getattr(shared.client, "close", None)  # chromadb >= 1.1
    if close is not None:
        close()


def max_batch_size(key: tuple[object, ...]) -> int:
    """Chroma's largest write batch, asked once per shared client."""
    shared = _CLIENTS[key]
    if shared.max_batch is None:
        shared.max_batch = shared.client.get_max_batch_size()
    return shared.max_batch


def connect(url: StoreURL, location: Location, options: ChromaOptions) -> ClientAPI:
    """A new client for the location, with Chroma's telemetry off and the tenant/database checked."""
    import chromadb
    from chromadb.config import Settings

    if options.create_database:
        ensure_database(location, options, Settings(anonymized_telemetry=False), url)
    settings = Settings(anonymized_telemetry=False)
    try:
        if location.mode == "persistent":
            assert location.path is not None
            make_directories(Path(location.path))  # owner-only, before Chroma writes into it
            return chromadb.PersistentClient(path=location.path, settings=settings,
                                             tenant=options.chroma_tenant, database=options.database)
        if location.mode == "ephemeral":
            if not _EPHEMERAL_KEEPER:
                _EPHEMERAL_KEEPER.append(chromadb.EphemeralClient(settings=settings))
            return chromadb.EphemeralClient(settings=settings, tenant=options.chroma_tenant,
                                            database=options.database)
        settings.chroma_server_ssl_verify = options.verify_ssl
        return chromadb.HttpClient(host=location.host or "localhost", port=location.port or 8000,
                                   ssl=location.ssl, headers=http_headers(url, options), settings=settings,
                                   tenant=options.chroma_tenant, database=options.database)
    except Exception as exc:
        raise BackendError(f"cannot open Chroma at {url.masked}: {type(exc).__name__}: {url.scrub(str(exc))}") from None


def ensure_database(location: Location, options: ChromaOptions, settings: Any, url: StoreURL) -> None:
    """Create the configured Chroma tenant and database on a server where they are missing."""
    import chromadb

    if location.mode != "http":
        raise ConfigError(f"{url.masked}: create_database applies to Chroma servers; embedded stores "
                          "share one database, so give each store its own prefix= instead")
    settings.chroma_api_impl = "chromadb.api.fastapi.FastAPI"
    settings.chroma_server_host = location.host
    settings.chroma_server_http_port = location.port
    settings.chroma_server_ssl_enabled = location.ssl
    settings.chroma_server_ssl_verify = options.verify_ssl
    settings.chroma_server_headers = http_headers(url, options)
    try:
        admin = chromadb.AdminClient(settings)
        try:
            admin.get_tenant(options.chroma_tenant)
        except Exception:
            admin.create_tenant(options.chroma_tenant)
        try:
            admin.get_database(options.database, tenant=options.chroma_tenant)
        except Exception:
            admin.create_database(options.database, tenant=options.chroma_tenant)
    except Exception as exc:
        raise BackendError(
            f"cannot create Chroma database {options.chroma_tenant}/{options.database} at {url.masked}: "
            f"{type(exc).__name__}: {url.scrub(str(exc))}") from None
