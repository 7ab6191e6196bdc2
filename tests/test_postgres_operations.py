"""Postgres-specific behaviour beyond the suite: restarts, timeouts, secrets, plans, processes."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg_pool import ConnectionPool
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.core.errors import BackendError, ConfigError
from mnemostore.core.filters import F
from mnemostore.core.store import Store
from mnemostore.testing.clauses.vectors import assert_hits
from mnemostore.testing.factories import make, vectors
from mnemostore.testing.oracle import reference_search

__all__ = ["postgres_server"]

PASSWORD = "pw-Zq81-never-shown"


def with_password(url: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


@pytest.fixture
def store(postgres_server: PostgresTestServer) -> Iterator[Store]:
    with mnemostore.open(postgres_server.url()) as opened:
        yield opened


def conninfo(store: Store) -> str:
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    return backend.conninfo()


def test_postgres_scheme_alias_opens_the_same_backend(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url().replace("postgresql://", "postgres://", 1)
    with mnemostore.open(url) as store:
        store.heuristics.add(condition="c", strategy="s")
        assert store.backend.name == "postgres" and store.heuristics.count() == 1


def test_next_call_succeeds_after_a_server_restart(postgres_server: PostgresTestServer, store: Store) -> None:
    if not postgres_server.owned:
        pytest.skip("the server comes from MNEMOSTORE_TEST_POSTGRES_URL and cannot be restarted here")
    record = store.heuristics.add(make("heuristic", 1))
    postgres_server.restart()
    assert store.heuristics.get(record.id) == record
    store.heuristics.reinforce(record.id)
    assert store.heuristics[record.id].occurrence_count == record.occurrence_count + 1


def test_statement_timeout_is_honoured(postgres_server: PostgresTestServer) -> None:
    with mnemostore.open(postgres_server.url(statement_timeout="0.2")) as store:
        store.outcomes.record("code", True)
        table = f'"{store.backend.options.schema_name}".mnemo_outcome'  # type: ignore[attr-defined]
        with psycopg.connect(conninfo(store)) as blocker:
            blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(BackendError, match="statement_timeout"):
                store.outcomes.count()
            assert time.monotonic() - started < 5
        assert store.outcomes.count() == 1  # the pool recovered the cancelled connection


def test_password_never_appears_in_reprs_errors_or_logs(
        postgres_server: PostgresTestServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = with_password(postgres_server.url())
    seen: list[str] = []
    with mnemostore.open(url) as store:
        seen += [repr(store), str(store), repr(store.backend), str(store.backend.describe())]
        schema = store.backend.options.schema_name  # type: ignore[attr-defined]
        with psycopg.connect(conninfo(store)) as blocker, pytest.raises(BackendError) as timeout_error:
            blocker.execute(f'LOCK TABLE "{schema}".mnemo_outcome IN ACCESS EXCLUSIVE MODE')
            with mnemostore.open(url, schema=schema, statement_timeout=0.1) as quick:
                quick.outcomes.count()
        seen.append(str(timeout_error.value))
    with pytest.raises(ConfigError) as bad_option:
        mnemostore.open(url + "&pool_max_size=zero")
    seen.append(str(bad_option.value))
    unreachable = with_password("postgresql://postgres@/nowhere?host=/nonexistent-socket-dir&connect_timeout=1")
    with pytest.raises(BackendError) as unreachable_error:
        mnemostore.open(unreachable)
    seen += [str(unreachable_error.value), repr(unreachable_error.value)]
    seen += [record.getMessage() for record in caplog.records]
    assert "***" in seen[0]
    for text in seen:
        assert PASSWORD not in text


@pytest.fixture(scope="module")
def needles(postgres_server: PostgresTestServer) -> Iterator[tuple[Store, np.ndarray]]:
    """3,000 embeddings (HNSW, ef_search 40), one in 20 a needle by agent and by model, analysed."""
    # pgvector costs an index scan by ef_search: on a table this small, at the default 60, the
    # planner rightly sorts the 150 rows the filter leaves instead. 40 shows the query's shape.
    with mnemostore.open(postgres_server.url(index="hnsw", hnsw_ef_search="40")) as store:
        matrix = vectors(3000, 32, seed=1)
        store.embeddings.put([make("embedding", i, agent="needle" if i % 20 == 0 else "hay",
                                   model="needle" if i % 20 == 0 else "hay", embedding=matrix[i])
                              for i in range(3000)])
        with psycopg.connect(conninfo(store), autocommit=True) as conn:
            conn.execute(f'ANALYZE "{store.backend.options.schema_name}".mnemo_embedding')  # type: ignore[attr-defined]
        yield store, matrix


def test_hnsw_index_serves_plain_and_filtered_search(needles: tuple[Store, np.ndarray]) -> None:
    store, matrix = needles
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    for where in (None, F.model == "needle"):  # no btree index on model: the graph walk filters
        plan = backend.explain_search("embedding", None, matrix[7], 10, where)
        assert "mnemo_embedding_hnsw" in plan, plan
    hits = store.embeddings.search(matrix[20], k=10, where=F.model == "needle")
    assert len(hits) == 10 and hits[0].record.id == make("embedding", 20).id
    assert all(hit.record.model == "needle" for hit in hits)


def test_a_selective_scope_filter_reads_its_index_and_sorts_exactly(needles: tuple[Store, np.ndarray]) -> None:
    """150 of 3,000 rows by agent: the first query already reads them by the (tenant, agent)
    index and sorts them, which is cheaper than the graph walk and exact."""
    store, matrix = needles
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    for where in (F.agent == "needle", F.agent.in_(["needle", "pin"])):
        plan = backend.explain_search("embedding", None, matrix[7], 10, where)
        assert "mnemo_embedding_agent" in plan and "mnemo_embedding_hnsw" not in plan, plan
    picked = np.arange(0, 3000, 20)
    for query in vectors(3, 32, seed=2):
        hits = store.embeddings.search(query, k=10, where=F.agent == "needle", vectors=False)
        rows = matrix[picked].astype(np.float64)
        similarity = rows @ query / (np.linalg.norm(rows, axis=1) * np.linalg.norm(query))
        assert [hit.record.id for hit in hits] == [make("embedding", int(picked[i])).id
                                                   for i in np.argsort(-similarity, kind="stable")[:10]]


def test_a_scope_filter_on_a_large_table_walks_the_graph(needles: tuple[Store, np.ndarray],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a search has read the table's row count and it reaches `SCOPE_INDEX_ROWS` (lowered here
    to 1,000 for the 3,000-row table), the agent filter goes without the scope index's prefix, so the
    planner walks the graph (reading a tenth of a large table by the index and sorting it cost 7x the
    walk); the hits are still k needles whenever k match."""
    from mnemostore.backends.postgres import row_estimates

    store, matrix = needles
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    store.embeddings.search(matrix[7], k=10, where=F.agent == "needle")  # reads the row count
    assert "mnemo_embedding_agent" in backend.explain_search("embedding", None, matrix[7], 10, F.agent == "needle")
    monkeypatch.setattr(row_estimates, "SCOPE_INDEX_ROWS", 1_000)
    plan = backend.explain_search("embedding", None, matrix[7], 10, F.agent == "needle")
    assert "mnemo_embedding_hnsw" in plan and "mnemo_embedding_agent" not in plan, plan
    hits = store.embeddings.search(matrix[20], k=10, where=F.agent == "needle")
    assert len(hits) == 10 and hits[0].record.id == make("embedding", 20).id
    assert all(hit.record.agent == "needle" for hit in hits)


def test_existing_pool_is_borrowed_and_left_open(postgres_server: PostgresTestServer) -> None:
    probe = mnemostore.open(postgres_server.url())
    info = conninfo(probe)
    probe.close()
    with ConnectionPool(info, min_size=1, max_size=2, open=True) as pool:
        with mnemostore.open(postgres_server.url(), pool=pool) as store:
            store.checkpoints.save("run", {"step": 1})
            assert store.checkpoints.latest("run").state == {"step": 1}  # type: ignore[union-attr]
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_schema_name_is_quoted_never_interpolated(postgres_server: PostgresTestServer) -> None:
    schema = 'odd"; DROP TABLE x; --'
    with mnemostore.open(postgres_server.url(), schema=schema) as store:
        store.anti_patterns.add(pattern="p")
        assert store.anti_patterns.count() == 1
        with psycopg.connect(conninfo(store)) as conn:
            row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)).fetchone()
        assert row is not None and row[0] == 6


def _writer(url: str, worker: int, heuristic_id: str, barrier: Any) -> None:
    with mnemostore.open(url) as store:
        barrier.wait()
        store.outcomes.put([make("outcome", worker * 1000 + i) for i in range(150)])
        for _ in range(40):
            store.heuristics.reinforce(heuristic_id)


def test_processes_writing_through_separate_pools_lose_nothing(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    with mnemostore.open(url) as store:
        heuristic = store.heuristics.add(make("heuristic", 1, occurrence_count=0, success_count=0))
        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(3)
        workers = [context.Process(target=_writer, args=(url, w, heuristic.id, barrier)) for w in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
        assert [worker.exitcode for worker in workers] == [0, 0, 0]
        assert store.outcomes.count() == 450
        final = store.heuristics[heuristic.id]
        assert final.occurrence_count == final.success_count == 120
        # the prior (the confidence it was added with) worth two uses, with one racing reinforce's counters
        prior = heuristic.confidence
        assert final.prior_confidence == prior
        assert any(final.confidence == pytest.approx((prior * 2 + n) / (2 + n)) for n in range(1, 121))


def test_threads_sharing_one_store_increment_atomically(store: Store) -> None:
    heuristic = store.heuristics.add(make("heuristic", 2, occurrence_count=0, success_count=0))

    def bump() -> None:
        for _ in range(50):
            store.heuristics.update(heuristic.id, inc={"occurrence_count": 1})

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.heuristics[heuristic.id].occurrence_count == 200


def test_batch_with_existing_ids_upserts_through_copy(store: Store) -> None:
    matrix = vectors(400, 8, seed=2)
    first = [make("embedding", i, embedding=matrix[i]) for i in range(200)]
    store.embeddings.put(first)
    second = [make("embedding", i, text=f"new {i}", embedding=matrix[i + 100]) for i in range(100, 300)]
    store.embeddings.put(second)
    assert store.embeddings.count() == 300
    assert store.embeddings.get(second[0].id) == second[0]
    assert np.array_equal(store.embeddings.get(first[0].id).embedding, matrix[0])  # type: ignore[union-attr]


def test_a_small_batch_is_one_statement_and_a_larger_one_executemany(store: Store,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """2 to 8 records of distinct ids are one multi-row statement sent as it is ($n placeholders: one round
    trip, atomic by itself), a lone write run at the libpq level; 9 go as executemany; both write what they
    were given."""
    from mnemostore.backends.postgres.lone_writes import LoneWrites

    sent: list[tuple[str, str]] = []
    for owner, name in ((psycopg.Cursor, "execute"), (psycopg.Cursor, "executemany"), (LoneWrites, "run")):
        original = getattr(owner, name)

        def spy(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            sent.append((type(self).__name__, _name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
    matrix = vectors(20, 8, seed=3)
    store.embeddings.put([make("embedding", 0, embedding=matrix[0])])  # the table, looked up once
    sent.clear()
    small = [make("embedding", i, embedding=matrix[i]) for i in range(1, 4)]
    store.embeddings.put(small)
    assert sent == [("LoneWrites", "run")]
    sent.clear()
    store.embeddings.put([make("embedding", i, embedding=matrix[i]) for i in range(4, 13)])
    assert ("Cursor", "executemany") in sent and ("LoneWrites", "run") not in sent
    changed = small[0].model_copy(update={"text": "changed"})
    store.embeddings.put([changed, make("embedding", 13, embedding=matrix[13])], keep_existing=True)
    assert store.embeddings.count() == 14 and store.embeddings.get(small[0].id) == small[0]
    store.embeddings.put([changed, small[1]])
    assert store.embeddings.get(changed.id) == changed


def test_a_connection_the_server_closed_is_replaced_without_a_ping_per_call(
        postgres_server: PostgresTestServer) -> None:
    # pool_check_after is long: only the socket check can notice the closed connections.
    with mnemostore.open(postgres_server.url(pool_check_after="3600")) as store:
        record = store.heuristics.add(make("heuristic", 3))
        with psycopg.connect(conninfo(store), autocommit=True) as admin:
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE application_name = 'mnemostore' AND pid <> pg_backend_pid()").fetchone()
        assert killed is not None and killed[0] >= 1
        time.sleep(0.2)  # the FATAL message reaches the idle sockets
        assert store.heuristics.get(record.id) == record


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_records_without_embeddings_stay_out_of_every_search_and_zero_vectors_score_zero(
        postgres_server: PostgresTestServer, index: str) -> None:
    """The search statement does not test `embedding IS NOT NULL` (see `_nearest_sql`): a record
    without one has no distance and is dropped, also where a zero vector's NaN distance is
    turned into cosine similarity 0 (the exact query), and when fewer than k have one."""
    with mnemostore.open(postgres_server.url(index=index)) as store:
        written = [make("embedding", i, embedding=v) for i, v in enumerate(vectors(6, 4, seed=9))]
        written += [make("embedding", 6, embedding=[0.0] * 4)]
        written += [make("embedding", i) for i in range(7, 30)]
        store.embeddings.put(written)
        for query in [*vectors(2, 4, seed=10), np.zeros(4, dtype=np.float32)]:
            for k, where in ((3, None), (7, None), (30, None), (30, F.agent == written[0].agent)):
                expected = reference_search(written, query, k, "cosine", where)
                assert_hits(store.embeddings.search(query, k=k, where=where), expected, written)
                without = store.embeddings.search(query, k=k, where=where, vectors=False)
                assert [(hit.record.id, pytest.approx(hit.score, abs=1e-5)) for hit in without] == expected


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_search_without_vectors_gives_the_same_hits_and_scores(
        postgres_server: PostgresTestServer, metric: str) -> None:
    with mnemostore.open(postgres_server.url(), metric=metric) as store:
        matrix = vectors(300, 16, seed=4)
        store.embeddings.put([make("embedding", i, agent=f"a{i % 3}", embedding=matrix[i]) for i in range(300)])
        for where in (None, F.agent == "a1"):
            with_vectors = store.embeddings.search(matrix[5], k=10, where=where)
            without = store.embeddings.search(matrix[5], k=10, where=where, vectors=False)
            assert [hit.record.id for hit in without] == [hit.record.id for hit in with_vectors]
            assert all(hit.record.embedding is None for hit in without)
            for a, b in zip(without, with_vectors, strict=True):
                assert a.score == pytest.approx(b.score, rel=1e-5, abs=1e-5)


def test_an_application_kinds_table_is_made_by_its_first_write_typed_and_indexed(store: Store) -> None:
    from mnemostore.testing.specimen import SPECIMEN, registered

    def tables() -> set[str]:
        with psycopg.connect(conninfo(store), autocommit=True) as conn:
            rows = conn.execute("SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = %s", (store.backend.options.schema_name,)).fetchall()
        return {name for (name,) in rows}

    with registered():
        specimens = store.collection(SPECIMEN)
        assert specimens.count() == 0 and specimens.all() == [] and store.search(SPECIMEN, [1.0, 0.0], 2) == []
        assert f"mnemo_{SPECIMEN}" not in tables()  # reads make nothing
        store.embeddings.add(make("embedding", 1, embedding=[0.5, 0.5]))  # the dimension is known first
        specimens.put([make(SPECIMEN, i, embedding=[1.0, float(i)]) for i in range(4)])
        made = tables()
        assert {f"mnemo_{SPECIMEN}", f"mnemo_{SPECIMEN}__created_at_id", f"mnemo_{SPECIMEN}__label_count",
                f"mnemo_{SPECIMEN}__agent", f"mnemo_{SPECIMEN}__project_id", f"mnemo_{SPECIMEN}_hnsw"} <= made
        hits = store.search(SPECIMEN, [1.0, 3.0], 1, where=F.label == make(SPECIMEN, 3).label)
        assert [hit.record.id for hit in hits] == [make(SPECIMEN, 3).id]
        with psycopg.connect(conninfo(store), autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{store.backend.options.schema_name}"."mnemo_{SPECIMEN}" DROP COLUMN flag')
        with mnemostore.open(store.backend.url.raw) as again, pytest.raises(
                mnemostore.SchemaMismatch, match="no column for flag"):
            again.collection(SPECIMEN).count()
