"""Every code block in README.md and docs/**/*.md runs, for real, so the docs stay true.

What runs, by the block's language:

- ``python``: a page's python blocks form one program, run in page order in one fresh process
  (a later block uses what an earlier one defined: the README's `store`, `builder`, ...).
  A failure names the markdown file and line; the page's later blocks are then skipped.
- ``bash``, ``sh``, ``shell``: the whole block is one bash script, and each command in it (a
  line, or the lines an open quote or a trailing backslash joins) must succeed, ``a && b`` too.
- ``console``: only the ``$ `` lines (and ``> `` continuations) run; the other lines are output.
- anything else (``text``, ``toml``, ``json``, ``sql``, ...) never runs. The sample report
  in docs/writing-a-backend.md is checked by tests/test_conformance_cli.py.

Where: each program runs in its own empty temporary directory, with an empty ``HOME``,
``MNEMOSTORE_URL`` naming a SQLite store in that directory, and the bin directory of the
interpreter running these tests first on ``PATH`` (``mnemostore``, ``pytest``, ``python``);
``.venv/bin/`` in a shell block means that directory too. The guide's example plugin is
installed as the guide names it (distribution ``mystore-mnemostore``, entry point
``mystore = "mystore_mnemostore:MyBackend"``): the LMDB example (examples/mnemostore-lmdb)
under the name and scheme ``mystore``. ``/tmp/`` in a shell block is the block's own
temporary directory, so parallel runs never share a path. A run of the conformance suite
(a block naming ``--mnemostore-url``, ``--mnemostore-all-installed``, ``mnemostore
conformance`` or ``ConformanceSuite``) gets ``PYTEST_ADDOPTS=-k SLICE`` (one clause per URL):
these tests prove the commands work; the whole suite runs elsewhere.

Markers: HTML comments on the line(s) directly above a block's fence.

- ``<!-- not-run: REASON -->``: the block cannot run here (a set-up line CI runs itself, a
  command needing a server the tests do not start, the whole test suite). The reason is
  required and shown as the skip reason.
- ``<!-- snippet: standalone -->``: a python block that runs alone, not in its page's program.
- ``<!-- snippet: pytest -->``: a python block that is a test module: written to the file its
  first line names (``# tests/test_x.py``; else ``test_snippet.py``) and run with pytest.
- ``<!-- snippet: in-checkout -->``: a shell block run in the repository's root (commands
  naming the checkout's files: ``tests/...``, ``src``) instead of an empty directory.
- ``<!-- snippet: before: COMMAND -->``: a shell command run first, in the block's directory
  (what the block takes as given, e.g. a store that already exists).
- ``<!-- snippet: postgres URL -->``: URL in the block is replaced by a fresh schema on the
  test session's PostgreSQL server (tests/postgres_server.py).

An unmarked block is run, so a new snippet is tested by default; a marker that is not
directly above a block, a not-run without a reason, or an unknown directive fails
``test_markers_are_well_formed``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tests.docs_snippets import PYTHON, ROOT, RUNNER, SHELL, Block, pages, parse
from tests.postgres_server import postgres_server  # noqa: F401 - a fixture, started only when a block asks

EXAMPLE = ROOT / "examples" / "mnemostore-lmdb"
BIN = Path(sys.executable).parent
SLICE = "test_put_then_get_returns_equal_record and checkpoint"  # one clause per URL: the commands work
RUNS_THE_SUITE = re.compile(r"--mnemostore-url|--mnemostore-all-installed|mnemostore conformance|ConformanceSuite")
TIMEOUT = 300

PARSED = [parse(page) for page in pages()]
BLOCKS = [block for blocks, _ in PARSED for block in blocks]
RUNNABLE = [block for block in BLOCKS if block.language in PYTHON | SHELL]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory in which `pip install mystore-mnemostore` has been run."""
    site = tmp_path_factory.mktemp("site")
    info = site / "mystore_mnemostore-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mystore-mnemostore\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[mnemostore.backends]\nmystore = mystore_mnemostore:MyBackend\n")
    (site / "mystore_mnemostore.py").write_text(
        '"""The guide\'s `mystore` plugin: the LMDB example under the name and scheme the guide uses."""\n'
        "from mnemostore_lmdb import LMDBBackend\n\n\n"
        "class MyBackend(LMDBBackend):\n"
        '    name = "mystore"\n'
        '    schemes = ("mystore",)\n')
    return site


def environment(directory: Path, site: Path, code: str) -> dict[str, str]:
    """A user with nothing yet (empty HOME, the default store inside `directory`) who has
    installed mnemostore and the guide's plugin; a run of the suite is bounded to SLICE."""
    home = directory.parent / f"{directory.name}-home"
    home.mkdir(exist_ok=True)
    inherited = {key: value for key, value in os.environ.items()
                 if not key.startswith(("MNEMOSTORE_", "XDG_", "PYTEST_", "PYTHON", "VIRTUAL_ENV"))}
    env = {**inherited, "HOME": str(home), "MNEMOSTORE_URL": f"sqlite:///{directory / 'memory.db'}",
           "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE / "src")])}
    if RUNS_THE_SUITE.search(code):
        env["PYTEST_ADDOPTS"] = f"-p no:cacheprovider -k {shlex.quote(SLICE)}"
    return env


def prepared(block: Block, directory: Path, request: pytest.FixtureRequest) -> str:
    """The block's code with its postgres URL, `/tmp/` and `.venv/bin/` substituted."""
    code = block.code if block.language in PYTHON else block.script()
    for url in block.arguments("postgres "):
        assert url in code, f"{block.name}: <!-- snippet: postgres {url} --> but the block has no {url}"
        code = code.replace(url, request.getfixturevalue("postgres_server").url())
    if block.language not in PYTHON:
        code = re.sub(r"(?<![\w.])/tmp/", f"{directory}/", code)
        code = re.sub(r"(?<![\w/])\.venv/bin/", f"{BIN}/", code)
    return code


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def output(done: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout:\n{done.stdout[-4000:]}\n--- stderr:\n{done.stderr[-4000:]}"


class Programs:
    """Each page's python program, run once (by its first block's test) for all its blocks."""

    def __init__(self, factory: pytest.TempPathFactory, site: Path) -> None:
        self.factory = factory
        self.site = site
        self.done: dict[Path, tuple[dict[int, str | None], str]] = {}

    def result(self, block: Block, request: pytest.FixtureRequest) -> tuple[dict[int, str | None], str]:
        if block.page not in self.done:
            steps = [b for b in BLOCKS if b.page == block.page and b.language in PYTHON and b.runs
                     and not b.has("standalone") and not b.has("pytest")]
            self.done[block.page] = self.execute(steps, request)
        return self.done[block.page]

    def execute(self, steps: list[Block], request: pytest.FixtureRequest) -> tuple[dict[int, str | None], str]:
        directory = self.factory.mktemp("snippet")
        results = directory.parent / f"{directory.name}-results.jsonl"
        program = [{"page": str(b.page), "line": b.line, "code": prepared(b, directory, request),
                    "before": b.arguments("before:")} for b in steps]
        done = run([sys.executable, "-c", RUNNER, json.dumps(program), str(results)], directory,
                   environment(directory, self.site, "".join(b.code for b in steps)))
        outcomes = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        return {o["line"]: o["error"] for o in outcomes}, output(done)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory, plugin_site: Path) -> Programs:
    return Programs(tmp_path_factory, plugin_site)


def run_python(block: Block, programs: Programs, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if block.has("pytest"):
        first = block.code.splitlines()[0] if block.code.strip() else ""
        name = first[2:].strip() if re.fullmatch(r"# [\w/]+\.py", first) else "test_snippet.py"
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(prepared(block, tmp_path, request))
        done = run([sys.executable, "-m", "pytest", "-q", name], tmp_path,
                   environment(tmp_path, programs.site, block.code))
        assert done.returncode == 0, f"{block.name}: pytest {name} failed\n{output(done)}"
        return
    outcomes, printed = (programs.execute([block], request) if block.has("standalone")
                         else programs.result(block, request))
    if block.line not in outcomes:
        failed = next((line for line, error in outcomes.items() if error), None)
        if failed is not None:
            pytest.skip(f"{block.name} not reached: {block.page.relative_to(ROOT)}:{failed} failed before it")
        pytest.fail(f"{block.name}: the program did not report this block\n{printed}")
    error = outcomes[block.line]
    assert error is None, f"{block.name} failed:\n{error}\n{printed}"


def run_shell(block: Block, plugin_site: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    directory = ROOT if block.has("in-checkout") else tmp_path
    script = "\n".join([*block.arguments("before:"), prepared(block, tmp_path, request)])
    done = run(["bash", "-e", "-o", "pipefail", "-c", script], directory,
               environment(tmp_path, plugin_site, block.code))
    assert done.returncode == 0, f"{block.name} failed (exit {done.returncode}):\n{script}\n{output(done)}"


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.name for block in RUNNABLE])
def test_snippet(block: Block, programs: Programs, plugin_site: Path, request: pytest.FixtureRequest,
                 tmp_path: Path) -> None:
    if block.not_run is not None:
        pytest.skip(f"{block.name} is not run: {block.not_run}")
    if block.language in PYTHON:
        run_python(block, programs, request, tmp_path)
    else:
        run_shell(block, plugin_site, request, tmp_path)


def test_markers_are_well_formed() -> None:
    errors = [error for _, page_errors in PARSED for error in page_errors]
    assert not errors, "\n".join(errors)


def test_the_documented_commands_of_a_plugin_author_are_run() -> None:
    """The parser finds the blocks (a broken fence pattern would pass every page vacuously),
    and the guide's three ways to run the suite on a plugin are among the blocks that run."""
    runs = [block for block in RUNNABLE if block.runs]
    assert len(runs) >= 15
    for command in ("pytest --mnemostore-url 'mystore:///tmp/conformance/{test}'",
                    "mnemostore conformance 'mystore:///tmp/conformance/{test}'",
                    "class TestMyStore(ConformanceSuite)"):
        assert any(command in b.code and b.page.name == "writing-a-backend.md" for b in runs), command
