"""The guard clause: a subclass that deletes or quietly overrides a clause fails; a strict xfail is allowed."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

HEADER = """
import pytest
from mnemostore.testing import ConformanceSuite

class TestStore(ConformanceSuite):
    @pytest.fixture
    def store_url(self):
        return "memory://"
"""
GUARD = "-k", "test_no_clause_is_deleted"


def test_an_untouched_subclass_passes_the_guard(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER)
    pytester.runpytest("-p", "no:cacheprovider", *GUARD).assert_outcomes(passed=1)


@pytest.mark.parametrize("tampering", [
    "    test_put_of_an_empty_batch_writes_nothing = None",
    "    def test_put_of_an_empty_batch_writes_nothing(self, store, kind='outcome'):\n        pass",
    "    @pytest.mark.xfail(reason='no strict')\n    def test_put_of_an_empty_batch_writes_nothing(self):\n"
    "        raise AssertionError",
])
def test_deleting_or_overriding_a_clause_fails_the_guard(pytester: pytest.Pytester, tampering: str) -> None:
    pytester.makepyfile(HEADER + tampering + "\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *GUARD)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_put_of_an_empty_batch_writes_nothing*"])


def test_a_strict_xfail_override_is_allowed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER + (
        "    @pytest.mark.xfail(strict=True, reason='known bug #12')\n"
        "    def test_put_of_an_empty_batch_writes_nothing(self):\n"
        "        raise AssertionError('still broken')\n"))
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "test_no_clause_is_deleted or test_put_of_an_empty")
    result.assert_outcomes(passed=1, xfailed=1)


def test_a_class_pinned_to_an_older_level_skips_newer_clauses(pytester: pytest.Pytester) -> None:
    pinned = HEADER.replace('class TestStore(ConformanceSuite):\n', 'class TestStore(ConformanceSuite):\n'
                            '    suite_level = "1.0"\n')
    pytester.makepyfile(pinned)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "-k", "test_no_clause_is_deleted or half_way")
    result.assert_outcomes(skipped=8)  # the guard and the fault clause (5 kinds sync, 2 async) came in 1.1
    result.stdout.fnmatch_lines(["*clause added in suite 1.1; this test class pins suite_level 1.0*"])


def test_a_class_pinned_to_1_4_skips_the_async_facade_runs(pytester: pytest.Pytester) -> None:
    pinned = HEADER.replace('class TestStore(ConformanceSuite):\n', 'class TestStore(ConformanceSuite):\n'
                            '    suite_level = "1.4"\n')
    pytester.makepyfile(pinned)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "-k", "test_put_of_an_empty_batch")
    result.assert_outcomes(passed=5, skipped=2)  # one per kind through Store; the AsyncStore runs came in 1.5
    result.stdout.fnmatch_lines(["*clause added in suite 1.5; this test class pins suite_level 1.4*"])
