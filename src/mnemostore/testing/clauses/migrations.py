"""Migrations: every store keeps a ledger, record migrations reach every covered record of every
tenant exactly once, and what must not run silently (an edited migration, other parameters, a
layout from a newer mnemostore, a second runner) is refused with the fix in the message.

The record migration that counts its runs (`workers.counting_migration`) is not idempotent on
purpose: a record it changed twice reads 2, so "exactly once" is checked, not assumed.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import pytest

from ...core.base64text import to_text
from ...core.capabilities import Capability
from ...core.errors import (
    ChecksumMismatch,
    LockHeld,
    MigrationError,
    MnemostoreError,
    PendingMigrations,
    SchemaMismatch,
    StoreTooNew,
)
from ...core.jsonvalues import dumps_json_document
from ...core.kinds import kinds, register_kind
from ...core.records import Checkpoint, Embedding, Record, hash_state
from ...core.store import Store
from ...core.url import StoreURL
from ...kinds.langgraph_ids import (
    LEGACY_WRITES_BRANCH,
    checkpoint_record_id,
    checkpoint_writes_prefix,
    digest,
    item_id,
    legacy_write_id,
    write_id,
)
from ...migrations.langgraph_items import LANGGRAPH_ITEMS_MIGRATION_ID
from ...migrations.langgraph_writes import LANGGRAPH_WRITES_MIGRATION_ID
from ...migrations.ledger import LEDGER_KEY, PROGRESS_KEY, Ledger, LedgerEntry, whoami
from ...migrations.locking import holding
from ...migrations.records import add_metadata_default, rename_metadata_key
from ...migrations.runner import Runner
from ...migrations.state_hashes import STATE_HASH_MIGRATION_ID, sha256_state_digest
from ..factories import BASE_TIME, make, vectors
from ..oracle import assert_same_records
from ..requirements import requires, since
from ..subprocesses import WAIT_SECONDS, workers_running
from ..workers import counting_migration

TENANTS: tuple[str | None, ...] = (None, "t2")
COVERED = ("outcome", "heuristic")
"""The kinds the suite's record migrations change; `anti_pattern` records must stay as they were."""
UNCOVERED = ("anti_pattern",)
DIMENSION = 8
LOCK_WAIT = 0.3
PROCESSES = 3

Written = dict[tuple[str | None, str], list[Record]]
"""(tenant, kind) -> records as read back."""


def tenant_stores(open_store: Callable[..., Store], **options: Any) -> dict[str | None, Store]:
    """One open store per tenant of `TENANTS`: the default tenant and "t2"."""
    return {tenant: open_store(tenant=tenant, **options) for tenant in TENANTS}


def seed(stores: Mapping[str | None, Store], kinds: Iterable[str], n: int = 7) -> Written:
    """n records of each kind in each tenant (odd ones with an embedding); returns them read back."""
    matrix = vectors(n, DIMENSION, seed=43)
    kinds = tuple(kinds)
    for store in stores.values():
        for kind in kinds:
            store.collection(kind).put([make(kind, i, embedding=matrix[i] if i % 2 else None) for i in range(n)])
    return read_back(stores, kinds, n)


def read_back(stores: Mapping[str | None, Store], kinds: Iterable[str], n: int = 7) -> Written:
    """The records `seed` wrote, as each tenant's store reads them now."""
    found: Written = {}
    for tenant, store in stores.items():
        for kind in kinds:
            got = store.collection(kind).get_many([make(kind, i).id for i in range(n)])
            assert len(got) == n, f"{kind} records of tenant {tenant!r} went missing: {len(got)} of {n} left"
            found[(tenant, kind)] = [r for r in got if r is not None]
    return found


def assert_same_stores(actual: Written, expected: Written) -> None:
    """Every (tenant, kind) holds the expected records, field for field."""
    assert actual.keys() == expected.keys()
    for key in expected:
        assert_same_records(actual[key], expected[key])


def renamed(record: Record, old: str, new: str) -> Record:
    """`record` as `rename_metadata_key(old, new)` should leave it: nothing else changed."""
    metadata = {k: v for k, v in record.metadata.items() if k != old}
    return record.model_copy(update={"metadata": {**metadata, new: record.metadata[old]}})


def runs(stores: Mapping[str | None, Store], count: int) -> dict[str | None, dict[str, int]]:
    """How often the counting migration changed each of the first `count` heuristics, per tenant."""
    found: dict[str | None, dict[str, int]] = {}
    for tenant, store in stores.items():
        got = store.heuristics.get_many([make("heuristic", i).id for i in range(count)])
        assert len(got) == count, f"heuristics of tenant {tenant!r} went missing"
        found[tenant] = {r.id: r.metadata.get("runs", 0) for r in got if r is not None}
    return found


def each_run_once(count: int) -> dict[str | None, dict[str, int]]:
    """What `runs` reads when the counting migration changed every record exactly once."""
    return {tenant: {make("heuristic", i).id: 1 for i in range(count)} for tenant in TENANTS}


def entries(store: Store, id: str) -> list[LedgerEntry]:
    """The ledger entries for migration `id` (one if applied: never two)."""
    return [entry for entry in Ledger.read(store.backend).entries if entry.id == id]


HASHED_STATES: tuple[dict[str, Any], ...] = (
    {"step": 0}, {"step": 1, "messages": ["hi", "there"]}, {"z": {"b": [None, True, 1.5], "a": "é"}, "step": 2})
"""States of the checkpoints an older mnemostore hashed with SHA-256 (keys out of order: the hash
sorts them)."""


class Interrupted(Exception):
    """Raised by `InterruptedAfterOneBatch` to stop a record migration the way a crash would."""


class InterruptedAfterOneBatch:
    """Progress that stops the run once its first batch is written and its position saved."""

    def begin(self, label: str, total: int | None) -> None:
        pass

    def advance(self, count: int) -> None:
        raise Interrupted

    def end(self) -> None:
        pass


def sha256_of(state: dict[str, Any]) -> str:
    """The `state_hash` mnemostore stamped before xxh3-128."""
    return sha256_state_digest(dumps_json_document(state, "state"))


def store_of_older_code(stores: Mapping[str | None, Store]) -> None:
    """Checkpoints hashed the old way in every tenant (and one with an application's own hash), and
    a ledger without the state-hash migration: the store an older mnemostore leaves."""
    for store in stores.values():
        store.checkpoints.put([Checkpoint(id=f"old{n}", run_id="r", sequence=n, state=state,
                                          state_hash=sha256_of(state)) for n, state in enumerate(HASHED_STATES)])
        store.checkpoints.put([Checkpoint(id="given", run_id="r", state={"x": 1}, state_hash="app-given")])
    backend = stores[None].backend
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing(STATE_HASH_MIGRATION_ID).to_json())


def items_of_older_code(stores: Mapping[str | None, Store]) -> dict[str, Embedding]:
    """LangGraph store items as an older mnemostore kept them (`Embedding`s, the key in `text`; an item
    with a vector, its shard, one without), an embedding of the application's own beside them in every
    tenant, and a ledger without the move: the store an older mnemostore leaves. Returns them by id."""
    matrix = vectors(2, DIMENSION, seed=47)
    ident = item_id("langgraph", ("users", "u/1"), "prefs")
    common: dict[str, Any] = {"metadata": {"text": "tea", "n": 1}, "text": "prefs", "model": "m"}
    written = [Embedding(id=ident, namespace="langgraph:users/u%2F1/", embedding=matrix[0], **common),
               Embedding(id=f"{ident}#1", namespace="langgraph#users/u%2F1/", embedding=matrix[1], **common),
               Embedding(id=item_id("langgraph", ("users",), "plain"), namespace="langgraph:users/", text="plain",
                         metadata={"n": 2}),
               Embedding(id="own", namespace="langgraph:users/", text="prefs")]  # not its item id: stays
    for store in stores.values():
        store.embeddings.put(written)
    backend = stores[None].backend
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing(LANGGRAPH_ITEMS_MIGRATION_ID).to_json())
    return {record.id: record for record in stores[None].embeddings.get_many([r.id for r in written])}


def stored_moved(stores: Mapping[str | None, Store], source: str,
                 target: type[Record]) -> dict[str | None, tuple[list[Any], list[Any]]]:
    """Each tenant's (records of the `source` kind, records of the `target` kind) by id, the target kind
    registered to read them (a move registers it for its run only)."""
    register_kind(target)
    return {tenant: (store.collection(source).all(order_by="id"), store.collection(target).all(order_by="id"))
            for tenant, store in stores.items()}


def moved_by_an_interrupted_run(open_store: Callable[..., Store], stores: Mapping[str | None, Store],
                                migration_id: str, moved: Callable[[], dict[str | None, tuple[list[Any], list[Any]]]],
                                count: int) -> None:
    """A move a store of older code still needs (`*_of_older_code`): refused on open when asked, naming it; a
    run stopped after its first batch records nothing, having moved the first tenant's `count` records and
    none of the other's (`moved` reads both kinds per tenant); the next open resumes it to the end."""
    with pytest.raises(PendingMigrations) as caught:
        open_store(migrate="refuse")
    assert migration_id in str(caught.value)
    with pytest.raises(Interrupted):
        Runner(stores[None].backend, progress=InterruptedAfterOneBatch()).up()
    assert entries(stores[None], migration_id) == [], "an interrupted run was recorded"
    found = moved()
    assert [len(found[tenant][1]) for tenant in TENANTS] == [count, 0], (
        "the first tenant's records must have moved and the other tenant's not yet")
    opened = open_store(migrate="auto")  # resumes after the saved position
    assert [m.id for m in Runner(opened.backend).status().pending] == []


OlderWrite = tuple[int, str, str, str, tuple[tuple[int, str, str, bytes], ...]]
"""(writes format, checkpoint namespace, task id, task path, its writes as (idx, channel, value type, value
bytes)) of one write record a LangGraph saver of formats 1 to 4 kept (formats 1 to 3: one write a record)."""

WRITES_THREAD, WRITES_CHECKPOINT = "t", "c1"
OLDER_WRITES: tuple[OlderWrite, ...] = (
    (4, "", "a", "p", ((0, "ch", "json", b'"x"'), (1, "other", "msgpack", b"\x01\x02"))),
    (3, "", "b", "p", ((0, "ch", "bytes", b"\x00\xff"),)),
    (2, "sub", "c", "", ((0, "ch", "json", b'{"n": 1}'),)),
    (1, "", "d", "q", ((-1, "__error__", "json", b'"boom"'),)),
)
"""A write record of each format, on one thread and checkpoint (one in a subgraph's namespace)."""


def writes_owner(ns: str) -> str:
    """The record id of the checkpoint writes in namespace `ns` are pending on."""
    return checkpoint_record_id(WRITES_THREAD, ns, WRITES_CHECKPOINT)


def older_write_record(write: OlderWrite) -> Checkpoint:
    """A write record as its format stored it: a checkpoint on the `langgraph:writes` branch, its id the
    owner's, `.w.` and a digest of the task and idx list (format 1: a digest of the thread, namespace,
    checkpoint, task and idx); format 4 lists [idx, channel, value type, size] in `state["writes"]`, the
    values one after another in `payload`; format 3 keeps its one write's value in `payload`, formats 1 and
    2 as [type, base64] in `state["value"]`."""
    format, ns, task_id, task_path, writes = write
    owner = writes_owner(ns)
    ident = legacy_write_id(owner, task_id, [part[0] for part in writes])
    state: dict[str, Any] = {"format": format, "checkpoint_ns": ns, "checkpoint_id": WRITES_CHECKPOINT,
                             "task_id": task_id, "task_path": task_path}
    payload: bytes | None = b"".join(part[3] for part in writes)
    if format == 4:
        state["writes"] = [[idx, channel, kind, len(value)] for idx, channel, kind, value in writes]
    else:
        ((idx, channel, kind, value),) = writes
        state.update(idx=idx, channel=channel)
        if format == 3:
            state["type"] = kind
        else:
            state["value"], payload = [kind, to_text(value)], None
        if format == 1:
            ident = f"lgw.{digest(WRITES_THREAD, ns, WRITES_CHECKPOINT, task_id, str(idx))}"
    return Checkpoint(id=ident, run_id=WRITES_THREAD, node_id=owner, parent_ids=[owner],
                      branch_id=LEGACY_WRITES_BRANCH, state=state, payload=payload, metadata={"n": format},
                      created_at=BASE_TIME + timedelta(minutes=format), updated_at=BASE_TIME + timedelta(hours=format))


def writes_of_older_code(stores: Mapping[str | None, Store]) -> dict[str, Checkpoint]:
    """LangGraph pending writes as an older mnemostore kept them (`OLDER_WRITES`: checkpoint records of
    writes formats 1 to 4), a checkpoint of the application's own beside them in every tenant, and a
    ledger without the move: the store an older mnemostore leaves. Returns them by id."""
    written = [*map(older_write_record, OLDER_WRITES),
               Checkpoint(id="own", run_id=WRITES_THREAD, state={"x": 1})]  # not on the writes branch: stays
    for store in stores.values():
        store.checkpoints.put(written)
    backend = stores[None].backend
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing(LANGGRAPH_WRITES_MIGRATION_ID).to_json())
    return {record.id: record for record in stores[None].checkpoints.get_many([r.id for r in written])
            if record is not None}


def stored_hashes(stores: Mapping[str | None, Store]) -> dict[str | None, dict[str, str]]:
    """Each tenant's checkpoints' stored `state_hash` by id."""
    return {tenant: {c.id: c.state_hash for c in store.checkpoints.all()} for tenant, store in stores.items()}


def hashes_by(digest: Callable[[dict[str, Any]], str]) -> dict[str, str]:
    """The hashes `store_of_older_code`'s checkpoints hold once hashed by `digest`."""
    return {**{f"old{n}": digest(state) for n, state in enumerate(HASHED_STATES)}, "given": "app-given"}


def seed_heuristics(stores: Mapping[str | None, Store], count: int) -> None:
    """The same `count` heuristics in each tenant, for the counting migration."""
    for store in stores.values():
        store.heuristics.put([make("heuristic", i) for i in range(count)])


class MigrationClauses:
    @since("1.1")
    def test_a_new_store_has_a_migration_ledger_holding_its_whole_layout(
            self, open_store: Callable[..., Store]) -> None:
        store = open_store()
        status = Runner(store.backend).status()
        assert status.ledger_exists, "opening a new store must write its migration ledger"
        assert status.pending == (), f"a new store has pending migrations: {[m.id for m in status.pending]}"
        assert status.current and not status.changed and not status.too_new
        layout = [m.id for m in type(store.backend).layout_migrations]
        applied = {entry.id: entry for entry in status.applied}
        assert [id for id in applied if id in layout] == layout, "the layout steps are not all applied, in order"
        assert all(applied[id].layer == "layout" and applied[id].how == "applied" for id in layout)
        again = open_store()
        assert Runner(again.backend).status().applied == status.applied, "opening again changed the ledger"

    @since("1.1")
    @pytest.mark.parametrize("via", ["open", "runner"])
    def test_a_record_migration_changes_each_covered_record_of_every_tenant_once_and_reverts(
            self, open_store: Callable[..., Store], via: str) -> None:
        stores = tenant_stores(open_store)
        before = seed(stores, (*COVERED, *UNCOVERED))
        migration = rename_metadata_key("suite.rename_parity", "parity", "evenness", kinds=COVERED)
        if via == "open":
            open_store(migrations=[migration], migrate="auto")
        else:
            assert Runner(stores[None].backend, [migration]).up() == [migration.id]
        expected = {key: [renamed(r, "parity", "evenness") if key[1] in COVERED else r for r in records]
                    for key, records in before.items()}  # timestamps and embeddings as they were
        for readers in (stores, tenant_stores(open_store)):  # the stores open all along, and new ones
            assert_same_stores(read_back(readers, (*COVERED, *UNCOVERED)), expected)
        (entry,) = entries(stores[None], migration.id)
        assert (entry.layer, entry.checksum) == ("records", migration.checksum)

        open_store(migrations=[migration], migrate="auto")
        assert Runner(stores[None].backend, [migration]).up() == []
        assert entries(stores[None], migration.id) == [entry], "an applied migration was recorded again"
        assert_same_stores(read_back(stores, (*COVERED, *UNCOVERED)), expected)

        assert Runner(stores[None].backend, [migration]).down() == [migration.id]
        assert entries(stores[None], migration.id) == []
        assert_same_stores(read_back(tenant_stores(open_store), (*COVERED, *UNCOVERED)), before)

    @since("1.1")
    def test_a_failed_record_migration_resumes_after_its_last_finished_batch(
            self, open_store: Callable[..., Store]) -> None:
        stores = tenant_stores(open_store)
        seed_heuristics(stores, 10)
        failing = make("heuristic", 7).id  # batches of 3 in id order: 0-2 and 3-5 finish, 6-8 fails
        broken = counting_migration("suite.resumable", batch_size=3, fail_on=failing)
        with pytest.raises(MigrationError) as caught:
            open_store(migrations=[broken], migrate="auto")
        assert "suite.resumable" in str(caught.value) and failing in str(caught.value)
        assert entries(stores[None], broken.id) == [], "a failed migration was recorded as applied"
        finished = {make("heuristic", i).id: int(i < 6) for i in range(10)}
        assert runs(stores, 10) == {None: finished, "t2": dict.fromkeys(finished, 0)}, (
            "the finished batches must be written and nothing of the failed batch")

        fixed = counting_migration("suite.resumable", batch_size=3)
        assert Runner(stores[None].backend, [fixed]).up() == [fixed.id]
        assert runs(stores, 10) == each_run_once(10), "a batch was run twice, or skipped, on resuming"
        (entry,) = entries(stores[None], fixed.id)
        assert entry.checksum == fixed.checksum
        assert fixed.id not in (stores[None].backend.read_meta(PROGRESS_KEY) or {}), "progress left behind"

    @since("1.1")
    def test_an_edited_migration_is_refused_until_accepted(self, open_store: Callable[..., Store]) -> None:
        store = open_store()
        store.outcomes.put([make("outcome", i) for i in range(3)])
        original = add_metadata_default("app.x", "flag", 1, kinds=("outcome",))
        edited = add_metadata_default("app.x", "flag", 2, kinds=("outcome",))
        assert original.checksum != edited.checksum
        open_store(migrations=[original], migrate="auto")
        runner = Runner(store.backend, [edited])
        with pytest.raises(ChecksumMismatch, match=r"app\.x"):
            runner.up()
        with pytest.raises(ChecksumMismatch, match=r"app\.x"):
            runner.plan()
        with pytest.raises(ChecksumMismatch, match=r"app\.x") as caught:
            open_store(migrations=[edited], migrate="auto")
        assert "mnemostore migrate accept" in str(caught.value)
        assert [m.id for m, _ in runner.status().changed] == ["app.x"]

        accepted = runner.accept("app.x")
        assert accepted.checksum == edited.checksum
        assert open_store(migrations=[edited], migrate="refuse").outcomes.count() == 3
        assert runner.status().current
        assert [r.metadata["flag"] for r in store.outcomes.all()] == [1, 1, 1], "accept must not run the migration"
        with pytest.raises(ChecksumMismatch):
            open_store(migrations=[original], migrate="auto")

    @since("1.1")
    def test_a_different_embedding_model_needs_a_migration_not_an_open(self, open_store: Callable[..., Store]) -> None:
        assert open_store(embedding_model="model-a").params.embedding_model == "model-a"
        with pytest.raises(SchemaMismatch) as caught:
            open_store(embedding_model="model-b")
        assert "model-a" in str(caught.value) and "model-b" in str(caught.value)
        assert open_store().params.embedding_model == "model-a"
        assert open_store(embedding_model="model-a").params.embedding_model == "model-a"

    @since("1.1")
    @requires(Capability.PERSISTENT)
    def test_parameters_stored_beside_the_migration_ledger_are_checked_after_reopen(
            self, open_store: Callable[..., Store]) -> None:
        open_store(dimension=DIMENSION, metric="l2", embedding_model="model-a").close()
        for wrong in ({"dimension": DIMENSION * 2}, {"metric": "dot"}, {"embedding_model": "model-b"}):
            with pytest.raises(SchemaMismatch):
                open_store(**wrong)
        params = open_store().params
        assert (params.dimension, params.metric, params.embedding_model) == (DIMENSION, "l2", "model-a")

    @since("1.1")
    @requires(Capability.PERSISTENT)
    def test_the_migration_ledger_survives_close_and_reopen(self, open_store: Callable[..., Store]) -> None:
        stores = tenant_stores(open_store)
        seed_heuristics(stores, 5)
        migration = counting_migration("suite.persisted", batch_size=2)
        open_store(migrations=[migration], migrate="auto").close()
        applied = Ledger.read(stores[None].backend).entries
        for store in stores.values():
            store.close()
        again = tenant_stores(open_store, migrations=[migration], migrate="refuse")  # nothing pending
        assert Ledger.read(again[None].backend).entries == applied
        assert runs(again, 5) == each_run_once(5)

    @since("1.1")
    def test_a_held_migration_lock_makes_another_runner_fail_naming_the_holder(
            self, open_store: Callable[..., Store]) -> None:
        first, second = open_store(), open_store()
        second.outcomes.put([make("outcome", 1)])
        pending = add_metadata_default("suite.after_the_lock", "locked", False, kinds=("outcome",))
        holder = Runner(first.backend)
        waiter = Runner(second.backend, [pending], lock_wait=LOCK_WAIT)
        with holding(holder.lock, wait=5) as info:
            seen = waiter.lock_holder()  # this process, as the engine describes it (hostname:pid)
            assert seen is not None and info.holder in seen.holder, f"the lock names {seen} as its holder"
            started = time.monotonic()
            with pytest.raises(LockHeld) as caught:
                waiter.up()
            assert time.monotonic() - started >= LOCK_WAIT, "the runner did not wait for the lock"
            assert whoami() in str(caught.value) and "break-lock" in str(caught.value)
            assert entries(second, pending.id) == []
            assert open_store().outcomes.count() == 1, "opening a current store must not wait for the lock"
        assert waiter.lock_holder() is None
        assert waiter.up() == [pending.id]
        assert second.outcomes.all()[0].metadata["locked"] is False

    @since("1.1")
    def test_break_lock_frees_the_migration_lock_or_refuses_naming_the_live_holder(
            self, open_store: Callable[..., Store]) -> None:
        first, second, third = open_store(), open_store(), open_store()
        pending = add_metadata_default("suite.after_break_lock", "broken", True, kinds=("outcome",))
        breaker = Runner(second.backend, [pending], lock_wait=LOCK_WAIT)
        held: contextlib.AbstractContextManager[Any] | None = holding(Runner(first.backend).lock, wait=5)
        assert held is not None
        held.__enter__()
        try:
            try:
                freed = breaker.break_lock()
            except LockHeld as refused:  # a lock the engine ties to a live holder (a lock file)
                assert whoami() in str(refused), f"the refusal does not name the holder: {refused}"
                with pytest.raises(LockHeld):
                    breaker.up()
            else:  # a lock record, or an engine that ends the holder's session: say whose lock it was
                assert freed is not None and whoami() in freed.holder, f"break-lock freed {freed}"
                with holding(breaker.lock, wait=LOCK_WAIT):
                    late, held = held, None
                    with contextlib.suppress(MnemostoreError):  # an ended session may fail to unlock
                        late.__exit__(None, None, None)
                    with pytest.raises(LockHeld):  # the old holder's late release freed the new one's lock
                        Runner(third.backend, [pending], lock_wait=LOCK_WAIT).up()
        finally:
            if held is not None:
                held.__exit__(None, None, None)
        assert breaker.up() == [pending.id]

    @since("1.1")
    def test_two_runners_migrating_at_once_apply_a_migration_once(self, open_store: Callable[..., Store]) -> None:
        stores = tenant_stores(open_store)
        seed_heuristics(stores, 6)
        migration = counting_migration("suite.raced", batch_size=2, delay=0.01)
        runners = [Runner(open_store().backend, [migration]) for _ in range(2)]
        start = threading.Barrier(len(runners))
        applied: list[list[str]] = []
        failures: list[BaseException] = []

        def run(runner: Runner) -> None:
            try:
                start.wait(timeout=WAIT_SECONDS)
                applied.append(runner.up())
            except BaseException as exc:  # reported by the test thread
                failures.append(exc)

        threads = [threading.Thread(target=run, args=(runner,)) for runner in runners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT_SECONDS)
        assert not any(thread.is_alive() for thread in threads), "a runner did not finish (a deadlock?)"
        assert not failures, f"a runner failed: {failures[0]!r}"
        assert sorted(applied) == [[], [migration.id]]
        assert runs(stores, 6) == each_run_once(6)
        assert len(entries(stores[None], migration.id)) == 1

    @since("1.1")
    @requires(Capability.MULTI_PROCESS)
    def test_processes_migrating_one_new_store_at_once_apply_each_migration_once(
            self, open_store: Callable[..., Store], store_url: str, store_options: dict[str, Any]) -> None:
        migration = {"id": "suite.processes", "batch_size": 3, "delay": 0.05}
        params = [{**migration, "via": ("open", "runner")[w % 2], "options": store_options} for w in range(PROCESSES)]
        with workers_running("migrate", store_url, store_options, params) as started:
            for worker in started:  # each opened the new store: the first opens raced to lay it out
                worker.ready()
            stores = tenant_stores(open_store)
            seed_heuristics(stores, 8)
            for worker in started:
                worker.go()
            deadline = time.monotonic() + WAIT_SECONDS
            outputs = [worker.finish(max(1.0, deadline - time.monotonic())) for worker in started]
            pids = {f"{socket.gethostname()}:{worker.process.pid}" for worker in started}
        reported = []
        for lines in outputs:
            word, _, payload = lines[-1].partition(" ")
            assert word == "migrated", lines
            reported.append(json.loads(payload)["applied"])
        assert sum(applied.count(migration["id"]) for applied in reported if applied is not None) <= 1
        assert runs(stores, 8) == each_run_once(8), "the migration changed some records twice or not at all"
        (entry,) = entries(stores[None], str(migration["id"]))
        assert entry.applied_by in pids
        status = Runner(stores[None].backend).status()
        assert [e.id for e in status.applied].count(str(migration["id"])) == 1
        layout = [m.id for m in type(stores[None].backend).layout_migrations]
        assert all([e.id for e in status.applied].count(id) == 1 for id in layout)

    @since("1.1")
    def test_pending_migrations_are_refused_on_open_when_asked(
            self, open_store: Callable[..., Store], store_url: str) -> None:
        store = open_store()
        written = store.outcomes.put([make("outcome", i) for i in range(3)])
        ledger = Ledger.read(store.backend)
        pending = add_metadata_default("suite.pending", "reviewed", False, kinds=("outcome",))
        with pytest.raises(PendingMigrations) as caught:
            open_store(migrations=[pending], migrate="refuse")
        message = str(caught.value)
        assert "mnemostore migrate up" in message and "suite.pending" in message
        password = StoreURL.parse(store_url).password
        assert not password or password not in message, "the message shows the store's password"
        assert Ledger.read(store.backend) == ledger
        assert_same_records(store.outcomes.get_many([r.id for r in written]), written)
        assert [m.id for m in Runner(store.backend, [pending]).status().pending] == [pending.id]
        if type(store.backend).auto_migrate:  # the backend's default when `migrate` is not given
            open_store(migrations=[pending])
        else:
            with pytest.raises(PendingMigrations):
                open_store(migrations=[pending])
            open_store(migrations=[pending], migrate="auto")
        assert [r.metadata["reviewed"] for r in store.outcomes.all()] == [False] * 3
        assert len(entries(store, pending.id)) == 1

    @since("1.9")
    def test_checkpoints_an_older_mnemostore_hashed_are_rehashed_resumably_and_found_by_one_filter(
            self, open_store: Callable[..., Store]) -> None:
        """SHA-256 state hashes become xxh3-128 (`mnemostore.0001_state_hash_xxh3`): refused on open when
        asked, naming the command; an interrupted run resumes; then every hash equals a fresh one and a
        filter on a state's hash finds its old and new checkpoints; an application's own hash is kept;
        `down` puts SHA-256 back."""
        stores = tenant_stores(open_store)
        store_of_older_code(stores)
        older = hashes_by(sha256_of)
        assert stored_hashes(stores) == dict.fromkeys(TENANTS, older)
        with pytest.raises(PendingMigrations) as caught:
            open_store(migrate="refuse")
        assert "mnemostore migrate up" in str(caught.value) and STATE_HASH_MIGRATION_ID in str(caught.value)

        with pytest.raises(Interrupted):
            Runner(stores[None].backend, progress=InterruptedAfterOneBatch()).up()
        assert entries(stores[None], STATE_HASH_MIGRATION_ID) == [], "an interrupted run was recorded as applied"
        assert stored_hashes(stores) == {None: hashes_by(hash_state), "t2": older}, (
            "the first tenant's batch must be rehashed and the other tenant's checkpoints not yet")
        opened = open_store(migrate="auto")  # resumes after the saved position
        assert [m.id for m in Runner(opened.backend).status().pending] == []
        assert STATE_HASH_MIGRATION_ID not in (opened.backend.read_meta(PROGRESS_KEY) or {}), "progress left behind"
        assert stored_hashes(stores) == dict.fromkeys(TENANTS, hashes_by(hash_state))
        for store in stores.values():
            fresh = store.checkpoints.save("r2", dict(reversed(HASHED_STATES[2].items())), parent=None)
            assert fresh.state_hash == hash_state(HASHED_STATES[2])
            found = store.checkpoints.query({"state_hash": fresh.state_hash}, order_by="id")
            assert [c.id for c in found] == sorted(["old2", fresh.id]), "one filter must find old and new"

        assert Runner(stores[None].backend).down() == [STATE_HASH_MIGRATION_ID]
        assert {tenant: {id: found for id, found in hashes.items() if id in older}
                for tenant, hashes in stored_hashes(stores).items()} == dict.fromkeys(TENANTS, older)

    @since("1.10")
    def test_langgraph_items_an_older_mnemostore_kept_as_embeddings_move_to_their_kind_resumably(
            self, open_store: Callable[..., Store]) -> None:
        """LangGraph store items an older mnemostore kept as embeddings move to the `langgraph_item` kind
        (`mnemostore.0002_langgraph_item_kind`): refused on open when asked; an interrupted run resumes;
        then every item is there with its fields and vector kept, the application's own embedding stays;
        `down` moves them back as they were."""
        registered = "langgraph_item" in kinds.applications()
        try:
            from ...kinds.langgraph_items import LangGraphItem

            stores = tenant_stores(open_store)
            older = items_of_older_code(stores)

            def stored_items() -> dict[str | None, tuple[list[Any], list[Any]]]:
                return stored_moved(stores, "embedding", LangGraphItem)

            moved_by_an_interrupted_run(open_store, stores, LANGGRAPH_ITEMS_MIGRATION_ID, stored_items, 3)
            for tenant, (embeddings, items) in stored_items().items():
                assert [r.id for r in embeddings] == ["own"], f"tenant {tenant!r}: only the own embedding stays"
                assert len(items) == 3
                for item in items:
                    before = {**older[item.id].model_dump(), "tenant_id": tenant}
                    after = item.model_dump()
                    assert after.pop("key") == before.pop("text")
                    assert {k: v for k, v in after.items() if k != "embedding"} == {
                        k: v for k, v in before.items() if k != "embedding"}, f"{item.id} changed as it moved"
                    assert (item.embedding is None) == (older[item.id].embedding is None)
                    if item.embedding is not None:
                        assert item.embedding.tolist() == pytest.approx(older[item.id].embedding.tolist())

            assert Runner(stores[None].backend).down() == [LANGGRAPH_ITEMS_MIGRATION_ID]
            for tenant, (embeddings, items) in stored_items().items():
                assert items == [], f"tenant {tenant!r}: down must move every item back"
                assert_same_records(embeddings, sorted(
                    (r.model_copy(update={"tenant_id": tenant}) for r in older.values()), key=lambda r: r.id))
        finally:
            if not registered:
                kinds.unregister("langgraph_item")

    @since("1.14")
    def test_langgraph_writes_an_older_mnemostore_kept_as_checkpoints_move_to_their_kind_resumably(
            self, open_store: Callable[..., Store]) -> None:
        """LangGraph pending writes an older mnemostore kept as checkpoint records (writes formats 1 to 4)
        move to the `langgraph_write` kind (`mnemostore.0003_langgraph_write_kind`), under ids of their
        checkpoint's writes range: refused on open when asked; an interrupted run resumes; then every write
        is there with its fields, its writes and values kept, the application's own checkpoint stays; `down`
        moves them back as format-4 write records."""
        registered = "langgraph_write" in kinds.applications()  # before the import: importing it registers it
        try:
            from ...kinds.langgraph_writes import LangGraphWrite

            stores = tenant_stores(open_store)
            older = writes_of_older_code(stores)

            def stored_writes() -> dict[str | None, tuple[list[Any], list[Any]]]:
                return stored_moved(stores, "checkpoint", LangGraphWrite)

            moved_by_an_interrupted_run(open_store, stores, LANGGRAPH_WRITES_MIGRATION_ID, stored_writes,
                                        len(OLDER_WRITES))

            def expected(tenant: str | None, format: int | None = None) -> list[Record]:
                """Each older write as the move leaves it (format None), or as a write record of `format`,
                with the shared fields it was stored with."""
                records: list[Record] = []
                for write in OLDER_WRITES:
                    old = older[older_write_record(write).id]
                    shared = {"tenant_id": tenant, "metadata": old.metadata, "created_at": old.created_at,
                              "updated_at": old.updated_at}
                    if format is not None:
                        records.append(older_write_record((format, *write[1:])).model_copy(update=shared))
                        continue
                    _, ns, task_id, task_path, writes = write
                    records.append(LangGraphWrite(
                        id=write_id(checkpoint_writes_prefix(WRITES_THREAD, ns, WRITES_CHECKPOINT), task_id,
                                    [part[0] for part in writes]),
                        thread=WRITES_THREAD, owner=writes_owner(ns), checkpoint_ns=ns,
                        checkpoint_id=WRITES_CHECKPOINT, task_id=task_id, task_path=task_path,
                        writes=[[idx, channel, kind, len(value)] for idx, channel, kind, value in writes],
                        payload=b"".join(part[3] for part in writes), **shared))
                return sorted(records, key=lambda r: r.id)

            own = older["own"]
            for tenant, (checkpoints, writes) in stored_writes().items():
                assert [r.id for r in checkpoints] == ["own"], f"tenant {tenant!r}: only the own checkpoint stays"
                assert_same_records(checkpoints, [own.model_copy(update={"tenant_id": tenant})])
                assert_same_records(writes, expected(tenant))

            assert Runner(stores[None].backend).down() == [LANGGRAPH_WRITES_MIGRATION_ID]
            for tenant, (checkpoints, writes) in stored_writes().items():
                assert writes == [], f"tenant {tenant!r}: down must move every write back"
                assert_same_records(checkpoints, sorted(
                    [own.model_copy(update={"tenant_id": tenant}), *expected(tenant, format=4)], key=lambda r: r.id))
        finally:
            if not registered:
                kinds.unregister("langgraph_write")

    @since("1.1")
    def test_a_store_migrated_by_a_newer_mnemostore_is_refused(self, open_store: Callable[..., Store]) -> None:
        store = open_store()
        ledger = Ledger.read(store.backend)

        def entry(id: str, layer: str) -> LedgerEntry:
            return LedgerEntry(id, layer, "0" * 64, "2999-01-01T00:00:00+00:00", "99.0", "elsewhere:1", True)

        someone_elses = ledger.adding(entry("app.someone_elses_record_migration", "records"))
        store.backend.write_meta(LEDGER_KEY, someone_elses.to_json())
        assert open_store().outcomes.count() == 0, "an unknown record migration in the ledger must not block opening"
        future = someone_elses.adding(entry("zz.9999_from_the_future", "layout"))
        store.backend.write_meta(LEDGER_KEY, future.to_json())
        with pytest.raises(StoreTooNew, match=r"zz\.9999_from_the_future") as caught:
            open_store()
        assert "upgrade mnemostore" in str(caught.value)
        with pytest.raises(StoreTooNew):
            Runner(store.backend).up()
        assert Ledger.read(store.backend) == future
