"""`@requires(Capability...)`: a clause runs only where the backend declares what it tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from ..core.capabilities import Capability

T = TypeVar("T", bound=Callable[..., Any])


def requirement(*capabilities: Capability) -> pytest.MarkDecorator:
    """The mark behind `requires`, for `pytest.param(..., marks=requirement(...))`."""
    return pytest.mark.mnemostore_requires(*capabilities)


def requires(*capabilities: Capability) -> Callable[[T], T]:
    """Mark a suite test as needing these capabilities; it is skipped (with the reason) without them."""

    def mark(test: T) -> T:
        return requirement(*capabilities)(test)  # type: ignore[no-any-return]

    return mark


def since(version: str) -> Callable[[T], T]:
    """Mark a clause as added in suite `version`: a test class pinned to an older
    `suite_level` skips it, so upgrading mnemostore never breaks a passing plugin."""

    def mark(test: T) -> T:
        return pytest.mark.mnemostore_since(version)(test)  # type: ignore[no-any-return]

    return mark


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def newer_than(level: str | None, item: pytest.Item) -> str | None:
    """The suite version that added this clause (or its parameter, e.g. the async facade), if it is
    newer than the pinned `level`."""
    versions = [str(marker.args[0]) for marker in item.iter_markers("mnemostore_since")]
    if level is None or not versions:
        return None
    added = max(versions, key=_version)
    return added if _version(added) > _version(level) else None


def missing(declared: frozenset[Capability], item: pytest.Item) -> list[Capability]:
    needed: list[Capability] = []
    for marker in item.iter_markers("mnemostore_requires"):
        needed.extend(marker.args)
    return [c for c in needed if c not in declared]


def skip_if_declared(declared: frozenset[Capability], capability: Capability) -> None:
    """For clauses about what an undeclared capability does: skip where it is declared."""
    if capability in declared:
        pytest.skip(f"the backend declares {capability.value}; this clause checks its absence")
