"""`ConformanceSuite`: the base class a backend's test module subclasses.

Clauses live in mixins, one module per area; this class combines them and provides
the fixtures. A subclass gives one fixture, `store_url`, returning the URL of an empty
store that may be opened several times (for reopen and concurrency clauses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..core.store import Store, open
from .clauses.basics import BasicClauses
from .requirements import missing


class ConformanceSuite(BasicClauses):
    """Every clause of the suite. Subclass it and provide `store_url`."""

    @pytest.fixture
    def store_url(self) -> str:
        raise NotImplementedError("a conformance test class must define the `store_url` fixture")

    @pytest.fixture
    def store_options(self) -> dict[str, Any]:
        """Extra keyword arguments for `mnemostore.open` (override to pass backend options)."""
        return {}

    @pytest.fixture
    def open_store(self, store_url: str, store_options: dict[str, Any]) -> Iterator[Callable[..., Store]]:
        """Open (another instance of) the store under test; everything opened is closed after."""
        opened: list[Store] = []

        def opener(**overrides: Any) -> Store:
            store = open(store_url, **{**store_options, **overrides})
            opened.append(store)
            return store

        yield opener
        for store in reversed(opened):
            store.close()

    @pytest.fixture
    def store(self, open_store: Callable[..., Store], request: pytest.FixtureRequest) -> Store:
        """The store under test; skips the test if a required capability is undeclared."""
        store = open_store()
        lacking = missing(store.capabilities, request.node)
        if lacking:
            names = ", ".join(c.value for c in lacking)
            pytest.skip(f"the {store.backend.name} backend does not declare {names}")
        return store
