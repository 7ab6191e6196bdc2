"""`mnemostore migrate ...`, `copy`, `export` and `import` through `mnemostore.cli.main`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.copy_data import checksums, fill, snapshot

import mnemostore
from mnemostore.cli import main
from mnemostore.core.store import open_backend
from mnemostore.migrations.locking import LockInfo

LAYOUT = ["sqlite.0001_tables", "sqlite.0002_project_indexes", "sqlite.0003_compressed_docs",
          "sqlite.0004_payload_column", "sqlite.0005_leaner_indexes", "sqlite.0006_bare_payloads",
          "sqlite.0007_framed_states", "sqlite.0008_latest_index"]
STATE_HASH = "mnemostore.0001_state_hash_xxh3"
LANGGRAPH_ITEMS = "mnemostore.0002_langgraph_item_kind"
LANGGRAPH_WRITES = "mnemostore.0003_langgraph_write_kind"
"""mnemostore's own record migrations, in every store's history after the layout steps."""
HISTORY = [*LAYOUT, STATE_HASH, LANGGRAPH_ITEMS, LANGGRAPH_WRITES]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A current SQLite store holding a few records."""
    location = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(location) as store:
        store.outcomes.add(task_type="t", success=True, id="o1")
        store.heuristics.add(condition="c", strategy="s", id="h1", embedding=[1.0, 0.0, 0.0])
    return location


@pytest.fixture
def app_migrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two versions of an application's record migration module: the second edits the first."""
    for name, team in (("app_migrations_v1", "core"), ("app_migrations_v2", "platform")):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
            from mnemostore.migrations import add_metadata_default
            MIGRATIONS = [add_metadata_default("app.0001_team", "team", {team!r}, kinds=["outcome"])]
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "app_migrations_v1:MIGRATIONS", "app_migrations_v2:MIGRATIONS"


def test_status_shows_ledger_params_and_lock(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "migrate", "status", url)
    assert (code, err) == (0, "")
    assert f"store   {url} (sqlite)" in out
    assert "params  dimension 3, metric cosine" in out
    assert "11 applied, 0 pending" in out and "state   current" in out and "lock    free" in out
    assert all(id in out for id in HISTORY)
    code, out, _ = run_cli(capsys, "migrate", "status", url, "--json", "--check")
    data = json.loads(out)
    assert code == 0 and data["current"] and [e["id"] for e in data["applied"]] == HISTORY
    assert data["params"] == {"dimension": 3, "metric": "cosine"} and data["lock"] is None
    assert data["pending"] == data["changed"] == data["unknown"] == []


def test_down_plan_up_round_trip(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, f"reverted 1 migration(s): {LANGGRAPH_WRITES}\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, f"reverted 1 migration(s): {LANGGRAPH_ITEMS}\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, f"reverted 1 migration(s): {STATE_HASH}\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0008_latest_index\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0007_framed_states\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0006_bare_payloads\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0005_leaner_indexes\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0004_payload_column\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0003_compressed_docs\n")
    code, out, _ = run_cli(capsys, "migrate", "down", url, "--dry-run", "--sql")
    assert code == 0 and out.startswith("1. revert sqlite.0002_project_indexes [layout]")
    assert 'DROP INDEX IF EXISTS "mnemo_outcome_project_id";' in out
    applied = json.loads(run_cli(capsys, "migrate", "status", url, "--json")[1])["applied"]
    assert [e["id"] for e in applied] == LAYOUT[:2]  # the dry run changed nothing

    code, out, _ = run_cli(capsys, "migrate", "down", url, "--quiet")
    assert (code, out) == (0, "reverted 1 migration(s): sqlite.0002_project_indexes\n")
    code, out, _ = run_cli(capsys, "migrate", "status", url, "--check")
    assert code == 1 and "1 applied, 10 pending" in out and "Pending (in run order):" in out

    code, out, _ = run_cli(capsys, "migrate", "plan", url, "--sql")
    assert code == 0 and "1. apply sqlite.0002_project_indexes [layout]" in out and "CREATE INDEX" in out
    code, out, _ = run_cli(capsys, "migrate", "up", url, "--dry-run")
    assert code == 0 and "apply sqlite.0002_project_indexes" in out and "CREATE INDEX" not in out
    code, out, _ = run_cli(capsys, "migrate", "up", url)
    assert (code, out) == (0, "applied 10 migration(s): sqlite.0002_project_indexes, sqlite.0003_compressed_docs, "
                              "sqlite.0004_payload_column, sqlite.0005_leaner_indexes, sqlite.0006_bare_payloads, "
                              "sqlite.0007_framed_states, sqlite.0008_latest_index, "
                              f"{STATE_HASH}, {LANGGRAPH_ITEMS}, {LANGGRAPH_WRITES}\n")
    assert run_cli(capsys, "migrate", "up", url)[1] == "nothing to apply: the store is current\n"
    with mnemostore.open(url) as store:
        assert store.outcomes.get("o1") is not None


def test_down_to_base_then_up_to_a_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    mnemostore.open(url).close()
    code, out, _ = run_cli(capsys, "migrate", "down", url, "base")
    assert code == 0 and out == f"reverted {len(HISTORY)} migration(s): {', '.join(reversed(HISTORY))}\n"
    code, out, _ = run_cli(capsys, "migrate", "up", url, LAYOUT[0])
    assert code == 0 and out == f"applied 1 migration(s): {LAYOUT[0]}\n"
    code, out, _ = run_cli(capsys, "migrate", "stamp", url)
    assert code == 0 and LAYOUT[1] in out and LAYOUT[2] in out and STATE_HASH in out
    data = json.loads(run_cli(capsys, "migrate", "status", url, "--json")[1])
    assert [(e["id"], e["how"]) for e in data["applied"]] == [
        (LAYOUT[0], "applied"), *((id, "stamped") for id in HISTORY[1:])]


def test_application_migrations_changed_and_accepted(
        url: str, app_migrations: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    first, second = app_migrations
    code, out, _ = run_cli(capsys, "migrate", "status", url, "--migrations", first, "--check")
    assert code == 1 and "app.0001_team" in out.split("Pending")[1]
    code, out, _ = run_cli(capsys, "migrate", "up", url, "--migrations", first)
    assert (code, out) == (0, "applied 1 migration(s): app.0001_team\n")
    with mnemostore.open(url) as store:
        assert store.outcomes.get("o1").metadata == {"team": "core"}

    code, out, _ = run_cli(capsys, "migrate", "status", url)
    assert code == 0 and "Applied but unknown to this mnemostore" in out and "app.0001_team" in out.split("unknown")[1]
    code, out, _ = run_cli(capsys, "migrate", "status", url, "--migrations", second)
    assert "Changed since applied" in out and "state   needs attention" in out
    code, out, err = run_cli(capsys, "migrate", "up", url, "--migrations", second)
    assert code == 1 and out == "" and "changed since they ran: app.0001_team" in err and "migrate accept" in err
    code, out, _ = run_cli(capsys, "migrate", "accept", url, "app.0001_team", "--migrations", second)
    assert code == 0 and out.startswith("accepted the changed content of app.0001_team")
    assert json.loads(run_cli(capsys, "migrate", "status", url, "--json", "--migrations", second)[1])["current"]


def test_a_held_lock_is_shown_waited_for_and_broken(capsys: pytest.CaptureFixture[str]) -> None:
    url = "memory://cli-locked"
    mnemostore.open(url).close()
    backend = open_backend(url)
    holder = LockInfo.mine(None)
    assert backend.migration_lock().try_acquire(holder)
    code, out, _ = run_cli(capsys, "migrate", "status", url)
    assert code == 0 and f"lock    {holder.holder}" in out
    code, out, err = run_cli(capsys, "migrate", "down", url, "--lock-wait", "0.05")
    assert code == 1 and "holds this store's migration lock" in err and "break-lock" in err
    code, out, _ = run_cli(capsys, "migrate", "break-lock", url)
    assert code == 0 and out.startswith(f"freed the migration lock held by {holder.holder}")
    assert run_cli(capsys, "migrate", "break-lock", url)[1] == "the migration lock was not held\n"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "migrate")[0] == 2
    assert run_cli(capsys, "migrate", "accept", "memory://x")[0] == 2
    code, _, err = run_cli(capsys, "migrate", "status", "memory://x", "--migrations", "nope")
    assert code == 1 and "expected MODULE:NAME" in err


def test_copy_export_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    counts = fill(source, per_kind=4)
    total = sum(counts.values())
    copied = f"file://{tmp_path / 'copied'}"
    code, out, err = run_cli(capsys, "copy", source, copied)
    assert (code, err) == (0, "")
    assert out.startswith("KIND") and f"copied {total} records from {source} to {copied}" in out
    assert "verified: counts and checksums match" in out
    assert checksums(copied) == checksums(source)

    code, out, err = run_cli(capsys, "copy", source, copied)
    assert code == 1 and out == "" and "already holds records" in err and "--overwrite" in err
    assert run_cli(capsys, "copy", source, copied, "--overwrite", "--quiet") == (0, "", "")

    archive = tmp_path / "store.jsonl.gz"
    code, out, _ = run_cli(capsys, "export", source, str(archive), "--json")
    report = json.loads(out)
    assert code == 0 and report["count"] == total and archive.exists()
    assert run_cli(capsys, "export", source, str(archive))[0] == 1

    imported = "memory://cli-imported"
    code, out, _ = run_cli(capsys, "import", str(archive), imported, "--batch-size", "3")
    assert code == 0 and f"imported {total} records" in out
    assert checksums(imported) == checksums(source)

    code, out, _ = run_cli(capsys, "copy", source, "memory://cli-some", "--kinds", "outcome,checkpoint", "--json")
    assert code == 0 and list(json.loads(out)["kinds"]) == ["outcome", "checkpoint"]
    assert not snapshot("memory://cli-some")["heuristic"]


def test_import_of_a_damaged_archive_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "cut.jsonl"
    archive.write_text('{"format": "mnemostore-archive", "version": 1, "params": {}, "kinds": ["outcome"]}\n')
    code, out, err = run_cli(capsys, "import", str(archive), "memory://cli-damaged")
    assert code == 1 and out == "" and "ends without its footer line" in err and "Traceback" not in err


def test_progress_bars_on_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    source = "memory://cli-progress"
    fill(source, per_kind=2)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    code, out, err = run_cli(capsys, "copy", source, f"sqlite:///{tmp_path / 'bars.db'}")
    assert code == 0 and "copy heuristic" in err and "verify checkpoint" in err
    code, out, err = run_cli(capsys, "copy", source, f"sqlite:///{tmp_path / 'quiet.db'}", "--quiet")
    assert (code, out, err) == (0, "", "")
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    code, out, err = run_cli(capsys, "export", source, str(tmp_path / "a.jsonl"))
    assert code == 0 and err == ""


def test_rich_progress_adapter() -> None:
    from rich.console import Console

    from mnemostore.cli.progress import RichProgress

    buffer = io.StringIO()
    with RichProgress(Console(file=buffer, force_terminal=True, width=100)) as bar:
        bar.begin("copy outcome", 10)
        bar.advance(4)
        bar.advance(6)
        bar.end()
        bar.begin("verify outcome", None)
        bar.advance(7)
        bar.begin("next stage", 3)  # begin ends the previous stage
    text = buffer.getvalue()
    assert "copy outcome" in text and "10/10" in text and "7/7" in text and "next stage" in text


def test_importing_mnemostore_and_its_cli_loads_no_rich() -> None:
    code = ("import sys, mnemostore, mnemostore.cli, mnemostore.migrations; mnemostore.open('memory://').close(); "
            "mnemostore.migrations.copy; mnemostore.copy; print('rich' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
