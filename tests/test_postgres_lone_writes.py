"""Lone writes on the store's own sync connections run at the libpq level (lone_writes.py): prepared at
their second execution under names of their own, run again when psycopg has deallocated them, bounded
in number; a server error is psycopg's own and leaves the connection usable; a lost connection is an
OperationalError. A list column's ids (binary `text[]`) read back exactly."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.postgres_one_connection import pooled_connection, store
from tests.postgres_server import PostgresTestServer, postgres_server

from mnemostore.backends.postgres import lone_writes
from mnemostore.backends.postgres.own_connections import OwnConnection
from mnemostore.backends.postgres.steps import Run
from mnemostore.core.store import Store
from mnemostore.testing.factories import make

__all__ = ["postgres_server", "store"]


def _ours(conn: OwnConnection) -> list[str]:
    """The statements prepared on `conn` under lone writes' names."""
    return [name for (name,) in conn.execute(
        "SELECT name FROM pg_prepared_statements WHERE name LIKE '\\_mnemo\\_%' ORDER BY name").fetchall()]


def test_a_lone_write_is_prepared_at_its_second_execution_and_runs_again_after_a_deallocate_all(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = pooled_connection(store)
    runs: list[Any] = []
    original = lone_writes.LoneWrites.run
    monkeypatch.setattr(lone_writes.LoneWrites, "run", lambda self, step: runs.append(step) or original(self, step))
    conn.execute("DEALLOCATE ALL")  # what opening the store prepared
    store.outcomes.add(make("outcome", 1))  # the table, looked up once
    assert len(runs) == 1 and _ours(conn) == []
    store.outcomes.add(make("outcome", 2))
    prepared = _ours(conn)
    assert len(runs) == 2 and len(prepared) == 1
    conn.execute("DEALLOCATE ALL")  # what psycopg does after a rollback while it holds prepared statements
    store.outcomes.add(make("outcome", 3))
    assert len(runs) == 3 and len(_ours(conn)) == 1 and _ours(conn) != prepared
    assert {r.id for r in store.outcomes.query()} == {make("outcome", i).id for i in range(1, 4)}


def test_lone_writes_keep_at_most_max_prepared_statements(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lone_writes, "MAX_PREPARED", 2)
    collections = (store.heuristics, store.outcomes, store.anti_patterns)
    for collection in collections:  # the tables, looked up once
        collection.add(make(collection.kind, 0))
    conn = pooled_connection(store)
    conn.execute("DEALLOCATE ALL")  # what opening the store prepared: names lone writes still hold
    for i in range(1, 4):  # three statements, each run thrice: prepared at their second
        for collection in collections:
            collection.add(make(collection.kind, i))
    assert len(_ours(conn)) == 2
    assert [collection.count() for collection in collections] == [4, 4, 4]


def test_a_server_error_is_psycopgs_own_and_leaves_the_connection_usable(store: Store) -> None:
    conn = pooled_connection(store)
    lone = conn.lone_writes()
    for _ in range(2):  # unprepared, then failing to prepare
        with pytest.raises(psycopg.errors.UndefinedTable, match="no_such_table"):
            lone.run(Run(b"INSERT INTO no_such_table VALUES (%s)", (1,)))
        assert lone.usable()
    record = store.heuristics.add(make("heuristic", 1))
    assert store.heuristics.get(record.id) == record


def test_a_lost_connection_is_an_operational_error_and_the_store_carries_on(
        store: Store, postgres_server: PostgresTestServer) -> None:
    record = store.heuristics.add(make("heuristic", 1))
    conn = pooled_connection(store)
    lone = conn.lone_writes()
    pid = conn.info.backend_pid
    with psycopg.connect(postgres_server.base_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    with pytest.raises(psycopg.OperationalError):
        lone.run(Run(b"SELECT 1 WHERE %s", (True,)))
    assert conn.closed and not lone.usable()
    assert store.heuristics.get(record.id) == record  # the pool replaced it


def test_a_write_inside_a_transaction_goes_through_psycopg(store: Store) -> None:
    conn = pooled_connection(store)
    with conn.transaction():
        assert not conn.lone_writes().usable()
    assert conn.lone_writes().usable()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parents=st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                min_size=1, max_size=12), max_size=4))
def test_a_checkpoints_parent_ids_read_back_exactly(store: Store, parents: list[str]) -> None:
    """Quotes, braces, commas, backslashes, spaces, 'NULL', non-ASCII texts and no parents: sent as binary
    `text[]`."""
    record = make("checkpoint", 1, parent_ids=parents)
    store.checkpoints.put([record])
    assert store.checkpoints.get(record.id).parent_ids == parents
