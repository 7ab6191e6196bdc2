"""The conformance `Report`: per-test outcomes, a per-capability table and the conformance level.

`ReportCollector` is the small pytest plugin object that fills it while the suite runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pytest

from ..core.capabilities import Capability
from .pytest_plugin import MARKER

Outcome = Literal["passed", "failed", "skipped", "xfailed"]
Level = Literal["full", "partial", "failing"]
CORE = "(core)"
"""The table row of clauses that need no capability: every backend must pass them."""


@dataclass(frozen=True)
class TestResult:
    """One suite test: where it comes from, what it needs, how it ended and why."""

    __test__ = False  # not a pytest test class

    nodeid: str
    name: str
    area: str
    capabilities: tuple[str, ...]
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True)
class CapabilityRow:
    capability: str
    declared: bool
    passed: int
    failed: int
    skipped: int
    xfailed: int

    @property
    def tested(self) -> bool:
        return self.passed > 0


@dataclass
class Report:
    """What `validate(url)` found. `level` is "full" only when every capability of the taxonomy is
    declared and passed at least one clause, nothing failed, and the whole suite ran."""

    url: str
    backend: str
    suite_version: str
    declared: list[str]
    results: list[TestResult] = field(default_factory=list)
    complete: bool = True
    """False when the run was a subset (`-k`): such a run never claims "full"."""
    errors: list[str] = field(default_factory=list)
    """Collection or session errors (a run with any is failing)."""

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def ok(self) -> bool:
        """True when nothing failed, nothing errored and at least one test ran."""
        return not self.errors and bool(self.results) and self.count("failed") == 0

    def failures(self) -> list[TestResult]:
        return [r for r in self.results if r.outcome == "failed"]

    def capability_rows(self) -> list[CapabilityRow]:
        """One row for clauses needing no capability, then one per capability of the taxonomy."""
        rows: list[CapabilityRow] = []
        for name in (CORE, *(c.value for c in Capability)):
            mine = [r for r in self.results if (name in r.capabilities) or (name == CORE and not r.capabilities)]
            counts = Counter(r.outcome for r in mine)
            rows.append(CapabilityRow(name, name == CORE or name in self.declared, counts["passed"],
                                      counts["failed"], counts["skipped"], counts["xfailed"]))
        return rows

    def gaps(self) -> list[str]:
        """Why the level is not "full" (empty when it is)."""
        reasons: list[str] = []
        rows = self.capability_rows()
        undeclared = [r.capability for r in rows if not r.declared]
        untested = [r.capability for r in rows if r.declared and not r.tested]
        if undeclared:
            reasons.append("undeclared: " + ", ".join(undeclared))
        if untested:
            reasons.append("declared but untested: " + ", ".join(untested))
        if not self.complete:
            reasons.append("a subset of the suite ran (-k)")
        return reasons

    @property
    def level(self) -> Level:
        if not self.ok:
            return "failing"
        return "partial" if self.gaps() else "full"

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url, "backend": self.backend, "suite_version": self.suite_version,
            "level": self.level, "ok": self.ok, "gaps": self.gaps(), "complete": self.complete,
            "declared": self.declared, "errors": self.errors,
            "totals": {o: self.count(o) for o in ("passed", "failed", "skipped", "xfailed")},
            "capabilities": [{**asdict(r), "tested": r.tested} for r in self.capability_rows()],
            "results": [asdict(r) for r in self.results],
        }


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def failure_message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The first line of the assertion (or error) message, not the traceback."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return first_line(crash.message)
    return first_line(str(report.longrepr))


def skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        return reason.removeprefix("Skipped: ")
    return first_line(str(report.longrepr))


class ReportCollector:
    """A pytest plugin object: records each conformance test's outcome into `results`."""

    def __init__(self) -> None:
        self.results: dict[str, TestResult] = {}
        self.errors: list[str] = []
        self._meta: dict[str, tuple[str, str, tuple[str, ...]]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            if item.get_closest_marker(MARKER) is None:
                continue
            needed = tuple(str(c) for m in item.iter_markers("mnemostore_requires") for c in m.args)
            function = getattr(item, "function", None)
            module = getattr(function, "__module__", "") or ""
            self._meta[item.nodeid] = (item.name, module.rsplit(".", 1)[-1], tuple(dict.fromkeys(needed)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid}: {failure_message(report)}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        meta = self._meta.get(report.nodeid)
        if meta is None:
            return
        outcome: Outcome | None = None
        message = ""
        if report.failed:
            outcome, message = "failed", failure_message(report)
            if report.when != "call":
                message = f"error in {report.when}: {message}"
        elif report.skipped and hasattr(report, "wasxfail"):
            outcome, message = "xfailed", str(report.wasxfail)
        elif report.skipped:
            outcome, message = "skipped", skip_reason(report)
        elif report.when == "call":
            outcome = "passed"
        previous = self.results.get(report.nodeid)
        if outcome is None or (previous is not None and previous.outcome == "failed"):
            return  # a passing teardown, or a later phase after a failure: keep the first failure
        self.results[report.nodeid] = TestResult(report.nodeid, *meta, outcome=outcome, message=message)
