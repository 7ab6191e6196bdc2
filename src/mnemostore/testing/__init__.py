"""The conformance suite: every backend, ours or a plugin's, proves itself against it.

Opt in from a plugin's tests with a few lines::

    from mnemostore.testing import ConformanceSuite

    class TestMyStore(ConformanceSuite):
        @pytest.fixture
        def store_url(self, tmp_path):
            return f"mystore://{tmp_path}"   # an empty store, fresh for each test

or run it without writing a test: `pytest --mnemostore-url URL`, `mnemostore conformance URL`
or `mnemostore.testing.validate(URL)`. Tests that need a capability the backend does not
declare are skipped with the reason.

Names load on first use: the pytest plugin imports this package in every pytest run of
an environment where mnemostore is installed, and must cost nothing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

SUITE_VERSION = "1.19"
"""The version of the clause set; `docs/conformance-changelog.md` lists what each version added."""

_EXPORTS: dict[str, str] = {
    "ConformanceSuite": "mnemostore.testing.suite",
    "requires": "mnemostore.testing.requirements",
    "Report": "mnemostore.testing.report",
    "validate": "mnemostore.testing.validate",
}

__all__ = ["SUITE_VERSION", "ConformanceSuite", "Report", "requires", "validate"]

if TYPE_CHECKING:
    from .report import Report
    from .requirements import requires
    from .suite import ConformanceSuite
    from .validate import validate


__getattr__ = lazy_getattr(__name__, _EXPORTS)
