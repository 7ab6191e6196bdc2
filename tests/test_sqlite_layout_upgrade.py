"""A SQLite store written by layout 1 (before the ledger) opens, is adopted and upgraded, and reads back equal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.legacy_fixtures import copy_fixture, expected, expected_records, read_back

import mnemostore
from mnemostore.core.errors import StoreTooNew
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner
from mnemostore.migrations.langgraph_items import LANGGRAPH_ITEMS_MIGRATION_ID
from mnemostore.migrations.langgraph_writes import LANGGRAPH_WRITES_MIGRATION_ID
from mnemostore.migrations.state_hashes import STATE_HASH_MIGRATION_ID


def test_layout1_store_is_adopted_upgraded_and_reads_back(tmp_path: Path) -> None:
    path = copy_fixture("sqlite", tmp_path) / "store.db"
    url = f"sqlite:///{path}"
    backend = open_backend(url)
    try:
        runner = Runner(backend)
        plan = [step.migration.id for step in runner.plan()]
        # no ledger yet: all look pending
        assert plan == ["sqlite.0001_tables", "sqlite.0002_project_indexes", "sqlite.0003_compressed_docs",
                        "sqlite.0004_payload_column", "sqlite.0005_leaner_indexes", "sqlite.0006_bare_payloads",
                        "sqlite.0007_framed_states", "sqlite.0008_latest_index", STATE_HASH_MIGRATION_ID,
                        LANGGRAPH_ITEMS_MIGRATION_ID, LANGGRAPH_WRITES_MIGRATION_ID]
        assert backend.legacy_layout() == "sqlite.0001_tables"
    finally:
        backend.close()
    for tenant in expected()["tenants"]:
        with mnemostore.open(url, tenant=tenant) as store:
            assert read_back(store) == sorted(expected_records(tenant), key=lambda r: (r["kind"], r["id"]))
            ledger = Runner(store.backend).status().applied
            assert [(e.id, e.how) for e in ledger] == [
                ("sqlite.0001_tables", "adopted"), ("sqlite.0002_project_indexes", "applied"),
                ("sqlite.0003_compressed_docs", "applied"), ("sqlite.0004_payload_column", "applied"),
                ("sqlite.0005_leaner_indexes", "applied"), ("sqlite.0006_bare_payloads", "applied"),
                ("sqlite.0007_framed_states", "applied"), ("sqlite.0008_latest_index", "applied"),
                (STATE_HASH_MIGRATION_ID, "applied"), (LANGGRAPH_ITEMS_MIGRATION_ID, "applied"),
                (LANGGRAPH_WRITES_MIGRATION_ID, "applied")]
    indexes = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "mnemo_outcome_project_id" in indexes
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 8


def test_store_laid_out_by_newer_code_refuses_to_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    mnemostore.open(url).close()
    conn = sqlite3.connect(tmp_path / "new.db")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreTooNew, match="layout version 99"):
        mnemostore.open(url)


def test_failed_layout_step_leaves_no_trace(tmp_path: Path) -> None:
    from mnemostore.migrations import LayoutMigration

    url = f"sqlite:///{tmp_path / 'a.db'}"
    mnemostore.open(url).close()
    broken = LayoutMigration("sqlite.9999_broken", backend="sqlite",
                             up=("CREATE TABLE half_done (x INTEGER)", "CREATE TABLE oops (syntax error here"))
    backend = open_backend(url)
    try:
        with pytest.raises(mnemostore.MnemostoreError, match=r"sqlite\.9999_broken"):
            Runner(backend, [broken]).up()
        assert "sqlite.9999_broken" not in [e.id for e in Runner(backend).status().applied]
    finally:
        backend.close()
    tables = {row[0] for row in sqlite3.connect(tmp_path / "a.db").execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables
