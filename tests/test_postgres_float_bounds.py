"""A float column compared with an int no float holds (past 2**53) selects what
the reference selects, comparing them exactly: through a filter and through a prepared shape's bound value."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.core.filters import F
from mnemostore.core.shapes import Param, QueryShape
from mnemostore.core.store import Store
from mnemostore.testing.oracle import expected_ids
from mnemostore.testing.specimen import Specimen, registered

__all__ = ["postgres_server"]
SCORES = [2.0**53, 2.0**53 + 2, -(2.0**53), 1.5, None]
BOUNDS = {"2**53+1": 2**53 + 1, "2**53-1": 2**53 - 1, "-2**53-1": -(2**53) - 1, "2**53": 2**53,
          "2**64+1": 2**64 + 1, "-2**64-1": -(2**64) - 1}


@pytest.fixture(scope="module")
def store(postgres_server: PostgresTestServer) -> Iterator[Store]:
    with registered(), mnemostore.open(postgres_server.url()) as opened:
        opened.collection(Specimen).put([Specimen(id=f"s{i}", label="x", score=score)
                                         for i, score in enumerate(SCORES)])
        yield opened


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
@pytest.mark.parametrize("bound", BOUNDS.values(), ids=BOUNDS.keys())
def test_a_float_column_compares_with_an_int_exactly(store: Store, op: str, bound: int) -> None:
    specimens = store.collection(Specimen)
    comparison = getattr(F.score, f"__{op}__")
    expected = sorted(expected_ids(Specimen.kind, specimens.all(), comparison(bound)))
    assert sorted(r.id for r in specimens.query(comparison(bound))) == expected
    shape = QueryShape(Specimen, comparison(Param("bound")), "id")
    assert [r.id for r in specimens.fetch(shape, {"bound": bound})] == expected
