"""`validate(url) -> Report`: run the conformance suite in-process against one store URL.

The run is isolated from the caller's project: its own empty rootdir and ini file (so the
caller's addopts, testpaths and conftest.py do not apply), no cache, no terminal output.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..core.url import mask_password
from . import SUITE_VERSION
from .locations import backend_for, check_reachable, declared_capabilities, fresh_store
from .report import Report, ReportCollector

INI = "[pytest]\nxfail_strict = true\n"
"""A known bug is a strict xfail: a clause marked xfail that passes fails the run."""


@contextmanager
def _hypothesis_storage(root: Path) -> Iterator[None]:
    """Keep hypothesis' example database out of the caller's working directory."""
    key = "HYPOTHESIS_STORAGE_DIRECTORY"
    before = os.environ.get(key)
    if before is None:
        os.environ[key] = str(root / ".hypothesis")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)


def pytest_args(url: str, root: Path, keyword: str | None, junit_xml: Path | None,
                extra: Sequence[str]) -> list[str]:
    args = [str(root), "-c", str(root / "pytest.ini"), "--rootdir", str(root), "-p", "no:cacheprovider",
            "-p", "no:terminal", "--mnemostore-url", url]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "mnemostore.testing.pytest_plugin"]
    if keyword:
        args += ["-k", keyword]
    if junit_xml is not None:
        args += [f"--junitxml={junit_xml}"]
    return [*args, *extra]


def validate(url: str, *, keyword: str | None = None, junit_xml: str | Path | None = None,
             pytest_options: Sequence[str] = ()) -> Report:
    """Run the whole suite (or the `-k keyword` subset) against fresh stores derived from `url`.

    `url` follows the plugin's rules (docs/writing-a-backend.md): a location, store name or
    prefix is varied per test, or `{test}` in the URL is replaced. Raises a MnemostoreError
    before running anything if no installed backend handles the URL.
    """
    backend = backend_for(url)
    sample = fresh_store(url, Path("unused"), token="check").url  # refuse an unusable URL before pytest starts
    check_reachable(url)
    collector = ReportCollector()
    junit = Path(junit_xml).resolve() if junit_xml is not None else None
    with tempfile.TemporaryDirectory(prefix="mnemostore-conformance-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text(INI)
        with _hypothesis_storage(root):
            code = pytest.main(pytest_args(url, root, keyword, junit, pytest_options), plugins=[collector])
    report = Report(
        url=mask_password(url), backend=backend.name, suite_version=SUITE_VERSION,
        declared=sorted(c.value for c in declared_capabilities(sample)),
        results=sorted(collector.results.values(), key=lambda r: r.nodeid),
        complete=not keyword, errors=list(collector.errors))
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        report.errors.append(f"pytest stopped with exit code {int(code)} ({pytest.ExitCode(code).name})")
    if not report.results and not report.errors:
        report.errors.append(f"no conformance test ran{f' (-k {keyword!r} matched none)' if keyword else ''}")
    return report
