"""The postgres backend under the migration runner, against a real server: layout history,
transactional steps, the advisory migration lock, concurrent runners, and a layout-1 store."""

from __future__ import annotations

import importlib.util
import multiprocessing
import random
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import orjson
import psycopg
import pytest
from psycopg import sql
from tests.legacy_fixtures import LAYOUT1, expected, expected_records, read_back
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.backends.postgres.layout import layout
from mnemostore.backends.postgres.migrations import HISTORY
from mnemostore.backends.postgres.sql_filters import FilterCompiler
from mnemostore.core.base64text import to_text
from mnemostore.core.compression import inflate
from mnemostore.core.errors import LockHeld, MigrationError, PendingMigrations, SchemaMismatch, StoreTooNew
from mnemostore.core.filters import F
from mnemostore.core.kinds import kinds
from mnemostore.core.protocol import Backend
from mnemostore.core.records import KINDS, Checkpoint, Record
from mnemostore.core.store import open_backend
from mnemostore.migrations import LayoutMigration, Runner
from mnemostore.migrations.langgraph_items import LANGGRAPH_ITEMS_MIGRATION, LANGGRAPH_ITEMS_MIGRATION_ID
from mnemostore.migrations.langgraph_writes import LANGGRAPH_WRITES_MIGRATION, LANGGRAPH_WRITES_MIGRATION_ID
from mnemostore.migrations.locking import holding
from mnemostore.migrations.state_hashes import STATE_HASH_MIGRATION, STATE_HASH_MIGRATION_ID
from mnemostore.testing.factories import make, vectors

__all__ = ["postgres_server"]

IDS = ["postgres.0001_tables", "postgres.0002_scope_indexes", "postgres.0003_compressed_docs",
       "postgres.0004_zstd_docs", "postgres.0005_payload_column", "postgres.0006_leaner_indexes",
       "postgres.0007_latest_index", "postgres.0008_inline_rows"]
ALL = [*IDS, STATE_HASH_MIGRATION_ID, LANGGRAPH_ITEMS_MIGRATION_ID, LANGGRAPH_WRITES_MIGRATION_ID]
LIBRARY_DOWN = [LANGGRAPH_WRITES_MIGRATION_ID, LANGGRAPH_ITEMS_MIGRATION_ID, STATE_HASH_MIGRATION_ID]
"""mnemostore's own migrations, newest first (as `down` reverts them)."""
"""The layout history, then mnemostore's own record migration."""
SCOPE_INDEXES = {f"mnemo_{kind}_{suffix}" for kind in KINDS for suffix in ("agent", "project")}
PARENT_COLUMN = ("mnemo_checkpoint", "parent_ids", "text[]", "default", False)
"""The column layout 3 adds (a checkpoint's parent_ids)."""
PAYLOAD_COLUMN = ("mnemo_checkpoint", "payload", "bytea", None, False)
"""The column layout 5 adds (a checkpoint's payload)."""
ADDED_COLUMNS = (PARENT_COLUMN, PAYLOAD_COLUMN)


@contextmanager
def backend_at(url: str) -> Iterator[PostgresBackend]:
    """The backend opened (meta table only) but not migrated, as the runner sees it."""
    backend = open_backend(url)
    assert isinstance(backend, PostgresBackend)
    try:
        yield backend
    finally:
        backend.close()


def connect(server: PostgresTestServer) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(server.base_url, autocommit=True)


def schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&")[0]


def layout_version(server: PostgresTestServer, schema: str) -> Any:
    with closing(connect(server)) as conn:
        row = conn.execute(f'SELECT value FROM "{schema}".mnemo_meta WHERE key = %s', ("layout_version",)).fetchone()
    return None if row is None else row[0]


def catalog(server: PostgresTestServer, schema: str) -> tuple[list[tuple[Any, ...]], set[tuple[str, str]]]:
    """Every column (table, name, type, collation, not null) and index (name, definition) of a schema."""
    with closing(connect(server)) as conn:
        columns = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), co.collname, a.attnotnull "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY c.relname, a.attnum", (schema,)).fetchall()
        indexes = conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s",
                               (schema,)).fetchall()
    return columns, {(name, definition.replace(f" ON {schema}.", " ON S.")) for name, definition in indexes}


def load_layout1(server: PostgresTestServer) -> str:
    """The layout-1 fixture (pg_dump of the pre-ledger code's schema) restored into a new schema."""
    schema = f"legacy_{uuid.uuid4().hex[:10]}"
    text = (LAYOUT1 / "postgres.sql").read_text().replace("legacy1", schema)
    with closing(connect(server)) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(text.encode())
    return schema


def ledger_of(backend: Backend) -> list[tuple[str, str]]:
    return [(entry.id, entry.how) for entry in Runner(backend).status().applied]


# a fresh schema ----------------------------------------------------------------------------
def test_fresh_schema_gets_the_whole_history_on_open(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    with mnemostore.open(url) as store:
        status = Runner(store.backend).status()
        assert [(e.id, e.how, e.transactional) for e in status.applied] == [
            (IDS[0], "applied", True), (IDS[1], "applied", False), (IDS[2], "applied", True),
            (IDS[3], "applied", True), (IDS[4], "applied", True), (IDS[5], "applied", False),
            (IDS[6], "applied", False), (IDS[7], "applied", True), (STATE_HASH_MIGRATION_ID, "applied", False),
            (LANGGRAPH_ITEMS_MIGRATION_ID, "applied", False), (LANGGRAPH_WRITES_MIGRATION_ID, "applied", False)]
        assert status.current
    schema = schema_of(url)
    assert layout_version(postgres_server, schema) == 8
    columns, indexes = catalog(postgres_server, schema)
    assert {name for name, _ in indexes} >= SCOPE_INDEXES
    with closing(connect(postgres_server)) as conn:
        invalid = conn.execute("SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                               "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                               "AND NOT i.indisvalid", (schema,)).fetchone()
    assert invalid == (0,)
    # The frozen layout-1 DDL and the row layout the code reads and writes agree.
    for kind in KINDS:
        table = [name for relname, name, *_ in columns if relname == f"mnemo_{kind}"]
        assert set(table) == set(layout(kind, "mnemo_").write_columns), kind


def test_tenants_lists_every_tenant_of_a_kind(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    with mnemostore.open(url) as store, mnemostore.open(url, tenant="acme") as acme:
        store.outcomes.record("code", True)
        acme.outcomes.record("deploy", True)
        acme.heuristics.add(condition="c", strategy="s")
        assert store.backend.tenants("outcome") == [None, "acme"]
        assert store.backend.tenants("heuristic") == ["acme"]
        assert store.backend.tenants("checkpoint") == []


def test_plan_shows_each_steps_sql_and_the_backend_renders_it(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url(schema=f'odd "name" {uuid.uuid4().hex[:6]}')
    with backend_at(url) as backend:
        steps = Runner(backend).plan()
        assert [step.migration.id for step in steps] == ALL
        assert steps[1].describe() == f"apply {IDS[1]} [layout] (not transactional)"
        quoted = '"' + backend.options.schema_name.replace('"', '""') + '"'
        first = "\n".join(steps[0].sql)  # the plan shows the SQL as it runs on this store
        assert f'CREATE TABLE IF NOT EXISTS {quoted}."mnemo_outcome" (tenant text' in first
        assert "'layout_version', '1'" in first
        assert "{schema}" in "\n".join(HISTORY[0].sql())  # the migration itself holds templates
        rendered = backend.layout_sql(HISTORY[1])
        assert list(steps[1].sql) == rendered
        assert rendered[1] == (f'CREATE INDEX CONCURRENTLY "mnemo_outcome_agent" ON {quoted}."mnemo_outcome" '
                               "(tenant, left(agent, 64))")
        # The checksum covers the templates: the same for every schema and prefix.
        with backend_at(postgres_server.url(table_prefix="other_")) as second:
            assert Runner(second).up() == ALL
            applied = Runner(second).status().applied
            history = (*HISTORY, STATE_HASH_MIGRATION, LANGGRAPH_ITEMS_MIGRATION, LANGGRAPH_WRITES_MIGRATION)
            assert [(e.id, e.checksum) for e in applied] == [(m.id, m.checksum) for m in history]
            assert second.tenants("outcome") == []


def test_reverting_and_reapplying_the_history(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    schema = schema_of(url)
    mnemostore.open(url).close()
    with backend_at(url) as backend:
        runner = Runner(backend)
        assert "mnemo_checkpoint_created" not in {name for name, _ in catalog(postgres_server, schema)[1]}
        assert runner.down() == [LANGGRAPH_WRITES_MIGRATION_ID]
        assert runner.down() == [LANGGRAPH_ITEMS_MIGRATION_ID]
        assert runner.down() == [STATE_HASH_MIGRATION_ID]
        assert runner.down() == [IDS[7]]
        assert layout_version(postgres_server, schema) == 7
        assert {"mnemo_checkpoint_run_latest"} == {name for name, _ in catalog(postgres_server, schema)[1]
                                                  if name.startswith("mnemo_checkpoint_run")}
        assert runner.down() == [IDS[6]]
        assert {"mnemo_checkpoint_run"} == {name for name, _ in catalog(postgres_server, schema)[1]
                                           if name.startswith("mnemo_checkpoint_run")}
        assert layout_version(postgres_server, schema) == 6
        assert runner.down() == [IDS[5]]
        assert "mnemo_checkpoint_created" in {name for name, _ in catalog(postgres_server, schema)[1]}
        assert layout_version(postgres_server, schema) == 5
        assert runner.down() == [IDS[4]]
        assert PAYLOAD_COLUMN not in catalog(postgres_server, schema)[0]
        assert layout_version(postgres_server, schema) == 4
        assert runner.down() == [IDS[3]]
        assert layout_version(postgres_server, schema) == 3
        assert runner.down() == [IDS[2]]
        assert layout_version(postgres_server, schema) == 2
        assert runner.down() == [IDS[1]]
        assert not SCOPE_INDEXES & {name for name, _ in catalog(postgres_server, schema)[1]}
        assert layout_version(postgres_server, schema) == 1
        assert runner.down("base") == [IDS[0]]
        assert catalog(postgres_server, schema)[0] == [
            ("mnemo_meta", "key", "text", "default", True), ("mnemo_meta", "value", "jsonb", None, True)]
        assert layout_version(postgres_server, schema) is None
        assert runner.up() == ALL
    with mnemostore.open(url, dimension=4) as store:
        recorded = store.outcomes.record("code", True, embedding=[1.0, 0.0, 0.0, 0.0])
        assert store.outcomes.search([1.0, 0.0, 0.0, 0.0], k=1)[0].record.id == recorded.id


# transactional and non-transactional steps ---------------------------------------------------
def test_failed_atomic_step_leaves_no_trace(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    mnemostore.open(url).close()
    broken = LayoutMigration("postgres.9001_broken", backend="postgres",
                             up=("CREATE TABLE {schema}.{name[probe]} (x int)",
                                 "ALTER TABLE {schema}.{name[outcome]} ADD COLUMN probe int",
                                 "SELECT 1 / 0"))
    with backend_at(url) as backend:
        with pytest.raises(MigrationError, match=r"postgres\.9001_broken.*statement 3 of 3.*DivisionByZero.*"
                                                 r"rolled back: nothing of it was applied"):
            Runner(backend, [broken]).up()
        assert ledger_of(backend) == [(id, "applied") for id in ALL]
        assert Runner(backend, [broken]).status().pending == (broken,)
    with closing(connect(postgres_server)) as conn:
        row = conn.execute("SELECT to_regclass(%s), (SELECT count(*) FROM information_schema.columns "
                           "WHERE table_schema = %s AND table_name = 'mnemo_outcome' AND column_name = 'probe')",
                           (f'"{schema_of(url)}".mnemo_probe', schema_of(url))).fetchone()
    assert row == (None, 0)


def test_failed_non_atomic_step_keeps_what_ran_records_nothing_and_can_run_again(
        postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    mnemostore.open(url).close()
    step = LayoutMigration("postgres.9002_gated", backend="postgres", atomic=False,
                           up=("CREATE INDEX CONCURRENTLY IF NOT EXISTS {name[outcome_probe]} "
                               "ON {schema}.{name[outcome]} (task_type)",
                               "SELECT 1 FROM {schema}.{name[gate]}"))
    schema = schema_of(url)
    with backend_at(url) as backend:
        with pytest.raises(MigrationError, match=r"postgres\.9002_gated.*statement 2 of 2.*not transactional: "
                                                 r"the 1 statement\(s\) before it took effect"):
            Runner(backend, [step]).up()
        assert "mnemo_outcome_probe" in {name for name, _ in catalog(postgres_server, schema)[1]}
        assert IDS[1] in [id for id, _ in ledger_of(backend)] and step.id not in [id for id, _ in ledger_of(backend)]
        with closing(connect(postgres_server)) as conn:
            conn.execute(f'CREATE TABLE "{schema}".mnemo_gate (x int)')
        assert Runner(backend, [step]).up() == [step.id]
        assert ledger_of(backend)[-1] == (step.id, "applied")


# the advisory lock --------------------------------------------------------------------------
def test_lock_waits_then_names_the_holder_and_break_lock_frees_it(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    mnemostore.open(url).close()
    with backend_at(url) as first, backend_at(url) as second, backend_at(postgres_server.url()) as elsewhere:
        lock = first.migration_lock()
        with holding(lock, 0) as info:
            pid = lock.session_pid  # type: ignore[attr-defined]
            assert pid is not None
            started = time.monotonic()
            with pytest.raises(LockHeld, match=rf"postgres session pid {pid} \('mnemostore-migrate/.*waited 0.5 s"):
                Runner(second, lock_wait=0.5).up()
            assert time.monotonic() - started >= 0.5
            holder = Runner(second).lock_holder()
            assert holder is not None and holder.token == str(pid) and holder.expires_at is None
            assert Runner(elsewhere, lock_wait=0).up() == ALL  # another schema: another lock
            broken = Runner(second).break_lock()
            assert broken is not None and broken.token == str(pid)
            assert Runner(second).lock_holder() is None
            with pytest.raises(LockHeld, match="lock session was ended"):
                lock.refresh(info)
            assert Runner(second, lock_wait=0).up() == []
        assert Runner(second).break_lock() is None  # nothing held: nothing to break


def _run_up(url: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    backend = open_backend(url)
    try:
        results.put(Runner(backend, lock_wait=60).up())
    finally:
        backend.close()


def test_concurrent_runners_on_a_fresh_schema_apply_each_step_once(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_run_up, args=(url, barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert sorted([results.get(timeout=5), results.get(timeout=5)]) == [[], ALL]
    with backend_at(url) as backend:
        assert [id for id, _ in ledger_of(backend)] == ALL


# stores written before the ledger ------------------------------------------------------------
def test_layout1_store_refuses_then_is_adopted_upgraded_and_reads_back(postgres_server: PostgresTestServer) -> None:
    schema = load_layout1(postgres_server)
    url = postgres_server.url(schema=schema)
    with backend_at(url) as backend:
        assert backend.legacy_layout() == IDS[0]
        assert [step.migration.id for step in Runner(backend).plan()] == ALL  # no ledger yet: all look pending
    with pytest.raises(PendingMigrations, match=rf"{IDS[1]}.*mnemostore migrate up postgresql://"):
        mnemostore.open(url)
    with backend_at(url) as backend:
        assert not Runner(backend).status().ledger_exists  # refusing wrote nothing
        assert backend.legacy_layout() == IDS[0]
    before = catalog(postgres_server, schema)
    for tenant in expected()["tenants"]:
        with mnemostore.open(url, tenant=tenant, migrate="auto") as store:
            assert read_back(store) == sorted(expected_records(tenant), key=lambda r: (r["kind"], r["id"]))
            assert ledger_of(store.backend) == [(IDS[0], "adopted"), (IDS[1], "applied"), (IDS[2], "applied"),
                                                (IDS[3], "applied"), (IDS[4], "applied"), (IDS[5], "applied"),
                                                (IDS[6], "applied"), (IDS[7], "applied"),
                                                (STATE_HASH_MIGRATION_ID, "applied"),
                                                (LANGGRAPH_ITEMS_MIGRATION_ID, "applied"),
                                                (LANGGRAPH_WRITES_MIGRATION_ID, "applied")]
    assert layout_version(postgres_server, schema) == 8
    after = catalog(postgres_server, schema)
    added_last = {column: n + 1 for n, column in enumerate(ADDED_COLUMNS)}
    assert after[0] == sorted([*before[0], *ADDED_COLUMNS], key=lambda c: (c[0], added_last.get(c, 0)))
    assert {name for name, _ in after[1] - before[1]} == {*SCOPE_INDEXES, "mnemo_checkpoint_run_latest"}
    with mnemostore.open(url) as store:  # current now: the default opens it
        assert store.outcomes.count() == len([r for r in expected_records(None) if r["kind"] == "outcome"])


def test_fresh_layout_is_the_pre_ledger_layout_plus_the_scope_indexes_with_its_checkpoint_indexes_changed(
        postgres_server: PostgresTestServer) -> None:
    legacy = load_layout1(postgres_server)
    url = postgres_server.url(hnsw_ef_construction="64")  # the HNSW build setting the legacy store had
    with mnemostore.open(url, dimension=4) as store:
        store.outcomes.record("code", True, embedding=[1.0, 0.0, 0.0, 0.0])  # types the vector columns
    old_columns, old_indexes = catalog(postgres_server, legacy)
    new_columns, new_indexes = catalog(postgres_server, schema_of(url))
    assert [c for c in new_columns if c not in ADDED_COLUMNS] == old_columns
    assert set(ADDED_COLUMNS) <= set(new_columns)
    assert {name for name, _ in new_indexes - old_indexes} == {*SCOPE_INDEXES, "mnemo_checkpoint_run_latest"}
    dropped = {(name, definition) for name, definition in old_indexes
               if name in ("mnemo_checkpoint_created", "mnemo_checkpoint_run")}
    assert len(dropped) == 2 and old_indexes - dropped <= new_indexes  # layouts 6 and 7 drop them
    assert all(definition.endswith(" IS NOT NULL)") for name, definition in new_indexes if name in SCOPE_INDEXES)


def _old_schema_module() -> ModuleType:
    """schema.py of ed63a16 (the last pre-ledger code), loaded beside today's layout.py."""
    root = Path(__file__).resolve().parents[1]
    try:
        source = subprocess.run(["git", "show", "ed63a16:src/mnemostore/backends/postgres/schema.py"], cwd=root,
                                capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the pre-ledger code (commit ed63a16) is not available in this checkout")
    spec = importlib.util.spec_from_loader("mnemostore.backends.postgres._schema_ed63a16", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "mnemostore.backends.postgres"
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        exec(compile(source, "schema_ed63a16.py", "exec"), module.__dict__)
    finally:
        del sys.modules[spec.name]
    return module


def test_pre_ledger_code_refuses_a_store_with_newer_layout(postgres_server: PostgresTestServer) -> None:
    old = _old_schema_module()
    url = postgres_server.url()
    mnemostore.open(url).close()
    names = old.Names(schema_of(url), "mnemo_", "public")
    with closing(connect(postgres_server)) as conn, pytest.raises(SchemaMismatch, match="layout version is 8"):
        old.create_tables(conn, names)
    with backend_at(url) as backend:
        Runner(backend).down(IDS[0])  # back to layout 1: what the old code knows
    with closing(connect(postgres_server)) as conn:
        old.create_tables(conn, names)


def test_store_with_a_newer_layout_version_is_refused(postgres_server: PostgresTestServer) -> None:
    url = postgres_server.url()
    mnemostore.open(url).close()
    with closing(connect(postgres_server)) as conn:
        conn.execute(f"UPDATE \"{schema_of(url)}\".mnemo_meta SET value = '99' WHERE key = 'layout_version'")
    with pytest.raises(StoreTooNew, match="layout version 99"):
        mnemostore.open(url)


# the planner ---------------------------------------------------------------------------------
def test_selective_filters_use_the_scope_indexes(postgres_server: PostgresTestServer) -> None:
    with mnemostore.open(postgres_server.url(index="exact")) as store:
        matrix = vectors(2000, 8, seed=3)
        store.embeddings.put([make("embedding", i, agent="needle" if i % 400 == 0 else "hay",
                                   project_id=f"p{i % 100}", embedding=matrix[i]) for i in range(2000)])
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        with closing(connect(postgres_server)) as conn:
            conn.execute(f'ANALYZE "{backend.options.schema_name}".mnemo_embedding')
        plan = backend.explain_search("embedding", None, matrix[0], 5, F.agent == "needle")
        assert "mnemo_embedding_agent" in plan, plan
        hits = store.embeddings.search(matrix[400], k=5, where=F.agent == "needle")
        assert [hit.record.agent for hit in hits] == ["needle"] * 5 and hits[0].record.id == make("embedding", 400).id
        compiler = FilterCompiler(layout("embedding", "mnemo_"))
        for where in (F.project_id == "p7", F.project_id.in_(["p7", "p8"])):
            condition = compiler.where(where)
            with closing(connect(postgres_server)) as conn:
                statement = sql.SQL("EXPLAIN SELECT count(*) FROM {} WHERE tenant = '' AND {}").format(
                    sql.Identifier(backend.options.schema_name, "mnemo_embedding"), condition)
                rows = conn.execute(statement, compiler.params).fetchall()
                compiler.params.clear()
            assert "mnemo_embedding_project" in "\n".join(row[0] for row in rows), rows


def test_scope_index_keys_are_prefixes_so_long_and_alike_values_still_match_exactly(
        postgres_server: PostgresTestServer) -> None:
    alike = ["x" * 64 + "a", "x" * 64 + "b", "long 🧠 text " * 20_000]
    with mnemostore.open(postgres_server.url(), dimension=2) as store:
        made = [store.outcomes.record("code", True, agent=agent, embedding=[1.0, float(i)])
                for i, agent in enumerate(alike)]
        store.outcomes.record("code", True, agent="x" * 64)
        for record in made:
            assert [r.id for r in store.outcomes.query(F.agent == record.agent)] == [record.id]
            hits = store.outcomes.search([1.0, 0.0], k=3, where=F.agent == record.agent)
            assert [hit.record.id for hit in hits] == [record.id]
        both = store.outcomes.query(F.agent.in_(alike[:2]), order_by="agent")
        assert [r.id for r in both] == [made[0].id, made[1].id]
        assert store.outcomes.count(F.agent != alike[0]) == 3


# layout 3: compressed documents, the parent_ids column -------------------------------------
def raw_documents(server: PostgresTestServer, schema: str, kind: str) -> dict[str, bytes]:
    with closing(connect(server)) as conn:
        rows = conn.execute(f'SELECT id, doc FROM "{schema}".mnemo_{kind}').fetchall()
    return {id: bytes(doc) for id, doc in rows}


def test_layout2_store_written_before_compression_upgrades_and_reads_back(postgres_server: PostgresTestServer) -> None:
    """Rows written at layout 3, reverted to layout 2 (plain documents, parent_ids inside them, as
    layout-2 code wrote them), then upgraded again: every record reads back equal, and the
    default parent, updates and new saves work on the old rows."""
    url = postgres_server.url()
    schema = schema_of(url)
    big = {"messages": [f"message {i}: " + "lorem ipsum " * 20 for i in range(200)]}
    with mnemostore.open(url) as store:
        cps = store.checkpoints
        chain = [cps.save("run", {**big, "step": n}) for n in range(3)]
        small = cps.save("run", {"step": 3}, branch="side")
        rule = store.heuristics.add(condition="c", strategy="s", metadata={"notes": "x" * 5000})
        assert [c.parent_ids for c in chain] == [[], [chain[0].id], [chain[1].id]]
        assert get_byte0(raw_documents(postgres_server, schema, "checkpoint")[chain[2].id]) != b"{"
    with backend_at(url) as backend:
        assert Runner(backend).down(IDS[1]) == [*LIBRARY_DOWN, IDS[7], IDS[6], IDS[5], IDS[4], IDS[3], IDS[2]]
    assert layout_version(postgres_server, schema) == 2
    assert PARENT_COLUMN not in catalog(postgres_server, schema)[0]
    docs = raw_documents(postgres_server, schema, "checkpoint")
    assert all(doc[:1] == b"{" for doc in docs.values())
    assert orjson.loads(docs[chain[2].id])["parent_ids"] == [chain[1].id]
    with pytest.raises(PendingMigrations, match=IDS[2]):
        mnemostore.open(url)
    with mnemostore.open(url, migrate="auto") as store:
        cps = store.checkpoints
        assert [cps.get(c.id) for c in [*chain, small]] == [*chain, small]
        assert store.heuristics.get(rule.id) == rule
        following = cps.save("run", big)  # the default parent, found among the layout-2 rows
        assert following.parent_ids == [chain[2].id] and following.sequence == 3
        moved = cps.update(chain[1].id, set={"metadata": {"seen": True}})  # rewrites an old document
        assert moved.parent_ids == [chain[0].id] and cps.get(chain[1].id) == moved
        assert [c.id for c in cps.lineage(following.id)] == [following.id, *[c.id for c in reversed(chain)]]


def test_layout4_zstd_documents_go_back_to_zlib_for_layout3_and_up_again(postgres_server: PostgresTestServer) -> None:
    """Reverting layout 4 rewrites every zstd document as zlib (what layout-3 code reads); zlib
    documents from then on stay readable after the upgrade, beside new zstd ones."""
    url = postgres_server.url()
    schema = schema_of(url)
    big = {"messages": [f"message {i}: " + "lorem ipsum " * 20 for i in range(200)]}
    with mnemostore.open(url) as store:  # a hash of the application's own: the state-hash migration's
        # revert and reapply leave its document as the layout step wrote it
        saved = store.checkpoints.put([Checkpoint(run_id="run", state=big, state_hash="app-given")])[0]
    assert raw_documents(postgres_server, schema, "checkpoint")[saved.id][:4] == b"\x28\xb5\x2f\xfd"
    with backend_at(url) as backend:
        assert Runner(backend).down(IDS[2]) == [*LIBRARY_DOWN, IDS[7], IDS[6], IDS[5], IDS[4], IDS[3]]
    assert layout_version(postgres_server, schema) == 3
    stored = raw_documents(postgres_server, schema, "checkpoint")[saved.id]
    assert orjson.loads(zlib.decompress(stored))["state"] == big
    with mnemostore.open(url, migrate="auto") as store:
        assert store.checkpoints.get(saved.id) == saved
        again = store.checkpoints.save("run", big)
    documents = raw_documents(postgres_server, schema, "checkpoint")
    assert documents[again.id][:4] == b"\x28\xb5\x2f\xfd" and documents[saved.id][:1] == b"\x78"


def get_byte0(doc: bytes) -> bytes:
    return doc[:1]


def test_layout5_payloads_fold_into_documents_for_layout4_and_move_back(postgres_server: PostgresTestServer) -> None:
    """Reverting layout 5 folds each payload into its document as base64 text (what layout-4 code
    keeps there) and drops the column; after the upgrade those rows read back equal, a rewrite of
    their document moves the payload into the column, and new saves use the column."""
    url = postgres_server.url()
    schema = schema_of(url)
    repetitive, varied = b"same words " * 5000, random.Random(3).randbytes(30_000)
    with mnemostore.open(url) as store:
        saved = [store.checkpoints.save("run", {"step": n}, payload=payload)
                 for n, payload in enumerate((repetitive, varied, b"", None))]
    with closing(connect(postgres_server)) as conn:
        packed = dict(conn.execute(f'SELECT id, payload FROM "{schema}".mnemo_checkpoint').fetchall())
    assert packed[saved[0].id][:1] == b"\x01" and len(packed[saved[0].id]) < len(repetitive) // 20
    assert packed[saved[1].id] == b"\x00" + varied and packed[saved[3].id] is None
    assert all(b"payload" not in inflate(doc) for doc in raw_documents(postgres_server, schema, "checkpoint").values())
    with backend_at(url) as backend:
        assert Runner(backend).down(IDS[3]) == [*LIBRARY_DOWN, IDS[7], IDS[6], IDS[5], IDS[4]]
    assert layout_version(postgres_server, schema) == 4
    assert PAYLOAD_COLUMN not in catalog(postgres_server, schema)[0]
    docs = {id: orjson.loads(inflate(doc)) for id, doc in raw_documents(postgres_server, schema, "checkpoint").items()}
    assert [docs[c.id].get("payload") for c in saved] == [to_text(repetitive), to_text(varied), "", None]
    with mnemostore.open(url, migrate="auto") as store:
        assert store.checkpoints.history("run") == saved
        moved = store.checkpoints.update(saved[0].id, set={"state": {"step": 9}})  # rewrites an old document
        assert moved.payload == repetitive and store.checkpoints.get(saved[0].id) == moved
        again = store.checkpoints.save("run", {"step": 4}, payload=b"new")
        assert store.checkpoints.get(again.id) == again
    with closing(connect(postgres_server)) as conn:
        packed = dict(conn.execute(f'SELECT id, payload FROM "{schema}".mnemo_checkpoint').fetchall())
    assert packed[again.id] == b"\x00new" and packed[saved[0].id] is not None



class Jotting(Record):
    """An application's kind with a bytes field: its table is made by its first write."""

    body: bytes = b""

    kind: ClassVar[str] = "migrations_jotting"


def toast_targets(server: PostgresTestServer, schema: str) -> dict[str, list[str] | None]:
    """Each kind's table's storage parameters (the meta table left out)."""
    with closing(connect(server)) as conn:
        return dict(conn.execute("SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n "
                                 "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' "
                                 "AND c.relname <> 'mnemo_meta'", (schema,)).fetchall())


def toasted_bytes(server: PostgresTestServer, schema: str, table: str) -> int:
    with closing(connect(server)) as conn:
        row = conn.execute("SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = %s::regclass",
                           (f'"{schema}".{table}',)).fetchone()
    assert row is not None
    return int(row[0])


def test_layout8_keeps_rows_whole_in_every_kinds_table_and_down_restores_the_default(
        postgres_server: PostgresTestServer) -> None:
    """Layout 8 sets `toast_tuple_target` on the built-in kinds' tables and on an application kind's
    table made before it: a 3 KB row written after stays in its table (the TOAST table does not grow),
    where at layout 7 it went to the TOAST table; its down resets them all; every row reads back."""
    url = postgres_server.url()
    schema = schema_of(url)
    table = f"mnemo_{Jotting.kind}"
    kind_tables = {f"mnemo_{kind}" for kind in KINDS} | {table}
    bodies = {f"j{n}": random.Random(n).randbytes(3000) for n in range(6)}
    mnemostore.register_kind(Jotting)
    try:
        with mnemostore.open(url) as store:
            store.collection(Jotting).put([Jotting(id="j0", body=bodies["j0"])])
        inline = ["toast_tuple_target=8160"]
        assert toast_targets(postgres_server, schema)[table] == inline  # as its first write made it
        with backend_at(url) as backend:
            assert Runner(backend).down(IDS[6]) == [*LIBRARY_DOWN, IDS[7]]
        assert layout_version(postgres_server, schema) == 7
        assert {name: options for name, options in toast_targets(postgres_server, schema).items()
                if name in kind_tables} == dict.fromkeys(kind_tables)
        before = toasted_bytes(postgres_server, schema, table)
        with closing(connect(postgres_server)) as conn:  # rows written at layout 7: out of line above ~2 KB
            conn.execute(f'CREATE TEMP TABLE copies AS SELECT * FROM "{schema}".{table}')
            for n in range(1, 4):
                conn.execute("UPDATE copies SET id = %s", (f"c{n}",))
                conn.execute(f'INSERT INTO "{schema}".{table} SELECT * FROM copies')
        assert toasted_bytes(postgres_server, schema, table) > before
        with backend_at(url) as backend:
            Runner(backend).up()
        assert layout_version(postgres_server, schema) == 8
        targets = toast_targets(postgres_server, schema)
        assert {name: targets[name] for name in kind_tables} == {name: inline for name in kind_tables}
        before = toasted_bytes(postgres_server, schema, table)
        with mnemostore.open(url) as store:
            store.collection(Jotting).put([Jotting(id=f"j{n}", body=bodies[f"j{n}"]) for n in range(1, 6)])
            copies = {f"c{n}": bodies["j0"] for n in range(1, 4)}
            assert {j.id: j.body for j in store.collection(Jotting).all()} == {**bodies, **copies}
        assert toasted_bytes(postgres_server, schema, table) == before
    finally:
        kinds.unregister(Jotting.kind)

def test_a_filter_on_a_scope_value_uses_the_partial_index_and_missing_values_are_kept(
        postgres_server: PostgresTestServer) -> None:
    """Layout 6's scope indexes hold rows with the field only: an equality on a value (as the
    backend compiles it, with its prefix) implies the index's predicate, so it still uses it."""
    url = postgres_server.url()
    schema = schema_of(url)
    with mnemostore.open(url) as store:
        store.outcomes.put([make("outcome", n, agent=None if n % 3 else f"agent-{n % 7}") for n in range(300)])
        assert store.outcomes.count(F.agent == None) == 200  # noqa: E711  (rows the index leaves out)
        assert store.outcomes.count(F.agent == "agent-3") == len([n for n in range(0, 300, 3) if n % 7 == 3])
    with closing(connect(postgres_server)) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row[0] for row in conn.execute(
            f"EXPLAIN SELECT id FROM \"{schema}\".mnemo_outcome WHERE tenant = '' AND agent = 'agent-3' "
            "AND left(agent, 64) = left('agent-3', 64)"))
    assert "mnemo_outcome_agent" in plan
