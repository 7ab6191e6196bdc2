"""Connections of the sync backend's own pool kept out of it between calls, the last one given
back taken first: a call skips psycopg_pool's checkout and return (their locking, statistics and
logging cost 40-60 us of client CPU per search here, a fifth of a search's client time).

What the pool guarantees still holds:
- a kept connection is health-checked as the pool checks one (the same `check`) before it is
  handed out; one that fails goes back to the pool, which replaces it;
- kept connections are checked out of the pool, so they count towards its `max_size`;
- none is kept while a thread waits for the pool (no call waits on the pool while a connection
  sits idle here), and one out of the pool for `RETURN_AFTER` seconds goes back to it when its
  call ends, so under steady use the pool's lifetime, idle shrinking and statistics still see
  every connection (an idle store keeps at most the connections its last calls used);
- `close` gives every kept connection back before the pool closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import monotonic
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    Connection = psycopg.Connection[tuple[Any, ...]]

RETURN_AFTER = 1.0
"""Seconds after which a connection taken from the pool goes back to it when given back, not kept."""
IDLE = 0
"""`psycopg.pq.TransactionStatus.IDLE`: outside a transaction (an int, so not imported per call)."""


class KeptConnections:
    """A pool's connections kept for the next call (a LIFO stack), and when each left the pool."""

    def __init__(self, pool: ConnectionPool[Any], check: Callable[[Connection], None]) -> None:
        self._pool = pool
        self._check = check
        self._lock = threading.Lock()
        self._kept: list[Connection] = []
        self._left_pool: dict[Connection, float] = {}
        """Each connection out of the pool through `take`: when it left it (monotonic seconds)."""
        self._waiting = 0
        """Threads in (or on their way into) the pool's `getconn`: while any is, nothing is kept."""
        self._closed = False

    def take(self) -> Connection:
        """A kept connection that passes `check`, or else one from the pool (which checks it);
        the pool's PoolTimeout passes through."""
        while True:
            with self._lock:
                conn = self._kept.pop() if self._kept else None
                if conn is None:
                    self._waiting += 1
            if conn is None:
                return self._from_pool()
            try:
                self._check(conn)
            except Exception:  # the server closed it: the pool replaces it (as its own check does)
                self._to_pool(conn)
                continue
            except BaseException:
                self._to_pool(conn)
                raise
            return conn

    def _from_pool(self) -> Connection:
        try:
            conn: Connection = self._pool.getconn()
        finally:
            with self._lock:
                self._waiting -= 1
        self._left_pool[conn] = monotonic()
        return conn

    def give(self, conn: Connection, now: float) -> None:
        """Keep `conn` for the next call if it is idle and healthy, no thread waits for the pool and
        it left the pool less than `RETURN_AFTER` seconds before `now`; else give it back to the pool."""
        if (not conn.closed and conn.pgconn.transaction_status == IDLE
                and now - self._left_pool.get(conn, 0.0) < RETURN_AFTER):
            with self._lock:
                if not self._waiting and not self._closed:
                    self._kept.append(conn)
                    return
        self._to_pool(conn)

    def _to_pool(self, conn: Connection) -> None:
        self._left_pool.pop(conn, None)
        self._pool.putconn(conn)

    def close(self) -> None:
        """Give every kept connection back to the pool and keep none from now on."""
        with self._lock:
            self._closed = True
            kept, self._kept = self._kept, []
        for conn in kept:
            self._to_pool(conn)

    def __len__(self) -> int:
        return len(self._kept)
