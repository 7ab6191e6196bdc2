"""The reference backend under the conformance suite."""

import uuid

import pytest

from mnemostore.testing import ConformanceSuite


class TestMemoryBackend(ConformanceSuite):
    @pytest.fixture
    def store_url(self) -> str:
        return f"memory://{uuid.uuid4().hex}"
