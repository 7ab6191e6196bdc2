"""The sqlite backend's `records_reader` (the sync facade's kept shape reads: `fetch`, a run's `latest`) gives what
`query_shape` gives, call after call, through everything that makes the backend plan its statements again."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore import Record
from mnemostore.core.declarations import Declaration, KindChange
from mnemostore.core.errors import StoreClosed
from mnemostore.core.filters import F
from mnemostore.core.kinds import kinds
from mnemostore.core.records import Checkpoint, Heuristic
from mnemostore.core.shapes import Param, QueryShape
from mnemostore.testing.oracle import assert_same_records


class Memo(Record):
    """An application's kind: its table is made by its first write."""

    topic: str = ""

    kind: ClassVar[str] = "records_reader_memo"
    filterable: ClassVar[dict[str, type]] = {"topic": str}


@pytest.fixture(autouse=True)
def _memo_kind() -> Iterator[None]:
    mnemostore.register_kind(Memo)
    yield
    kinds.unregister(Memo.kind)


CLASSES: dict[str, type[Record]] = {"checkpoint": Checkpoint, "heuristic": Heuristic, Memo.kind: Memo}
LATEST = QueryShape(Checkpoint, F.run_id == Param("run"), ["-sequence", "-created_at"])
"""A run's latest checkpoint's shape (one row read and decoded: `select.mode == "first"` with limit 1)."""
BY_RUN = QueryShape(Checkpoint, F.run_id == Param("run"), "-id")
"""A shape whose statement selects seqs first without a limit of one."""


def _write(store: Any, kinds_written: set[str], step: int) -> None:
    if "checkpoint" in kinds_written:
        store.checkpoints.put([Checkpoint(id=f"c{n}{step}", run_id="r" if n % 3 else "q", state={"n": n},
                                          sequence=n, payload=None if n % 2 else b"x" * n * 900) for n in range(5)])
    if "heuristic" in kinds_written:
        store.heuristics.put([{"id": f"{x}{n}{step}", "condition": "c", "strategy": "s"}
                              for x in "cd" for n in range(3)])
    if Memo.kind in kinds_written:
        store.collection(Memo).put([Memo(id=f"e{n}{step}", topic="t") for n in range(3)])


@settings(max_examples=30, deadline=None)
@given(reads=st.lists(st.tuples(st.sampled_from(["checkpoint", "heuristic", Memo.kind, "latest", "by run"]),
                                st.sampled_from(["c", "d", "e"]), st.sampled_from(["id", "-id"]),
                                st.sampled_from([None, 1, 2]), st.booleans()),
                      min_size=1, max_size=3),
       written=st.sets(st.sampled_from(["checkpoint", "heuristic", Memo.kind])),
       later=st.sets(st.sampled_from(["checkpoint", "heuristic", Memo.kind])))
def test_a_records_reader_gives_what_query_shape_gives(reads: list[Any], written: set[str], later: set[str]) -> None:
    """Readers of fixed (kind, shape, limit, vectors) give `query_shape`'s records for each call's values: before a
    kind has a table and once it has one, after more writes, after the backend forgot its compiled shapes
    (`SHAPES_KEPT` reached) and after a kind evolved (planned again), and for a value the statement was not
    compiled for (None)."""
    with tempfile.TemporaryDirectory() as directory, mnemostore.open(f"sqlite:///{directory}/s.db") as store:
        backend: Any = store.backend
        made = []
        for name, low, order, limit, vectors in reads:
            if name == "latest":
                made.append(("checkpoint", LATEST, 1, vectors, {"run": "r" if low == "c" else "q"}))
            elif name == "by run":
                made.append(("checkpoint", BY_RUN, limit, vectors, {"run": "r"}))
            else:
                shape = QueryShape(CLASSES[name], (F.id >= Param("low")) & (F.id < Param("high")), order)
                made.append((name, shape, limit, vectors, {"low": low, "high": chr(ord(low) + 1)}))
        readers = [backend.records_reader(kind, None, shape, limit, vectors) for kind, shape, limit, vectors, _ in made]

        def check(unbindable: bool = False) -> None:
            for reader, (kind, shape, limit, vectors, values) in zip(readers, made, strict=True):
                if unbindable:
                    values = dict.fromkeys(values)
                expected = backend.query_shape(kind, None, shape, values, limit, vectors)
                found = reader(values)
                assert_same_records(found, expected)
                assert all(record.embedding is None for record in found) or vectors

        check()  # no table yet for the application's kind
        _write(store, written, 0)
        check()
        _write(store, later, 1)
        check()
        for filler in range(512):  # `SHAPES_KEPT` other shapes: the cache starts again
            backend.query_shape("checkpoint", None, QueryShape(Checkpoint, F.id == Param("id")), {"id": f"f{filler}"},
                                None)
        check()
        declared = Declaration.of(Heuristic)
        token = backend._shapes_token
        backend.evolve_kind(KindChange(declared, declared))
        assert backend._shapes_token is not token
        check()
        tables = {"checkpoint", "heuristic", *written, *later}  # the built-in kinds' are there from the start
        assert all(reader._token is backend._shapes_token  # planned again
                   for reader, (kind, *_) in zip(readers, made, strict=True) if kind in tables)
        check(unbindable=True)


def test_the_facade_s_latest_and_fetch_read_through_kept_readers_and_refuse_once_closed() -> None:
    """A sync store keeps one reader per shape (`Collection._shape_read`) for `latest` and `fetch`: what they give
    is `query_shape`'s, a new checkpoint is the next `latest`, and a closed store refuses them."""
    with tempfile.TemporaryDirectory() as directory:
        store = mnemostore.open(f"sqlite:///{directory}/s.db")
        cps = store.checkpoints
        assert cps.latest("r") is None
        first = cps.save("r", {"n": 1})
        assert cps.latest("r") == first
        second = cps.save("r", {"n": 2})
        assert cps.latest("r") == second and cps.latest("r", branch="main") == second
        assert cps.fetch(BY_RUN, {"run": "r"}) == sorted([first, second], key=lambda c: c.id, reverse=True)
        assert len(cps._readers) == 3
        store.close()
        with pytest.raises(StoreClosed):
            cps.latest("r")
        with pytest.raises(StoreClosed):
            cps.fetch(BY_RUN, {"run": "r"})
