"""SQLite layout and locking choices the hot path depends on, checked on real stores."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import mnemostore
from mnemostore import F
from mnemostore.backends.sqlite.schema import LAYOUTS
from mnemostore.backends.sqlite.sql_filters import order_sql, where_sql
from mnemostore.core.filters import bind, matches
from mnemostore.core.query import parse_order
from mnemostore.core.records import Embedding
from mnemostore.core.store import open_backend
from mnemostore.migrations.runner import Runner


def test_threads_of_one_process_queue_for_writes_instead_of_timing_out(tmp_path: Path) -> None:
    """Writers in one process take turns on a lock of their own, so even a 1 ms busy timeout
    (SQLite's busy handler sleeps 1 ms and more between tries) never fails one of them."""
    url = f"sqlite:///{tmp_path / 'store.db'}?busy_timeout=0.001"
    errors: list[BaseException] = []
    with mnemostore.open(url) as store:
        def write(worker: int) -> None:
            try:
                for batch in range(15):
                    store.outcomes.put([{"task_type": "t", "success": True, "id": f"{worker}-{batch}-{i}"}
                                        for i in range(40)])
                    store.outcomes.add(task_type="t", success=False, id=f"{worker}-{batch}-one")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert store.outcomes.count() == 6 * 15 * 41


def _indexes(path: Path) -> dict[str, str]:
    rows = sqlite3.connect(path).execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
    return dict(rows.fetchall())


def test_filters_on_optional_fields_use_their_partial_indexes(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        store.outcomes.put([{"task_type": "t", "success": True, "project_id": "p" if i % 2 else None}
                            for i in range(10)])
        assert store.outcomes.count({"project_id": "p"}) == 5
    indexes = _indexes(path)
    assert indexes["mnemo_outcome_project_id"].endswith('WHERE "project_id" IS NOT NULL')
    assert indexes["mnemo_embedding_agent"].endswith('WHERE "agent" IS NOT NULL')
    assert "mnemo_checkpoint_created_at_id" not in indexes and "mnemo_outcome_created_at_id" in indexes
    for field in ("project_id", "agent"):
        plan = sqlite3.connect(path).execute(
            f'EXPLAIN QUERY PLAN SELECT seq FROM "mnemo_outcome" WHERE tenant = ? AND "{field}" = ?', ("", "p"))
        assert any(f"mnemo_outcome_{field}" in row[-1] for row in plan.fetchall())


def test_leaner_indexes_revert_to_the_full_ones(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    mnemostore.open(f"sqlite:///{path}").close()
    backend = open_backend(f"sqlite:///{path}")
    try:
        Runner(backend).down(target="sqlite.0004_payload_column")
    finally:
        backend.close()
    indexes = _indexes(path)
    assert "WHERE" not in indexes["mnemo_outcome_project_id"] and "WHERE" not in indexes["mnemo_outcome_agent"]
    assert "mnemo_checkpoint_created_at_id" in indexes
    with mnemostore.open(f"sqlite:///{path}") as store:  # opening applies the step again
        store.checkpoints.save("run", {"n": 1}, node_id="a")
    assert "mnemo_checkpoint_created_at_id" not in _indexes(path)


def test_an_id_filter_uses_the_id_index_whatever_the_order(tmp_path: Path) -> None:
    """An equality on a non-null value compiles to `=`: SQLite ignores a unique index for `IS ?` when
    the ORDER BY fits another one (a lookup by id became a scan of the tenant's rows)."""
    field, index = "id", "sqlite_autoindex_mnemo_embedding_1"
    path = tmp_path / "store.db"
    mnemostore.open(f"sqlite:///{path}").close()
    layout = LAYOUTS["embedding"]
    condition, params = where_sql(layout, bind(getattr(F, field) == "x", Embedding.filterable))
    order = order_sql(layout, parse_order(None, Embedding))
    plan = sqlite3.connect(path).execute(
        f"EXPLAIN QUERY PLAN SELECT seq FROM {layout.table} WHERE tenant = ? AND {condition} ORDER BY {order}",
        ["", *params]).fetchall()
    assert any(f"USING INDEX {index} " in row[-1] or f"COVERING INDEX {index} " in row[-1] for row in plan), plan



def test_text_equality_on_metadata_reads_one_json_value_and_stays_exact(tmp_path: Path) -> None:
    """A text that cannot be an array's or object's JSON compiles to one json_extract a row (no json_type);
    stored arrays, objects, numbers, booleans, nulls and missing keys still equal only what Python says."""
    stored: list[Any] = ["[1]", [1], "{}", {}, "1", 1, "true", True, "", None, "a", ["a"], {"a": "a"}]
    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        records = store.embeddings.put([{"metadata": {"k": value}} for value in stored] + [{"metadata": {}}])
        for texts in (["a"], ["1"], ["true"], [""], ["[1]"], ["{}"], ["a", "[1]"], ["null"]):
            for expr in (F.metadata["k"] == texts[0], ~(F.metadata["k"] == texts[0]), F.metadata["k"].in_(texts),
                         F.metadata["k"].not_in(texts), F.metadata["k"].in_([*texts, None])):
                found = {r.id for r in store.embeddings.all(where=expr)}
                assert found == {r.id for r in records if matches(bind(expr, Embedding.filterable), r)}, expr
        sql, _ = where_sql(LAYOUTS["embedding"], bind(F.metadata["k"] == "a", Embedding.filterable))
        assert "json_type" not in sql and sql.count("json_extract") == 1
