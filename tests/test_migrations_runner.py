"""The migration runner's own rules: ordering (`plan.order`), checksums of normalised content,
and plan/up/down/stamp/accept with targets, against the memory backend."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.errors import ChecksumMismatch, ConfigError, MigrationError, PendingMigrations, StoreTooNew
from mnemostore.core.protocol import Backend
from mnemostore.core.records import Record
from mnemostore.core.registry import registry
from mnemostore.core.store import open_backend
from mnemostore.migrations.ledger import LEDGER_KEY, PROGRESS_KEY, Ledger, LedgerEntry
from mnemostore.migrations.locking import holding
from mnemostore.migrations.model import LayoutMigration, Migration, RecordMigration
from mnemostore.migrations.plan import library_migrations, order
from mnemostore.migrations.records import add_metadata_default
from mnemostore.migrations.runner import Runner, Step
from mnemostore.testing.factories import make

SETTINGS = settings(deadline=None, max_examples=60)


def unchanged(record: Record) -> None:
    """A record migration's change that changes nothing (ordering tests never run it)."""


def layout(id: str, after: tuple[str, ...] = ()) -> LayoutMigration:
    return LayoutMigration(id, backend="test", after=after, up=(f"CREATE TABLE {id.replace('.', '_')} (x INT)",))


def records(id: str, after: tuple[str, ...] = ()) -> RecordMigration:
    return RecordMigration(id, after=after, kinds=("outcome",), change=unchanged)


# ordering ---------------------------------------------------------------------------------------
Graph = tuple[list[LayoutMigration], list[Migration]]


@st.composite
def graphs(draw: st.DrawFn, min_size: int = 1) -> Graph:
    """A random DAG: nodes m0..mN-1 may only come after lower-numbered ones, so a topological
    order exists; some are the backend's layout sequence (in number order), the rest are
    declared in a random order."""
    n = draw(st.integers(min_size, 12))
    is_layout = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    after = [tuple(f"m{j}" for j in sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)))) if i else ()
             for i in range(n)]
    sequence = [layout(f"m{i}", after[i]) for i in range(n) if is_layout[i]]
    others: list[Migration] = [records(f"m{i}", after[i]) for i in range(n) if not is_layout[i]]
    return sequence, draw(st.permutations(others))


def positions(result: list[Migration]) -> dict[str, int]:
    return {m.id: i for i, m in enumerate(result)}


@SETTINGS
@given(graphs())
def test_order_respects_every_dependency_and_the_layout_sequence(graph: Graph) -> None:
    sequence, others = graph
    result = order(sequence, others)
    assert sorted(m.id for m in result) == sorted(m.id for m in [*sequence, *others])
    at = positions(result)
    for migration in result:
        assert all(at[dependency] < at[migration.id] for dependency in migration.after), migration
    assert [m.id for m in result if m in sequence] == [m.id for m in sequence]
    assert [m.id for m in order(sequence, others)] == [m.id for m in result]  # deterministic


@SETTINGS
@given(st.lists(st.booleans(), min_size=1, max_size=10), st.randoms(use_true_random=False))
def test_without_dependencies_layout_comes_first_then_declaration_order(kinds: list[bool], rng: Any) -> None:
    sequence = [layout(f"l{i}") for i, is_layout in enumerate(kinds) if is_layout]
    others: list[Migration] = [records(f"r{i}") for i, is_layout in enumerate(kinds) if not is_layout]
    rng.shuffle(others)
    assert order(sequence, others) == [*sequence, *others]


@SETTINGS
@given(graphs(min_size=2), st.data())
def test_a_cycle_is_refused(graph: Graph, data: st.DataObject) -> None:
    sequence, others = graph
    everything = {m.id: m for m in [*sequence, *others]}
    ring = data.draw(st.lists(st.sampled_from(sorted(everything)), min_size=1, max_size=4, unique=True))
    for previous, current in zip(ring, ring[1:] + ring[:1], strict=True):  # current after previous, around
        m = everything[current]
        everything[current] = (layout if isinstance(m, LayoutMigration) else records)(
            m.id, (*m.after, previous))
    looped = [everything[m.id] for m in sequence]
    with pytest.raises(ConfigError, match="cycle"):
        order([m for m in looped if isinstance(m, LayoutMigration)], [everything[m.id] for m in others])


@SETTINGS
@given(graphs(), st.data())
def test_an_unknown_dependency_is_refused_naming_it(graph: Graph, data: st.DataObject) -> None:
    sequence, others = graph
    victim = data.draw(st.sampled_from([*sequence, *others]))
    broken = (layout if isinstance(victim, LayoutMigration) else records)(victim.id, (*victim.after, "nowhere.0001"))
    swap = [broken if m.id == victim.id else m for m in [*sequence, *others]]
    with pytest.raises(ConfigError, match=r"nowhere\.0001"):
        order([m for m in swap if isinstance(m, LayoutMigration)], [m for m in swap if m.layer == "records"])


def test_one_id_twice_is_one_migration_if_equal_and_refused_if_not() -> None:
    assert [m.id for m in order([layout("a")], [layout("a"), records("b")])] == ["a", "b"]
    other = LayoutMigration("a", backend="test", up=("DROP TABLE a",))
    with pytest.raises(ConfigError, match="share the id 'a'"):
        order([layout("a")], [other])


# checksums --------------------------------------------------------------------------------------
WORDS = st.sampled_from(["CREATE", "TABLE", "t", "(x", "INT,", "y", "TEXT)", "INDEX", "ON", "'a'", "=", "1"])
STATEMENTS = st.lists(st.lists(WORDS, min_size=1, max_size=8), min_size=1, max_size=4)
SPACE = st.text(alphabet=" \t\n\r", min_size=1, max_size=4)


def respaced(statement: list[str], data: st.DataObject) -> str:
    """The words with random whitespace runs between them and around them."""
    text = data.draw(st.one_of(st.just(""), SPACE))
    for i, word in enumerate(statement):
        text += word + (data.draw(SPACE) if i < len(statement) - 1 else "")
    return text + data.draw(st.one_of(st.just(""), SPACE))


def sql(id: str, statements: list[str]) -> LayoutMigration:
    return LayoutMigration(id, backend="test", up=tuple(statements), down=("DROP TABLE t",))


@SETTINGS
@given(STATEMENTS, st.data())
def test_whitespace_only_edits_keep_the_checksum(statements: list[list[str]], data: st.DataObject) -> None:
    original = sql("x.1", [" ".join(words) for words in statements])
    edited = sql("x.1", [respaced(words, data) for words in statements])
    assert edited.checksum == original.checksum


@SETTINGS
@given(STATEMENTS, st.data())
def test_content_edits_change_the_checksum(statements: list[list[str]], data: st.DataObject) -> None:
    original = sql("x.1", [" ".join(words) for words in statements])
    i = data.draw(st.integers(0, len(statements) - 1))
    j = data.draw(st.integers(0, len(statements[i]) - 1))
    edit = data.draw(st.sampled_from(["word", "drop", "add"]))
    changed = [list(words) for words in statements]
    if edit == "word":
        changed[i][j] += "z"
    elif edit == "drop":
        del changed[i]
    else:
        changed.insert(i, ["SELECT", "1"])
    assert sql("x.1", [" ".join(words) for words in changed]).checksum != original.checksum


def import_change(path: Path, source: str) -> Any:
    """`change` from a module written to `path` (functions are checksummed by their source file)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"migration_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.change


FUNCTION = 'def change(record):\n    return {"metadata": {**record.metadata, "seen": 1}}\n'
REFORMATTED = '\n\ndef change(record):   \n\n        return {"metadata":   {**record.metadata,\n "seen": 1}}\n\n'
EDITED = 'def change(record):\n    return {"metadata": {**record.metadata, "seen": 2}}\n'


def test_function_steps_are_checksummed_by_normalised_source(tmp_path: Path) -> None:
    def migration(name: str, source: str, **fields: Any) -> RecordMigration:
        return RecordMigration("app.seen", change=import_change(tmp_path / f"{name}.py", source), **fields)

    original = migration("original", FUNCTION)
    assert migration("reformatted", REFORMATTED).checksum == original.checksum
    assert migration("described", FUNCTION, description="explained now").checksum == original.checksum
    assert migration("edited", EDITED).checksum != original.checksum
    assert migration("parameters", FUNCTION, parameters=(2,)).checksum != original.checksum
    assert migration("kinds", FUNCTION, kinds=("outcome",)).checksum != original.checksum
    assert (add_metadata_default("app.d", "k", 1).checksum != add_metadata_default("app.d", "k", 2).checksum)


CHECKSUM_OF_EXEC = """
import functools, sys
from mnemostore.migrations.model import RecordMigration
namespace = {}
exec(sys.argv[1], namespace)
change = namespace["change"]
if sys.argv[2] == "partial":
    change = functools.partial(change, flag=1)
print(RecordMigration("app.x", change=change).checksum)
"""
SET_SOURCE = 'def change(record, flag=0):\n    return {"flag": flag} if record.id in {"a", "b", "c", "d"} else None'


def checksum_in_a_new_process(source: str, how: str, seed: int) -> str:
    """The checksum of a function defined without a source file, computed in a fresh interpreter."""
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run([sys.executable, "-c", CHECKSUM_OF_EXEC, source, how], env=env, capture_output=True,
                          text=True, check=True, timeout=60)
    return done.stdout.strip()


def test_functions_without_source_are_checksummed_by_their_code_and_constants() -> None:
    """Defined interactively (exec, a REPL): an edited constant changes the checksum, and the
    checksum is the same in every process (no addresses, no hash-seeded set order)."""
    same = {checksum_in_a_new_process(SET_SOURCE, how, seed) for how in ("plain",) for seed in (1, 2, 3)}
    assert len(same) == 1
    edited = SET_SOURCE.replace('"d"', '"e"')
    assert checksum_in_a_new_process(edited, "plain", 1) not in same
    partials = {checksum_in_a_new_process(SET_SOURCE, "partial", seed) for seed in (1, 2)}
    assert len(partials) == 1 and not partials & same


# the runner against memory:// ------------------------------------------------------------------
@pytest.fixture
def backend() -> Iterator[Backend]:
    opened = open_backend(f"memory://runner-{uuid.uuid4().hex}")
    yield opened
    opened.close()


def marked(id: str, *, reversible: bool = True, after: tuple[str, ...] = ()) -> LayoutMigration:
    """A memory layout step that sets (and on revert clears) the meta key `mark.ID`."""

    def up(backend: Backend) -> None:
        backend.write_meta(f"mark.{id}", True)

    def down(backend: Backend) -> None:
        backend.write_meta(f"mark.{id}", None)

    return LayoutMigration(id, backend="memory", after=after, up=up, down=down if reversible else None)


def marks(backend: Backend, migrations: list[LayoutMigration]) -> list[str]:
    """The ids whose up step ran and was not reverted."""
    return [m.id for m in migrations if backend.read_meta(f"mark.{m.id}")]


def ledger(backend: Backend) -> list[str]:
    return Ledger.read(backend).ids


CHAIN = [marked(f"mem.{i:04d}") for i in range(4)]
IDS = [m.id for m in CHAIN]
LIBRARY = [m.id for m in library_migrations()]
"""mnemostore's own record migrations: every store's history has them, after its layout steps."""
ALL = [*IDS, *LIBRARY]


def test_plan_lists_the_steps_and_changes_nothing(backend: Backend) -> None:
    runner = Runner(backend, CHAIN)
    steps = runner.plan()
    assert [(s.migration.id, s.direction) for s in steps] == [(id, "up") for id in ALL]
    assert steps[0].describe() == "apply mem.0000 [layout]" and steps[0].sql == ()
    assert steps[-1].describe() == f"apply {LIBRARY[-1]} [records] (not transactional)"
    assert runner.plan("mem.0001") == steps[:2]
    assert not Ledger.read(backend).exists and marks(backend, CHAIN) == []
    runner.up()
    assert [(s.migration.id, s.direction) for s in runner.plan("mem.0001", "down")] == \
        [(id, "down") for id in LIBRARY[::-1]] + [("mem.0003", "down"), ("mem.0002", "down")]
    assert runner.plan() == []


def test_sql_steps_show_their_statements_in_the_plan(backend: Backend) -> None:
    migration = sql("x.1", ["CREATE TABLE t (x INT)"])
    assert backend.layout_sql(migration, "up") == ["CREATE TABLE t (x INT)"]
    assert backend.layout_sql(migration, "down") == ["DROP TABLE t"]
    assert Step(migration, "down", ("DROP TABLE t",)).describe() == "revert x.1 [layout]"


def test_up_applies_in_order_once_and_records_each(backend: Backend) -> None:
    runner = Runner(backend, CHAIN)
    assert runner.up() == ALL
    assert marks(backend, CHAIN) == IDS and ledger(backend) == ALL
    entries = Ledger.read(backend).entries
    assert [(e.layer, e.how, e.checksum) for e in entries] == [
        (m.ledger_layer, "applied", m.checksum) for m in [*CHAIN, *library_migrations()]]
    assert runner.up() == [] and Ledger.read(backend).entries == entries
    assert runner.status().current


def test_up_to_a_target_stops_there(backend: Backend) -> None:
    runner = Runner(backend, CHAIN)
    assert runner.up("mem.0001") == IDS[:2]
    assert runner.up("mem.0000") == []  # already applied
    with pytest.raises(MigrationError, match=r"no migration 'mem\.9999'"):
        runner.up("mem.9999")
    assert ledger(backend) == IDS[:2] and [m.id for m in runner.status().pending] == ALL[2:]


def test_down_reverts_the_newest_or_back_to_a_target(backend: Backend) -> None:
    runner = Runner(backend, CHAIN)
    runner.up()
    assert runner.down() == LIBRARY[-1:]
    assert runner.down(IDS[-1]) == LIBRARY[:-1][::-1]
    assert runner.down() == ["mem.0003"]
    assert runner.down("mem.0000") == ["mem.0002", "mem.0001"]
    assert marks(backend, CHAIN) == ledger(backend) == ["mem.0000"]
    with pytest.raises(MigrationError, match="not applied"):
        runner.down("mem.0002")
    assert runner.down("base") == ["mem.0000"]
    assert runner.down() == [] and ledger(backend) == [] and marks(backend, CHAIN) == []


def test_down_through_an_irreversible_migration_is_refused_before_reverting_anything(backend: Backend) -> None:
    chain = [marked("mem.a"), marked("mem.b", reversible=False), marked("mem.c")]
    runner = Runner(backend, chain)
    runner.up()
    for target in ("base", "mem.a"):
        with pytest.raises(MigrationError, match=r"cannot revert mem\.b"):
            runner.down(target)
        with pytest.raises(MigrationError, match=r"cannot revert mem\.b"):
            runner.plan(target, "down")
        assert ledger(backend) == [*marks(backend, chain), *LIBRARY] == ["mem.a", "mem.b", "mem.c", *LIBRARY]
    assert runner.down("mem.b") == [*LIBRARY[::-1], "mem.c"]


def test_stamp_records_without_running(backend: Backend) -> None:
    runner = Runner(backend, CHAIN)
    assert runner.stamp("mem.0001") == IDS[:2]
    assert [e.how for e in Ledger.read(backend).entries] == ["stamped", "stamped"]
    assert marks(backend, CHAIN) == []
    assert runner.up() == ALL[2:] and marks(backend, CHAIN) == IDS[2:]
    assert runner.stamp() == []


def test_accept_records_an_edited_migration(backend: Backend) -> None:
    Runner(backend, [add_metadata_default("app.flag", "flag", 1)]).up()
    edited = Runner(backend, [add_metadata_default("app.flag", "flag", 2)])
    for attempt in (edited.up, edited.plan, edited.stamp, edited.down, lambda: edited.ensure_current(True)):
        with pytest.raises(ChecksumMismatch, match=r"app\.flag.*mnemostore migrate accept"):
            attempt()
    with pytest.raises(MigrationError, match=r"no migration 'app\.other'"):
        edited.accept("app.other")
    with pytest.raises(MigrationError, match="has not been applied"):
        Runner(backend, [add_metadata_default("app.new", "k", 0)]).accept("app.new")
    entry = edited.accept("app.flag")
    assert "accepted a change" in entry.how and edited.status().current


def future(id: str, layer: str) -> LedgerEntry:
    return LedgerEntry(id, layer, "f" * 64, "2999-01-01T00:00:00+00:00", "99", "elsewhere:1", True)


def test_an_unknown_layout_step_means_the_store_is_too_new(backend: Backend) -> None:
    runner = Runner(backend, CHAIN)
    runner.up()
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).adding(future("app.theirs", "records")).to_json())
    assert runner.status().current and [e.id for e in runner.status().unknown] == ["app.theirs"]
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).adding(future("mem.9999", "layout")).to_json())
    for attempt in (runner.up, runner.plan, runner.down, runner.stamp, lambda: runner.ensure_current(True)):
        with pytest.raises(StoreTooNew, match=r"mem\.9999"):
            attempt()
    assert marks(backend, CHAIN) == IDS


def test_open_initialises_a_new_store_and_refuses_pending_when_asked(backend: Backend) -> None:
    Runner(backend, CHAIN[:2]).ensure_current(auto=False)  # a new store is laid out even when refusing
    assert ledger(backend) == [*IDS[:2], *LIBRARY]
    with pytest.raises(PendingMigrations, match=r"mem\.0002, mem\.0003.*mnemostore migrate up"):
        Runner(backend, CHAIN).ensure_current(auto=False)
    Runner(backend, CHAIN).ensure_current(auto=True)
    assert ledger(backend) == [*IDS[:2], *LIBRARY, *IDS[2:]]


def test_refusing_open_waits_for_a_runner_finishing_a_concurrent_first_open(backend: Backend) -> None:
    """A store seen half laid out by another opener holding the lock is not refused."""
    runner = Runner(backend, CHAIN)
    runner.up("mem.0001")
    outcome: list[BaseException | None] = []

    def open_refusing() -> None:
        try:
            Runner(backend, CHAIN, lock_wait=10).ensure_current(auto=False)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with holding(runner.lock, wait=1):
        opener = threading.Thread(target=open_refusing)
        opener.start()
        time.sleep(0.2)
        assert outcome == [], "it decided while the lock was held"
        for migration in [*CHAIN[2:], *library_migrations()]:  # the other opener finishes its migrations
            backend.write_meta(LEDGER_KEY, Ledger.read(backend).adding(LedgerEntry.of(migration)).to_json())
    opener.join(timeout=10)
    assert outcome == [None]


def test_a_failing_record_migration_keeps_its_position_and_no_ledger_entry(backend: Backend) -> None:
    backend.put("outcome", [make("outcome", i, id=f"o{i}") for i in range(5)])
    seen: list[str] = []

    def change(record: Record) -> dict[str, Any]:
        if record.id == "o3":
            raise ValueError("no")
        seen.append(record.id)
        return {"metadata": {"done": True}}

    migration = RecordMigration("app.partial", kinds=("outcome",), change=change, batch_size=2)
    with pytest.raises(MigrationError, match=r"'app\.partial' on outcome 'o3' failed: ValueError: no"):
        Runner(backend, [migration]).up()
    assert backend.read_meta(PROGRESS_KEY) == {
        "app.partial": {"direction": "up", "kind": "outcome", "tenant": None, "after": "o1"}}
    assert "app.partial" not in ledger(backend)
    seen.clear()
    with pytest.raises(MigrationError):
        Runner(backend, [migration]).up()
    assert seen == ["o2"], "it resumed after the last finished batch"


def test_a_resumed_migration_whose_kinds_changed_starts_again(backend: Backend) -> None:
    backend.put("outcome", [make("outcome", i, id=f"o{i}") for i in range(3)])
    backend.write_meta(PROGRESS_KEY, {"app.kinds": {"direction": "up", "kind": "heuristic", "tenant": None,
                                                    "after": "h9"}})
    migration = add_metadata_default("app.kinds", "tagged", True, kinds=("outcome",))
    assert Runner(backend, [migration]).up() == [*LIBRARY, "app.kinds"]
    assert all(r.metadata["tagged"] for r in backend.query("outcome", None, None, (), None))
    assert backend.read_meta(PROGRESS_KEY) is None


Op = tuple[str, int | str | None]
OPS = st.lists(st.tuples(st.sampled_from(["up", "down", "stamp"]),
                         st.one_of(st.none(), st.just("base"), st.integers(0, len(ALL) - 1))), max_size=8)


@SETTINGS
@given(OPS)
def test_up_down_and_stamp_with_targets_follow_the_model(ops: list[Op]) -> None:
    """A model of the ledger as a prefix of the chain (mnemostore's record migrations last): each
    operation's result and effect."""
    backend = open_backend(f"memory://runner-{uuid.uuid4().hex}")
    runner = Runner(backend, CHAIN)
    applied, ran = 0, set[str]()
    try:
        for verb, target in ops:
            name = ALL[target] if isinstance(target, int) else target
            if verb == "down":
                if isinstance(target, int) and target >= applied:
                    with pytest.raises(MigrationError):
                        runner.down(name)
                    continue
                keep = max(applied - 1, 0) if target is None else 0 if target == "base" else int(target) + 1
                assert runner.down(name) == ALL[keep:applied][::-1]
                ran -= set(ALL[keep:applied])
                applied = keep
            else:
                if target == "base":
                    with pytest.raises(MigrationError):
                        getattr(runner, verb)(name)
                    continue
                through = len(ALL) if target is None else max(applied, int(target) + 1)
                assert getattr(runner, verb)(name) == ALL[applied:through]
                if verb == "up":
                    ran |= set(ALL[applied:through])
                applied = through
            assert ledger(backend) == ALL[:applied]
            assert set(marks(backend, CHAIN)) == ran - set(LIBRARY)
    finally:
        backend.close()


class RefusingMemoryBackend(MemoryBackend):
    """The reference backend as a shared server would be configured: no migration on open."""

    name: ClassVar[str] = "refusing-memory"
    schemes: ClassVar[tuple[str, ...]] = ("refusing-memory",)
    auto_migrate: ClassVar[bool] = False


def test_a_store_from_before_the_ledger_holding_records_is_not_mistaken_for_a_new_one() -> None:
    registry.register(RefusingMemoryBackend, replace=True)
    try:
        url = f"refusing-memory://{uuid.uuid4().hex}"
        with mnemostore.open(url) as store:
            store.outcomes.put([make("outcome", 1)])
            store.backend.write_meta(LEDGER_KEY, None)  # as written by a mnemostore from before the ledger
        migration = add_metadata_default("app.pre_ledger", "tagged", True)
        with pytest.raises(PendingMigrations, match=r"app\.pre_ledger"):
            mnemostore.open(url, migrations=[migration])
        mnemostore.open(f"refusing-memory://{uuid.uuid4().hex}", migrations=[migration]).close()  # empty: new
        with mnemostore.open(url, migrations=[migration], migrate="auto") as store:
            assert store.outcomes.all()[0].metadata["tagged"] is True
    finally:
        registry.unregister(RefusingMemoryBackend.name)
