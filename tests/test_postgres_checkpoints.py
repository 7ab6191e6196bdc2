"""Postgres checkpoints beyond the suite: the one-statement save through a borrowed pool, its
function's ordering, and compressed documents as stored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.backends.postgres.layout import COMPRESS_AT, layout
from mnemostore.backends.postgres.migrations import HISTORY
from mnemostore.backends.postgres.sql_filters import order_by
from mnemostore.core.filters import F
from mnemostore.core.protocol import LATEST_CHECKPOINT_ORDER
from mnemostore.core.store import Store
from mnemostore.testing.clauses.checkpoints import SAVERS, assert_one_chain, save_concurrently

__all__ = ["postgres_server"]

@pytest.fixture
def url(postgres_server: PostgresTestServer) -> str:
    return postgres_server.url(pool_max_size=str(SAVERS))


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with mnemostore.open(url) as opened:
        yield opened


def test_large_documents_are_compressed_and_small_ones_plain(store: Store, url: str) -> None:
    state = {"messages": [f"turn {i}: " + "the same words again " * 10 for i in range(500)]}
    large = store.checkpoints.save("run", state)
    small = store.checkpoints.save("run", {"n": 1})
    schema = url.rsplit("schema=", 1)[1].split("&")[0]
    with closing(psycopg.connect(url.split("?")[0] + "?" + url.split("?")[1].split("&")[0])) as conn:
        rows = dict(conn.execute(f'SELECT id, doc FROM "{schema}".mnemo_checkpoint').fetchall())
        storage = conn.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass "
                               "AND attname = 'doc'", (f'"{schema}".mnemo_checkpoint',)).fetchone()
    assert rows[large.id][:1] != b"{" and len(rows[large.id]) < COMPRESS_AT * 4
    assert rows[small.id][:1] == b"{"
    assert storage == ("e",)  # EXTERNAL: no pglz over the compressed document
    assert store.checkpoints.get(large.id) == large and store.checkpoints.get(small.id) == small


def test_concurrent_saves_through_a_borrowed_pool_form_one_chain(store: Store, url: str) -> None:
    """A borrowed pool's connections are not in autocommit: the save runs in their transaction."""
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    with ConnectionPool(backend.conninfo(), min_size=SAVERS, max_size=SAVERS, open=True) as pool:
        with mnemostore.open(url, pool=pool) as borrowed:
            saved = save_concurrently(borrowed, lambda worker: "borrowed")
        with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert_one_chain(saved)


def test_the_latest_function_orders_as_core_defines_the_latest() -> None:
    """The layout's `checkpoint_latest` function is frozen text: its ORDER BY must stay core's."""
    function = next(statement for statement in HISTORY[2].sql() if "checkpoint_latest" in statement)
    ordering = function.split("ORDER BY ", 1)[1].split(" LIMIT", 1)[0]
    expected = order_by(layout("checkpoint", ""), LATEST_CHECKPOINT_ORDER).as_bytes(None).decode()
    assert ordering.replace("c.", "") == expected.replace('"', "")


def test_latest_reads_the_run_index_first_entry_with_no_sort(store: Store) -> None:
    """Since layout 7 the run index gives a run's checkpoints in `LATEST_CHECKPOINT_ORDER`: `latest`'s statement,
    of a run and of a branch (the save's lookup function has the branch's), reads the index's first entry; the
    (run_id, branch_id, sequence) index before it sorted the whole run. Sequential scans are off for the EXPLAIN:
    a table this small would be scanned whatever its indexes."""
    cps = store.checkpoints
    for i in range(40):  # roots: every one ties on sequence
        cps.save("run", {"i": i}, parent=None, branch=("main", "b")[i % 2])
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    kind_layout = backend._layout("checkpoint")
    with closing(psycopg.connect(backend.conninfo(), autocommit=True)) as conn:
        conn.execute("SET enable_seqscan = off")
        for where, found in ((F.run_id == "run", cps.latest("run")),
                             ((F.run_id == "run") & (F.branch_id == "main"), cps.latest("run", "main"))):
            assert found == cps.query(where, order_by=LATEST_CHECKPOINT_ORDER).items[0]
            condition, params = backend.statements.condition(kind_layout, where)
            statement = backend.statements.ordered(kind_layout, condition, False, LATEST_CHECKPOINT_ORDER, True)
            plan = "\n".join(row[0] for row in conn.execute(b"EXPLAIN " + statement, ["", *params, 1]))
            assert "Index Scan using mnemo_checkpoint_run_latest" in plan and "Sort" not in plan, plan
