"""The whole mnemostore conformance suite against the LMDB backend: the plugin's only test file."""

from pathlib import Path

import pytest

from mnemostore.testing import ConformanceSuite


class TestLMDBBackend(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"lmdb://{tmp_path / 'store'}"
