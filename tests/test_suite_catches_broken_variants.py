"""The suite's catch rate: each deliberately broken backend (tests/broken_variants.py) must fail it.

Each variant runs the suite in-process through `validate()`, stopping at the first failure (only the
clauses its `found_by` names, for a variant the whole suite reaches late).
A variant the suite cannot catch yet is a strict xfail naming the missing clause, so the
day the clause lands, this test demands the marker be removed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest
from tests.broken_variants import VARIANTS, Broken, scheme

from mnemostore.core.registry import registry
from mnemostore.testing import validate


def _registered(variant: type[Broken]) -> type[Broken]:
    name = scheme(variant)
    return type(variant.__name__, (variant,), {
        "name": name, "schemes": (name,), "__module__": __name__,
        "__annotations__": {"name": ClassVar[str], "schemes": ClassVar[tuple[str, ...]]}})


def _params() -> Iterator[object]:
    for variant in VARIANTS:
        marks = [pytest.mark.xfail(strict=True, reason=f"the suite lacks {variant.catch_needs}")] \
            if variant.catch_needs else []
        yield pytest.param(variant, id=variant.__name__, marks=marks)


@pytest.mark.parametrize("variant", list(_params()))
def test_the_suite_fails_the_broken_variant(variant: type[Broken]) -> None:
    cls = _registered(variant)
    registry.register(cls, replace=True)
    try:
        report = validate(f"{cls.name}://", keyword=variant.found_by, pytest_options=["-x", "-p", "no:randomly"])
    finally:
        registry.unregister(cls.name)
    assert not report.errors, report.errors
    assert report.failures(), f"the suite passed a backend whose {variant.bug}"
