"""The postgres backend under the conformance suite, against a real server with pgvector."""

from __future__ import annotations

import pytest
from tests.postgres_server import PostgresTestServer, postgres_server

from mnemostore.testing import ConformanceSuite

__all__ = ["postgres_server"]


class TestPostgresBackend(ConformanceSuite):
    @pytest.fixture
    def store_url(self, postgres_server: PostgresTestServer) -> str:
        return postgres_server.url()
