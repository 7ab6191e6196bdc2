"""The qdrant backends under the conformance suite: the local engine in memory and on disk,
and a Qdrant server when `MNEMOSTORE_TEST_QDRANT_URL` is set, e.g.::

    docker run -p 6333:6333 qdrant/qdrant
    MNEMOSTORE_TEST_QDRANT_URL=qdrant+http://localhost:6333 pytest tests/test_backend_qdrant.py

Each server test uses its own collection prefix and drops its collections afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemostore.core.url import StoreURL
from mnemostore.testing import ConformanceSuite

SERVER_URL = os.environ.get("MNEMOSTORE_TEST_QDRANT_URL")


class TestQdrantInMemory(ConformanceSuite):
    @pytest.fixture
    def store_url(self) -> str:
        return f"qdrant://memory/{uuid.uuid4().hex}"


class TestQdrantOnDisk(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"qdrant://{tmp_path / 'store'}"


@pytest.mark.skipif(SERVER_URL is None, reason="set MNEMOSTORE_TEST_QDRANT_URL=qdrant+http://host:6333 to run")
class TestQdrantServer(ConformanceSuite):
    @pytest.fixture
    def store_url(self) -> Iterator[str]:
        assert SERVER_URL is not None
        prefix = f"t{uuid.uuid4().hex[:12]}_"
        separator = "&" if "?" in SERVER_URL else "?"
        yield f"{SERVER_URL}{separator}prefix={prefix}"
        from qdrant_client import QdrantClient

        parsed = StoreURL.parse(SERVER_URL)
        http = parsed.scheme.split("+", 1)[1]
        client = QdrantClient(url=f"{http}://{parsed.host}:{parsed.port or 6333}", api_key=parsed.password)
        for collection in client.get_collections().collections:
            if collection.name.startswith(prefix):
                client.delete_collection(collection.name)
        client.close()
