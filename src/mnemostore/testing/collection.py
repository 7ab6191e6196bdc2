"""Collecting the suite for URLs named on pytest's command line (active only when asked)."""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..core.capabilities import Capability
from ..core.errors import MnemostoreError
from ..core.registry import missing_driver, registry
from ..core.url import mask_password
from . import SUITE_VERSION
from .locations import THROWAWAY_URLS, backend_for, declared_capabilities, fresh_store, fresh_store_url

NODE_ID = "mnemostore-conformance"


def installed_throwaway_urls() -> list[str]:
    """`memory://`, `sqlite://`, ... for each embedded built-in that loads with its driver installed."""
    urls: list[str] = []
    for name, url in THROWAWAY_URLS.items():
        try:
            cls = registry.get(name)
        except MnemostoreError:
            continue
        if missing_driver(cls) is None:
            urls.append(url)
    return urls


def suite_class(url: str, name: str) -> type:
    """A `ConformanceSuite` subclass whose tests each get a fresh empty store derived from `url`."""
    from .suite import ConformanceSuite

    class Conformance(ConformanceSuite):
        pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.mnemostore_conformance(mask_password(url))]

        @pytest.fixture
        def store_url(self, tmp_path: Path) -> Iterator[str]:
            with fresh_store_url(url, tmp_path) as fresh:
                yield fresh

        @pytest.fixture
        def declared(self, store_url: str) -> frozenset[Capability]:
            return declared_capabilities(store_url)

    Conformance.__name__ = Conformance.__qualname__ = name
    return Conformance


def class_names(urls: Iterable[str]) -> list[str]:
    """`Conformance(URL)` (password masked), numbered when a URL is given twice.

    No "[" or "::" in a class name: pytest reads those as parameters and node-id separators."""
    names: list[str] = []
    for url in urls:
        label = re.sub(r"\[|\]|::", "_", mask_password(url))
        name = f"Conformance({label})"
        names.append(name if name not in names else f"{name}#{len(names) + 1}")
    return names


class ConformanceModule(pytest.Module):
    """A module node holding one suite class per URL; nothing is imported from disk."""

    urls: list[str]

    def _getobj(self) -> Any:
        return types.ModuleType(NODE_ID.replace("-", "_"))

    def collect(self) -> list[pytest.Class]:
        classes: list[pytest.Class] = []
        for url, name in zip(self.urls, class_names(self.urls), strict=True):
            try:
                backend_for(url)
                fresh_store(url, Path("unused"), token="check")
            except MnemostoreError as exc:
                raise self.CollectError(f"mnemostore conformance: {mask_password(url)}: {exc}") from None
            setattr(self.obj, name, suite_class(url, name))  # pytest finds a class on its module
            classes.append(pytest.Class.from_parent(self, name=name))
        return classes


class ConformanceRun:
    """Registered by the plugin when URLs are given: adds the suite's items to the session."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls

    @pytest.hookimpl(tryfirst=True)  # before -k / -m / --deselect filter the items
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        from . import suite

        module = ConformanceModule.from_parent(session, path=Path(suite.__file__), nodeid=NODE_ID)
        module.urls = self.urls
        items.extend(session.genitems(module))

    def pytest_report_header(self) -> str:
        return f"mnemostore conformance suite {SUITE_VERSION}: " + ", ".join(mask_password(u) for u in self.urls)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Stop before collecting when a URL's store cannot be reached (`check_reachable`): every
        clause would fail alike. A URL that is wrong in itself is reported by collection, per URL."""
        from ..core.errors import BackendError
        from .locations import check_reachable

        for url in self.urls:
            try:
                check_reachable(url)
            except BackendError as exc:
                pytest.exit(f"mnemostore: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
            except Exception:  # collection reports it, with the URL
                continue

