"""`@requires(Capability...)`: a clause runs only where the backend declares what it tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from ..core.capabilities import Capability

T = TypeVar("T", bound=Callable[..., Any])


def requires(*capabilities: Capability) -> Callable[[T], T]:
    """Mark a suite test as needing these capabilities; it is skipped (with the reason) without them."""

    def mark(test: T) -> T:
        return pytest.mark.mnemostore_requires(*capabilities)(test)  # type: ignore[no-any-return]

    return mark


def missing(declared: frozenset[Capability], item: pytest.Item) -> list[Capability]:
    needed: list[Capability] = []
    for marker in item.iter_markers("mnemostore_requires"):
        needed.extend(marker.args)
    return [c for c in needed if c not in declared]
