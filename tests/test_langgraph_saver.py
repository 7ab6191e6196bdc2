"""`MnemostoreSaver` under LangGraph's own checkpointer conformance suite, and a real graph resumed in a new process."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import subprocess
import sys
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server
from tests.seed_kinds import forget_the_writes_kind, items_storage_made

import mnemostore
from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.capabilities import Capability
from mnemostore.core.registry import registry

pytest.importorskip("langgraph.graph", reason="needs the langgraph extra")
conformance = pytest.importorskip("langgraph.checkpoint.conformance", reason="needs langgraph-checkpoint-conformance")

from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

from mnemostore.integrations.langgraph import MnemostoreSaver  # noqa: E402


@pytest.fixture(autouse=True)
def _writes_kind_forgotten() -> Iterator[None]:
    """`MnemostoreSaver` registers its write kind; forgotten after each test (see `forget_the_writes_kind`)."""
    yield
    forget_the_writes_kind()

__all__ = ["postgres_server"]

BACKENDS = ["memory", "memory-no-ranges", "sqlite", "file", "postgres", "qdrant", "chroma"]


class NoRangesMemoryBackend(MemoryBackend):
    """The reference backend without range filters: the saver must not rely on id ranges."""

    name: ClassVar[str] = "memory-no-ranges"
    schemes: ClassVar[tuple[str, ...]] = ("memory-no-ranges",)
    capabilities: ClassVar[frozenset[Capability]] = MemoryBackend.capabilities - {Capability.FILTER_RANGE}


@pytest.fixture(params=BACKENDS)
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """A factory of URLs of fresh, empty stores on one backend."""
    if request.param == "postgres":
        server: PostgresTestServer = request.getfixturevalue("postgres_server")
        yield server.url
        return
    if request.param == "memory-no-ranges":
        registry.register(NoRangesMemoryBackend, replace=True)
        yield lambda: f"memory-no-ranges://{uuid.uuid4().hex}"
        registry.unregister(NoRangesMemoryBackend.name)
        return
    counter = iter(range(1_000_000))
    urls: dict[str, Callable[[], str]] = {
        "memory": lambda: f"memory://{uuid.uuid4().hex}",
        "sqlite": lambda: f"sqlite:///{tmp_path / f'store{next(counter)}.db'}",
        "file": lambda: f"file://{tmp_path / f'store{next(counter)}'}",
        "qdrant": lambda: f"qdrant://memory/{uuid.uuid4().hex}",
        "chroma": lambda: f"chroma://memory?prefix=s{uuid.uuid4().hex[:12]}_",
    }
    yield urls[request.param]


@pytest.mark.parametrize("facade", ["Store", "AsyncStore"])
@pytest.mark.parametrize("capability", sorted(c.value for c in ALL_CAPABILITIES))
def test_conformance(new_url: Callable[[], str], capability: str, facade: str) -> None:
    """LangGraph's suite awaits the async methods: over an AsyncStore (open_async), and over a sync
    Store (its backend awaited through a thread pool)."""
    @conformance.checkpointer_test(name="MnemostoreSaver")
    async def saver() -> AsyncGenerator[MnemostoreSaver, None]:
        if facade == "AsyncStore":
            async with await mnemostore.open_async(new_url()) as astore:
                yield MnemostoreSaver(astore)
            return
        store = mnemostore.open(new_url())
        try:
            yield MnemostoreSaver(store)
        finally:
            store.close()

    report = asyncio.run(conformance.validate(saver, capabilities={capability}))
    result = report.results[capability]
    assert result.detected, f"{capability} is not implemented"
    assert result.passed, "\n".join(result.failures)
    assert result.tests_passed > 0


def test_misuse_is_named(tmp_path: Path) -> None:
    """A closed Store, an AsyncStore's saver called sync on its own loop or built outside one, not a store."""
    config: Any = {"configurable": {"thread_id": "t"}}
    store = mnemostore.open(f"sqlite:///{tmp_path / 's.db'}")
    saver = MnemostoreSaver(store)
    store.close()
    with pytest.raises(mnemostore.StoreClosed):
        asyncio.run(saver.aget_tuple(config))
    with pytest.raises(mnemostore.StoreClosed):
        saver.get_tuple(config)

    async def scenario() -> tuple[mnemostore.AsyncStore, MnemostoreSaver]:
        astore = await mnemostore.open_async(f"sqlite:///{tmp_path / 'a.db'}")
        on_loop = MnemostoreSaver(astore)
        assert await on_loop.aget_tuple(config) is None
        with pytest.raises(mnemostore.MnemostoreError, match="thread other than the event loop"):
            on_loop.get_tuple(config)
        return astore, on_loop

    astore, on_loop = asyncio.run(scenario())
    with pytest.raises(mnemostore.MnemostoreError, match="event loop must be running"):
        on_loop.get_tuple(config)  # its loop is gone
    with pytest.raises(mnemostore.MnemostoreError, match="event loop must be running"):
        MnemostoreSaver(astore).get_tuple(config)  # built outside any loop
    astore.backend.close()
    with pytest.raises(mnemostore.ValidationError, match="takes a mnemostore Store or AsyncStore"):
        MnemostoreSaver("sqlite:///x.db")  # type: ignore[arg-type]


def test_import_mnemostore_stays_free_of_langgraph() -> None:
    code = ("import sys, mnemostore; mnemostore.open('memory://').checkpoints.save('r', {'a': 1}); "
            "print(sorted(m for m in sys.modules if m.startswith(('langgraph', 'langchain'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_records_follow_the_mapping(tmp_path: Path) -> None:
    """Thread -> run, namespace -> branch, parent config -> parent_ids; writes hang off their checkpoint."""
    from langgraph.checkpoint.base import empty_checkpoint

    from mnemostore.integrations.langgraph import mapping

    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        saver = MnemostoreSaver(store)
        first = saver.put({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
                          empty_checkpoint(), {"source": "input", "step": -1}, {})
        second_cp = empty_checkpoint()
        second = saver.put(first, second_cp, {"source": "loop", "step": 0}, {})
        saver.put({"configurable": {"thread_id": "t1", "checkpoint_ns": "main"}},
                  empty_checkpoint(), {"source": "loop", "step": 0}, {})
        saver.put_writes(second, [("ch", {"when": datetime(2024, 1, 2, tzinfo=UTC), "raw": b"\x00\xff"})], "task-1")

        root = store.checkpoints.history("t1", branch="main")
        assert [c.sequence for c in root] == [0, 1]
        assert root[1].parent_ids == [root[0].id]
        assert root[1].metadata == {"source": "loop", "step": 0}
        assert [c.branch_id for c in store.checkpoints.history("t1", branch="ns:main")] == ["ns:main"]
        [write] = store.collection("langgraph_write").all()
        assert write.thread == "t1" and write.owner == root[1].id and store.checkpoints.count() == 3

        found = saver.get_tuple({"configurable": {"thread_id": "t1"}})
        assert found is not None and found.checkpoint["id"] == second_cp["id"]
        assert found.pending_writes == [("task-1", "ch", {"when": datetime(2024, 1, 2, tzinfo=UTC),
                                                          "raw": b"\x00\xff"})]
        assert write.id.startswith(mapping.checkpoint_writes_prefix("t1", "", second_cp["id"]))  # an id range
        by_id = saver.get_tuple(second)
        assert by_id is not None and by_id.pending_writes == found.pending_writes
        everything = list(saver.list(None))
        assert len(everything) == 3  # pending writes never show up as checkpoints
        assert {t.config["configurable"]["checkpoint_ns"] for t in everything} == {"", "main"}
        saver.delete_thread("t1")
        assert store.checkpoints.count() == 0 and store.collection("langgraph_write").count() == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_saver_on_a_tenant_scoped_store_keeps_to_its_tenant(backend: str, tmp_path: Path,
                                                               request: pytest.FixtureRequest) -> None:
    """The saver's records skip the facade's pass only as built for the store's tenant: on a store scoped
    to a tenant they take `put`'s validation, which stamps it, and another tenant sees none of them."""
    from langgraph.checkpoint.base import empty_checkpoint

    url = (request.getfixturevalue("postgres_server").url() if backend == "postgres"
           else f"sqlite:///{tmp_path / 's.db'}")
    with mnemostore.open(url, tenant="acme") as store, mnemostore.open(url, tenant="other") as other:
        saver = MnemostoreSaver(store)
        config = saver.put({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}, empty_checkpoint(),
                           {"source": "input", "step": -1}, {})
        saver.put_writes(config, [("a", 1), ("b", 2), ("c", 3)], "task-1")
        found = saver.get_tuple(config)
        assert found is not None and found.pending_writes == [("task-1", "a", 1), ("task-1", "b", 2),
                                                              ("task-1", "c", 3)]
        writes = store.collection("langgraph_write")
        assert {record.tenant_id for record in [*store.checkpoints.all(), *writes.all()]} == {"acme"}
        assert store.checkpoints.count() == 1 and writes.count() == 1  # one record for the call's three writes
        assert other.checkpoints.count() == 0 and other.collection("langgraph_write").count() == 0
        theirs = MnemostoreSaver(other)
        assert theirs.get_tuple(config) is None and theirs.get_tuple({"configurable": {"thread_id": "t1"}}) is None
        assert list(theirs.list(config)) == [] and len(list(saver.list(config))) == 1

        async def awaited() -> None:  # the async methods' flat reads (natively on postgres) keep to it too
            async with await mnemostore.open_async(url, tenant="acme") as mine, \
                    await mnemostore.open_async(url, tenant="other") as others:
                ours, theirs = MnemostoreSaver(mine), MnemostoreSaver(others)
                got = await ours.aget_tuple(config)
                assert got is not None and got.pending_writes == found.pending_writes
                assert await theirs.aget_tuple(config) is None
                assert await theirs.aget_tuple({"configurable": {"thread_id": "t1"}}) is None
                assert [item async for item in theirs.alist(config)] == []
                assert len([item async for item in ours.alist(config)]) == 1

        asyncio.run(awaited())


def test_records_put_as_built_are_validated_when_they_are_not_what_that_path_takes(tmp_path: Path) -> None:
    """`_put_built` writes the records it can take as they are; a batch it cannot (a repeated id, another
    tenant) gets `put`'s validation and its clear error, with nothing written."""
    from mnemostore.core.errors import ValidationError
    from mnemostore.core.records import Checkpoint

    with mnemostore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        checkpoints = store._async.checkpoints
        first, second = Checkpoint(id="a", run_id="r"), Checkpoint(id="b", run_id="r")
        store._run(checkpoints._put_built([first, second], keep_existing=True))
        assert [record.id for record in store.checkpoints.all(order_by="id")] == ["a", "b"]
        for batch, field in (([Checkpoint(id="c", run_id="r"), Checkpoint(id="c", run_id="r")], "records[1].id"),
                             ([Checkpoint(id="d", run_id="r", tenant_id="someone")], "records[0].tenant_id")):
            with pytest.raises(ValidationError) as refused:
                store._run(checkpoints._put_built(batch))
            assert refused.value.errors[0][0] == field
        assert store.checkpoints.count() == 2


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_sync_writes_over_a_sync_store_call_the_backend_straight_and_keep_the_facade_checks(
        backend: str, tmp_path: Path) -> None:
    """Over a sync `Store`, `put` and `put_writes` (and `_put_built`) call the backend with no coroutine
    to drive; records that need `put`'s validation, and a closed store, still get the facade's errors."""
    from langgraph.checkpoint.base import empty_checkpoint

    from mnemostore.core.errors import StoreClosed, ValidationError
    from mnemostore.core.records import Checkpoint

    url = f"memory://{uuid.uuid4().hex}" if backend == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    store = mnemostore.open(url)
    saver = MnemostoreSaver(store)
    saver.setup()  # the writes' kind declared in the store: its writes need no coroutine either
    driven: list[Any] = []
    drive = store.checkpoints._run
    store.checkpoints._run = lambda coro: (driven.append(coro), drive(coro))[1]  # type: ignore[method-assign]
    store.collection("langgraph_write")._run = store.checkpoints._run  # type: ignore[method-assign]
    config = saver.put({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}, empty_checkpoint(),
                       {"source": "input", "step": -1}, {})
    saver.put_writes(config, [("a", 1), ("b", 2)], "task-1")
    store.checkpoints._put_built([Checkpoint(id="plain", run_id="r")])
    assert driven == []
    with pytest.raises(ValidationError) as refused:  # another tenant's record: `put`'s validation names it
        store.checkpoints._put_built([Checkpoint(id="theirs", run_id="r", tenant_id="someone")])
    assert refused.value.errors[0][0] == "records[0].tenant_id" and len(driven) == 1
    found = saver.get_tuple(config)
    assert found is not None and found.pending_writes == [("task-1", "a", 1), ("task-1", "b", 2)]
    assert {record.id for record in store.checkpoints.all()} >= {"plain"} and store.checkpoints.count() == 2
    assert store.collection("langgraph_write").count() == 1
    store.close()
    with pytest.raises(StoreClosed):
        saver.put_writes(config, [("c", 3)], "task-2")


def moved_over(store: mnemostore.Store) -> int:
    """Run the move of formats 1-4 write records to the write kind (`mnemostore.0003_langgraph_write_kind`)
    on an open store, as an upgrade's migration does: the writes older code left are then read."""
    from mnemostore.migrations.langgraph_writes import LANGGRAPH_WRITES_MIGRATION
    from mnemostore.migrations.progress import Silent
    from mnemostore.migrations.records import run_moves

    return run_moves(store.backend, LANGGRAPH_WRITES_MIGRATION, "up", lambda: None, Silent())


def as_format_4(write: Any) -> Any:
    """A `LangGraphWrite` as writes format 4 stored it: a checkpoint record on the writes branch."""
    from mnemostore.migrations.langgraph_writes import _to_checkpoint

    return _to_checkpoint(write)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("facade", ["Store", "AsyncStore"])
def test_the_first_put_makes_the_writes_storage(backend: str, facade: str, tmp_path: Path,
                                                request: pytest.FixtureRequest) -> None:
    """A saver's first put makes its writes' table (as `setup` does), so its reads find one before any
    `put_writes`: a read of a kind with no table asks the engine for it again every time."""
    from langgraph.checkpoint.base import empty_checkpoint

    url = (request.getfixturevalue("postgres_server").url() + "&schema=s" + uuid.uuid4().hex[:8]
           if backend == "postgres" else f"sqlite:///{tmp_path / 's.db'}")
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    async def put_async() -> None:
        async with await mnemostore.open_async(url) as store:
            saver = MnemostoreSaver(store)
            await saver.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})

    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    mnemostore.register_kind(LangGraphWrite)  # to ask for its storage before a saver registers it
    with mnemostore.open(url) as store:
        assert items_storage_made(store.backend, None, "langgraph_write") is False
        if facade == "Store":
            MnemostoreSaver(store).put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        else:
            asyncio.run(put_async())
    with mnemostore.open(url) as store:
        assert items_storage_made(store.backend, None, "langgraph_write") is True


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_format_1_checkpoints_keep_their_writes(backend: str, tmp_path: Path) -> None:
    """A checkpoint stored before writes were keyed under its id still finds them once they are moved, and
    a retried write is read as the first one it was (the move keys it as format 5 keys that write)."""
    from langgraph.checkpoint.base import empty_checkpoint

    from mnemostore.integrations.langgraph import mapping
    from mnemostore.kinds.langgraph_ids import digest

    url = "memory://" + uuid.uuid4().hex if backend == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    with mnemostore.open(url) as store:
        saver = MnemostoreSaver(store)
        checkpoint = empty_checkpoint()
        config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint,
                           {"source": "loop", "step": 0}, {})
        owner = store.checkpoints[mapping.checkpoint_record_id("t", "", checkpoint["id"])]
        store.checkpoints.put([owner.model_copy(update={"state": {**owner.state, "format": 1}})])
        legacy, = mapping.write_records(saver.serde, "t", "", checkpoint["id"], "task", "", [(0, "ch", "old")])
        legacy_id = f"lgw.{digest('t', '', checkpoint['id'], 'task', '0')}"
        store.checkpoints.put([as_format_2(as_format_4(legacy)).model_copy(update={"id": legacy_id})])
        assert moved_over(store) == 1

        saver.put_writes(config, [("ch", "retried")], "task")  # a regular write already stored: kept

        found = saver.get_tuple(config)
        assert found is not None and found.pending_writes == [("task", "ch", "old")]
        assert [t.pending_writes for t in saver.list(None)] == [[("task", "ch", "old")]]


def as_format_2(record: Any) -> Any:
    """A format-3 record (or a format-4 write record of one write) as format 2 stored it: values as
    [type, base64] in `state`, no payload."""
    from mnemostore.core.base64text import to_text

    state = dict(record.state)
    if "writes" in state:
        [[state["idx"], state["channel"], state["type"], _]] = state.pop("writes")
    state["format"] = 2
    state["value" if "channel" in state else "checkpoint"] = [state.pop("type"), to_text(record.payload)]
    return record.model_copy(update={"state": state, "payload": None})


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_format_2_records_read_back_beside_format_3(backend: str, tmp_path: Path) -> None:
    """Checkpoints and writes stored by format 2 (values as base64 in `state`) give the same tuples
    as format 3's payloads (and, once moved, format 4's writes as format 5's), by id, latest and list
    (metadata filter included)."""
    from langgraph.checkpoint.base import empty_checkpoint

    from mnemostore.integrations.langgraph import mapping

    url = "memory://" + uuid.uuid4().hex if backend == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    with mnemostore.open(url) as store:
        saver = MnemostoreSaver(store)
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for step in range(3):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"blob": bytes(range(256)), "step": step}
            checkpoint["channel_versions"] = {"blob": f"{step + 1:032}", "step": f"{step + 1:032}"}
            config = saver.put(config, checkpoint, {"source": "loop", "step": step, "raw": b"\xff"}, {})
            saver.put_writes(config, [("ch", {"n": step, "raw": b"\x00"})], f"task-{step}")
        stored = store.checkpoints.all(order_by="id")
        writes = store.collection("langgraph_write").all(order_by="id")
        assert all(r.payload is not None and r.state["format"] == mapping.FORMAT for r in stored)
        assert (mapping.FORMAT, mapping.WRITES_FORMAT) == (4, 5)
        assert all(len(str(r.state)) < 400 for r in stored)  # the serialized values are not in the state
        assert all(len(str(w.writes)) < 400 for w in writes)
        before = list(saver.list(None))
        latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
        first = saver.get_tuple(before[-1].config)
        store.checkpoints.put([as_format_2(r) for i, r in enumerate(stored) if i % 2 == 0])  # formats mixed
        store.collection("langgraph_write").delete(where={})
        store.checkpoints.put([as_format_2(as_format_4(w)) if i % 2 == 0 else as_format_4(w)
                               for i, w in enumerate(writes)])
        assert moved_over(store) == len(writes)
        assert {r.payload is None for r in store.checkpoints.all()} == {True, False}
        assert list(saver.list(None)) == before
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) == latest
        assert saver.get_tuple(before[-1].config) == first
        assert [t.metadata["step"] for t in saver.list(None, filter={"step": 1, "raw": b"\xff"})] == [1]



_metadata_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=4) | st.binary(max_size=2),
    lambda children: st.lists(children, max_size=2) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=3), children, max_size=2),
    max_leaves=5)
"""Metadata values: JSON (kept only as the record's metadata since format 4) and not (ints past 64 bits, infinite
floats, bytes, tuples, text JSON cannot hold: also kept in `state`)."""


def _typed(value: Any) -> Any:
    """`value` with every part's type beside it: equal only if the types are equal too (1 is not 1.0 nor True)."""
    if isinstance(value, dict):
        return "dict", sorted(((key, _typed(item)) for key, item in value.items()), key=repr)
    if isinstance(value, list | tuple):
        return type(value).__name__, [_typed(item) for item in value]
    return type(value).__name__, value


@settings(max_examples=40, deadline=None)
@given(extra=st.dictionaries(st.text(max_size=5), _metadata_values, max_size=3),
       backend=st.sampled_from(["memory", "sqlite"]))
def test_metadata_reads_back_exactly_from_either_place(extra: dict[str, Any], backend: str) -> None:
    """Metadata reads back as LangGraph's serializer gives it back, types included, whether it is all JSON
    (format 4: only the record's metadata) or not (also in `state`), by id, latest, list with a filter,
    flat and through the collection; and a checkpoint as format 3 stored it (metadata always in `state`)
    reads back the same."""
    import tempfile

    from langgraph.checkpoint.base import empty_checkpoint, get_serializable_checkpoint_metadata

    from mnemostore.integrations.langgraph import mapping

    with tempfile.TemporaryDirectory() as directory:
        url = "memory://" + uuid.uuid4().hex if backend == "memory" else f"sqlite:///{directory}/s.db"
        with mnemostore.open(url) as store:
            saver = MnemostoreSaver(store)
            start: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            metadata: Any = {"source": "loop", "step": 1, "parents": {}, **extra}
            config = saver.put(start, empty_checkpoint(), metadata, {})
            expected = _typed(saver.serde.loads_typed(saver.serde.dumps_typed(
                dict(get_serializable_checkpoint_metadata(start, metadata)))))

            def read() -> list[Any]:
                latest: Any = {"configurable": {"thread_id": "t"}}
                found = [saver.get_tuple(config), saver.get_tuple(latest), asyncio.run(saver.aget_tuple(config)),
                         *saver.list(None, filter={"source": "loop"})]
                return [_typed(item.metadata) for item in found if item is not None]

            assert read() == [expected] * 4
            stored, = store.checkpoints.all()
            given = dict(get_serializable_checkpoint_metadata(start, metadata))  # what the saver is handed: no NUL
            assert ("metadata" in stored.state) == (len(mapping.json_metadata(given)) != len(given))
            state = {**stored.state, "format": 3, "metadata": mapping.encode(saver.serde, mapping.metadata_of(
                saver.serde, stored))}
            store.checkpoints.put([stored.model_copy(update={"state": state})])  # as format 3 wrote it
            assert read() == [expected] * 4


# A real graph: plan -> review (interrupts for approval) -> finish, resumed in another process.

class State(TypedDict):
    steps: Annotated[list[str], operator.add]
    started: datetime
    blob: bytes
    approved: bool


def build_graph(store: mnemostore.Store) -> Any:
    from langgraph.types import interrupt

    def plan(state: State) -> dict[str, Any]:
        return {"steps": ["plan"], "started": datetime(2025, 5, 6, 7, 8, tzinfo=UTC), "blob": b"\x00\x01\xfe"}

    def review(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve the plan?", "steps": state["steps"]})
        return {"steps": ["review"], "approved": answer == "yes"}

    def finish(state: State) -> dict[str, Any]:
        return {"steps": ["finish"]}

    return compiled(store, plan, review, finish)


def compiled(store: mnemostore.Store | mnemostore.AsyncStore, *nodes: Callable[[State], Any]) -> Any:
    """plan -> review -> finish, checkpointed by a MnemostoreSaver over `store`."""
    from langgraph.graph import END, START, StateGraph

    plan, review, finish = nodes
    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("review", review)
    graph.add_node("finish", finish)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "review")
    graph.add_edge("review", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=MnemostoreSaver(store))


def _child(command: str, url: str, thread_id: str) -> None:
    """Run in a subprocess: `start` runs until the interrupt, `resume` answers it and finishes."""
    from langgraph.types import Command

    config = {"configurable": {"thread_id": thread_id}}
    with mnemostore.open(url) as store:
        graph = build_graph(store)
        if command == "start":
            graph.invoke({"steps": []}, config)
            snapshot = graph.get_state(config)
            assert snapshot.next == ("review",), snapshot.next
            print(snapshot.interrupts[0].value["question"])
        else:
            result = graph.invoke(Command(resume="yes"), config)
            assert result["steps"] == ["plan", "review", "finish"], result
            assert result["approved"] is True
            assert result["started"] == datetime(2025, 5, 6, 7, 8, tzinfo=UTC)
            assert result["blob"] == b"\x00\x01\xfe"
            print("finished")


def _run_child(command: str, url: str, thread_id: str) -> str:
    out = subprocess.run([sys.executable, "-m", "tests.test_langgraph_saver", command, url, thread_id],
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_graph_interrupt_and_resume_in_a_new_process(backend: str, tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    if backend == "postgres":
        url = request.getfixturevalue("postgres_server").url()
    else:
        url = f"sqlite:///{tmp_path / 'graph.db'}"
    thread_id = f"thread-{uuid.uuid4().hex[:8]}"

    assert _run_child("start", url, thread_id) == "approve the plan?"
    with mnemostore.open(url) as store:
        saver = MnemostoreSaver(store)
        paused = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        assert paused is not None
        assert any(channel == "__interrupt__" for _, channel, _ in paused.pending_writes or [])
    assert _run_child("resume", url, thread_id) == "finished"

    with mnemostore.open(url) as store:
        history = list(MnemostoreSaver(store).list({"configurable": {"thread_id": thread_id}}))
        ids = [t.checkpoint["id"] for t in history]
        assert ids == sorted(ids, reverse=True)
        assert history[0].metadata["step"] == max(t.metadata["step"] for t in history)
        assert all(c.run_id == thread_id for c in store.checkpoints.history(thread_id, branch="main"))


# The same graph with async nodes, run by ainvoke and astream on an AsyncStore.

def build_async_graph(store: mnemostore.AsyncStore) -> Any:
    from langgraph.types import interrupt

    async def plan(state: State) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"steps": ["plan"], "started": datetime(2025, 5, 6, 7, 8, tzinfo=UTC), "blob": b"\x00\x01\xfe"}

    async def review(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve the plan?", "steps": state["steps"]})
        return {"steps": ["review"], "approved": answer == "yes"}

    async def finish(state: State) -> dict[str, Any]:
        return {"steps": ["finish"]}

    return compiled(store, plan, review, finish)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_async_graph_interrupts_and_resumes(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """ainvoke stops at the interrupt and astream resumes it (and the other way round on a second thread);
    the resumed state and the stored history are LangGraph's, read back through a sync Store too."""
    from langgraph.types import Command

    url = request.getfixturevalue("postgres_server").url() if backend == "postgres" else \
        f"sqlite:///{tmp_path / 'graph.db'}"
    first: Any = {"configurable": {"thread_id": "async-1"}}
    second: Any = {"configurable": {"thread_id": "async-2"}}

    async def scenario() -> list[Any]:
        async with await mnemostore.open_async(url) as store:
            graph = build_async_graph(store)
            paused = await graph.ainvoke({"steps": []}, first)
            assert paused["__interrupt__"][0].value == {"question": "approve the plan?", "steps": ["plan"]}
            assert (await graph.aget_state(first)).next == ("review",)
            updates = [chunk async for chunk in graph.astream(Command(resume="yes"), first, stream_mode="updates")]
            assert [list(chunk) for chunk in updates] == [["review"], ["finish"]]

            streamed = [chunk async for chunk in graph.astream({"steps": []}, second, stream_mode="updates")]
            assert [list(chunk) for chunk in streamed] == [["plan"], ["__interrupt__"]]
            resumed = await graph.ainvoke(Command(resume="no"), second)
            assert resumed["steps"] == ["plan", "review", "finish"] and resumed["approved"] is False

            final = await graph.aget_state(first)
            assert final.next == ()
            assert final.values == {"steps": ["plan", "review", "finish"], "approved": True,
                                    "started": datetime(2025, 5, 6, 7, 8, tzinfo=UTC), "blob": b"\x00\x01\xfe"}
            history = [snapshot async for snapshot in graph.aget_state_history(first)]
            assert await asyncio.to_thread(graph.get_state, first) == final  # sync, from another thread
            with pytest.raises(mnemostore.MnemostoreError, match="thread other than the event loop"):
                graph.get_state(first)  # sync, on the loop that must serve it
            return history

    history = asyncio.run(scenario())
    assert [snapshot.metadata["step"] for snapshot in history] == [3, 2, 1, 0, -1]
    assert [snapshot.next for snapshot in history] == [(), ("finish",), ("review",), ("plan",), ("__start__",)]
    assert history[2].tasks[0].interrupts[0].value["question"] == "approve the plan?"
    with mnemostore.open(url) as store:  # stored: the same history through a sync Store
        saver = MnemostoreSaver(store)
        listed = list(saver.list(first))
        assert [t.checkpoint["id"] for t in listed] == [s.config["configurable"]["checkpoint_id"] for s in history]
        records = store.checkpoints.history("async-1", branch="main")
        assert [r.sequence for r in records] == [0, 1, 2, 3, 4]
        assert all(child.parent_ids == [parent.id] for parent, child in itertools.pairwise(records))
        assert store.checkpoints.count({"run_id": "async-2", "branch_id": "main"}) == 5


if __name__ == "__main__":
    _child(*sys.argv[1:4])


texts = st.text(max_size=12) | st.sampled_from(["", "a" * 520, "nul\x00", "lone \ud800"])


@settings(max_examples=60, deadline=None)
@given(thread_id=texts, ns=texts, checkpoint_id=texts, task_id=texts, task_path=texts,
       writes=st.lists(st.tuples(st.integers(-3, 3) | st.just(2**63), texts, st.sampled_from([{"v": 1}, b"", "x"])),
                       min_size=1, max_size=3))
def test_write_records_equal_what_validation_builds_or_fail_as_it_does(
        thread_id: str, ns: str, checkpoint_id: str, task_id: str, task_path: str,
        writes: list[tuple[int, str, Any]]) -> None:
    """`write_records` skips pydantic's pass for inputs it checked itself: its records (one for the
    regular writes, one for the special ones) must equal `LangGraphWrite(...)`'s field for field, and
    inputs `LangGraphWrite(...)` refuses must be refused too."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from mnemostore.core.errors import ValidationError
    from mnemostore.core.jsonvalues import check_text
    from mnemostore.integrations.langgraph import mapping
    from mnemostore.kinds.langgraph_ids import checkpoint_writes_prefix, write_id
    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    serde = JsonPlusSerializer()
    try:
        built = mapping.write_records(serde, thread_id, ns, checkpoint_id, task_id, task_path, writes)
    except ValidationError:
        built = None
    reference: list[LangGraphWrite] | None = None
    texts = (thread_id, ns, checkpoint_id, task_id, task_path, *(channel for _, channel, _ in writes))
    if all(check_text(text) is None for text in texts):  # else refused before any id is made of them
        owner = mapping.checkpoint_record_id(thread_id, ns, checkpoint_id)
        reference = []
        for group in ([w for w in writes if w[0] >= 0], [w for w in writes if w[0] < 0]):
            if not group:
                continue
            typed = [(idx, channel, *serde.dumps_typed(value)) for idx, channel, value in group]
            try:
                reference.append(LangGraphWrite(
                    id=write_id(checkpoint_writes_prefix(thread_id, ns, checkpoint_id), task_id, [w[0] for w in group]),
                    thread=thread_id, owner=owner, checkpoint_ns=ns, checkpoint_id=checkpoint_id, task_id=task_id,
                    task_path=task_path, writes=[[idx, channel, kind, len(data)] for idx, channel, kind, data in typed],
                    payload=b"".join(data for *_, data in typed)))
            except ValidationError:
                reference = None
                break
    assert (built is None) == (reference is None)
    if built is not None and reference is not None:
        assert len(built) == len(reference)
        for record, expected in zip(built, reference, strict=True):
            mine, theirs = dict(record.__dict__), dict(expected.__dict__)
            for stamp in ("created_at", "updated_at"):
                mine.pop(stamp), theirs.pop(stamp)
            assert mine == theirs
            assert record.created_at == record.updated_at and record.created_at.tzinfo is not None
            assert record.__pydantic_fields_set__ >= expected.__pydantic_fields_set__


serializable_texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)  # what msgpack takes
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | serializable_texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(serializable_texts, inner, max_size=3), max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(thread_id=texts, ns=texts, checkpoint_id=texts, parent_id=st.none() | texts,
       metadata=st.dictionaries(serializable_texts, json_values, max_size=4),
       ts=st.sampled_from(["2026-11-26T10:00:00+00:00", "2026-11-26T10:00:00+02:00", "2026-11-26T10:00:00", "x"]))
def test_a_checkpoint_record_is_what_validation_makes_of_its_fields(
        thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None, metadata: dict[str, Any], ts: str) -> None:
    """`checkpoint_record` skips pydantic's pass for inputs it checked itself: validating the fields
    of what it built gives the same record (and its refusals are ValidationErrors)."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from mnemostore.core.errors import ValidationError
    from mnemostore.core.records import Checkpoint
    from mnemostore.integrations.langgraph import mapping

    checkpoint = {**empty_checkpoint(), "id": checkpoint_id, "ts": ts}
    try:
        built = mapping.checkpoint_record(JsonPlusSerializer(), thread_id, ns, parent_id, checkpoint,
                                          {**metadata, "step": 2})
    except ValidationError:
        return
    revalidated = Checkpoint(**{name: value for name, value in built.__dict__.items() if name != "state_hash"})
    assert revalidated.__dict__ == built.__dict__


def _old_saver_put_writes(saver: MnemostoreSaver, config: Any, writes: list[tuple[str, Any]], task_id: str,
                          task_path: str) -> None:
    """`put_writes` as format 3 stored it (a record per write, keyed by (task, idx): a regular one kept
    if stored, a special one replaced), then moved to the write kind as an upgrade moves it (`moved_over`),
    so tests hold stores written before format 5."""
    from langgraph.checkpoint.base import WRITES_IDX_MAP

    from mnemostore.integrations.langgraph import mapping

    conf = config["configurable"]
    store = saver.store
    assert isinstance(store, mnemostore.Store)
    for position, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, position)
        record, = mapping.write_records(saver.serde, conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"],
                                        task_id, task_path, [(idx, channel, value)])
        moved = store.collection("langgraph_write")
        if moved.get(record.id) is not None:
            if idx >= 0:
                continue
            moved.delete(record.id)  # replaced, as format 3 replaced it (a move keeps what its target holds)
        state = dict(as_format_4(record).state)
        [[state["idx"], state["channel"], state["type"], _]] = state.pop("writes")
        store.checkpoints.put([as_format_4(record).model_copy(update={"state": {**state, "format": 3}})])
        moved_over(store)


_SPECIAL = ["__error__", "__interrupt__", "__resume__", "__scheduled__"]
_calls = st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.sampled_from(["", "p"]),
                            st.lists(st.tuples(st.sampled_from(["a", "b", *_SPECIAL]), st.integers(0, 3)),
                                     min_size=1, max_size=3),
                            st.booleans()),
                  min_size=1, max_size=6)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "file"])
@settings(max_examples=40, deadline=None)
@given(calls=_calls)
def test_pending_writes_are_what_langgraphs_savers_give(backend: str, calls: list[Any]) -> None:
    """Any sequence of `put_writes` calls (retries, special channels, a task writing more than once,
    some stored by format 3 before an upgrade) reads back, after each call, as LangGraph's InMemorySaver
    gives it, and in SqliteSaver's order and values while no call mixes special and regular channels
    (where SqliteSaver keeps the whole call if one of its writes is stored); and so does a copy of the thread."""
    import sqlite3
    import tempfile

    from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    assert set(_SPECIAL) == set(WRITES_IDX_MAP)
    with contextlib.ExitStack() as stack:
        if backend == "memory":
            url = f"memory://{uuid.uuid4().hex}"
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite:///{directory}/s.db" if backend == "sqlite" else f"file://{directory}/s"
        ours = MnemostoreSaver(stack.enter_context(mnemostore.open(url)))
        sqlite_saver = SqliteSaver(stack.enter_context(contextlib.closing(
            sqlite3.connect(":memory:", check_same_thread=False))))
        savers: list[Any] = [ours, InMemorySaver(), sqlite_saver]
        checkpoint = empty_checkpoint()
        configs = [saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint,
                             {"source": "loop", "step": 0}, {}) for saver in savers]
        mixed = False
        for task_id, task_path, writes, as_format_3 in calls:
            mixed = mixed or len({channel in WRITES_IDX_MAP for channel, _ in writes}) == 2
            for saver, config in zip(savers, configs, strict=True):
                if saver is ours and as_format_3:
                    _old_saver_put_writes(saver, config, writes, task_id, task_path)
                else:
                    saver.put_writes(config, writes, task_id, task_path)
            found = [saver.get_tuple(config).pending_writes for saver, config in zip(savers, configs, strict=True)]
            assert sorted(found[0], key=repr) == sorted(found[1], key=repr)
            if not mixed:
                assert found[0] == found[2]
            assert ours.get_tuple({"configurable": {"thread_id": "t"}}).pending_writes == found[0]
            assert next(iter(ours.list(None))).pending_writes == found[0]
        ours.copy_thread("t", "copy")  # the copy's records keep their written order
        assert ours.get_tuple({"configurable": {"thread_id": "copy"}}).pending_writes == found[0]


def test_values_a_serializer_gives_as_other_bytes_like_types_read_back() -> None:
    """A serializer may return a bytes subclass, a bytearray or a memoryview: each value of a call is
    kept whole beside the others (its size is that of the bytes stored)."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Subclass(bytes):
        pass

    class Serde(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, Any]:
            kind, data = super().dumps_typed(obj)
            wrap: dict[Any, Callable[[bytes], Any]] = {"sub": Subclass, "view": memoryview, "array": bytearray}
            return kind, (wrap.get(obj, bytes) if type(obj) is str else bytes)(data)

    with mnemostore.open(f"memory://{uuid.uuid4().hex}") as store:
        saver = MnemostoreSaver(store, serde=Serde())
        config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(),
                           {"source": "loop", "step": 0}, {})
        saver.put_writes(config, [("a", "sub"), ("b", "view"), ("c", "array"), ("d", 1)], "task")
        found = saver.get_tuple(config)
        assert found is not None
        assert found.pending_writes == [("task", "a", "sub"), ("task", "b", "view"), ("task", "c", "array"),
                                        ("task", "d", 1)]
