"""A postgres store whose own pool holds one connection, and that connection: what every call of the
store runs on (for tests of what a connection keeps: cursors, prepared statements)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.postgres_server import PostgresTestServer

import mnemostore
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.backends.postgres.own_connections import OwnConnection
from mnemostore.core.store import Store


@pytest.fixture
def store(postgres_server: PostgresTestServer) -> Iterator[Store]:
    with mnemostore.open(postgres_server.url(pool_max_size="1")) as opened:
        yield opened


def pooled_connection(store: Store) -> OwnConnection:
    """The pool's one connection (the pool holds one): the one every call of `store` runs on."""
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    with backend._connection() as conn:
        assert isinstance(conn, OwnConnection)
        return conn
