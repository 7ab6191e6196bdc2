"""`mnemostore conformance URL` and `validate(url)`: the table, JSON, JUnit XML and exit codes,
against the reference backend and against a deliberately broken plugin found by its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from tests import conformance_sample
from tests.plugin_dists import install_fake_distribution

from mnemostore.backends.memory import MemoryBackend
from mnemostore.cli import main
from mnemostore.core.capabilities import Capability
from mnemostore.core.records import Record
from mnemostore.core.registry import registry
from mnemostore.testing import SUITE_VERSION, validate
from mnemostore.testing.report import Report, TestResult

BROKEN_PLUGIN = """
    from mnemostore.backends.memory import MemoryBackend

    class DropsMetadata(MemoryBackend):
        '''The reference backend, except that it forgets every record's metadata.'''
        name = "drops-metadata"
        schemes = ("drops-metadata",)

        def put(self, kind, records):
            super().put(kind, [r.model_copy(update={"metadata": {}}) for r in records])
"""
METADATA_CLAUSE = "test_nested_metadata_round_trips_with_exact_types"
SUBSET = "test_put_then_get_returns_equal_record or test_get_of_missing_ids or " + METADATA_CLAUSE


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_subprocess(cwd: Path, *argv: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "mnemostore", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_whole_suite_passes_on_the_reference_backend(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "conformance", "memory://", "--json", "report.json", "--junit", "junit.xml")
    assert code == 0, out + err
    assert f"mnemostore conformance suite {SUITE_VERSION}: memory:// (backend memory)" in out
    # The guide's sample report is this output (suite version, clause counts, skip reasons): a new clause or
    # version fails here until the sample is regenerated (`python -m tests.conformance_sample`).
    assert conformance_sample.documented() == f"$ mnemostore {' '.join(conformance_sample.COMMAND)}\n{out}"
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["CAPABILITY", "DECLARED", "PASSED", "FAILED", "SKIPPED"]
    rows = {line.split()[0]: line.split()[1:] for line in table[2:]}
    assert set(rows) == {"(core)", *(c.value for c in Capability)}
    assert rows["persistent"][:3] == ["no", "0", "0"] and int(rows["persistent"][3]) > 0  # skipped, not failed
    assert rows["vector.l2"][0] == "yes" and int(rows["vector.l2"][1]) > 0 and rows["vector.l2"][2] == "0"
    assert "checks its absence" in out.split("Skipped:", 1)[1]  # skip reasons are shown
    # Suite 1.1's fault clause tests `transactions`: only the undeclared capabilities keep it partial.
    assert "conformance level: partial (undeclared: persistent, multi_process, crash_safe)" in out
    assert int(rows["transactions"][1]) > 0 and rows["transactions"][2] == "0"
    assert not list(tmp_path.glob(".hypothesis"))  # nothing left in the working directory but what was asked

    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["ok"], report["level"], report["suite_version"]) == (True, "partial", SUITE_VERSION)
    assert report["totals"]["failed"] == 0 and report["totals"]["passed"] > 300
    assert report["complete"] is True
    assert {r["area"] for r in report["results"]} >= {"basics", "fidelity", "filters", "vectors", "checkpoints"}
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert int(suite.get("failures", -1)) == 0 and int(suite.get("errors", -1)) == 0
    assert int(suite.get("tests", 0)) == report["totals"]["passed"] + report["totals"]["skipped"]


def test_the_command_runs_as_a_subprocess_with_json_on_stdout(tmp_path: Path) -> None:
    done = run_subprocess(tmp_path, "conformance", "memory://", "-k", SUBSET, "--json", "-")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["level"] == "partial" and "a subset of the suite ran (-k)" in report["gaps"]
    assert {r["name"].split("[")[0] for r in report["results"]} == set(SUBSET.split(" or "))
    assert all(r["outcome"] == "passed" for r in report["results"])


def test_a_broken_plugin_fails_with_the_clause_named(tmp_path: Path) -> None:
    site = tmp_path / "site"
    entry_points = {"mnemostore.backends": {"drops-metadata": "dm_plugin:DropsMetadata"}}
    install_fake_distribution(site, "drops-metadata", entry_points, {"dm_plugin": BROKEN_PLUGIN})
    sys.path.remove(str(site))  # only the subprocess sees it, through PYTHONPATH
    done = run_subprocess(tmp_path, "conformance", "drops-metadata://", "-k", SUBSET,
                          "--json", "report.json", "--junit", "junit.xml", pythonpath=site)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = done.stdout.split("Failed:", 1)[1]
    assert f"fidelity: {METADATA_CLAUSE}[sync-outcome]" in failed
    assert f"fidelity: {METADATA_CLAUSE}[async-heuristic]" in failed  # the AsyncStore sees the same defect
    assert "assert" in failed.lower()  # the assertion's first line is shown
    assert "conformance level: failing" in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["level"] == "failing" and report["ok"] is False
    assert METADATA_CLAUSE in {r["name"].split("[")[0] for r in report["results"] if r["outcome"] == "failed"}
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and int(suite.get("failures", 0)) == report["totals"]["failed"] > 0


class ForgetsVectors(MemoryBackend):
    """Declares vector search but stores no embedding: every vector clause must fail."""

    name: ClassVar[str] = "forgets-vectors"
    schemes: ClassVar[tuple[str, ...]] = ("forgets-vectors",)

    def put(self, kind: str, records: list[Record]) -> None:  # type: ignore[override]
        super().put(kind, [r.model_copy(update={"embedding": None}) for r in records])


@pytest.fixture
def forgets_vectors() -> Iterator[str]:
    registry.register(ForgetsVectors, replace=True)
    yield f"forgets-vectors://{uuid.uuid4().hex}"
    registry.unregister(ForgetsVectors.name)


def test_validate_counts_a_declared_but_broken_capability_as_failed(forgets_vectors: str) -> None:
    report = validate(forgets_vectors, keyword="test_top_k_matches_numpy_exactly or " + METADATA_CLAUSE)
    rows = {row.capability: row for row in report.capability_rows()}
    assert rows["vector.cosine"].failed > 0 and rows["vector.cosine"].passed == 0
    assert rows["(core)"].failed == 0 and rows["(core)"].passed > 0
    assert report.level == "failing" and not report.ok


def test_unknown_scheme_is_an_error_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "conformance", "nosuch://x")
    assert (code, out) == (1, "")
    assert "no installed backend handles the URL scheme 'nosuch'" in err


def test_a_keyword_matching_nothing_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "conformance", "memory://", "-k", "no_such_clause_anywhere")
    assert code == 1
    assert "no conformance test ran (-k 'no_such_clause_anywhere' matched none)" in out


def result(capabilities: tuple[str, ...], outcome: str = "passed") -> TestResult:
    return TestResult("id", "test", "area", capabilities, outcome)  # type: ignore[arg-type]


def test_level_is_full_only_when_every_capability_is_declared_and_tested() -> None:
    everything = [c.value for c in Capability]
    full = Report("x://", "x", SUITE_VERSION, everything, [result(()), *(result((c,)) for c in everything)])
    assert (full.level, full.gaps()) == ("full", [])
    undeclared = Report("x://", "x", SUITE_VERSION, everything[1:], full.results)
    assert undeclared.level == "partial" and undeclared.gaps() == [f"undeclared: {everything[0]}"]
    untested = Report("x://", "x", SUITE_VERSION, everything, full.results[:-1])
    assert untested.level == "partial" and untested.gaps() == [f"declared but untested: {everything[-1]}"]
    skipped = result((everything[-1],), "skipped")
    all_skipped = Report("x://", "x", SUITE_VERSION, everything, [*full.results[:-1], skipped])
    assert all_skipped.level == "partial"
    subset = Report("x://", "x", SUITE_VERSION, everything, full.results, complete=False)
    assert subset.level == "partial"
    failed = Report("x://", "x", SUITE_VERSION, everything, [*full.results, result((), "failed")])
    assert failed.level == "failing"
