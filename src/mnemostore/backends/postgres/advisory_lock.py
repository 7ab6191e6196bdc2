"""The migration lock on Postgres: a session-level advisory lock on a connection of its own.

`pg_try_advisory_lock(key)` on a dedicated autocommit connection, held from acquire to
release; the key comes from the store's schema and table prefix, so stores in different
schemas never wait for each other. The server frees the lock when the holding session
ends, so a crashed runner never leaves a store locked and there is no expiry (ttl None).
`break-lock` on Postgres terminates the holding session (`pg_terminate_backend`): that
frees the lock and rolls back whatever that runner's transaction was doing.

The connection is autocommit on purpose: an idle open transaction on it would hold a
snapshot, and `CREATE INDEX CONCURRENTLY` in the runner's own steps would wait for it forever.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, closing
from typing import TYPE_CHECKING, Any

from ...core.errors import LockHeld
from ...migrations.locking import LockInfo, MigrationLock

if TYPE_CHECKING:
    import psycopg

    Connection = psycopg.Connection[tuple[Any, ...]]

APPLICATION = "mnemostore-migrate"
"""The `application_name` prefix of a lock session, as pg_stat_activity shows it."""
_APPLICATION = re.compile(rf"^{APPLICATION}/(\S+) ")
_HOLDER_SQL = """
SELECT l.pid, a.application_name, a.client_addr::text, a.client_port, a.backend_start
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid
"""
"""The session holding a bigint advisory lock: pg_locks splits the key into classid (high
32 bits) and objid (low 32 bits), objsubid 1; pg_stat_activity says who that session is."""


class AdvisoryLock(MigrationLock):
    """One store's migration lock as a Postgres advisory lock (see the module docstring)."""

    ttl: float | None = None

    def __init__(self, connect: Callable[[], Connection], key: int,
                 errors: Callable[[str], AbstractContextManager[None]], terminate_wait: float = 10.0) -> None:
        self.connect = connect
        """Opens a new autocommit connection to the store's database."""
        self.key = key
        self.errors = errors
        """Turns driver errors into BackendError naming the store (and no secret)."""
        self.terminate_wait = terminate_wait
        self._conn: Connection | None = None
        self._info: LockInfo | None = None
        self._mutex = threading.Lock()

    @property
    def session_pid(self) -> int | None:
        """The server process of the session holding the lock through this object, if it does."""
        conn = self._conn
        return None if conn is None else int(conn.info.backend_pid)

    def try_acquire(self, info: LockInfo) -> bool:
        with self._mutex:
            if self._conn is not None:
                return False
            with self.errors("taking the migration lock"):
                conn = self.connect()
                try:
                    name = f"{APPLICATION}/{info.runner_version or '?'} {info.holder}"
                    conn.execute("SELECT set_config('application_name', %s, false)", (name[:63],))
                    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
                except BaseException:
                    conn.close()
                    raise
            if not (row and row[0]):
                conn.close()
                return False
            self._conn, self._info = conn, info
            return True

    def release(self, info: LockInfo) -> None:
        import psycopg

        with self._mutex:
            if self._conn is None or self._info is None or self._info.token != info.token:
                return
            conn, self._conn, self._info = self._conn, None, None
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            except psycopg.Error:
                pass  # the session is gone (terminated by break-lock): so is its lock
            finally:
                conn.close()

    def refresh(self, info: LockInfo) -> LockInfo:
        """Nothing expires; but stop a runner whose lock session was terminated (break-lock)."""
        import psycopg

        with self._mutex:
            conn = self._conn
            if conn is None or self._info is None or self._info.token != info.token:
                raise LockHeld("this runner no longer holds the migration lock; stopping")
            try:
                conn.execute("SELECT 1")
            except psycopg.Error:
                raise LockHeld(
                    "this runner's migration lock session was ended (by `mnemostore migrate break-lock` or the "
                    "server); stopping before the next step") from None
        return info

    def holder(self) -> LockInfo | None:
        unsigned = self.key & 0xFFFF_FFFF_FFFF_FFFF
        with self.errors("looking up the migration lock holder"), closing(self.connect()) as conn:
            row = conn.execute(_HOLDER_SQL, (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchone()
        if row is None:
            return None
        pid, application, address, port, started = row
        match = _APPLICATION.match(application or "")
        client = "a local socket" if address is None else f"{address}:{port}"
        return LockInfo(
            holder=f"postgres session pid {pid} ({application or 'application unknown'!r} from {client})",
            token=str(pid),
            acquired_at=started.isoformat() if started is not None else "?",
            runner_version=match.group(1) if match else "",
        )

    def force_release(self) -> LockInfo | None:
        """Terminate the session holding the lock (`pg_terminate_backend`); return who it was."""
        import psycopg

        current = self.holder()
        if current is None:
            return None
        pid = int(current.token)
        with self.errors("breaking the migration lock"), closing(self.connect()) as conn:
            try:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            except psycopg.errors.InsufficientPrivilege:
                raise LockHeld(
                    f"the migration lock is held by {current.describe()} and this role may not end that session; "
                    f"ask an administrator to run: SELECT pg_terminate_backend({pid})") from None
        deadline = time.monotonic() + self.terminate_wait
        while (now := self.holder()) is not None and now.token == current.token:
            if time.monotonic() >= deadline:
                raise LockHeld(f"terminated {current.describe()}, but it still holds the migration lock "
                               f"after {self.terminate_wait:g} s; try again")
            time.sleep(0.05)
        return current
