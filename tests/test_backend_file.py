"""The file backend under the conformance suite."""

from pathlib import Path

import pytest

from mnemostore.testing import ConformanceSuite


class TestFileBackend(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"file://{tmp_path / 'store'}"
