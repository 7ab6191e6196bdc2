"""`Collection.prepare()` (`Backend.prepare`): a kind's storage is made before its first write, on
every built-in backend whose storage is made at all, and making it again changes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.chroma_server import chroma_server
from tests.postgres_server import PostgresTestServer, postgres_server
from tests.seed_kinds import forget_the_items_kind, items_storage_made

import mnemostore
from mnemostore.core.capabilities import Capability
from mnemostore.kinds.langgraph_items import LangGraphItem

__all__ = ["chroma_server", "postgres_server"]

KIND = "langgraph_item"
"""An application's kind (its storage is made on demand, unlike the built-in kinds' tables)."""


@pytest.fixture(params=["memory", "file", "sqlite", "postgres", "chroma", "chroma-server", "qdrant"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        server: PostgresTestServer = request.getfixturevalue("postgres_server")
        yield server.url()
        return
    if request.param == "chroma-server":
        pytest.importorskip("chromadb")
        yield request.getfixturevalue("chroma_server").url()  # its async side is native (AsyncHttpClient)
        return
    pytest.importorskip({"chroma": "chromadb", "qdrant": "qdrant_client"}.get(request.param, "mnemostore"))
    yield {"memory": f"memory://{uuid.uuid4().hex}", "file": f"file://{tmp_path / 'f'}",
           "sqlite": f"sqlite:///{tmp_path / 's.db'}", "chroma": f"chroma://{tmp_path / 'c'}",
           "qdrant": f"qdrant://{tmp_path / 'q'}"}[request.param]


@pytest.fixture(autouse=True)
def _items_kind() -> Iterator[None]:
    mnemostore.register_kind(LangGraphItem)
    yield
    forget_the_items_kind()


def _reopened(url: str, check: Callable[[mnemostore.Store], object]) -> object:
    with mnemostore.open(url, tenant="acme") as store:
        return check(store)


@pytest.mark.parametrize("facade", ["Store", "AsyncStore"])
def test_prepare_makes_a_kinds_storage_before_its_first_write(url: str, facade: str) -> None:
    with mnemostore.open(url, tenant="acme") as store:
        assert items_storage_made(store.backend, "acme") in (False, None)
        if facade == "Store":
            store.collection(KIND).prepare()
            store.collection(KIND).prepare()  # again: nothing changes

    async def prepared() -> None:  # on the async side (a native one where the backend has it)
        async with await mnemostore.open_async(url, tenant="acme") as store:
            await store.collection(KIND).prepare()
            await store.collection(KIND).prepare()

    if facade == "AsyncStore":
        asyncio.run(prepared())
    assert _reopened(url, lambda store: items_storage_made(store.backend, "acme")) in (True, None)
    assert _reopened(url, lambda store: store.collection(KIND).count()) == 0
    with mnemostore.open(url, tenant="acme") as store:  # prepared before the store knew a dimension
        items = store.collection(KIND)
        items.put([{"id": "plain", "namespace": "n", "key": "k"}])
        items.put([{"id": "vectored", "namespace": "n", "key": "v", "embedding": np.ones(4, dtype=np.float32)}])
        assert [r.id for r in items.all(order_by="id")] == ["plain", "vectored"]
        if Capability.VECTOR_COSINE in store.capabilities:
            assert [hit.record.id for hit in items.search(np.ones(4, dtype=np.float32), k=2)] == ["vectored"]
