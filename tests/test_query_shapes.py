"""Prepared query shapes (`core.shapes`): what a shape refuses when it is built, and the stores'
compiled-statement caches (the behaviour every backend shows is the suite's: clauses/filters.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import mnemostore
from mnemostore import Checkpoint, F, Heuristic, Param, QueryShape, ValidationError


@pytest.mark.parametrize(("where", "field"), [
    (F.metadata["topic"] == Param("topic"), "where.metadata.topic"),
    (F.agent.in_([Param("a")]), "where.agent"),
    ((F.agent == Param("a")) & (F.project_id == Param("a")), "where.project_id"),
    (F.embedding == Param("e"), "where.embedding"),
])
def test_a_param_stands_only_for_one_filterable_value(where: mnemostore.core.filters.Expr, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        QueryShape(Heuristic, where)
    assert raised.value.errors[0][0] == field


def test_a_shape_is_fetched_from_its_own_kind_only(tmp_path: Path) -> None:
    shape = QueryShape(Heuristic, F.agent == Param("agent"))
    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store, pytest.raises(ValidationError) as raised:
        store.checkpoints.fetch(shape, {"agent": "a"})
    assert "heuristic" in str(raised.value)


def test_sqlite_compiles_a_shape_once_and_binds_each_call(tmp_path: Path) -> None:
    """One compiled statement per shape and limit form, whatever the values; a None takes the plain path."""
    shape = QueryShape(Checkpoint, (F.run_id == Param("run")) & (F.sequence >= Param("from")), "-sequence")
    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        for run in ("a", "b"):
            for _ in range(3):
                store.checkpoints.save(run, {"run": run})
        runs = [[c.state["run"] for c in store.checkpoints.fetch(shape, {"run": run, "from": 1}, limit=5)]
                for run in ("a", "b", "c")]
        assert runs == [["a", "a"], ["b", "b"], []]
        assert store.checkpoints.fetch(shape, {"run": None, "from": 0}) == []
        compiled = [key for key in store.backend._shapes if key[0] is shape]
        assert len(compiled) == 1, compiled
