"""Conformance clauses, one mixin per area; `ConformanceSuite` combines them.

Mixins parametrize per method (`each_kind`, a mark the suite parametrizes), never per class: pytest gathers class
marks through the MRO, so a class-level mark would leak into every other mixin.
"""

from __future__ import annotations

import pytest

from ...core.records import KINDS
from ...core.store import Store

each_kind = pytest.mark.mnemostore_each_kind
"""Run a clause once for every record kind (`ConformanceSuite.pytest_generate_tests` gives `kind`;
through the async facade, once for each of `async_facade.ASYNC_KINDS`)."""


def clear(store: Store, *kinds: str) -> None:
    """Delete every record of these kinds (all kinds if none given) in the store's tenant."""
    for kind in kinds or KINDS:
        store.collection(kind).delete(where={})
