"""The `mnemostore` command line: demo, backends, info, exit codes and error output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.seed_kinds import seed_kinds

import mnemostore
from mnemostore.cli import main
from mnemostore.demo import DEMO_DIMENSION, PROJECT, HashingEmbedder
from mnemostore.demo import run as run_demo

DEMO_COUNTS = {"outcome": 5, "heuristic": 6, "anti_pattern": 3, "checkpoint": 5, "embedding": 0,
               "workflow_outcome": 3}
"""What the demo writes."""
EXPECTED_COUNTS = {**DEMO_COUNTS, "artifact_ref": 0, "user_preference": 0, "domain_knowledge": 0,
                   "session_handoff": 0, "langgraph_item": 0, "langgraph_write": 0}
"""`info` in this process, which knows every shipped kind (`seeds`)."""


@pytest.fixture(autouse=True)
def seeds() -> Iterator[None]:
    """The shipped kinds, which the demo uses, registered for each test and forgotten after it."""
    with seed_kinds():
        yield


@pytest.fixture
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A store of the embedded default kind under tmp_path, set as MNEMOSTORE_URL; cwd has no config file."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    monkeypatch.setenv("MNEMOSTORE_URL", url)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    yield url


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_writes_memory_and_recalls_it_with_a_filtered_search(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "demo")
    assert (code, err) == (0, "")
    assert store_url in out and "environment variable MNEMOSTORE_URL" in out
    search = out.split("Heuristics nearest to it", 1)[1].split("Anti-patterns", 1)[0]
    rows = [line for line in search.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and all("  coder  " in row for row in rows)
    assert "a test fails intermittently on CI but passes locally" in rows[0]
    runs = out.split("Workflow outcomes (mnemostore.kinds.workflow) nearest to it, where "
                     "F.workflow_id == 'fix-flaky-test':", 1)[1].split("Reinforced", 1)[0]
    assert [line.split()[2] for line in runs.splitlines() if line.strip()[:1].isdigit()] == ["failure", "success"]
    assert "confidence 0.75 -> 0.79 (4 of 5 uses succeeded)" in out
    assert "merge <- run_tests <- edit <- plan" in out
    assert "Restored the latest state as RunState" in out
    assert "step='docs', tests_passed=212, files_changed=['tests/test_upload.py', 'CHANGELOG.md']" in out
    assert ("notes, each once though both branches inherited them: ['reproduce with a fixed seed', "
            "'isolate the temp dir per test', '200 seeded runs green']") in out
    assert ("(the merge's rule: each branch's changes since edit folded once onto its state, branches in order: "
            "step last (the last branch to change it: write_docs); files_changed union; notes append; "
            "tests_passed max; any other field two branches changed differently would be a MergeConflict)") in out


def test_demo_is_repeatable_and_does_not_pile_up_records(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = run_cli(capsys, "demo")
    second = run_cli(capsys, "demo")
    assert first == second
    code, out, _ = run_cli(capsys, "info", "--json")
    info = json.loads(out)
    assert code == 0
    assert info["counts"] == EXPECTED_COUNTS
    assert (info["dimension"], info["metric"]) == (DEMO_DIMENSION, "cosine")


@pytest.mark.parametrize("scheme", ["memory", "sqlite", "file"])
def test_demo_runs_twice_on_every_builtin_backend(
        store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], scheme: str) -> None:
    url = {"memory": f"memory://demo-{tmp_path.name}", "sqlite": f"sqlite:///{tmp_path / 'demo.db'}",
           "file": f"file://{tmp_path / 'demo-dir'}"}[scheme]
    first = run_cli(capsys, "demo", "--url", url)
    second = run_cli(capsys, "demo", "--url", url)
    assert first[0] == 0 and first == second, first[2]
    assert json.loads(run_cli(capsys, "info", "--json", url)[1])["counts"] == EXPECTED_COUNTS


def test_demo_refuses_a_store_of_another_dimension_with_one_line(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with mnemostore.open(store_url) as store:
        store.heuristics.add(condition="c", strategy="s", embedding=np.ones(384, dtype=np.float32))
    code, out, err = run_cli(capsys, "demo")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("mnemostore: error: ")
    assert "384-dimensional" in err and "--url" in err and "Traceback" not in err


def test_demo_url_option_overrides_the_environment(
        store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = f"sqlite:///{tmp_path / 'other.db'}"
    code, out, _ = run_cli(capsys, "demo", "--url", other)
    assert code == 0 and other in out and "store from: command line" in out
    assert json.loads(run_cli(capsys, "info", "--json", other)[1])["counts"] == EXPECTED_COUNTS
    code, _, err = run_cli(capsys, "info", "--json")  # the environment's store: the demo did not create it
    assert code == 1 and "no mnemostore store at" in err


def test_demo_report_filters_inside_the_search() -> None:
    with mnemostore.open("memory://") as store:
        report = run_demo(store)
        assert [h.agent for h, _ in report.heuristic_hits] == ["coder"] * 3
        assert {a.agent for a, _ in report.anti_pattern_hits} <= {"coder", "reviewer"}
        scores = [score for _, score in report.heuristic_hits]
        assert scores == sorted(scores, reverse=True)
        assert report.counts == DEMO_COUNTS
        assert [run.result for run, _ in report.workflow_hits] == ["failure", "success"]
        assert {run.workflow_id for run, _ in report.workflow_hits} == {"fix-flaky-test"}
        assert store.heuristics.count({"project_id": PROJECT}) == 6


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    embed = HashingEmbedder()
    a, b = embed("flaky test on CI"), HashingEmbedder()("flaky test on CI")
    assert a.shape == (DEMO_DIMENSION,) and np.array_equal(a, b)
    assert float(np.linalg.norm(a)) == pytest.approx(1.0, abs=1e-6)
    near = float(a @ embed("the flaky CI test"))
    far = float(a @ embed("database index plan"))
    assert near > far
    assert not embed("").any()


def test_backends_lists_builtins_with_capabilities(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "backends")
    assert (code, err) == (0, "")
    assert out.startswith("BACKEND")
    assert "CAPABILITY" in out and "vector.filtered" in out
    code, out, _ = run_cli(capsys, "backends", "--json")
    backends = {b["name"]: b for b in json.loads(out)["backends"]}
    assert code == 0 and {"memory", "sqlite", "file"} <= set(backends)
    memory = backends["memory"]
    assert (memory["distribution"], memory["version"]) == ("mnemostore", mnemostore.__version__)
    assert memory["schemes"] == ["memory"] and memory["status"] == "ok" and memory["error"] is None
    assert "vector.cosine" in memory["capabilities"]
    assert backends["sqlite"]["status"] == "ok" and "sqlite" in backends["sqlite"]["schemes"]


def test_info_describes_a_store_and_masks_passwords(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    mnemostore.open("memory://agent:s3cret@box").close()  # a named in-memory store lives on in this process
    code, out, err = run_cli(capsys, "info", "memory://agent:s3cret@box")
    assert (code, err) == (0, "")
    assert "memory://agent:***@box" in out and "s3cret" not in out
    assert "schema version  unversioned" in out
    assert "source          command line" in out
    assert "heuristic" in out and "vector.filtered" in out
    code, out, _ = run_cli(capsys, "info", "--json", "memory://agent:s3cret@box")
    info = json.loads(out)
    assert info["backend"] == "memory" and info["url"] == "memory://agent:***@box"
    assert info["counts"] == dict.fromkeys(EXPECTED_COUNTS, 0)
    assert info["schema_version"] == "unversioned" and info["dimension"] is None


def test_info_follows_the_environment(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    mnemostore.open(store_url).close()
    info = json.loads(run_cli(capsys, "info", "--json")[1])
    assert info["url"] == store_url and info["backend"] == "sqlite"
    assert info["source"] == "environment variable MNEMOSTORE_URL"


@pytest.mark.parametrize("argv", [["info", "nosuch://x"], ["info", "not a url"], ["demo", "--url", "nosuch://"],
                                  ["info", "memory://", "--tenant", ""]])
def test_failures_exit_1_with_one_line_and_no_traceback(
        store_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 1 and out == ""
    assert err.startswith("mnemostore: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [[], ["nosuch"], ["info", "--bogus"], ["demo", "extra"], ["backends", "x"]])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "usage: mnemostore" in err


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["backends", "--help"], ["info", "--help"]])
def test_help_everywhere(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and out.startswith("usage: mnemostore")


def _fake_distribution(root: Path, dist: str, backend: str, module: str, source: str) -> None:
    """A real distribution on disk registering `backend` as `module:Backend`."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 2.0\n")
    (info / "entry_points.txt").write_text(f"[mnemostore.backends]\n{backend} = {module}:Backend\n")


def test_python_dash_m_runs_demo_info_and_backends_in_fresh_processes(store_url: str, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(site, "kaput-plugin", "kaput", "kaput_plugin", "raise RuntimeError('kaput at import')\n")
    _fake_distribution(site, "odd-plugin", "odd", "odd_plugin", "Backend = 42\n")
    env = {**os.environ, "MNEMOSTORE_URL": store_url}

    def run(*argv: str, extra_path: bool = False) -> subprocess.CompletedProcess[str]:
        run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))} \
            if extra_path else env
        return subprocess.run([sys.executable, "-m", "mnemostore", *argv], capture_output=True, text=True,
                              env=run_env, timeout=120, check=False)

    demo = run("demo")
    assert demo.returncode == 0, demo.stderr
    assert "a test fails intermittently on CI but passes locally" in demo.stdout
    info = run("info", "--json")
    assert info.returncode == 0, info.stderr
    # persisted across processes; the store's record of the workflow kind imports mnemostore's module of it
    assert json.loads(info.stdout)["counts"] == {**DEMO_COUNTS, "artifact_ref": 0}

    listed = run("backends", "--json", extra_path=True)
    assert listed.returncode == 0, listed.stderr
    backends = {b["name"]: b for b in json.loads(listed.stdout)["backends"]}
    assert backends["kaput"]["distribution"] == "kaput-plugin"
    assert "kaput at import" in backends["kaput"]["error"]
    assert "odd-plugin" in backends["odd"]["error"] and "not a mnemostore Backend" in backends["odd"]["error"]
    assert backends["memory"]["status"] == "ok" and "sqlite" in backends
    text = run("backends", extra_path=True)
    assert text.returncode == 0 and "failed to load (see below)" in text.stdout
    assert "kaput at import" in text.stdout

    bad = run("info", "nosuch://x")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("mnemostore: error: no installed backend handles the URL scheme 'nosuch'")
    assert run().returncode == 2


def test_readme_python_examples_run_as_written(store_url: str) -> None:
    """The README's code blocks are the documentation users copy: they must run, in order, as written."""
    from tests.docs_snippets import PYTHON, ROOT, parse

    blocks = [b.code for b in parse(ROOT / "README.md")[0] if b.language in PYTHON and b.runs
              and not b.directives]  # the README's program (tests/test_docs_snippets.py)
    assert len(blocks) >= 3
    code = compile("\n".join(blocks), "README.md", "exec", dont_inherit=True)  # no __future__ of this module
    from mnemostore.core.kinds import kind_names, kinds

    before = set(kind_names())
    try:
        for _ in range(2):  # people paste the quick start twice: it must hold on the store it left
            exec(code, {"__name__": "readme"})
    finally:
        for name in set(kind_names()) - before:  # the README's own kind: later tests' copies must not see it
            kinds.unregister(name)
    assert Path("agent-memory.db").exists()  # the quick start's relative sqlite URL, in the cwd


def test_info_shows_the_ledgers_newest_layout_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mnemostore.backends.sqlite.migrations import HISTORY
    from mnemostore.migrations.plan import library_migrations

    url = f"sqlite:///{tmp_path / 'versioned.db'}"
    mnemostore.open(url).close()
    info = json.loads(run_cli(capsys, "info", "--json", url)[1])
    applied = len(HISTORY) + len(library_migrations())
    assert info["schema_version"] == f"{HISTORY[-1].id} ({applied} migration(s) applied)"


def test_the_readme_set_up_lines_install_what_each_needs_and_ci_runs_the_second() -> None:
    """Line one installs only the core (the demo needs nothing else); line two is exactly .ci/run's command."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert readme.index("```bash") < readme.index("\n## ")  # the newcomer's first lines: above every section
    demo, tests = first_block.splitlines()
    assert demo == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/mnemostore demo"
    assert "[" not in demo  # no extras: not the test kit
    ci = (root / ".ci" / "run").read_text(encoding="utf-8")
    assert f'TEST_COMMAND="{tests}"' in ci and "'.[dev]'" in tests


@pytest.mark.parametrize("argv", [
    ["info", "{missing}"],
    ["export", "{missing}", "{tmp}/out.jsonl"],
    ["copy", "{missing}", "file://{tmp}/backup"],
    ["migrate", "status", "{missing}"],
    ["migrate", "plan", "{missing}"],
])
def test_reading_commands_refuse_a_store_that_does_not_exist_and_create_nothing(
        argv: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "typo.db"
    words = [word.format(missing=f"sqlite:///{missing}", tmp=tmp_path) for word in argv]
    done = subprocess.run([sys.executable, "-m", "mnemostore", *words], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("mnemostore: error: no mnemostore store at sqlite:///")
    assert str(missing) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "no").exists() and not (tmp_path / "out.jsonl").exists()
    assert not (tmp_path / "backup").exists()


def test_info_refuses_a_sqlite_file_that_is_not_a_store_and_leaves_it_unchanged(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    before = sorted(p.name for p in tmp_path.iterdir()), other.read_bytes()
    done = subprocess.run([sys.executable, "-m", "mnemostore", "info", f"sqlite:///{other}"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "no mnemostore store at" in done.stderr
    assert (sorted(p.name for p in tmp_path.iterdir()), other.read_bytes()) == before
