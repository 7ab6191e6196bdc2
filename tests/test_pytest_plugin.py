"""The pytest plugin: inert unless asked; with --mnemostore-url, the ini option or
--mnemostore-all-installed it adds the suite, each test on a fresh empty store."""

from __future__ import annotations

from pathlib import Path

import pytest

import mnemostore.testing.collection
import mnemostore.testing.suite  # kept imported across pytester's in-process runs
from mnemostore.core.errors import ConfigError
from mnemostore.testing import SUITE_VERSION
from mnemostore.testing.locations import fresh_store

pytest_plugins = ["pytester"]

ONE_CLAUSE = "test_put_then_get_returns_equal_record and heuristic and not async"


def test_without_the_flag_the_plugin_adds_no_test_and_imports_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import sys

        def test_only_this():
            loaded = sorted(m for m in sys.modules if m.startswith("mnemostore"))
            expected = ["mnemostore", "mnemostore._lazy", "mnemostore.testing", "mnemostore.testing.pytest_plugin"]
            assert loaded == expected, loaded
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*mnemostore conformance*")


def test_the_options_are_documented_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--mnemostore-url=URL*", "*--mnemostore-all-installed*", "*mnemostore_urls*"])


def test_the_flag_runs_the_suite_next_to_the_projects_own_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_own(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "--mnemostore-url", "memory://",
                                "-k", f"test_own or ({ONE_CLAUSE})")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        f"mnemostore conformance suite {SUITE_VERSION}: memory://",
        "*test_own PASSED*",
        "mnemostore-conformance::Conformance(memory://)::"
        "test_put_then_get_returns_equal_record[[]sync-heuristic[]] PASSED*",
    ])


def test_the_marker_selects_only_the_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_own(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--mnemostore-url", "memory://",
                                "-m", "mnemostore_conformance", "-k", "test_own or test_get_of_missing_ids")
    result.assert_outcomes(passed=7)  # one per record kind through Store, two through AsyncStore, not test_own


def test_the_ini_option_names_urls_and_each_test_gets_a_fresh_store(pytester: pytest.Pytester) -> None:
    location = pytester.path / "stores"
    pytester.makeini(f"[pytest]\nmnemostore_urls =\n    memory://\n    sqlite:///{location}\n")
    # Counting clauses fail on a store that is not empty; two runs over one location prove freshness.
    args = ("-p", "no:cacheprovider", "-k", "test_count_with_and_without_filter or test_put_of_an_empty_batch")
    # Per URL: counts for 5 kinds and the suite's own through Store, 2 kinds and the suite's through
    # AsyncStore (9); empty puts for 5 kinds through Store and 2 through AsyncStore (7).
    for _ in range(2):
        pytester.runpytest(*args).assert_outcomes(passed=32)
    assert location.is_dir() and list(location.iterdir()) == []  # each test's sub-directory was removed


def test_command_line_urls_replace_the_ini_ones(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmnemostore_urls = sqlite://\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--mnemostore-url", "memory://", "-k", ONE_CLAUSE)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"mnemostore conformance suite {SUITE_VERSION}: memory://"])


def test_all_installed_runs_every_embedded_backend(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--mnemostore-all-installed", "-k", ONE_CLAUSE)
    urls = mnemostore.testing.collection.installed_throwaway_urls()
    assert {"memory://", "sqlite://", "file://"} <= set(urls)
    result.assert_outcomes(passed=len(urls))
    result.stdout.fnmatch_lines([f"mnemostore conformance suite {SUITE_VERSION}: {', '.join(urls)}"])


def test_a_url_of_no_installed_backend_is_a_collection_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--mnemostore-url", "nosuch://x")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*mnemostore conformance: nosuch://x: no installed backend handles*"])


@pytest.mark.parametrize(("url", "fresh"), [
    ("memory://", "memory://T"),
    ("memory://shared?x=1", "memory://shared-T?x=1"),
    ("sqlite://", "sqlite:////tmp/base/T/store.db"),
    ("sqlite:///rel/dir", "sqlite:///rel/dir/T/store.db"),
    ("file:///abs/dir/", "file:///abs/dir/T/store"),
    ("qdrant://memory", "qdrant://memory/T"),
    ("postgresql://u:pw@h/db?schema=s", "postgresql://u:pw@h/db?table_prefix=T_&schema=s"),
    ("qdrant+http://h:6333?prefix=app_", "qdrant+http://h:6333?prefix=app_T_"),
    ("anything://host/db_{test}", "anything://host/db_T"),
])
def test_fresh_store_urls(url: str, fresh: str) -> None:
    assert fresh_store(url, Path("/tmp/base"), token="T").url == fresh


def test_a_url_that_cannot_be_varied_asks_for_the_placeholder() -> None:
    from mnemostore.core.protocol import Backend
    from mnemostore.core.registry import registry

    class Fixed(Backend):  # never opened: only its name, schemes and (lack of) options matter
        name = "fixed-store"
        schemes = ("fixed-store",)

    with pytest.raises(ConfigError, match=r"put \{test\} in the URL"):
        registry.register(Fixed, replace=True)  # type: ignore[type-abstract]
        try:
            fresh_store("fixed-store://host/db", Path("/tmp"), token="T")
        finally:
            registry.unregister("fixed-store")


def test_a_run_leaves_no_store_behind(pytester: pytest.Pytester) -> None:
    """Each test's store is dropped (`Backend.drop`) and the directories named by its token removed:
    `{test}` URLs used to leave one store per test (466 directories, 451 MB after one run)."""
    from mnemostore.backends import memory

    root = pytester.path / "stores"
    urls = [f"sqlite:///{root}/s/{{test}}/x.db", f"file://{root}/f/conf_{{test}}", "sqlite:///rel/{test}.db",
            f"sqlite:///{root}/base", "memory://named"]
    named_before = set(memory._SHARED)
    result = pytester.runpytest("-p", "no:cacheprovider", *(arg for url in urls for arg in ("--mnemostore-url", url)),
                                "-k", "test_put_then_get_returns_equal_record or test_tenants_cannot_read "
                                      "or test_processes_reinforcing or test_status_lists")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 5 * len(urls) and not outcomes.get("failed"), outcomes
    assert sorted(str(p.relative_to(pytester.path)) for p in pytester.path.rglob("*")
                  if p.is_file() or p.name.startswith("t")) == [], "a store or its directory was left"
    assert set(memory._SHARED) == named_before
