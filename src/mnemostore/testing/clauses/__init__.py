"""Conformance clauses, one mixin per area; `ConformanceSuite` combines them.

Mixins parametrize per method (`each_kind`, a mark the suite parametrizes), never per class: pytest gathers class
marks through the MRO, so a class-level mark would leak into every other mixin.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ...core.records import KINDS
from ...core.store import Store
from ..specimen import SPECIMEN, registered

each_kind = pytest.mark.mnemostore_each_kind
"""Run a clause once for every record kind (`ConformanceSuite.pytest_generate_tests` gives `kind`;
through the async facade, once for each of `async_facade.ASYNC_KINDS`)."""

each_kind_and_specimen = pytest.mark.mnemostore_each_kind_and_specimen
"""Run a clause for every built-in kind and for the suite's registered kind (`testing.specimen`):
a focused set of clauses, so a backend proves it stores a kind it has no code for."""


class SpecimenFixtures:
    """The fixtures of a mixin whose clauses use the suite's kind (`each_kind_and_specimen`, `specimen`):
    a class that borrows such a mixin gets them with it."""

    @pytest.fixture(autouse=True)
    def _specimen_kind(self, request: pytest.FixtureRequest) -> Iterator[None]:
        """Register the suite's kind while a clause runs on it."""
        callspec = getattr(request.node, "callspec", None)
        if callspec is None or callspec.params.get("kind") != SPECIMEN:
            yield
            return
        with registered():
            yield

    @pytest.fixture
    def specimen(self) -> Iterator[str]:
        """The name of the suite's kind, registered for the clause."""
        with registered():
            yield SPECIMEN


def clear(store: Store, *kinds: str) -> None:
    """Delete every record of these kinds (all kinds if none given) in the store's tenant."""
    for kind in kinds or KINDS:
        store.collection(kind).delete(where={})
