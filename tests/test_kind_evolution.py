"""A kind a store holds, declared otherwise by newer code: what is a layout step, what is refused, and the
commands (`migrate status/plan/up`, `info`, `copy`) with `--import`. The suite proves the step itself on
every backend (`testing/clauses/kind_evolution.py`)."""

from __future__ import annotations

import importlib
import json
import sqlite3
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.postgres_server import postgres_server
from tests.test_cli import run_cli

import mnemostore
from mnemostore import F, KindChanged, MigrationError
from mnemostore.core.declarations import stored_declarations
from mnemostore.core.kinds import kinds
from mnemostore.core.store import open_backend
from mnemostore.migrations import RecordMigration, Runner

__all__ = ["postgres_server"]

VERSIONS = {
    "v1": """
        filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": int}
        incrementable: ClassVar[frozenset[str]] = frozenset({"stars"})
    """,
    "grown": """
        filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": int, "mood": str, "seen": datetime}
        incrementable: ClassVar[frozenset[str]] = frozenset({"stars"})
        indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("mood",),)
    """,
    "counters": """
        filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": int}
    """,
    "retyped": """
        filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": float}
        stars: float = 0
    """,
    "removed": """
        filterable: ClassVar[dict[str, type]] = {"topic": str}
    """,
    "unordered": """
        filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": int}
        incrementable: ClassVar[frozenset[str]] = frozenset({"stars"})
        default_order_index: ClassVar[bool] = False
    """,
    "required": """
        filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": int, "level": int}
        level: int
    """,
}


def _write(path: Path, version: str) -> None:
    path.write_text(textwrap.dedent("""
        from datetime import datetime
        from typing import ClassVar

        from pydantic import AwareDatetime

        import mnemostore

        @mnemostore.register_kind
        class Jot(mnemostore.Record):
            kind: ClassVar[str] = "jot"
            topic: str
            stars: int = 0
            mood: str = "calm"
            seen: AwareDatetime | None = None
        {body}
    """).replace("{body}", textwrap.indent(textwrap.dedent(VERSIONS[version]), "    ")))


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`app_jots.py` on the path, registering the kind `jot` as first declared; `declare(version)`
    rewrites and reloads it (the application's next release)."""
    module = tmp_path / "app_jots.py"
    _write(module, "v1")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("app_jots")
    yield module
    kinds.unregister("jot")
    sys.modules.pop("app_jots", None)


def declare(module: Path, version: str) -> None:
    _write(module, version)
    importlib.reload(sys.modules["app_jots"])


@pytest.fixture
def url(tmp_path: Path, app: Path) -> str:
    location = f"sqlite:///{tmp_path / 'jots.db'}"
    with mnemostore.open(location) as store:
        store.collection("jot").put([{"id": "a", "topic": "x", "mood": "sad", "seen": "2025-01-02T03:04:05+02:00"},
                                     {"id": "b", "topic": "y"}])
    return location


def test_retyping_a_stored_field_is_refused_as_a_record_migration(
        app: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = Path(url.removeprefix("sqlite:///")).read_bytes()
    declare(app, "retyped")
    with pytest.raises(KindChanged) as caught:
        mnemostore.open(url)
    message = str(caught.value)
    assert "filterable field 'stars' changed type from int to float" in message
    assert "record migration the application writes" in message and "migrate up" not in message
    backend = open_backend(url)
    try:
        with pytest.raises(KindChanged, match="record migration"):
            Runner(backend).plan()
        with pytest.raises(KindChanged, match="record migration"):
            Runner(backend).up()
    finally:
        backend.close()
    code, _, err = run_cli(capsys, "migrate", "accept", url, "kind.jot", "--import", "app_jots")
    assert code == 1 and "a changed type is a record migration" in err
    assert Path(url.removeprefix("sqlite:///")).read_bytes() == before


def test_a_field_no_longer_declared_is_accepted_not_migrated(
        app: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    declare(app, "removed")
    with pytest.raises(KindChanged, match=r"no longer declared.*`mnemostore migrate accept \S+ kind.jot "
                                          r"--import app_jots`; its column or payload key is left"):
        mnemostore.open(url)
    code, out, err = run_cli(capsys, "migrate", "accept", url, "kind.jot", "--import", "app_jots")
    assert code == 0, err
    assert out.strip() == ("recorded the declaration of jot by app_jots:Jot: filterable field 'stars' (int) is no "
                           "longer declared; counters ['stars'] -> []")
    with mnemostore.open(url) as store:
        assert [j.id for j in store.collection("jot").all({"topic": "x"})] == ["a"]
        assert store.collection("jot").get("a").stars == 0
    code, _, err = run_cli(capsys, "migrate", "accept", url, "kind.jot", "--import", "app_jots")
    assert code == 1 and "nothing to accept" in err


def test_opening_never_migrates_a_kind_unless_asked(app: Path, url: str) -> None:
    declare(app, "grown")
    with pytest.raises(KindChanged, match=r"migrate plan .* --import app_jots"):
        mnemostore.open(url)  # the embedded default applies layout steps of mnemostore's own, not these
    with mnemostore.open(url, migrate="auto") as store:
        jots = store.collection("jot")
        assert [j.id for j in jots.all(F.mood == "sad")] == ["a"]
        assert jots.count(F.seen > datetime(2025, 1, 1, tzinfo=UTC)) == 1
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "mnemo_jot__mood" in indexes


def test_a_record_migration_may_fill_a_field_the_kind_step_of_the_same_run_adds(app: Path, url: str) -> None:
    declare(app, "grown")
    fill = RecordMigration("app.0001_mood", kinds=("jot",),
                           change=lambda r: None if r.mood == "set" else {"mood": "set"})
    backend = open_backend(url)
    try:
        runner = Runner(backend, [fill])
        planned = [step.migration.layer for step in runner.plan()]
        assert planned == ["kinds", "records"]
        assert len(runner.up()) == 2
    finally:
        backend.close()
    with mnemostore.open(url, migrations=[fill]) as store:
        assert store.collection("jot").count(F.mood == "set") == 2


def test_a_change_of_counters_only_is_recorded_by_a_step_that_moves_no_data(app: Path, url: str) -> None:
    declare(app, "counters")
    backend = open_backend(url)
    try:
        runner = Runner(backend)
        (step,) = runner.plan()
        assert step.migration.description == "kind jot: counters ['stars'] -> []"
        assert runner.up() == [step.migration.id]
        assert stored_declarations(backend)["jot"].incrementable == ()
    finally:
        backend.close()
    with mnemostore.open(url) as store:
        assert store.collection("jot").count() == 2


def test_a_new_required_field_without_values_fails_the_step_and_changes_nothing(app: Path, url: str) -> None:
    declare(app, "required")
    backend = open_backend(url)
    try:
        with pytest.raises(MigrationError, match=r"jot 'a' was written before the field 'level' existed"):
            Runner(backend).up()
        assert stored_declarations(backend)["jot"].filterable == {"topic": "str", "stars": "int"}
    finally:
        backend.close()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        assert "level" not in {row[1] for row in conn.execute("PRAGMA table_info(mnemo_jot)")}


def test_migrate_status_plan_and_up_take_the_application_module(
        app: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    declare(app, "grown")
    code, out, _ = run_cli(capsys, "migrate", "status", url, "--import", "app_jots", "--check")
    assert code == 1 and "state   migrations pending" in out and "kinds" in out and "'mood' (str) added" in out
    code, out, err = run_cli(capsys, "migrate", "plan", url, "--import", "app_jots")
    assert (code, err) == (0, "")
    assert "1. apply kind.jot." in out and "[kinds]" in out
    assert "filterable field 'mood' (str) added; filterable field 'seen' (datetime) added; index ('mood',) added" in out
    code, out, err = run_cli(capsys, "migrate", "up", url, "--import", "app_jots", "--quiet")
    assert code == 0 and out.startswith("applied 1 migration(s): kind.jot."), err
    code, out, _ = run_cli(capsys, "migrate", "plan", url, "--import", "app_jots")
    assert (code, out.strip()) == (0, "nothing to apply: the store is current")
    code, out, _ = run_cli(capsys, "migrate", "status", url, "--import", "app_jots", "--json", "--check")
    assert code == 0 and json.loads(out)["current"] is True


def test_info_counts_every_kind_and_marks_one_this_process_does_not_know(
        app: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "info", url, "--json")
    data = json.loads(out)
    assert code == 0 and data["counts"]["jot"] == 2 and data["unregistered"] == {}
    kinds.unregister("jot")
    sys.modules.pop("app_jots")
    code, out, _ = run_cli(capsys, "info", url)
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("jot "))
    assert line.split()[1] == "2" and "stored, not registered in this process (declared by app_jots:Jot" in line
    code, out, _ = run_cli(capsys, "info", url, "--json", "--import", "app_jots")
    assert json.loads(out)["unregistered"] == {} and json.loads(out)["counts"]["jot"] == 2


def test_a_copy_of_every_kind_refuses_a_kind_this_process_does_not_know(
        app: Path, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds.unregister("jot")
    sys.modules.pop("app_jots")
    destination = f"sqlite:///{tmp_path / 'copy.db'}"
    code, _, err = run_cli(capsys, "copy", url, destination, "--quiet")
    assert code == 1 and "holds kinds this process does not know: 'jot' (declared by app_jots:Jot)" in err
    assert "--import app_jots" in err
    code, _, err = run_cli(capsys, "copy", url, destination, "--quiet", "--kinds", "outcome")
    assert code == 0, err  # naming the kinds to carry leaves the unknown one out knowingly
    code, _, err = run_cli(capsys, "copy", url, f"sqlite:///{tmp_path / 'copy2.db'}", "--quiet", "--import", "app_jots")
    assert code == 0, err
    with mnemostore.open(f"sqlite:///{tmp_path / 'copy2.db'}") as store:
        assert store.collection("jot").count() == 2
        assert stored_declarations(store.backend)["jot"].filterable == {"topic": "str", "stars": "int"}


def _indexes(url: str) -> set[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return {name for name, in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = "
                                               "'mnemo_jot' AND sql IS NOT NULL")}


def test_the_default_order_index_is_declared_off_and_on_as_a_layout_step(app: Path, url: str, tmp_path: Path) -> None:
    """`default_order_index = False` leaves out the (created_at, id) index: at a new kind's first write,
    and on a stored kind through `migrate up`, which puts it back when the declaration turns it on
    again; queries in the default order stay right either way."""
    assert "mnemo_jot__created_at_id" in _indexes(url)
    declare(app, "unordered")
    with pytest.raises(KindChanged, match=r"index \('created_at', 'id'\) dropped"):
        mnemostore.open(url)
    with mnemostore.open(url, migrate="auto") as store:
        store.collection("jot").add(id="c", topic="z")
        assert [j.id for j in store.collection("jot").all()] == ["a", "b", "c"]
        assert [j.id for j in store.collection("jot").all(order_by="-created_at")] == ["c", "b", "a"]
    assert "mnemo_jot__created_at_id" not in _indexes(url)
    backend = open_backend(url)
    try:
        assert stored_declarations(backend)["jot"].default_order_index is False
    finally:
        backend.close()
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    with mnemostore.open(fresh) as store:
        store.collection("jot").add(id="a", topic="x")
    assert not any("created_at" in name for name in _indexes(fresh))
    declare(app, "v1")
    with pytest.raises(KindChanged, match=r"index \('created_at', 'id'\) added"):
        mnemostore.open(url)
    with mnemostore.open(url, migrate="auto") as store:
        assert [j.id for j in store.collection("jot").all()] == ["a", "b", "c"]
    assert "mnemo_jot__created_at_id" in _indexes(url)


def test_the_default_order_index_step_on_postgres(app: Path, request: pytest.FixtureRequest) -> None:
    """The same step on PostgreSQL: its (tenant, created_at, id) index goes and comes back."""
    import psycopg

    server = request.getfixturevalue("postgres_server")
    schema = f"t_{uuid.uuid4().hex[:12]}"

    def created_index() -> bool:
        with psycopg.connect(server.base_url) as conn:
            return any("created_at" in row[0] for row in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename LIKE %s", (schema, "%jot")))

    with mnemostore.open(server.url(schema)) as store:
        store.collection("jot").put([{"id": "a", "topic": "x"}, {"id": "b", "topic": "y"}])
    assert created_index()
    declare(app, "unordered")
    with mnemostore.open(server.url(schema), migrate="auto") as store:
        assert [j.id for j in store.collection("jot").all()] == ["a", "b"]
    assert not created_index()
    declare(app, "v1")
    with mnemostore.open(server.url(schema), migrate="auto") as store:
        assert [j.id for j in store.collection("jot").all(order_by="-created_at")] == ["b", "a"]
    assert created_index()
