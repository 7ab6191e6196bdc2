"""The saver's flat reads on a sqlite or postgres store (its sync methods' on a sync `Store`, its async methods'
awaited on any) give what its reads through the collection give."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server
from tests.seed_kinds import forget_the_writes_kind

import mnemostore
from mnemostore.core.errors import StoreClosed
from mnemostore.core.filters import F
from mnemostore.core.records import Checkpoint
from mnemostore.core.shapes import Param, QueryShape

pytest.importorskip("langgraph.checkpoint.base", reason="needs the langgraph extra")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from mnemostore.integrations.langgraph import MnemostoreSaver
from mnemostore.integrations.langgraph.reads import AwaitedFlatReads, FlatReads, Reads
from mnemostore.integrations.langgraph.saver import _Listing

__all__ = ["postgres_server"]


@pytest.fixture(autouse=True)
def _writes_kind_forgotten() -> Iterator[None]:
    """`MnemostoreSaver` registers its write kind; forgotten after each test (see `forget_the_writes_kind`)."""
    yield
    forget_the_writes_kind()


@pytest.fixture(params=["sqlite", "postgres"])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """A factory of URLs of fresh, empty stores on a backend with document reads (each call a new one)."""
    if request.param == "postgres":
        server: PostgresTestServer = request.getfixturevalue("postgres_server")
        return server.url
    made = itertools.count()
    return lambda: f"sqlite:///{tmp_path / f's{next(made)}.db'}"


FRESH = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
"""For a property test given `new_url`: each example opens a store of its own."""

_steps = st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.sampled_from(["", "p"]),
                            st.sampled_from(["x", "y" * 3000, "z" * 70_000]),  # plain, compressible, large
                            st.lists(st.sampled_from(["a", "b", "__error__"]), max_size=2),
                            st.booleans(),
                            st.sampled_from([{}, {"score": 0.5, "tags": ["a"]}, {"raw": b"\xff"}])),  # JSON or not
                  min_size=1, max_size=8)


def _config(thread: str, ns: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": thread, "checkpoint_ns": ns}
    return {"configurable": conf if checkpoint_id is None else {**conf, "checkpoint_id": checkpoint_id}}


async def _listed(saver: MnemostoreSaver, config: dict[str, Any] | None, **kwargs: Any) -> list[Any]:
    return [item async for item in saver.alist(config, **kwargs)]


async def _every_read(configs: list[Any], threads: list[tuple[str, str]], get: Callable[[Any], Any],
                      listed: Callable[..., Any]) -> list[Any]:
    """`get_tuple` of each config, then each thread's latest and lists (whole, limit 2, before the last config,
    across namespaces), then a thread with none: through the awaited `get` and `listed` given."""
    found: list[Any] = [await get(config) for config in configs]
    for thread, ns in threads:
        found.append(await get(_config(thread, ns)))
        found.append(await listed(_config(thread, ns)))
        found.append(await listed(_config(thread, ns), limit=2))
        found.append(await listed(_config(thread, ns), before=configs[-1]))
        found.append(await listed({"configurable": {"thread_id": thread}}))
    found.append(await get(_config("t3", "")))
    return found


async def _through_collection(saver: MnemostoreSaver, configs: list[Any], threads: list[tuple[str, str]]) -> list[Any]:
    """`_every_read` through the saver's coroutines over the collection's reads of the store it awaits."""
    reads = Reads(saver._bridge.awaited())

    async def listed(config: Any, limit: int | None = None, before: Any = None) -> list[Any]:
        pages = saver._list(reads, _Listing(config, None, before), limit)
        return [item async for page in pages for item in page]

    return await _every_read(configs, threads, partial(saver._get_tuple, reads), listed)


async def _awaited(saver: MnemostoreSaver, configs: list[Any], threads: list[tuple[str, str]]) -> list[Any]:
    """`_every_read` through the saver's async methods (their reads flat: `AwaitedFlatReads`)."""
    assert isinstance(saver._awaited_reads(), AwaitedFlatReads)
    return await _every_read(configs, threads, saver.aget_tuple, partial(_listed, saver))


@settings(FRESH, max_examples=25)
@given(steps=_steps)
def test_flat_reads_give_what_the_collection_gives(new_url: Callable[[], str], steps: list[Any]) -> None:
    """After any run of puts and writes (several threads and namespaces, writes on older checkpoints,
    values stored plain and compressed, metadata all JSON or not), each sync read (flat) and each async one
    (flat, awaited in the executor of the store's twin) equals the read through the collection: `get_tuple` by id
    and latest, `list` whole, with a limit, before a checkpoint, across threads."""
    with mnemostore.open(new_url()) as store:
        saver = MnemostoreSaver(store)
        assert isinstance(saver._reads, FlatReads)
        configs: list[Any] = []
        parents: dict[tuple[str, str], Any] = {}
        for i, (thread, ns, text, channels, on_older, extra) in enumerate(steps):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=i))
            checkpoint["channel_values"] = {"text": text * (i + 1)}
            checkpoint["channel_versions"] = {"text": f"{i + 1:032}"}
            config = saver.put(parents.get((thread, ns), _config(thread, ns)), checkpoint,
                               {"source": "loop", "step": i, "parents": {}, **extra}, {"text": f"{i + 1:032}"})
            parents[(thread, ns)] = config
            configs.append(config)
            target = configs[i // 2] if on_older else config
            if channels:
                saver.put_writes(target, [(channel, {"n": i}) for channel in channels], f"task-{i}")

        flat: list[Any] = [saver.get_tuple(config) for config in configs]
        for thread, ns in sorted(parents):
            flat.append(saver.get_tuple(_config(thread, ns)))
            flat.append(list(saver.list(_config(thread, ns))))
            flat.append(list(saver.list(_config(thread, ns), limit=2)))
            flat.append(list(saver.list(_config(thread, ns), before=configs[-1])))
            flat.append(list(saver.list({"configurable": {"thread_id": thread}})))
        flat.append(saver.get_tuple(_config("t3", "")))
        assert flat == asyncio.run(_through_collection(saver, configs, sorted(parents)))
        assert flat == asyncio.run(_awaited(saver, configs, sorted(parents)))
        assert flat[-1] is None


TASKS = 4


@settings(FRESH, max_examples=30)
@given(ids=st.lists(st.text("ab./-", min_size=1, max_size=4), min_size=1, max_size=6, unique=True))
def test_listed_checkpoints_have_their_own_writes(new_url: Callable[[], str], ids: list[str]) -> None:
    """Each listed tuple holds its own checkpoint's pending writes and no other's, where checkpoint ids extend
    one another ("a", "a.b", "a-"): a page's writes are read by one id range (`_writes_ranges`); sync and async."""
    with mnemostore.open(url := new_url()) as store:
        saver = MnemostoreSaver(store)
        thread = _config("t", "")
        for i, checkpoint_id in enumerate(ids):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = checkpoint_id
            saved = saver.put(thread, checkpoint, {"source": "loop", "step": i, "parents": {}}, {})
            for task in range(TASKS):  # ids of several digests, some past any id the range could end on
                saver.put_writes(saved, [("n", checkpoint_id)], task_id=f"task-{i}-{task}")
        expected = {checkpoint_id: [(f"task-{i}-{task}", "n", checkpoint_id) for task in range(TASKS)]
                    for i, checkpoint_id in enumerate(ids)}
        assert {t.config["configurable"]["checkpoint_id"]: sorted(t.pending_writes)
                for t in saver.list(thread)} == expected

    async def awaited() -> list[Any]:
        async with await mnemostore.open_async(url) as opened:
            return await _listed(MnemostoreSaver(opened), thread)

    assert {t.config["configurable"]["checkpoint_id"]: sorted(t.pending_writes)
            for t in asyncio.run(awaited())} == expected


def test_flat_reads_page_through_long_threads_and_keep_each_thread_s_latest_read(new_url: Callable[[], str]) -> None:
    """Threads of several pages (`FlatReads.page`, the list's batches) list whole and in order on the flat reads,
    as the async reads list them; `get_tuple` of each thread's latest, its read kept per thread
    (`_TupleRead.kept`), gives that thread's newest checkpoint after every put, the threads taking turns."""
    with mnemostore.open(new_url()) as store:
        saver = MnemostoreSaver(store)
        assert isinstance(saver._reads, FlatReads) and saver._reads.page <= 25
        parents: dict[str, Any] = {}
        for i in range(3 * 25 + 7):
            thread = "t1" if i % 3 else "t2"
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=i))
            checkpoint["channel_values"] = {"n": i}
            checkpoint["channel_versions"] = {"n": f"{i + 1:032}"}
            parents[thread] = saver.put(parents.get(thread, _config(thread, "")), checkpoint,
                                        {"source": "loop", "step": i, "parents": {}}, {"n": f"{i + 1:032}"})
            for name in ("t1", "t2"):
                if name in parents:
                    latest = saver.get_tuple(_config(name, ""))
                    assert latest is not None and latest.config == parents[name]
        for thread in ("t1", "t2"):
            listed = list(itertools.islice(saver.list(_config(thread, "")), 200))  # a page read again: no end
            assert listed == asyncio.run(_listed(saver, _config(thread, "")))
            ids = [item.config["configurable"]["checkpoint_id"] for item in listed]
            assert len(ids) == (54 if thread == "t1" else 28) and ids == sorted(set(ids), reverse=True)
        assert len(list(saver.list({"configurable": {"thread_id": "t1"}}, limit=30))) == 30


def test_only_a_store_with_document_reads_reads_flat(new_url: Callable[[], str]) -> None:
    """A sync sqlite or postgres store's saver reads flat in its sync methods, and in its async ones awaited (in the
    executor of the store's twin); an async store's saver reads through the collection in its sync methods and
    flat in its async ones (natively on postgres, whose async side reads documents; in the executor on sqlite);
    a memory store's reads through the collection; a closed store's flat read is refused as the collection's is."""
    url = new_url()
    with mnemostore.open(url) as store:
        saver = MnemostoreSaver(store)
        assert isinstance(saver._reads, FlatReads)

        async def twin() -> None:
            reads = saver._awaited_reads()
            assert type(reads) is AwaitedFlatReads and not reads._natively and saver._awaited_reads() is reads

        asyncio.run(twin())
    with mnemostore.open("memory://flat") as memory:
        assert type(MnemostoreSaver(memory)._reads) is Reads

        async def memory_twin() -> None:
            assert type(MnemostoreSaver(memory)._awaited_reads()) is Reads

        asyncio.run(memory_twin())

    async def on_a_loop() -> None:
        async_store = await mnemostore.open_async(new_url())
        async with async_store:
            saver = MnemostoreSaver(async_store)
            assert type(saver._reads) is Reads
            reads = saver._awaited_reads()
            assert type(reads) is AwaitedFlatReads and reads._natively == url.startswith("postgresql")
        with pytest.raises(StoreClosed):
            await saver.aget_tuple(_config("t", ""))

    asyncio.run(on_a_loop())
    store = mnemostore.open(url)
    saver = MnemostoreSaver(store)
    store.close()
    with pytest.raises(StoreClosed):
        saver.get_tuple(_config("t", ""))


def test_an_async_store_s_awaited_flat_reads_give_what_the_collection_gives(new_url: Callable[[], str]) -> None:
    """On an `AsyncStore` (postgres: its async side's document reads, pipelined; sqlite: the executor), after puts
    and writes in several threads and namespaces (writes on an older checkpoint, a value stored compressed,
    metadata not all JSON), each async read equals the read through the collection, and listing a thread of
    several pages gives it whole, newest first."""

    async def run() -> None:
        async with await mnemostore.open_async(new_url()) as store:
            saver = MnemostoreSaver(store)
            configs: list[Any] = []
            parents: dict[tuple[str, str], Any] = {}
            for i in range(2 * 25 + 3):
                thread, ns = ("t1", "") if i % 3 else ("t2", "p" if i % 2 else "")
                checkpoint = empty_checkpoint()
                checkpoint["id"] = str(uuid6(clock_seq=i))
                checkpoint["channel_values"] = {"text": ("z" * 70_000) if i == 7 else f"x{i}"}
                checkpoint["channel_versions"] = {"text": f"{i + 1:032}"}
                metadata = {"source": "loop", "step": i, "parents": {}, **({"raw": b"\xff"} if i == 5 else {})}
                config = await saver.aput(parents.get((thread, ns), _config(thread, ns)), checkpoint, metadata,
                                          {"text": f"{i + 1:032}"})
                parents[(thread, ns)] = config
                configs.append(config)
                if i % 4 == 0:
                    await saver.aput_writes(configs[i // 2], [("a", {"n": i}), ("__error__", "e")], f"task-{i}")
            awaited = await _awaited(saver, configs, sorted(parents))
            assert awaited == await _through_collection(saver, configs, sorted(parents))
            assert awaited[-1] is None and all(found is not None for found in awaited[:len(configs)])
            listed = await _listed(saver, _config("t1", ""))
            ids = [item.config["configurable"]["checkpoint_id"] for item in listed]
            assert len(ids) == 35 and ids == sorted(ids, reverse=True)

    asyncio.run(run())


def test_flat_reads_without_several_shapes_read_them_one_after_another(new_url: Callable[[], str]) -> None:
    """A backend with `query_shape_documents` but not `query_shapes_documents` (a plugin's) still reads
    flat: the checkpoint and its writes one after another, the same tuples."""
    with mnemostore.open(new_url()) as store:
        saver = MnemostoreSaver(store)
        config = saver.put(_config("t", ""), empty_checkpoint(), {"source": "loop", "step": 0}, {})
        saver.put_writes(config, [("a", 1), ("__error__", "e")], "task")
        newer = saver.put(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        saver.put_writes(newer, [("b", 2)], "task")
        both = [saver.get_tuple(config), saver.get_tuple(newer), saver.get_tuple(_config("t", ""))]

        class OneShape:
            def __init__(self, backend: Any) -> None:
                self.query_shape_documents = backend.query_shape_documents

        one_by_one = FlatReads(store._async, OneShape(store.backend))
        assert one_by_one._several is None
        saver._reads = one_by_one
        assert [saver.get_tuple(config), saver.get_tuple(newer), saver.get_tuple(_config("t", ""))] == both
        assert [t.pending_writes for t in both] == [[("task", "__error__", "e"), ("task", "a", 1)],
                                                    [("task", "b", 2)], [("task", "b", 2)]]


def test_documents_are_the_records_stored_fields(new_url: Callable[[], str]) -> None:
    """`query_shape_documents` gives each record `query_shape` gives, as its stored fields (payloads plain
    and compressed, datetimes as text); None for a value the statement does not bind (None) and, on sqlite, for
    a shape whose statement would be two (the caller then takes `query_shape`)."""
    from mnemostore.core.codec import parse_fields

    url = new_url()
    with mnemostore.open(url) as store:
        records = [Checkpoint(id=f"c{n}", run_id="r", state={"n": n}, payload=payload)
                   for n, payload in enumerate([b"x", b"y" * 70_000, None, bytes(range(256)) * 40])]
        store.checkpoints.put(records)
        backend: Any = store.backend
        ranged = QueryShape(Checkpoint, (F.id >= Param("low")) & (F.id < Param("high")), "-id")
        for limit in (None, 1, 3):
            documents = backend.query_shape_documents("checkpoint", None, ranged, {"low": "c", "high": "d"}, limit)
            expected = store.checkpoints.fetch(ranged, {"low": "c", "high": "d"}, limit=limit, vectors=False)
            assert all(type(data["created_at"]) is str for data in documents)
            assert [Checkpoint(**parse_fields(Checkpoint, data)) for data in documents] == expected
            assert len(expected) == (4 if limit is None else limit)
        assert backend.query_shape_documents("checkpoint", None, ranged, {"low": None, "high": "d"}, None) is None
        by_run = QueryShape(Checkpoint, F.run_id == Param("run"), "-sequence")
        documents = backend.query_shape_documents("checkpoint", None, by_run, {"run": "r"}, None)
        if url.startswith("sqlite"):  # a run's checkpoints by sequence: two statements there
            assert documents is None
        else:
            expected = store.checkpoints.fetch(by_run, {"run": "r"}, vectors=False)
            assert [Checkpoint(**parse_fields(Checkpoint, data)) for data in documents] == expected


_shape_reads = st.lists(st.tuples(st.sampled_from(["checkpoint", "heuristic", "langgraph_write"]),
                                  st.sampled_from(["c", "d", "e"]), st.sampled_from(["id", "-id"]),
                                  st.sampled_from([None, 1, 2])),
                        min_size=1, max_size=3)


@settings(FRESH, max_examples=40)
@given(reads=_shape_reads, written=st.sets(st.sampled_from(["checkpoint", "heuristic", "langgraph_write"])))
def test_several_shapes_read_at_once_give_what_each_read_gives(new_url: Callable[[], str], reads: list[Any],
                                                                written: set[str]) -> None:
    """`query_shapes_documents` gives each shape's documents as `query_shape_documents` gives them, in its
    order: kinds with no bytes column beside one with, a kind whose table does not exist yet, limits of
    one (a statement of its own shape) and more; None when one of them would take `query` (a None value) or,
    on sqlite, two statements."""
    from mnemostore.core.records import Heuristic
    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    mnemostore.register_kind(LangGraphWrite)
    classes = {"checkpoint": Checkpoint, "heuristic": Heuristic, "langgraph_write": LangGraphWrite}
    url = new_url()
    with mnemostore.open(url) as store:
        if "checkpoint" in written:
            store.checkpoints.put([Checkpoint(id=f"c{n}", run_id="r", state={"n": n}, payload=b"x" * n * 900)
                                   for n in range(4)])
        if "heuristic" in written:
            store.heuristics.put([{"id": f"{x}{n}", "condition": "c", "strategy": "s"} for x in "cd" for n in range(3)])
        if "langgraph_write" in written:
            store.collection(LangGraphWrite).put([LangGraphWrite(
                id=f"e{n}", thread="t", owner="o", checkpoint_ns="", checkpoint_id="c", task_id="k",
                writes=[[0, "ch", "bytes", n]], payload=b"y" * n) for n in range(3)])
        backend: Any = store.backend
        several = [(kind, QueryShape(classes[kind], (F.id >= Param("low")) & (F.id < Param("high")), order),
                    {"low": low, "high": chr(ord(low) + 1)}, limit) for kind, low, order, limit in reads]
        found = backend.query_shapes_documents(None, several)
        assert found == [backend.query_shape_documents(kind, None, shape, values, limit)
                         for kind, shape, values, limit in several]
        unbound = ("checkpoint", QueryShape(Checkpoint, (F.id >= Param("low")) & (F.id < Param("high")), "id"),
                   {"low": None, "high": "d"}, None)
        assert backend.query_shapes_documents(None, [*several, unbound]) is None
        by_run = QueryShape(Checkpoint, F.run_id == Param("run"), "-sequence")  # two statements on sqlite: refused
        if "checkpoint" in written and url.startswith("sqlite"):
            assert backend.query_shapes_documents(None, [*several, ("checkpoint", by_run, {"run": "r"}, None)]) is None


@settings(max_examples=40, deadline=None)
@given(reads=st.lists(st.tuples(st.sampled_from(["checkpoint", "heuristic", "langgraph_write"]),
                                st.sampled_from(["c", "d", "e"]), st.sampled_from(["id", "-id"]),
                                st.sampled_from([None, 1, 2]),
                                st.sampled_from([None, ("id",), ("created_at", "id")])),
                      min_size=1, max_size=3),
       written=st.sets(st.sampled_from(["checkpoint", "heuristic", "langgraph_write"])),
       later=st.sets(st.sampled_from(["checkpoint", "heuristic", "langgraph_write"])))
def test_a_shapes_reader_gives_what_several_shapes_give(reads: list[Any], written: set[str], later: set[str]) -> None:
    """`shapes_reader` of fixed (kind, shape, limit, fields) reads gives what `query_shapes_documents` gives for the
    same values (only `fields` of each document, where given: from their columns, or, for a datetime, from the
    document), call after call: before a kind has a table and once it has one, after the backend forgot its
    compiled shapes (`SHAPES_KEPT` reached) and after a kind evolved (its layout made again); None for a value
    its statement was not compiled for (where a read's kind has a table)."""
    from mnemostore.core.declarations import Declaration, KindChange
    from mnemostore.core.records import Heuristic
    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    mnemostore.register_kind(LangGraphWrite)
    classes = {"checkpoint": Checkpoint, "heuristic": Heuristic, "langgraph_write": LangGraphWrite}

    def write(store: Any, kinds: set[str], step: int) -> None:
        if "checkpoint" in kinds:
            store.checkpoints.put([Checkpoint(id=f"c{n}{step}", run_id="r", state={"n": n}, payload=b"x" * n * 900)
                                   for n in range(4)])
        if "heuristic" in kinds:
            store.heuristics.put([{"id": f"{x}{n}{step}", "condition": "c", "strategy": "s"}
                                  for x in "cd" for n in range(3)])
        if "langgraph_write" in kinds:
            store.collection(LangGraphWrite).put([LangGraphWrite(
                id=f"e{n}{step}", thread="t", owner="o", checkpoint_ns="", checkpoint_id="c", task_id="k",
                writes=[[0, "ch", "bytes", n]], payload=b"y" * n) for n in range(3)])

    with tempfile.TemporaryDirectory() as directory, mnemostore.open(f"sqlite:///{directory}/s.db") as store:
        backend: Any = store.backend
        shapes = [(kind, QueryShape(classes[kind], (F.id >= Param("low")) & (F.id < Param("high")), order), limit,
                   fields) for kind, _, order, limit, fields in reads]
        values = [{"low": low, "high": chr(ord(low) + 1)} for _, low, *_ in reads]
        reader = backend.shapes_reader(None, shapes)

        def several(values: list[dict[str, Any]] = values) -> Any:
            found = backend.query_shapes_documents(None, [(kind, shape, part, limit) for (kind, shape, limit, _), part
                                                          in zip(shapes, values, strict=True)])
            return found if found is None else [
                documents if fields is None else [{name: document[name] for name in fields} for document in documents]
                for documents, (*_, fields) in zip(found, shapes, strict=True)]

        assert reader(values) == several()  # no table yet for the application's kinds
        write(store, written, 0)
        assert reader(values) == several()
        write(store, later, 1)
        assert reader(values) == several()
        for filler in range(512):  # `SHAPES_KEPT` other shapes: the cache starts again
            backend.query_shape_documents("checkpoint", None, QueryShape(Checkpoint, F.id == Param("id")),
                                          {"id": f"f{filler}"}, None)
        assert reader(values) == several()
        token = backend._shapes_token
        declared = Declaration.of(Heuristic)
        backend.evolve_kind(KindChange(declared, declared))
        assert backend._shapes_token is not token
        assert reader(values) == several()
        tables = {"checkpoint", "heuristic", *written, *later}  # the built-in kinds' are there from the start
        assert (reader._token is backend._shapes_token) == all(kind in tables for kind, *_ in shapes)  # planned again
        unbindable = [{**part, "low": None} for part in values]
        assert reader(unbindable) == several(unbindable)
        assert (reader(unbindable) is None) == any(kind in tables for kind, *_ in shapes)


def test_a_shapes_reader_reads_a_shape_that_selects_seqs_alone(tmp_path: Path) -> None:
    """Alone, a shape whose statement selects seqs first (a thread's checkpoints by id through its run index)
    is read in two statements on one snapshot, its documents those of `query_shape`'s records in their order;
    beside another shape it is refused (None), as `query_shapes_documents` refuses it."""
    from mnemostore.core.codec import parse_fields

    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.checkpoints.put([Checkpoint(id=f"c{n}", run_id="r" if n % 3 else "q", state={"n": n},
                                          payload=None if n % 4 == 0 else bytes([n]) * n * 500) for n in range(12)])
        backend: Any = store.backend
        by_run = QueryShape(Checkpoint, F.run_id == Param("run"), "-id")
        for limit in (None, 1, 2, 5):
            reader = backend.shapes_reader(None, [("checkpoint", by_run, limit, None)])
            expected = store.checkpoints.fetch(by_run, {"run": "r"}, limit=limit, vectors=False)
            (documents,) = reader([{"run": "r"}])
            assert [Checkpoint(**parse_fields(Checkpoint, data)) for data in documents] == expected
            assert len(expected) == (8 if limit is None else limit)
        assert backend.shapes_reader(None, [("checkpoint", by_run, 3, None)])([{"run": "nobody"}]) == [[]]
        ids = backend.shapes_reader(None, [("checkpoint", by_run, 3, ("id",))])([{"run": "r"}])
        assert ids == [[{"id": record.id} for record in expected[:3]]]
        ranged = QueryShape(Checkpoint, (F.id >= Param("low")) & (F.id < Param("high")), "-id")
        both = backend.shapes_reader(None, [("checkpoint", by_run, 3, None), ("checkpoint", ranged, None, None)])
        assert both([{"run": "r"}, {"low": "c", "high": "d"}]) is None


def test_a_shapes_reader_binds_a_plain_mapping_each_call_and_a_read_only_one_once(tmp_path: Path) -> None:
    """A dict its caller changes between calls (a list's next page bound) reads what it holds at each call; a
    read-only mapping (`MappingProxyType`, a saver's kept latest read) given again reads its values again."""
    from types import MappingProxyType

    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.checkpoints.put([Checkpoint(id=f"c{n}", run_id="r", state={"n": n}) for n in range(6)])
        backend: Any = store.backend
        ranged = QueryShape(Checkpoint, (F.id >= Param("low")) & (F.id < Param("high")), "-id")
        reader = backend.shapes_reader(None, [("checkpoint", ranged, 2, ("id",))])
        values = {"low": "c0", "high": "c9"}
        assert reader([values]) == [[{"id": "c5"}, {"id": "c4"}]]
        values["high"] = "c4"
        assert reader([values]) == [[{"id": "c3"}, {"id": "c2"}]]
        kept = MappingProxyType({"low": "c1", "high": "c3"})
        assert reader([kept]) == reader([kept]) == [[{"id": "c2"}, {"id": "c1"}]]
        store.checkpoints.delete("c2")
        assert reader([kept]) == [[{"id": "c1"}]]
        assert reader([values]) == [[{"id": "c3"}, {"id": "c1"}]]


def test_flat_reads_over_several_shapes_without_a_reader_read_them_in_one_statement(tmp_path: Path) -> None:
    """A backend with `query_shapes_documents` but no `shapes_reader` (a plugin's) reads the saver's checkpoint and
    its writes through it, the same tuples; a closed store's flat list is refused as its `get_tuple` is."""
    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        saver = MnemostoreSaver(store)
        config = saver.put(_config("t", ""), empty_checkpoint(), {"source": "loop", "step": 0}, {})
        saver.put_writes(config, [("a", 1), ("__error__", "e")], "task")
        newer = saver.put(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        reads = [config, newer, _config("t", "")]
        expected = [saver.get_tuple(c) for c in reads], list(saver.list(_config("t", ""))), list(saver.list(None))
        calls: list[int] = []

        class TwoShapes:
            def __init__(self, backend: Any) -> None:
                self.query_shape_documents = backend.query_shape_documents

            def query_shapes_documents(self, tenant: str | None, several: Any) -> Any:
                calls.append(len(several))
                return store.backend.query_shapes_documents(tenant, several)  # type: ignore[attr-defined]

        saver._reads = FlatReads(store._async, TwoShapes(store.backend))
        assert ([saver.get_tuple(c) for c in reads], list(saver.list(_config("t", ""))),
                list(saver.list(None))) == expected
        assert calls == [2, 2, 2]
    with pytest.raises(StoreClosed):
        list(saver.list(_config("t", "")))
