"""The embedded SQLite backend under the conformance suite."""

from pathlib import Path

import pytest

from mnemostore.testing import ConformanceSuite


class TestSQLiteBackend(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'store.db'}"
