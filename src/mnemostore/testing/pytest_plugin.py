"""The pytest plugin (entry point `pytest11`): the suite's markers and, only when asked, the suite.

`--mnemostore-url URL` (repeatable), the ini option `mnemostore_urls` or `--mnemostore-all-installed`
adds the whole conformance suite for each URL to the run. Without them the plugin registers two
markers and nothing else: no test, no import of mnemostore's core.
"""

from __future__ import annotations

import pytest

MARKER = "mnemostore_conformance"
INI_URLS = "mnemostore_urls"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mnemostore", "mnemostore conformance suite")
    group.addoption(
        "--mnemostore-url", action="append", default=[], metavar="URL", dest="mnemostore_urls",
        help="run the mnemostore conformance suite against the store at URL (repeatable); each test gets "
             "a fresh empty store derived from it (a sub-directory, store name or prefix, or {test} in the URL)")
    group.addoption(
        "--mnemostore-all-installed", action="store_true", default=False, dest="mnemostore_all_installed",
        help="run the mnemostore conformance suite against every installed embedded backend, in tmp_path")
    parser.addini(INI_URLS, type="linelist", default=[],
                  help="store URLs to run the mnemostore conformance suite against (--mnemostore-url overrides)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "mnemostore_requires(*capabilities): a conformance clause needs these capabilities")
    config.addinivalue_line(
        "markers", "mnemostore_since(version): the suite version that added a conformance clause")
    config.addinivalue_line(
        "markers", "mnemostore_each_kind: a conformance clause runs once per record kind")
    config.addinivalue_line(
        "markers", "mnemostore_each_kind_and_specimen: a conformance clause runs once per record kind "
                   "and for the suite's registered kind")
    config.addinivalue_line(
        "markers", f"{MARKER}(url): a test of the mnemostore conformance suite added by --mnemostore-url")
    urls: list[str] = list(config.getoption("mnemostore_urls") or config.getini(INI_URLS))
    if config.getoption("mnemostore_all_installed"):
        from .collection import installed_throwaway_urls

        urls.extend(url for url in installed_throwaway_urls() if url not in urls)
    if urls:
        from .collection import ConformanceRun

        config.pluginmanager.register(ConformanceRun(urls), "mnemostore-conformance-run")
