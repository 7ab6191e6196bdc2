"""`mnemostore.0003_langgraph_write_kind`: LangGraph pending writes (saver writes formats 1 to 4, checkpoint
records on the `langgraph:writes` branch) move to their own kind, `langgraph_write`, and back.

Old records are built here as each format wrote them (not through `MnemostoreSaver`), so these tests hold
whatever the saver writes today."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.core.base64text import to_text
from mnemostore.core.kinds import kinds
from mnemostore.core.records import Checkpoint, Embedding, Record, hash_exact_state
from mnemostore.kinds.langgraph_ids import (
    LEGACY_WRITES_BRANCH,
    LEGACY_WRITES_INFIX,
    checkpoint_record_id,
    checkpoint_writes_prefix,
    digest,
    write_id,
)
from mnemostore.migrations.langgraph_writes import (
    LANGGRAPH_WRITES_MIGRATION,
    LANGGRAPH_WRITES_MIGRATION_ID,
    _to_checkpoint,
    _to_write,
)

__all__ = ["postgres_server"]

KIND = "langgraph_write"
THEN = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

Write = tuple[int, str, str, bytes]
"""(idx, channel, value type, value bytes) of one pending write."""


@pytest.fixture(autouse=True)
def _writes_kind_forgotten() -> Iterator[None]:
    """Importing the write kind's module (the move does, once per process) registers it: forgotten after each
    test that did, so other modules' copies and listings do not see it."""
    registered = KIND in kinds.applications()
    yield
    if not registered:
        kinds.unregister(KIND)


def owner_of(thread: str, ns: str, checkpoint_id: str) -> str:
    """A checkpoint's record id, as the saver makes it."""
    return checkpoint_record_id(thread, ns, checkpoint_id)


def format_4(thread: str, ns: str, checkpoint_id: str, task_id: str, task_path: str, writes: Sequence[Write],
             **shared: Any) -> Checkpoint:
    """A task's writes of one call as format 4 stored them: one record, the values one after another in `payload`."""
    owner = owner_of(thread, ns, checkpoint_id)
    state = {"format": 4, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id, "task_id": task_id,
             "task_path": task_path, "writes": [[idx, channel, kind, len(value)]
                                                   for idx, channel, kind, value in writes]}
    idxs = ",".join(str(write[0]) for write in writes)
    return Checkpoint(id=f"{owner}{LEGACY_WRITES_INFIX}{digest(task_id, idxs)}", run_id=thread, node_id=owner,
                      parent_ids=[owner], branch_id=LEGACY_WRITES_BRANCH, state=state,
                      payload=b"".join(write[3] for write in writes),
                      **{"created_at": THEN, "updated_at": THEN, **shared})


def format_3(thread: str, ns: str, checkpoint_id: str, task_id: str, task_path: str, write: Write,
             **shared: Any) -> Checkpoint:
    """One write as format 3 stored it: its own record (the id format 4 gives a call of that write alone),
    its value in `payload`, its idx, channel and type in `state`."""
    record = format_4(thread, ns, checkpoint_id, task_id, task_path, [write], **shared)
    idx, channel, kind, _ = write
    state = {"format": 3, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id, "task_id": task_id,
             "task_path": task_path, "idx": idx, "channel": channel, "type": kind}
    return Checkpoint(**{**record.__dict__, "state": state, "state_hash": ""})


def format_2(thread: str, ns: str, checkpoint_id: str, task_id: str, task_path: str, write: Write,
             **shared: Any) -> Checkpoint:
    """One write as format 2 stored it: format 3's id, no payload, the value as [type, base64] in `state`."""
    record = format_3(thread, ns, checkpoint_id, task_id, task_path, write, **shared)
    state = {**record.state, "format": 2, "value": [write[2], to_text(write[3])]}
    del state["type"]
    return Checkpoint(**{**record.__dict__, "state": state, "state_hash": "", "payload": None})


def format_1(thread: str, ns: str, checkpoint_id: str, task_id: str, task_path: str, write: Write,
             **shared: Any) -> Checkpoint:
    """One write as format 1 stored it: format 2's state, an id hashed from the thread, namespace,
    checkpoint, task and idx."""
    record = format_2(thread, ns, checkpoint_id, task_id, task_path, write, **shared)
    ident = f"lgw.{digest(thread, ns, checkpoint_id, task_id, str(write[0]))}"
    return Checkpoint(**{**record.__dict__, "id": ident, "state": {**record.state, "format": 1}, "state_hash": ""})


def checkpoint(thread: str, ns: str, checkpoint_id: str) -> Checkpoint:
    """A checkpoint record (not a write): it stays where it is."""
    return Checkpoint(id=owner_of(thread, ns, checkpoint_id), run_id=thread, branch_id="main" if not ns else f"ns:{ns}",
                      state={"format": 4, "thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id,
                             "parent_checkpoint_id": None, "type": "msgpack"},
                      payload=b"\x80", created_at=THEN, updated_at=THEN)


def same(found: Record, expected: Record) -> None:
    """Equal records, a state's keys in the same order."""
    assert found == expected
    assert found.model_dump() == expected.model_dump()
    if isinstance(found, Checkpoint) and isinstance(expected, Checkpoint):
        assert list(found.state) == list(expected.state)


# the move of one record --------------------------------------------------------------------------------------

_characters = st.characters(codec="utf-8", exclude_characters="\x00")
"""What a stored text may hold: no lone surrogate, no NUL."""
_texts = st.text(_characters, max_size=6)
_names = st.text(_characters, min_size=1, max_size=6)
_writes = st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), _texts,
                             st.sampled_from(["json", "msgpack", "bytes", "null", "pickle"]) | _names,
                             st.binary(max_size=6)),
                   min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(thread=_names, ns=_texts, checkpoint_id=_texts, task_id=_texts, task_path=_texts, writes=_writes,
       tenant=st.none() | _names, agent=st.none() | _texts, project=st.none() | _texts,
       metadata=st.dictionaries(_texts, st.integers(-5, 5) | _texts, max_size=2),
       created_at=st.datetimes(timezones=st.just(UTC)), updated_at=st.datetimes(timezones=st.just(UTC)))
def test_a_format_4_record_moves_and_back_exactly_and_older_formats_move_as_it_does(
        thread: str, ns: str, checkpoint_id: str, task_id: str, task_path: str, writes: list[Write],
        tenant: str | None, agent: str | None, project: str | None, metadata: dict[str, Any],
        created_at: datetime, updated_at: datetime) -> None:
    """A format-4 write record becomes the `LangGraphWrite` validation makes of its fields (its id in its
    checkpoint's writes range, its writes and values as they were, its shared fields kept) and moves back
    to the very record it was; a write as formats 1 to 3 kept it becomes the record format 4 of that
    write alone becomes."""
    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    shared: dict[str, Any] = {"tenant_id": tenant, "agent": agent, "project_id": project, "metadata": metadata,
                              "created_at": created_at, "updated_at": updated_at}
    old = format_4(thread, ns, checkpoint_id, task_id, task_path, writes, **shared)
    moved = _to_write(old)
    assert isinstance(moved, LangGraphWrite)
    same(moved, LangGraphWrite(**moved.__dict__))
    assert moved.id == write_id(checkpoint_writes_prefix(thread, ns, checkpoint_id), task_id, [w[0] for w in writes])
    assert (moved.thread, moved.owner, moved.checkpoint_ns, moved.checkpoint_id, moved.task_id, moved.task_path) == (
        thread, owner_of(thread, ns, checkpoint_id), ns, checkpoint_id, task_id, task_path)
    assert moved.writes == [[idx, channel, kind, len(value)] for idx, channel, kind, value in writes]
    assert moved.payload == b"".join(w[3] for w in writes)
    assert (moved.tenant_id, moved.agent, moved.project_id, moved.metadata, moved.created_at, moved.updated_at) == (
        tenant, agent, project, metadata, created_at, updated_at)
    back = _to_checkpoint(moved)
    assert isinstance(back, Checkpoint)
    assert [list(r.__dict__) for r in (moved, back)] == [list(type(r).model_fields) for r in (moved, back)]
    same(back, old)
    same(back, Checkpoint(**{**back.__dict__, "state_hash": ""}))  # the hash a save stamps

    alone = _to_write(format_4(thread, ns, checkpoint_id, task_id, task_path, writes[:1], **shared))
    assert alone is not None
    for older in (format_3, format_2, format_1):
        found = _to_write(older(thread, ns, checkpoint_id, task_id, task_path, writes[0], **shared))
        assert found is not None
        same(found, alone)


def test_only_write_records_move() -> None:
    """A checkpoint on any other branch, and a record of another kind, stay where they are; only the write
    kind moves back."""
    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    assert _to_write(checkpoint("t", "", "c1")) is None
    assert _to_write(Checkpoint(run_id="r", branch_id="langgraph:writesx", state={"task_id": "x"})) is None
    assert _to_write(Embedding(text="langgraph:writes")) is None
    assert _to_checkpoint(format_4("t", "", "c1", "a", "", [(0, "ch", "json", b"1")])) is None
    assert _to_checkpoint(Embedding(text="k")) is None
    write = LangGraphWrite(thread="t", owner=owner_of("t", "", "c1"), checkpoint_ns="", checkpoint_id="c1",
                           task_id="a", created_at=THEN, updated_at=THEN)
    back = _to_checkpoint(write)  # no writes: an empty list and an empty payload, as a move gives it
    assert isinstance(back, Checkpoint) and back.payload == b"" and back.state["writes"] == []
    assert back.state_hash == hash_exact_state(back.state)
    assert _to_write(back) == write.model_copy(update={"id": write_id(
        checkpoint_writes_prefix("t", "", "c1"), "a", [])})


def test_a_write_whose_new_id_would_be_too_long_is_refused_by_name() -> None:
    """A checkpoint id that format 4 could key (its record id within 512 characters) but whose write id in
    the new kind would pass 512 stops the move with a clear error naming `id`, not a record no backend
    promises to hold."""
    from mnemostore.core.errors import ValidationError

    long_id = "c" * 430
    with pytest.raises(ValidationError) as refused:
        _to_write(format_4("t", "", long_id, "a", "", [(0, "ch", "json", b"1")]))
    assert refused.value.errors[0][0] == "id"
    assert _to_write(format_4("t", "", "c" * 300, "a", "", [(0, "ch", "json", b"1")])) is not None


def test_the_move_is_planned_after_the_items_move_and_locks_older_code_out() -> None:
    """The library's third record step, after the items move, reversible, for old stores only, and recorded
    as a layout step (an older mnemostore refuses the store)."""
    from mnemostore.migrations.plan import library_migrations

    assert [m.id for m in library_migrations()] == [
        "mnemostore.0001_state_hash_xxh3", "mnemostore.0002_langgraph_item_kind", LANGGRAPH_WRITES_MIGRATION_ID]
    move = LANGGRAPH_WRITES_MIGRATION
    assert (move.source, move.target_class().kind, move.reversible, move.new_stores, move.ledger_layer) == (
        "checkpoint", KIND, True, False, "layout")
    assert move.after == ("mnemostore.0002_langgraph_item_kind",)


# the move of a store ------------------------------------------------------------------------------------------

@pytest.fixture(params=["memory", "sqlite", "file", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty store on one backend."""
    if request.param == "postgres":
        server: PostgresTestServer = request.getfixturevalue("postgres_server")
        return server.url()
    return {"memory": f"memory://{uuid.uuid4().hex}", "sqlite": f"sqlite:///{tmp_path / 's.db'}",
            "file": f"file://{tmp_path / 'store'}"}[request.param]


def older_writes() -> dict[str | None, list[Checkpoint]]:
    """What formats 1 to 4 left in each tenant: write records of each format (two threads, two namespaces,
    a call's regular writes and its special one) and checkpoint records that are not writes."""
    return {
        None: [checkpoint("t", "", "c1"), checkpoint("t", "sub", "c1"),
               Checkpoint(id="app", run_id="r", state={"x": 1}, created_at=THEN, updated_at=THEN),
               format_4("t", "", "c1", "a", "p", [(0, "ch", "json", b'"x"'), (1, "other", "msgpack", b"\x01\x02")]),
               format_4("t", "", "c1", "a", "p", [(-1, "__error__", "json", b'"boom"')]),
               format_3("t", "", "c1", "b", "p", (0, "ch", "bytes", b"\x00\xff")),
               format_2("t", "", "c1", "c", "", (0, "ch", "json", b'{"n": 1}')),
               format_1("t", "", "c1", "d", "q", (2, "ch", "null", b"")),
               format_4("t", "sub", "c1", "e", "", [(0, "ch", "json", b"[]")]),
               format_3("u", "", "c9", "a", "", (0, "ch", "json", b"2"))],
        "t2": [checkpoint("t", "", "c1"),
               format_4("t", "", "c1", "a", "p", [(0, "ch", "json", b'"y"')]),
               format_1("t", "", "c1", "b", "p", (0, "ch", "json", b"3"))],
    }


def write_kind(store: mnemostore.Store) -> mnemostore.Collection[Any]:
    """The store's `langgraph_write` collection, the kind registered."""
    from mnemostore.kinds.langgraph_writes import LangGraphWrite

    return store.collection(mnemostore.register_kind(LangGraphWrite))


def writes_of(store: mnemostore.Store) -> list[Any]:
    """The store's `langgraph_write` records by id."""
    return write_kind(store).all(order_by="id")


def test_an_older_store_moves_its_writes_in_a_resumable_migration(url: str) -> None:
    """Write records formats 1 to 4 kept as checkpoints move to the write kind: a store left by older code
    refuses to open until migrated (when asked); an interrupted run resumes (a write an interrupted run put
    already is left as it is); then every write is a `langgraph_write` with its fields kept and no write is
    left among the checkpoints, whose own records stay; `down` moves them back as format-4 records."""
    from mnemostore.migrations.ledger import LEDGER_KEY, Ledger, LedgerEntry
    from mnemostore.migrations.progress import Silent
    from mnemostore.migrations.records import run_moves
    from mnemostore.migrations.runner import Runner
    from mnemostore.testing.clauses.migrations import Interrupted, InterruptedAfterOneBatch

    stores = {tenant: mnemostore.open(url, tenant=tenant) for tenant in (None, "t2")}
    try:
        for tenant, records in older_writes().items():
            stores[tenant].checkpoints.put(records)
        old = {tenant: {r.id: r for r in store.checkpoints.all(order_by="id")} for tenant, store in stores.items()}
        writes = {tenant: [r for r in records.values() if r.branch_id == LEGACY_WRITES_BRANCH]
                  for tenant, records in old.items()}
        kept = {tenant: [r for r in records.values() if r.branch_id != LEGACY_WRITES_BRANCH]
                for tenant, records in old.items()}
        carried = writes[None][-1]
        carried_write = _to_write(carried)
        assert carried_write is not None
        carried_write = carried_write.model_copy(update={"payload": b"put by a crashed run"})
        write_kind(stores[None]).put([carried_write])  # what a crashed run put before deleting its batch
        kinds.unregister(KIND)  # a process of the older code never registered it
        backend = stores[None].backend
        backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing(LANGGRAPH_WRITES_MIGRATION_ID).to_json())
        with pytest.raises(mnemostore.PendingMigrations, match=LANGGRAPH_WRITES_MIGRATION_ID):
            mnemostore.open(url, migrate="refuse")

        moving = dataclasses.replace(LANGGRAPH_WRITES_MIGRATION, batch_size=4)
        first_batch = [id for id in sorted(old[None])[:4] if old[None][id].branch_id == LEGACY_WRITES_BRANCH]
        assert 0 < len(first_batch) < 4 and carried.id not in first_batch
        with pytest.raises(Interrupted):
            run_moves(backend, moving, "up", lambda: None, InterruptedAfterOneBatch())
        assert sorted(r.id for r in stores[None].checkpoints.all()) == sorted(set(old[None]) - set(first_batch)), (
            "the first batch's writes must have moved, and only they")
        assert stores["t2"].checkpoints.count() == len(old["t2"])
        total = sum(map(len, writes.values()))
        assert run_moves(backend, moving, "up", lambda: None, Silent()) == total - len(first_batch)
        applied = Ledger.read(backend).adding(LedgerEntry.of(LANGGRAPH_WRITES_MIGRATION))
        backend.write_meta(LEDGER_KEY, applied.to_json())
        mnemostore.open(url, migrate="refuse").close()

        for tenant, store in stores.items():
            assert store.checkpoints.all(order_by="id") == kept[tenant], f"tenant {tenant!r}: only writes move"
            expected = {moved.id: moved for moved in map(_to_write, writes[tenant]) if moved is not None}
            if tenant is None:
                expected[carried_write.id] = carried_write
            found = writes_of(store)
            assert [r.id for r in found] == sorted(expected)
            for record in found:
                same(record, expected[record.id])
            assert all(r.tenant_id == tenant for r in found)

        assert Runner(backend).down() == [LANGGRAPH_WRITES_MIGRATION_ID]
        for tenant, store in stores.items():
            assert writes_of(store) == [], f"tenant {tenant!r}: down must move every write back"
            back = {r.id: r for r in store.checkpoints.all() if r.branch_id == LEGACY_WRITES_BRANCH}
            expected_back = {}
            for record in writes[tenant]:
                moved = _to_write(record) if record is not carried else carried_write
                assert moved is not None
                format_4_record = _to_checkpoint(moved)
                assert format_4_record is not None
                expected_back[format_4_record.id] = format_4_record
                if record.state["format"] == 4 and record is not carried:
                    same(format_4_record, record)  # a format-4 record comes back as it was
            assert sorted(back) == sorted(expected_back)
            for id, record in back.items():
                same(record, expected_back[id])
                assert record.state["format"] == 4 and record.node_id == record.parent_ids[0]
            assert [r for r in store.checkpoints.all(order_by="id") if r.branch_id != LEGACY_WRITES_BRANCH] == kept[
                tenant]

        assert Runner(backend).up() == [LANGGRAPH_WRITES_MIGRATION_ID]
        for tenant, store in stores.items():
            assert store.checkpoints.all(order_by="id") == kept[tenant]
            assert len(writes_of(store)) == len(writes[tenant])
    finally:
        for store in stores.values():
            store.close()


@pytest.mark.parametrize("batch_size", [1, 100])
def test_copies_of_one_write_in_two_formats_move_to_one_record(url: str, batch_size: int) -> None:
    """A write kept twice, by format 1 and again by format 3 (ids of both formats, one write), moves to one
    record, in one batch or two: format 3's, whose id comes first (as `put_missing` keeps the first); both
    old records leave the checkpoint kind."""
    from mnemostore.migrations.progress import Silent
    from mnemostore.migrations.records import run_moves

    write: Write = (-1, "__error__", "json", b'"first"')
    first = format_1("t", "", "c1", "a", "", write)
    second = format_3("t", "", "c1", "a", "", (*write[:3], b'"second"'))
    assert second.id < first.id
    with mnemostore.open(url) as store:
        store.checkpoints.put([first, second])
        moving = dataclasses.replace(LANGGRAPH_WRITES_MIGRATION, batch_size=batch_size)
        assert run_moves(store.backend, moving, "up", lambda: None, Silent()) == 2
        assert store.checkpoints.count() == 0
        found = writes_of(store)
        assert [r.payload for r in found] == [b'"second"'] and found == [_to_write(second)]


def test_moving_writes_on_open_leaves_no_kind_registered(tmp_path: Path) -> None:
    """Planning the move imports neither LangGraph nor the write kind; a process that moves a store's writes
    on open (the write kind's module imported for the first time by the move) knows no more kinds after it
    than before: listings and copies see only what it wrote."""
    script = f"""
import sys
import mnemostore
from mnemostore.core.kinds import kind_names
from mnemostore.core.records import Checkpoint
from mnemostore.migrations.ledger import LEDGER_KEY, Ledger
from mnemostore.migrations.plan import library_migrations
library_migrations()
print("langgraph" in sys.modules, "mnemostore.kinds.langgraph_writes" in sys.modules)
url = "sqlite:///{tmp_path / 'old.db'}"
with mnemostore.open(url) as store:
    state = {{"format": 4, "checkpoint_ns": "", "checkpoint_id": "c", "task_id": "a", "task_path": "",
              "writes": [[0, "ch", "json", 1]]}}
    store.checkpoints.put([Checkpoint(id="lg.x.c.w.y", run_id="t", node_id="lg.x.c", parent_ids=["lg.x.c"],
                                      branch_id="langgraph:writes", state=state, payload=b"1")])
    backend = store.backend
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing("mnemostore.0003_langgraph_write_kind").to_json())
with mnemostore.open(url) as store:
    print(store.checkpoints.count(), kind_names())
    from mnemostore.kinds.langgraph_writes import LangGraphWrite
    print([r.payload for r in store.collection(mnemostore.register_kind(LangGraphWrite)).all()])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "False False", "0 ('outcome', 'heuristic', 'anti_pattern', 'checkpoint', 'embedding')", "[b'1']"]
