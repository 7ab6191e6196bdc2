"""The suite itself: a backend that declares no capability passes it, and the clauses about
undeclared capabilities (UnsupportedFilter, UnsupportedCapability) actually run somewhere."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import ClassVar

import pytest

from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.capabilities import Capability
from mnemostore.core.registry import registry
from mnemostore.testing import ConformanceSuite


class BareMemoryBackend(MemoryBackend):
    """The reference backend declaring nothing: only the unconditional clauses apply."""

    name: ClassVar[str] = "bare-memory"
    schemes: ClassVar[tuple[str, ...]] = ("bare-memory",)
    capabilities: ClassVar[frozenset[Capability]] = frozenset()


class TestBackendWithoutCapabilities(ConformanceSuite):
    @pytest.fixture
    def store_url(self) -> Iterator[str]:
        registry.register(BareMemoryBackend, replace=True)
        yield f"bare-memory://{uuid.uuid4().hex}"
        registry.unregister(BareMemoryBackend.name)
