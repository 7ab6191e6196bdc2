"""`ConformanceSuite`: the base class a backend's test module subclasses.

Clauses live in mixins, one module per area; this class combines them and provides
the fixtures. A subclass gives one fixture, `store_url`, returning the URL of an empty
store that may be opened several times (for reopen, tenancy and concurrency clauses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from ..core.capabilities import Capability
from ..core.registry import registry
from ..core.store import Store, open
from ..core.url import StoreURL
from .async_facade import LoopThread, parametrize
from .clauses.basics import BasicClauses
from .clauses.checkpoints import CheckpointClauses
from .clauses.crashes import CrashClauses
from .clauses.edges import EdgeClauses
from .clauses.faults import FaultClauses
from .clauses.fidelity import FidelityClauses
from .clauses.filters import FilterClauses
from .clauses.fuzzing import FuzzClauses
from .clauses.isolation import IsolationClauses
from .clauses.kind_evolution import KindEvolutionClauses
from .clauses.kinds import KindClauses
from .clauses.merges import MergeClauses
from .clauses.migrations import MigrationClauses
from .clauses.ordering import OrderingClauses
from .clauses.persistence import PersistenceClauses
from .clauses.processes import ProcessClauses
from .clauses.tenancy import TenancyClauses
from .clauses.updates import UpdateClauses
from .clauses.validation import ValidationClauses
from .clauses.vectors import VectorClauses
from .requirements import missing, newer_than, since


class ConformanceSuite(
    BasicClauses,
    FidelityClauses,
    FilterClauses,
    OrderingClauses,
    UpdateClauses,
    VectorClauses,
    ValidationClauses,
    PersistenceClauses,
    TenancyClauses,
    CheckpointClauses,
    MergeClauses,
    IsolationClauses,
    ProcessClauses,
    CrashClauses,
    FaultClauses,
    EdgeClauses,
    FuzzClauses,
    MigrationClauses,
    KindClauses,
    KindEvolutionClauses,
):
    """Every clause of the suite. Subclass it and provide `store_url`."""

    suite_level: ClassVar[str | None] = None
    """Pin the suite version the plugin conforms to (e.g. "1.0"): clauses added later are
    skipped with the reason. None runs every clause of the installed suite."""

    @pytest.fixture
    def store_url(self) -> str:
        raise NotImplementedError("a conformance test class must define the `store_url` fixture")

    @pytest.fixture
    def store_options(self) -> dict[str, Any]:
        """Extra keyword arguments for `mnemostore.open` (override to pass backend options)."""
        return {}

    @pytest.fixture
    def declared(self, store_url: str) -> frozenset[Capability]:
        """The capabilities the backend under test declares (read without opening a store)."""
        url = StoreURL.parse(store_url)
        return registry.for_scheme(url.scheme).capabilities_for(url)

    @pytest.fixture(autouse=True)
    def _capability_gate(self, declared: frozenset[Capability], store_url: str, request: pytest.FixtureRequest) -> None:
        """Skip a clause whose `@requires` capabilities the backend does not declare, saying which."""
        added = newer_than(self.suite_level, request.node)
        if added is not None:
            pytest.skip(f"clause added in suite {added}; this test class pins suite_level {self.suite_level}")
        lacking = missing(declared, request.node)
        if lacking:
            name = registry.for_scheme(StoreURL.parse(store_url).scheme).name
            pytest.skip(f"the {name} backend does not declare {', '.join(c.value for c in lacking)}")

    @pytest.fixture
    def facade(self, request: pytest.FixtureRequest) -> str:
        """The facade a clause drives: "sync" (`Store`), or "async" (`AsyncStore`, see `async_facade`)."""
        return str(getattr(request, "param", "sync"))

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Every clause that opens a store, outside `SYNC_ONLY_AREAS`, runs through both facades;
        an `each_kind` clause once per kind (`async_facade.parametrize`)."""
        parametrize(metafunc)

    @pytest.fixture
    def open_store(self, store_url: str, store_options: dict[str, Any],
                   facade: str) -> Iterator[Callable[..., Store]]:
        """Open (another instance of) the store under test through `facade`; everything opened is closed after."""
        opened: list[Store] = []
        loop = LoopThread() if facade == "async" else None

        def opener(**overrides: Any) -> Store:
            options = {**store_options, **overrides}
            store = open(store_url, **options) if loop is None else loop.open(store_url, **options)
            opened.append(store)
            return store

        try:
            yield opener
        finally:
            for store in reversed(opened):
                store.close()
            if loop is not None:
                loop.close()

    @pytest.fixture
    def store(self, open_store: Callable[..., Store]) -> Store:
        """The store under test, opened with default parameters."""
        return open_store()

    @since("1.1")
    def test_no_clause_is_deleted_or_overridden_without_a_strict_xfail(self) -> None:
        """A subclass may replace a clause only to mark a known bug: `@pytest.mark.xfail(strict=True,
        reason=...)`. Anything else (deleting it, or overriding it to pass) hides a failure."""
        tampered = []
        for name in dir(ConformanceSuite):
            if not name.startswith("test_"):
                continue
            ours, theirs = getattr(ConformanceSuite, name), getattr(type(self), name, None)
            if theirs is ours:
                continue
            if not callable(theirs):
                tampered.append(f"{name} (deleted)")
            elif not any(mark.name == "xfail" and mark.kwargs.get("strict") is True and mark.kwargs.get("reason")
                         for mark in getattr(theirs, "pytestmark", [])):
                tampered.append(f"{name} (overridden without @pytest.mark.xfail(strict=True, reason=...))")
        assert not tampered, "conformance clauses changed by the subclass: " + "; ".join(tampered)
