"""Every command fails with one line on stderr, never a traceback, and says where its URL came from.

Subprocess tests of the real `mnemostore` command (issue 19's sweep): a URL no backend handles,
a server that is not listening, and paths that cannot be read or written.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.plugin_dists import install_fake_distribution

from mnemostore.core.errors import ConfigError
from mnemostore.core.url import StoreURL

CLOSED = "postgresql://agent:s3cret-pw@127.0.0.1:1/db"
"""Nothing listens on port 1: the connection is refused at once."""

COMMANDS: dict[str, list[str]] = {
    "info": ["info", "{url}"],
    "export": ["export", "{url}", "{tmp}/out.jsonl"],
    "import": ["import", "{tmp}/archive.jsonl", "{url}"],
    "copy from": ["copy", "{url}", "file://{tmp}/backup"],
    "copy to": ["copy", "memory://", "{url}"],
    "reembed": ["reembed", "{url}", "file://{tmp}/staging", "--embedder", "mnemostore.demo:HashingEmbedder",
                "--model", "hashing", "--dimension", "8"],
    "migrate status": ["migrate", "status", "{url}"],
    "migrate plan": ["migrate", "plan", "{url}"],
    "migrate up": ["migrate", "up", "{url}", "--quiet"],
    "migrate down": ["migrate", "down", "{url}", "--quiet"],
    "migrate stamp": ["migrate", "stamp", "{url}"],
    "migrate accept": ["migrate", "accept", "{url}", "sqlite.0001_tables"],
    "migrate break-lock": ["migrate", "break-lock", "{url}"],
    "conformance": ["conformance", "{url}"],
    "demo": ["demo", "--url", "{url}"],
}


def mnemostore(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mnemostore", *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, **(env or {})}, check=False)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.startswith("mnemostore: error: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A real archive (of an empty store) for `import`."""
    done = mnemostore("export", "memory://", str(tmp_path / "archive.jsonl"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "archive.jsonl"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("url", "expected"), [
    ("nosuch://x", "no installed backend handles the URL scheme 'nosuch'"),
    (CLOSED, "Connection refused"),
])
def test_every_command_fails_on_a_bad_url_or_a_closed_port_with_one_line(
        command: str, url: str, expected: str, tmp_path: Path, archive: Path) -> None:
    argv = [word.format(url=url, tmp=tmp_path) for word in COMMANDS[command]]
    started = time.monotonic()
    done = mnemostore(*argv, cwd=tmp_path)
    assert_one_line_error(done, expected)
    assert "s3cret" not in done.stderr + done.stdout
    assert time.monotonic() - started < 60  # no retry loop, no suite run against a dead server


@pytest.mark.parametrize(("argv", "expected"), [
    (["export", "memory://", "{tmp}/missing-dir/out.jsonl"],
     "cannot write the archive {tmp}/missing-dir/out.jsonl: No such file or directory"),
    (["import", "{tmp}/missing.jsonl", "memory://"], "cannot read the archive {tmp}/missing.jsonl"),
    (["import", "{tmp}", "memory://"], "Is a directory"),
    (["info", "file:///proc/version/store"], "/proc/version"),
    (["demo", "--url", "sqlite:////proc/version/memory.db"], "/proc/version"),
    (["copy", "memory://", "file:///proc/version/store"], "/proc/version"),
])
def test_paths_that_cannot_be_read_or_written_fail_with_one_line(
        argv: list[str], expected: str, tmp_path: Path) -> None:
    done = mnemostore(*[word.format(tmp=tmp_path) for word in argv], cwd=tmp_path)
    assert_one_line_error(done, expected.format(tmp=tmp_path))
    assert not (tmp_path / "missing-dir").exists()


def test_a_conformance_run_against_a_closed_port_stops_before_any_clause(tmp_path: Path) -> None:
    done = mnemostore("conformance", CLOSED, cwd=tmp_path)
    assert_one_line_error(done, "the conformance suite did not run", "Connection refused")
    assert done.stdout == ""
    direct = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--mnemostore-url",
                             CLOSED], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert direct.returncode == int(pytest.ExitCode.USAGE_ERROR), direct.stdout + direct.stderr
    assert "the conformance suite did not run" in direct.stdout + direct.stderr
    assert " passed" not in direct.stdout and "FAILED" not in direct.stdout and "collected" not in direct.stdout


@given(user=st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8),
       password=st.text(st.sampled_from("ab9_-/?#@:"), min_size=1, max_size=12))
def test_a_password_with_special_characters_reads_exactly_or_is_refused_without_echoing_it(
        user: str, password: str) -> None:
    """urllib splits `user:pa/ss@host` at '/', taking 'ss' as the host: the parse either gives back
    exactly the user, password and host, or refuses with a message that quotes none of the URL."""
    url = f"postgresql://{user}:{password}@db.example:5432/agents"
    try:
        parsed = StoreURL.parse(url)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("cannot parse") and "percent-encode" in message
        fragments = {part for part in re.split(r"[/?#@:]", password) if len(part) >= 3}
        assert not any(part in message for part in fragments), message
        return
    assert (parsed.username, parsed.password, parsed.host, parsed.port, parsed.path) == (
        user, password, "db.example", 5432, "/agents")


def test_a_password_with_a_slash_is_refused_without_its_fragments(tmp_path: Path) -> None:
    done = mnemostore("info", "postgresql://user:p@ss/w0rd@127.0.0.1:1/db", cwd=tmp_path)
    assert_one_line_error(done, "percent-encode")
    assert "ss" not in done.stderr.replace("password", "").replace("postgresql", "")
    assert "w0rd" not in done.stderr


def test_errors_say_where_the_url_came_from(tmp_path: Path) -> None:
    from_env = mnemostore("info", cwd=tmp_path, env={"MNEMOSTORE_URL": CLOSED})
    assert_one_line_error(from_env, "Connection refused", "[store URL from environment variable MNEMOSTORE_URL]")
    (tmp_path / "mnemostore.toml").write_text('url = "nosuch://x"\n')
    env = {"MNEMOSTORE_URL": ""}
    for argv in (["info"], ["migrate", "status"], ["demo"]):
        from_file = mnemostore(*argv, cwd=tmp_path, env=env)
        assert_one_line_error(from_file, "'nosuch'", f"[store URL from {tmp_path / 'mnemostore.toml'}]")
    given_url = mnemostore("info", "nosuch://x", cwd=tmp_path, env=env)
    assert_one_line_error(given_url)
    assert "store URL from" not in given_url.stderr


def test_migrate_takes_the_configured_store_like_every_command(tmp_path: Path) -> None:
    """`migrate status|up|down` without a URL act on MNEMOSTORE_URL's store; a lone migration id is the target."""
    from mnemostore.backends.sqlite.migrations import HISTORY
    from mnemostore.migrations.plan import library_migrations

    env = {"MNEMOSTORE_URL": f"sqlite:///{tmp_path / 'configured.db'}"}
    up = mnemostore("migrate", "up", HISTORY[0].id, "--quiet", cwd=tmp_path, env=env)
    assert up.returncode == 0 and f"applied 1 migration(s): {HISTORY[0].id}" in up.stdout, up.stderr
    status = mnemostore("migrate", "status", cwd=tmp_path, env=env)
    assert status.returncode == 0 and "configured.db" in status.stdout
    pending = len(HISTORY) - 1 + len(library_migrations())  # the layout steps left and the library's own
    assert f"1 applied, {pending} pending" in status.stdout
    down = mnemostore("migrate", "down", "base", "--quiet", cwd=tmp_path, env=env)
    assert down.returncode == 0 and f"reverted 1 migration(s): {HISTORY[0].id}" in down.stdout, down.stderr
    accept = mnemostore("migrate", "accept", env["MNEMOSTORE_URL"], cwd=tmp_path, env=env)
    assert accept.returncode == 2 and "migration ID is missing" in accept.stderr


FLAKY_PLUGIN = """
import os
import sqlite3

from mnemostore.backends.sqlite.backend import SQLiteBackend
from mnemostore.core.protocol import DRIVER_CALLS

calls = [0]


def failing(name):
    def method(self, *args, **kwargs):
        if name == os.environ["FLAKY_FAIL"]:
            calls[0] += 1
            if calls[0] > int(os.environ["FLAKY_AFTER"]):
                raise sqlite3.OperationalError("disk I/O error")
        return getattr(super(FlakyBackend, self), name)(*args, **kwargs)
    method.__name__ = name
    return method


class FlakyBackend(SQLiteBackend):
    name = "flaky"
    schemes = ("flaky",)
    for _name in DRIVER_CALLS:
        locals()[_name] = failing(_name)
"""
"""A plugin: the SQLite backend whose driver raises in the method $FLAKY_FAIL names once it has
answered $FLAKY_AFTER calls of it, so the failure comes mid-run, after the store opened."""


@pytest.fixture(scope="module")
def flaky(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's site directory (for PYTHONPATH), with `demo.db` (the demo's store) and
    `archive.jsonl` (its export) beside it."""
    site = tmp_path_factory.mktemp("flaky")
    install_fake_distribution(site, "flaky-driver", {"mnemostore.backends": {"flaky": "flaky_driver:FlakyBackend"}},
                              {"flaky_driver": FLAKY_PLUGIN})
    sys.path.remove(str(site))  # only the subprocesses see it, through PYTHONPATH
    for argv in (["demo", "--url", "sqlite:///demo.db"], ["export", "sqlite:///demo.db", "archive.jsonl"]):
        done = mnemostore(*argv, cwd=site)
        assert done.returncode == 0, done.stderr
    return site


@pytest.mark.parametrize(("argv", "method", "after"), [
    (["export", "flaky:///demo.db", "out.jsonl"], "query", 1),  # the second kind's page
    (["copy", "flaky:///demo.db", "file:///{tmp}/backup"], "query", 1),
    (["copy", "sqlite:///demo.db", "flaky:///copy.db"], "put", 1),
    (["import", "archive.jsonl", "flaky:///imported.db"], "put", 1),
    (["reembed", "flaky:///demo.db", "file:///{tmp}/staging", "--embedder", "mnemostore.demo:HashingEmbedder",
      "--model", "hashing", "--dimension", "8"], "query", 1),
    (["info", "flaky:///demo.db"], "count", 2),
    (["migrate", "status", "flaky:///demo.db"], "read_meta", 1),  # the ledger, after the params on open
    (["migrate", "up", "flaky:///fresh.db", "--quiet"], "read_meta", 1),
    (["migrate", "down", "flaky:///demo.db", "base", "--quiet"], "read_meta", 1),
    (["migrate", "stamp", "flaky:///fresh.db"], "write_meta", 0),  # the ledger stamp itself
    (["demo", "--url", "flaky:///new.db"], "put", 1),
], ids=lambda value: value[0] + (" " + value[1] if value[0] in ("migrate", "copy") else "")
    if isinstance(value, list) else str(value))
def test_a_driver_error_mid_run_is_one_line_naming_the_backend_and_the_call(
        argv: list[str], method: str, after: int, flaky: Path, tmp_path: Path) -> None:
    """Core's own backend calls (the migration runner, copy, export) turn a driver's error into a
    BackendError as the facade's do: before that, each of these printed a traceback."""
    shutil.copy(flaky / "demo.db", tmp_path / "demo.db")
    shutil.copy(flaky / "archive.jsonl", tmp_path / "archive.jsonl")
    done = mnemostore(*[word.format(tmp=tmp_path) for word in argv], cwd=tmp_path,
                      env={"PYTHONPATH": str(flaky), "FLAKY_FAIL": method, "FLAKY_AFTER": str(after)})
    assert_one_line_error(done, f"the flaky backend failed in {method} on flaky:///",
                          f"{sqlite3.OperationalError.__name__}: disk I/O error")
    assert not (tmp_path / "out.jsonl").exists()


def test_reading_commands_refuse_a_foreign_sqlite_file_and_leave_it_byte_identical(tmp_path: Path) -> None:
    """`info` (and every reading command) on a SQLite file mnemostore did not make: one line saying
    so and how to make it a store; the file unchanged, and no -wal, -shm or lock file beside it."""
    with sqlite3.connect(tmp_path / "other.db") as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
    conn.close()
    before = (tmp_path / "other.db").read_bytes()
    for argv in (["info", "sqlite:///other.db"], ["export", "sqlite:///other.db", "out.jsonl"],
                 ["copy", "sqlite:///other.db", "memory://"], ["migrate", "status", "sqlite:///other.db"],
                 ["migrate", "plan", "sqlite:///other.db"]):
        done = mnemostore(*argv, cwd=tmp_path)
        assert_one_line_error(done, "no mnemostore store at sqlite:///other.db",
                              "not a mnemostore store", "nothing was created or changed",
                              "`mnemostore migrate up sqlite:///other.db` makes it one")
        assert (tmp_path / "other.db").read_bytes() == before, argv
        assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"], argv
    made = mnemostore("migrate", "up", "sqlite:///other.db", "--quiet", cwd=tmp_path)  # what the message says
    assert made.returncode == 0, made.stderr
    assert mnemostore("info", "sqlite:///other.db", cwd=tmp_path).returncode == 0
    with sqlite3.connect(tmp_path / "other.db") as conn:
        assert conn.execute("SELECT body FROM notes").fetchall() == [("kept",)]
    conn.close()
