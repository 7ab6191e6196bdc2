"""The chroma backend under the conformance suite: embedded, in memory, and against a real server."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.chroma_server import ChromaTestServer, chroma_server

from mnemostore.testing import ConformanceSuite

__all__ = ["chroma_server"]


class TestChromaEmbedded(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"chroma://{tmp_path}/chroma"


class TestChromaServer(ConformanceSuite):
    @pytest.fixture
    def store_url(self, chroma_server: ChromaTestServer) -> str:
        return chroma_server.url()
