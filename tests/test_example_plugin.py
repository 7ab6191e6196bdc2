"""The worked third-party plugin (examples/mnemostore-lmdb) proven through all three opt-in paths.

It is installed the way pip would (a real dist-info with its entry point, its sources on
the path) into subprocesses, so discovery, the suite and the report run as a plugin
author's would. The subclass path runs the whole suite; the other two a slice of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "mnemostore-lmdb"
SLICE = "test_put_then_get_returns_equal_record or test_tenants_cannot_read or test_processes_reinforcing"

pytest.importorskip("lmdb")


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process in which `pip install mnemostore-lmdb` has been run."""
    site = tmp_path_factory.mktemp("site")
    info = site / "mnemostore_lmdb-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mnemostore-lmdb\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[mnemostore.backends]\nlmdb = mnemostore_lmdb:LMDBBackend\n")
    path = os.pathsep.join([str(site), str(EXAMPLE / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_backends_lists_the_plugin_with_its_distribution(plugin_env: dict[str, str], tmp_path: Path) -> None:
    result = run(["-m", "mnemostore", "backends", "--json"], plugin_env, tmp_path)
    assert result.returncode == 0, result.stderr
    entry = next(b for b in json.loads(result.stdout)["backends"] if b["name"] == "lmdb")
    assert entry["distribution"] == "mnemostore-lmdb"
    assert "transactions" in entry["capabilities"]


def test_subclass_path_the_plugins_own_test_file_passes_the_whole_suite(
        plugin_env: dict[str, str], tmp_path: Path) -> None:
    result = run(["-m", "pytest", str(EXAMPLE / "tests"), "-q", "-p", "no:cacheprovider",
                  "--rootdir", str(EXAMPLE)], plugin_env, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary


def test_pytest_plugin_path_needs_no_test_file(plugin_env: dict[str, str], tmp_path: Path) -> None:
    url = f"lmdb://{tmp_path / 'stores' / '{test}'}"
    result = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--mnemostore-url", url, "-k", SLICE],
                 plugin_env, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout.strip().splitlines()[-1]
    assert list((tmp_path / "stores").rglob("*")) == []  # every test's store dropped (LMDBBackend.drop)


def test_conformance_command_path_reports_per_capability(plugin_env: dict[str, str], tmp_path: Path) -> None:
    url = f"lmdb://{tmp_path / 'stores' / '{test}'}"
    report = tmp_path / "report.json"
    result = run(["-m", "mnemostore", "conformance", url, "--json", str(report), "-k", SLICE], plugin_env, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["totals"]["failed"] == 0 and data["totals"]["passed"] > 0
    assert "multi_process" in result.stdout
    assert list((tmp_path / "stores").rglob("*")) == []
