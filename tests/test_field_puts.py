"""Records handed to a backend as fields (`core.field_puts`, `Collection._put_fields`) are stored exactly as
the same records handed over as records (`_put_built`): on sqlite (which writes rows from the fields) the
rows read back are byte-identical, for every write call, new records and replaced ones (`created_at` kept);
on backends without `put_fields` (memory, file: the fallback) the records read back are equal. Bad fields
are refused by name with nothing written, and a batch failing half-way leaves the store as it was."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.seed_kinds import forget_the_items_kind

import mnemostore
from mnemostore.backends.sqlite import schema
from mnemostore.core.errors import StoreClosed, ValidationError
from mnemostore.core.field_puts import WRITE_CALLS, has_field_puts, records_of
from mnemostore.core.kinds import record_type, register_kind
from mnemostore.core.records import Record
from mnemostore.integrations.langgraph import store_mapping as mapping
from mnemostore.kinds.langgraph_items import LangGraphItem
from mnemostore.testing.strategies import records

KINDS = ("outcome", "heuristic", "anti_pattern", "embedding", "checkpoint")
"""Built-in kinds, a checkpoint's bytes field and state among their fields."""
CALL_FLAGS = {"put": {}, "put_missing": {"keep_existing": True}, "put_keeping_created": {"keep_created": True}}
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)
values = st.dictionaries(st.text(max_size=8).filter(lambda k: "\x00" not in k), json_values, max_size=5) | \
    st.builds(lambda n: {"big": "memory " * n}, st.integers(600, 2_000))  # past 4 KB: the document compressed
labels = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=6)
items = st.lists(st.tuples(st.tuples(st.tuples(labels, labels), st.sampled_from(["a", "b", "c/d", "é", "k5"])),
                           values), max_size=12, unique_by=lambda item: item[0])


@pytest.fixture(autouse=True)
def _item_kind() -> Iterator[None]:
    """The item kind registered (as `MnemostoreStore` registers it) for each test, forgotten after it, so other
    modules' copies and listings do not see it (`forget_the_items_kind`; idempotent: the examples of a property
    test share it)."""
    register_kind(LangGraphItem)
    yield
    forget_the_items_kind()


def _rows(path: Path, kind: str) -> list[tuple[Any, ...]]:
    """Every column of the kind's table but `seq`, by id."""
    with closing(sqlite3.connect(path)) as conn:
        columns = [row[1] for row in conn.execute(f'PRAGMA table_info("mnemo_{kind}")') if row[1] != "seq"]
        names = ", ".join(f'"{name}"' for name in columns)
        if not columns:  # nothing written: no table
            return []
        return conn.execute(f'SELECT {names} FROM "mnemo_{kind}" ORDER BY tenant, id').fetchall()


def _split(batch: Sequence[Record], shared: set[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(common, each) of `batch`, the `shared` fields' values the first record's (in every record)."""
    first = batch[0].__dict__
    common = {name: first[name] for name in shared}
    each = [{name: value for name, value in record.__dict__.items()
             if name not in shared and name not in ("tenant_id", "embedding")} for record in batch]
    return common, each


def _full(cls: type[Record], common: dict[str, Any], each: Sequence[dict[str, Any]]) -> list[Record]:
    return records_of(cls, {**common, "tenant_id": None, "embedding": None}, each)


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield tmp_path / "records.db", tmp_path / "fields.db"


def _both(paths: tuple[Path, Path], kind: str, rounds: Sequence[tuple[dict[str, Any], list[dict[str, Any]]]],
          call: str) -> None:
    """Each round through `_put_built` into the first store, through `_put_fields` into the second; the
    same rows in both."""
    cls = record_type(kind)
    flags = CALL_FLAGS[call]
    with mnemostore.open(f"sqlite:///{paths[0]}") as by_records, mnemostore.open(f"sqlite:///{paths[1]}") as by_fields:
        for common, each in rounds:
            by_records.collection(cls)._put_built(_full(cls, common, each), **flags)
            by_fields.collection(cls)._put_fields(common, each, **flags)
    assert _rows(paths[1], kind) == _rows(paths[0], kind)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_fields_store_the_rows_records_store(tmp_path_factory: pytest.TempPathFactory, kind: str,
                                             data: st.DataObject) -> None:
    first = data.draw(records(kind, max_size=6).filter(bool), label="first")
    second = data.draw(records(kind, max_size=6).filter(bool), label="second")  # ids overlap: replaced
    names = sorted(set(record_type(kind).model_fields) - {"id", "tenant_id", "embedding"})
    shared = data.draw(st.sets(st.sampled_from(names)), label="shared")
    call = data.draw(st.sampled_from(WRITE_CALLS), label="call")
    later = [r.model_copy(update={"created_at": r.created_at + timedelta(days=1)}) for r in second]
    where = tmp_path_factory.mktemp("fields")
    _both((where / "records.db", where / "fields.db"), kind, [_split(first, shared), _split(later, shared)], call)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=items, second=items, call=st.sampled_from(WRITE_CALLS))
def test_langgraph_items_as_fields_store_the_rows_records_store(tmp_path_factory: pytest.TempPathFactory,
                                                                first: list[Any], second: list[Any], call: str) -> None:
    """What `MnemostoreStore` writes: `plain_common` and `plain_fields`, a second batch later replacing some."""
    rounds = [(mapping.plain_common(at, at), mapping.plain_fields("lg", batch))
              for at, batch in ((T0, first), (T0 + timedelta(seconds=1), second)) if batch]
    where = tmp_path_factory.mktemp("items")
    _both((where / "records.db", where / "fields.db"), LangGraphItem.kind, rounds, call)


def test_lone_items_keep_created_at_and_store_the_rows_records_store(two: tuple[Path, Path]) -> None:
    """One item a call (`MnemostoreStore.put`): new, then replaced (the stored `created_at` kept)."""
    rounds = [(mapping.plain_common(T0 + timedelta(seconds=n), T0 + timedelta(seconds=n)),
               mapping.plain_fields("lg", [((("ns",), f"k{n % 2}"), {"n": n})])) for n in range(4)]
    _both(two, LangGraphItem.kind, rounds, "put_keeping_created")
    with mnemostore.open(f"sqlite:///{two[1]}") as store:
        stored = sorted(store.collection(LangGraphItem).all(), key=lambda r: r.key)
    assert [(r.key, r.created_at, r.updated_at, r.metadata) for r in stored] == [
        ("k0", T0, T0 + timedelta(seconds=2), {"n": 2}), ("k1", T0 + timedelta(seconds=1), T0 + timedelta(seconds=3),
                                                          {"n": 3})]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_a_field_writer_stores_the_rows_records_store(tmp_path_factory: pytest.TempPathFactory, kind: str,
                                                      data: st.DataObject) -> None:
    """`Collection._field_writer` (the LangGraph saver's prepared one-record writes) stores each record as
    `_put_built` of it does, byte for byte: for `put` and `put_missing`, new records and stored ones, the
    first call before the kind is declared (the facade's path) and the others prepared."""
    first = data.draw(records(kind, max_size=5).filter(bool), label="first")
    second = data.draw(records(kind, max_size=5).filter(bool), label="second")  # ids overlap: replaced or kept
    names = sorted(set(record_type(kind).model_fields) - {"id", "tenant_id", "embedding"})
    shared = data.draw(st.sets(st.sampled_from(names)), label="shared")
    keep = data.draw(st.booleans(), label="keep_existing")
    cls = record_type(kind)
    common, each = _split(first, shared)
    each += [{name: value for name, value in record.__dict__.items() if name not in shared
              and name not in ("tenant_id", "embedding")} for record in second]
    where = tmp_path_factory.mktemp("writer")
    with mnemostore.open(f"sqlite:///{where / 'records.db'}") as by_records, \
            mnemostore.open(f"sqlite:///{where / 'fields.db'}") as by_fields:
        write = by_fields.collection(cls)._field_writer(common, list(each[0]), keep_existing=keep)
        for fields in each:
            by_records.collection(cls)._put_built(_full(cls, common, [fields]), keep_existing=keep)
            write(fields)
    assert _rows(where / "fields.db", kind) == _rows(where / "records.db", kind)


def test_a_field_writer_plans_again_when_its_kind_s_statements_are_made_anew(two: tuple[Path, Path]) -> None:
    """A kind whose statements the backend makes anew (an evolved declaration) is written by its new plan."""
    cls = record_type("checkpoint")
    batch = [cls(id=f"c{i}", run_id="r", payload=b"p" * i, state={"i": i}) for i in range(4)]
    common, each = _split(batch, {"run_id"})
    with mnemostore.open(f"sqlite:///{two[0]}") as by_records, mnemostore.open(f"sqlite:///{two[1]}") as by_fields:
        write = by_fields.checkpoints._field_writer(common, list(each[0]))
        for n, fields in enumerate(each):
            if n == 2:
                by_fields.backend._kinds.pop("checkpoint")  # type: ignore[attr-defined]
            by_records.checkpoints._put_built(_full(cls, common, [fields]))
            write(fields)
    assert _rows(two[1], "checkpoint") == _rows(two[0], "checkpoint")


def test_records_of_fields_share_no_list_or_dict_of_the_common_fields() -> None:
    """A list or dict `common` gives (the saver's writes share an empty metadata) is each record's own copy:
    a record changed in place changes neither another nor `common`, as records validated one by one."""
    cls = record_type("checkpoint")
    common = {"run_id": "r", "metadata": {"seen": []}, "parent_ids": []}
    built = records_of(cls, {**common, "tenant_id": None, "embedding": None}, [{"id": "a"}, {"id": "b"}])
    built[0].metadata["seen"].append(1)
    built[0].parent_ids.append("x")
    assert built[1].metadata == {"seen": []} and built[1].parent_ids == [] and common["metadata"] == {"seen": []}


@pytest.mark.parametrize("scheme", ["sqlite", "memory"])
def test_a_field_writer_keeps_the_facade_s_refusals(tmp_path: Path, scheme: str) -> None:
    """Fields not named as the writer's `own` take `put`'s validation, which refuses a bad one by name with
    nothing written, on sqlite (whose writes are prepared) as on memory (no `field_writer`: `_put_fields`
    always); a closed store raises StoreClosed."""
    url = f"sqlite:///{tmp_path / 'x.db'}" if scheme == "sqlite" else f"memory://{tmp_path.name}"
    store = mnemostore.open(url)
    cls = record_type("checkpoint")
    common, each = _split([cls(id=f"c{i}", run_id="r", payload=b"p") for i in range(3)], {"run_id"})
    write = store.checkpoints._field_writer(common, list(each[0]))
    write(each[0])
    write(each[1])  # the kind declared by the first: prepared on sqlite
    with pytest.raises(ValidationError, match=r"records\[0\]\.bogus"):
        write({**each[2], "bogus": 1})
    del each[2]["payload"]  # an optional field left out: validation gives its default
    write(each[2])
    assert [(r.id, r.payload) for r in store.checkpoints.all(order_by="id")] == [
        ("c0", b"p"), ("c1", b"p"), ("c2", None)]
    store.close()
    with pytest.raises(StoreClosed):
        write(each[0])


@pytest.mark.parametrize("scheme", ["memory", "file"])
@pytest.mark.parametrize("call", WRITE_CALLS)
def test_backends_without_put_fields_get_the_records(tmp_path: Path, scheme: str, call: str) -> None:
    url = f"memory://{tmp_path.name}" if scheme == "memory" else f"file://{tmp_path / 'store'}"
    first = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": i}) for i in range(5)])
    second = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": -i}) for i in range(3, 8)])
    later = T0 + timedelta(hours=1)
    with mnemostore.open(url) as store:
        assert not has_field_puts(type(store.backend))
        items = store.collection(LangGraphItem)
        items._put_fields(mapping.plain_common(T0, T0), first, **CALL_FLAGS[call])
        items._put_fields(mapping.plain_common(later, later), second, **CALL_FLAGS[call])
        stored = {r.key: r for r in items.all()}
    expected = {r.key: r for r in _full(LangGraphItem, mapping.plain_common(T0, T0), first)}
    for record in _full(LangGraphItem, mapping.plain_common(later, later), second):
        old = expected.get(record.key)
        if old is not None and call == "put_missing":
            continue
        if old is not None and call == "put_keeping_created":
            record = record.model_copy(update={"created_at": old.created_at})
        expected[record.key] = record
    assert stored == expected


@pytest.mark.parametrize("scheme", ["sqlite", "memory"])
def test_an_id_twice_is_refused_by_name_and_nothing_is_written(tmp_path: Path, scheme: str) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}" if scheme == "sqlite" else f"memory://{tmp_path.name}"
    each = mapping.plain_fields("lg", [((("a",), "k"), {"v": 1}), ((("b",), "k"), {"v": 2})])
    each.append(dict(each[0]))
    with mnemostore.open(url) as store:
        items = store.collection(LangGraphItem)
        items._put_fields(mapping.plain_common(T0, T0), each[:1])
        with pytest.raises(ValidationError, match=r"records\[2\]\.id"):
            items._put_fields(mapping.plain_common(T0, T0), [*each[1:], each[0]], keep_created=True)
        assert [r.key for r in items.all()] == ["k"] and items.count() == 1


@pytest.mark.parametrize("scheme", ["sqlite", "memory"])
def test_fields_not_named_alike_are_refused_by_name_and_nothing_is_written(tmp_path: Path, scheme: str) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}" if scheme == "sqlite" else f"memory://{tmp_path.name}"
    with mnemostore.open(url) as store:
        items = store.collection(LangGraphItem)
        each = mapping.plain_fields("lg", [((("a",), "k"), {"v": 1})])
        del each[0]["key"]
        with pytest.raises(ValidationError, match=r"records\[0\]\.key"):  # the first's: `put` names it
            items._put_fields(mapping.plain_common(T0, T0), each)
        items._put_fields(mapping.plain_common(T0, T0), mapping.plain_fields("lg", [((("b",), "k"), {})]))
        for change in ("namespace", "extra", "swap"):
            for flags in CALL_FLAGS.values():
                each = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"v": i}) for i in range(3)])
                if change == "extra":
                    each[2]["agent"] = "x"  # a name `common` gives too
                else:
                    del each[2]["namespace"]
                    if change == "swap":
                        each[2]["agent"] = None
                with pytest.raises(ValidationError, match=r"records\[2\]"):  # the kind recorded: the fast path
                    items._put_fields(mapping.plain_common(T0, T0), each, **flags)
        assert [r.namespace for r in items.all()] == ["lg:b/"]


class _FailingOnSecondWalk(Sequence[dict[str, Any]]):
    """Fields whose first walk (the rows) succeeds and whose second (the records of the replaced ones,
    inside the write's transaction) fails at `fail_at`."""

    def __init__(self, each: list[dict[str, Any]], fail_at: int) -> None:
        self._each, self._fail_at, self._walks = each, fail_at, 0

    def __len__(self) -> int:
        return len(self._each)

    def __getitem__(self, index: Any) -> Any:
        return self._each[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._walks += 1
        for i, fields in enumerate(self._each):
            if self._walks > 1 and i == self._fail_at:
                raise RuntimeError("injected fault")
            yield fields


def test_a_batch_failing_half_way_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        items = store.collection(LangGraphItem)
        items._put_fields(mapping.plain_common(T0, T0), mapping.plain_fields(
            "lg", [((("a",), f"k{i}"), {"i": i}) for i in range(3)]))
        before = _rows(path, LangGraphItem.kind)
        later = T0 + timedelta(hours=1)
        each = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": -i}) for i in range(1, 6)])
        with pytest.raises(Exception, match="injected fault"):  # new k3..k5 inserted, then k1, k2 fail
            items._put_fields(mapping.plain_common(later, later), _FailingOnSecondWalk(each, 3), keep_created=True)
        assert _rows(path, LangGraphItem.kind) == before


def test_a_closed_store_refuses(tmp_path: Path) -> None:
    store = mnemostore.open(f"sqlite:///{tmp_path / 'x.db'}")
    items = store.collection(LangGraphItem)
    store.close()
    with pytest.raises(StoreClosed):
        items._put_fields(mapping.plain_common(T0, T0), mapping.plain_fields("lg", [((("a",), "k"), {})]))


def test_the_async_facade_stores_the_rows_records_store(two: tuple[Path, Path]) -> None:
    """`AsyncCollection._put_fields` (a store on an executor, its first write recording the kind)."""
    each = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": i}) for i in range(4)])

    async def run() -> None:
        for path, fields in zip(two, (False, True), strict=True):
            async with await mnemostore.open_async(f"sqlite:///{path}") as store:
                items = store.collection(LangGraphItem)
                for part in (each[:1], each):
                    if fields:
                        await items._put_fields(mapping.plain_common(T0, T0), part, keep_created=True)
                    else:
                        await items._put_built(_full(LangGraphItem, mapping.plain_common(T0, T0), part),
                                               keep_created=True)

    asyncio.run(run())
    assert _rows(two[1], LangGraphItem.kind) == _rows(two[0], LangGraphItem.kind)


def test_the_async_facade_without_put_fields_puts_the_records(tmp_path: Path) -> None:
    """A backend without `put_fields` gets the records through the store's own calls (`_put_built`)."""
    each = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": i}) for i in range(4)])

    async def run() -> list[LangGraphItem]:
        async with await mnemostore.open_async(f"memory://{tmp_path.name}") as store:
            items = store.collection(LangGraphItem)
            await items._put_fields(mapping.plain_common(T0, T0), each[:2])
            await items._put_fields(mapping.plain_common(T0, T0), each, keep_created=True)
            return sorted(await items.all(), key=lambda r: r.key)

    assert asyncio.run(run()) == _full(LangGraphItem, mapping.plain_common(T0, T0), each)


def test_batches_keep_created_at_and_store_the_rows_records_store(two: tuple[Path, Path]) -> None:
    """A batch (`MnemostoreStore.batch`) replacing some stored items and adding others."""
    later = T0 + timedelta(minutes=5)
    first = mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": i}) for i in range(4)])
    rounds = [(mapping.plain_common(T0, T0), first),
              (mapping.plain_common(later, later),
               mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": -i}) for i in range(2, 7)]))]
    _both(two, LangGraphItem.kind, rounds, "put_keeping_created")
    with mnemostore.open(f"sqlite:///{two[1]}") as store:
        stored = {r.key: (r.created_at, r.updated_at, r.metadata) for r in store.collection(LangGraphItem).all()}
    assert stored == {f"k{i}": (T0 if i < 4 else later, T0 if i < 2 else later, {"i": i if i < 2 else -i})
                      for i in range(7)}


@pytest.mark.parametrize("call", WRITE_CALLS)
def test_batches_past_a_statements_rows_store_the_rows_records_store(
        two: tuple[Path, Path], call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch goes by multi-row INSERTs of up to `ROWS_A_STATEMENT` rows (`schema.insert_rows`): 23 items
    make three full statements and a shorter one; a second batch replaces some and adds others."""
    monkeypatch.setattr(schema, "ROWS_A_STATEMENT", 7)
    later = T0 + timedelta(minutes=5)
    rounds = [(mapping.plain_common(T0, T0), mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": i})
                                                                         for i in range(23)])),
              (mapping.plain_common(later, later), mapping.plain_fields("lg", [((("a",), f"k{i}"), {"i": -i})
                                                                               for i in range(11, 40)]))]
    _both(two, LangGraphItem.kind, rounds, call)
    with mnemostore.open(f"sqlite:///{two[1]}") as store:
        assert store.collection(LangGraphItem).count() == 40


def test_multi_row_inserts_bind_no_more_variables_than_sqlite_allows() -> None:
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 20)  # 6 rows of 3 a statement at most
        conn.execute("CREATE TABLE t (a, b, c UNIQUE)")

        def inserts(conflict: str, n: int) -> str:
            assert 3 * n <= 20
            keep = conflict == "keep"
            return f"INSERT INTO t VALUES {', '.join(['(?, ?, ?)'] * n)}{' ON CONFLICT DO NOTHING' * keep}"

        rows = [(i, -i, i) for i in range(50)]
        schema.insert_rows(conn, inserts, rows, "replace")
        assert conn.execute("SELECT count(*), sum(b) FROM t").fetchone() == (50, -sum(range(50)))
        schema.insert_rows(conn, inserts, [*[(i, 7, i) for i in range(10)], (99, 0, 99)], "keep")  # the new row alone
        assert conn.execute("SELECT count(*), sum(b) FROM t").fetchone() == (51, -sum(range(50)))
