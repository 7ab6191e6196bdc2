"""A sqlite `latest` finds the record without a sort: its run index gives `LATEST_CHECKPOINT_ORDER` (layout 8),
and any other first-of-an-order read whose first key an index gives skips the sort when that key has no tie
(`selects.first_key_indexed`); the answer is the sorted one."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore import F, register_kind
from mnemostore.backends.sqlite.schema import LAYOUTS, Layout
from mnemostore.backends.sqlite.selects import Select, first_key_indexed
from mnemostore.backends.sqlite.sql_filters import where_sql
from mnemostore.core.calls import run_sync
from mnemostore.core.errors import StoreClosed, ValidationError
from mnemostore.core.kinds import kinds
from mnemostore.core.protocol import LATEST_CHECKPOINT_ORDER, OrderKey

_TIMES = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)]
_STEPS = st.lists(st.tuples(st.sampled_from(["save", "root", "explicit", "put", "delete"]),
                            st.integers(0, 2), st.sampled_from(["main", "b"]), st.integers(0, 3),
                            st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(_TIMES)),
                  min_size=1, max_size=25)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_latest_is_the_first_in_its_order_through_ties_deletes_tenants_and_other_stores(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, str, int, str, datetime]]) -> None:
    """Two stores on one file and a third in another tenant save (default parent, roots, explicit
    parents: ties in sequence), put checkpoints with chosen sequences, times and ids (ties in all but
    the id, re-puts of one id) and delete the latest. After each step, every store's `latest` of the
    run and of each branch, and `first` in the same order, is the first of the sorted query."""
    path = tmp_path_factory.mktemp("latest") / "store.db"
    url = f"sqlite:///{path}"
    with (mnemostore.open(url) as one, mnemostore.open(url) as two,
          mnemostore.open(url, tenant="other") as other):
        stores = (one, two, other)
        for index, (step, who, branch, sequence, id, at) in enumerate(steps):
            cps = stores[who].checkpoints
            if step == "save":
                cps.save("run", {"step": index}, branch=branch)
            elif step == "root":
                cps.save("run", {"step": index}, branch=branch, parent=None)
            elif step == "explicit" and (before := cps.latest("run", branch)) is not None:
                parent = cps.get(before.parent_ids[0]) if before.parent_ids else None
                cps.save("run", {"step": index}, branch=branch, parent=parent)  # the latest's sibling
            elif step == "put":
                cps.put([mnemostore.Checkpoint(id=id, run_id="run", branch_id=branch, sequence=sequence,
                                               created_at=at, updated_at=at, state={"step": index})])
            elif step == "delete" and (before := cps.latest("run")) is not None:
                cps.delete(before.id)
            for store in stores:
                for where, found in ((F.run_id == "run", store.checkpoints.latest("run")),
                                     *(((F.run_id == "run") & (F.branch_id == b), store.checkpoints.latest("run", b))
                                       for b in ("main", "b"))):
                    ordered = store.checkpoints.query(where, order_by=LATEST_CHECKPOINT_ORDER).items
                    assert found == (ordered[0] if ordered else None)
                    assert store.checkpoints.first(where, order_by=LATEST_CHECKPOINT_ORDER) == found


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_sync_get_and_latest_call_the_backend_straight_and_keep_the_facade_checks(backend: str,
                                                                                   tmp_path: Path) -> None:
    """Over a sync `Store`, `get` and `latest` call the backend with no coroutine to drive; they return
    what the async twin does, and a bad id or run, and a closed store, get the facade's errors."""
    url = f"memory://{uuid.uuid4().hex}" if backend == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    store = mnemostore.open(url)
    cps = store.checkpoints
    first = cps.save("run", {"a": 1})
    second = cps.save("run", {"a": 2}, branch="b", parent=first)
    driven: list[Any] = []
    drive = cps._run
    cps._run = lambda coro: (driven.append(coro), drive(coro))[1]  # type: ignore[method-assign]
    assert cps.get(first.id) == first and cps.get("missing") is None
    assert cps.latest("run") == second and cps.latest("run", "main") == first and cps.latest("none") is None
    assert driven == []
    assert run_sync(cps._async.latest("run", "b")) == second and run_sync(cps._async.get(second.id)) == second
    for call, field in ((lambda: cps.get(3), "ids[0]"), (lambda: cps.get("a\x00"), "ids[0]"),  # type: ignore[arg-type]
                        (lambda: cps.latest(3), "where.run_id")):  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as refused:
            call()
        assert refused.value.errors[0][0] == field
    store.close()
    for call in (lambda: cps.get(first.id), lambda: cps.latest("run")):
        with pytest.raises(StoreClosed):
            call()


def test_latest_and_a_saves_parent_lookup_read_the_run_index_first_entry_with_no_sort(tmp_path: Path) -> None:
    """Since layout 8 the checkpoints' run index gives a run's checkpoints in `LATEST_CHECKPOINT_ORDER`: the
    statements of `latest` (of a run, of a branch) and of a save's parent lookup read its first entry, with no
    sort of the checkpoints that tie on sequence (a run of roots), and answer as the sorted query does."""
    path = tmp_path / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        cps = store.checkpoints
        roots = {cps.save("run", {"i": i}, parent=None, branch=("main", "b")[i % 2]).id for i in range(40)}
        for where, found in ((F.run_id == "run", cps.latest("run")),
                             ((F.run_id == "run") & (F.branch_id == "main"), cps.latest("run", "main"))):
            ordered = cps.query(where, order_by=LATEST_CHECKPOINT_ORDER).items
            assert found == ordered[0] and {r.sequence for r in ordered} == {0} and found.id in roots
        lookup = store.backend._kind("checkpoint").latest_parent  # type: ignore[attr-defined]
    layout = LAYOUTS["checkpoint"]
    statements = [(lookup, ["", "run", "main"])]
    for where in (F.run_id == "run", (F.run_id == "run") & (F.branch_id == "main")):
        condition, params = where_sql(layout, where)
        select = Select.of(layout, where, condition, LATEST_CHECKPOINT_ORDER, 1, False)
        statements.append((select.sql, ["", *params] * select.repeat))
    conn = sqlite3.connect(path)
    for sql, args in statements:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args)]
        assert any("mnemo_checkpoint_run_latest" in step for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan
    conn.close()


class _Ranked(mnemostore.Record):
    """An application's kind whose index gives its first order key only: `first` takes `_unique_first`."""

    group: str
    rank: int = 0

    kind: ClassVar[str] = "latest_reads_ranked"
    filterable: ClassVar[dict[str, type]] = {"group": str, "rank": int}
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("group", "rank"),)


@pytest.fixture
def ranked() -> Iterator[type[_Ranked]]:
    register_kind(_Ranked)
    yield _Ranked
    kinds.unregister(_Ranked.kind)


_RANKED_STEPS = st.lists(st.tuples(st.sampled_from(["put", "delete"]), st.sampled_from(["g", "h"]),
                                   st.integers(0, 2), st.sampled_from(["a", "b", "c", "d", "e"])),
                         min_size=1, max_size=20)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_RANKED_STEPS)
def test_first_of_an_order_whose_first_key_an_index_gives_is_the_sorted_first_through_ties(
        tmp_path_factory: pytest.TempPathFactory, ranked: type[_Ranked],
        steps: list[tuple[str, str, int, str]]) -> None:
    """`first` in (rank DESC, id) of a group, where the kind's (group, rank) index gives the rank only, reads
    the top rank without a sort when no other record has it, and sorts the ties: the sorted query's first."""
    order = [OrderKey("rank", True), OrderKey("id", False)]
    layout = Layout.of(ranked.kind)
    where = F.group == "g"
    assert first_key_indexed(layout, where, order)  # the path under test
    path = tmp_path_factory.mktemp("ranked") / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        records = store.collection(ranked)
        for step, group, rank, id in steps:
            if step == "put":
                records.put([ranked(id=id, group=group, rank=rank)])
            else:
                records.delete(id)
            for g in ("g", "h"):
                ordered = records.query(F.group == g, order_by=order).items
                assert records.first(F.group == g, order_by=order) == (ordered[0] if ordered else None)
