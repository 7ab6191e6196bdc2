"""The sync postgres backend keeps its pool's connections between calls (kept_connections.py):
threads share them safely, a broken one is replaced, the pool's max holds, close returns all."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.backends.postgres import PostgresBackend, kept_connections
from mnemostore.core.filters import F
from mnemostore.core.store import Store
from mnemostore.testing.factories import make, vectors

__all__ = ["postgres_server"]


APPLICATION = f"kept-{uuid.uuid4().hex[:12]}"
"""This module's stores' application_name: their server sessions can be counted."""


@pytest.fixture
def store(postgres_server: PostgresTestServer) -> Iterator[Store]:
    with mnemostore.open(postgres_server.url(pool_max_size="2", pool_timeout="5",
                                             application_name=APPLICATION)) as opened:
        yield opened


def sessions(backend: PostgresBackend, settled: Callable[[int], bool]) -> int:
    """The server sessions of this module's stores, once `settled` by them (a session a client
    closed ends a moment later; up to 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        with psycopg.connect(backend.conninfo().replace(APPLICATION, "admin"), autocommit=True) as admin:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                (APPLICATION,)).fetchone()
        assert row is not None
        if settled(int(row[0])) or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.05)


def backend_of(store: Store) -> PostgresBackend:
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    return backend


def test_a_call_takes_the_connection_the_last_one_gave_back_without_the_pool(store: Store) -> None:
    backend = backend_of(store)
    record = store.heuristics.add(make("heuristic", 1))
    pool, kept = backend._pool, backend._kept
    assert pool is not None and kept is not None and len(kept) == 1
    requests = pool.get_stats().get("requests_num", 0)
    pids = set()
    for _ in range(5):
        assert store.heuristics.get(record.id) == record
        with backend._connection() as conn:
            pids.add(conn.info.backend_pid)
    assert len(pids) == 1 and len(kept) == 1
    assert pool.get_stats().get("requests_num", 0) == requests


def test_threads_share_the_kept_connections_within_the_pools_max(store: Store) -> None:
    """Eight threads on a pool of two, with a 5 s pool timeout: no call waits on the pool while a
    connection is kept idle (it would time out), every write lands, and never more than two
    connections exist."""
    backend = backend_of(store)
    matrix = vectors(8 * 30, 8, seed=3)

    def work(worker: int) -> list[int]:
        sizes = []
        for i in range(30):
            n = worker * 30 + i
            record = make("heuristic", n, agent=f"w{worker}", embedding=matrix[n])
            store.heuristics.put([record])
            assert store.heuristics.get(record.id) == record
            assert store.heuristics.search(matrix[n], k=1, where=F.agent == f"w{worker}")[0].record.id == record.id
            assert backend._pool is not None
            sizes.append(backend._pool.get_stats()["pool_size"])
        return sizes

    with ThreadPoolExecutor(8) as threads:
        sizes = [size for sizes in threads.map(work, range(8)) for size in sizes]  # a thread's error raises here
    assert store.heuristics.count() == 240
    assert max(sizes) <= 2
    assert sessions(backend, lambda n: n <= 2) <= 2


def test_a_kept_connection_the_server_closed_is_replaced(store: Store) -> None:
    backend = backend_of(store)
    record = store.heuristics.add(make("heuristic", 2))
    with backend._connection() as conn:
        killed_pid = conn.info.backend_pid
    with psycopg.connect(backend.conninfo(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (killed_pid,))
    time.sleep(0.2)  # the FATAL message reaches the kept connection's socket
    assert store.heuristics.get(record.id) == record
    with backend._connection() as conn:
        assert conn.info.backend_pid != killed_pid


def test_a_connection_goes_back_to_the_pool_once_it_has_been_out_long_enough(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = backend_of(store)
    record = store.heuristics.add(make("heuristic", 3))
    kept, pool = backend._kept, backend._pool
    assert kept is not None and pool is not None and len(kept) == 1
    monkeypatch.setattr(kept_connections, "RETURN_AFTER", 0.0)
    available = pool.get_stats()["pool_available"]
    assert store.heuristics.get(record.id) == record
    assert len(kept) == 0
    assert pool.get_stats()["pool_available"] == available + 1


def test_none_is_kept_while_a_transaction_is_open(store: Store) -> None:
    backend = backend_of(store)
    kept = backend._kept
    assert kept is not None
    conn = backend._take()
    conn.execute("BEGIN")
    backend._give(conn)  # a caller that left a transaction open: the pool rolls it back, not kept
    assert len(kept) == 0
    with backend._connection() as again:
        assert again.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_close_gives_every_kept_connection_back_and_the_pool_closes_them(postgres_server: PostgresTestServer) -> None:
    store = mnemostore.open(postgres_server.url(pool_max_size="3", application_name=APPLICATION))
    backend = backend_of(store)
    store.heuristics.add(make("heuristic", 4))
    held = [backend._take() for _ in range(3)]
    for conn in held:
        backend._give(conn)
    assert backend._kept is not None and len(backend._kept) == 3
    assert sessions(backend, lambda n: n == 3) == 3
    store.close()
    assert len(backend._kept) == 0
    assert all(conn.closed for conn in held)
    assert sessions(backend, lambda n: n == 0) == 0
