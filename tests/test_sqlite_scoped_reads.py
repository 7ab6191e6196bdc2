"""A sqlite query ordered by id alone within a scope an index leads with (a thread's checkpoints by `run_id`)
reads that index and sorts the scope, rather than walking the tenant's whole id index to skip the sort
(`selects.scoped_by_index`): a page of one thread costs what the thread's size does, not the store's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import mnemostore
from mnemostore import F
from mnemostore.backends.sqlite.schema import LAYOUTS
from mnemostore.backends.sqlite.selects import Select, scoped_by_index
from mnemostore.backends.sqlite.sql_filters import where_sql
from mnemostore.core.protocol import OrderKey

_NEWEST_ID = [OrderKey("id", True)]


def test_a_page_of_one_run_by_id_reads_the_run_index_and_answers_as_the_model(tmp_path: Path) -> None:
    """Checkpoints of 30 runs: a page of one run, newest id first, is the run's checkpoints sorted by id; its
    statement reads the run index, not the (tenant, id) index; a query bounded by id keeps the id index."""
    path = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        cps = store.checkpoints
        saved: dict[str, list[tuple[str, str]]] = {}  # run -> (id, branch) of each save
        for n in range(300):
            run, branch = f"run-{n % 30}", ("main", "b")[n % 3 == 0]
            saved.setdefault(run, []).append((cps.save(run, {"n": n}, branch=branch).id, branch))
        for run in ("run-0", "run-17"):
            page = cps.query(F.run_id == run, order_by="-id", limit=4).items
            assert [r.id for r in page] == sorted((id for id, _ in saved[run]), reverse=True)[:4]
            every = cps.query((F.run_id == run) & (F.branch_id != "b"), order_by="-id").items
            assert [r.id for r in every] == sorted((id for id, branch in saved[run] if branch != "b"), reverse=True)
    layout = LAYOUTS["checkpoint"]
    conn = sqlite3.connect(path)
    for where, scoped in (((F.run_id == "run-0") & (F.branch_id != "b"), True), (F.run_id == "run-0", True),
                          (F.node_id == "", False),  # no index leads with node_id
                          ((F.run_id == "run-0") & (F.id < "z"), False)):  # an id range: the id index orders it
        condition, params = where_sql(layout, where)
        select = Select.of(layout, where, condition, _NEWEST_ID, 4, False)
        plan = " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {select.sql}", ["", *params, 4]))
        assert ("mnemo_checkpoint_run_latest" in plan) is scoped, plan
    assert not scoped_by_index(layout, F.run_id == "run-0", [OrderKey("sequence", True)])  # ordered by another key
    conn.close()
