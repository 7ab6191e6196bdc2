"""`Backend.drop` (through `core.store.drop_store`) destroys one store, every trace of it, and
nothing else, on every built-in backend: the conformance suite's cleanup relies on it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tests.chroma_server import chroma_server
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.core.errors import StoreNotFound, UnsupportedCapability
from mnemostore.core.store import drop_store, open_backend

__all__ = ["chroma_server", "postgres_server"]

Leftovers = Callable[[], list[str]]
"""What is left of the dropped store (files, tables, collections): must be empty."""


def fill(url: str) -> None:
    """A store with records of two tenants, a vector, a checkpoint and a finished migration run."""
    with mnemostore.open(url) as store:
        store.outcomes.add(task_type="t", success=True, embedding=np.ones(4, dtype=np.float32))
        store.checkpoints.save("run", {"step": 1})
    with mnemostore.open(url, tenant="acme") as store:
        store.heuristics.add(condition="c", strategy="s")


def _files(directory: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(prefix)) if directory.is_dir() else []


def _collections(url: str, prefix: str) -> list[str]:
    """Collection names starting with `prefix`, through the client a store at `url` shares."""
    backend = open_backend(url)
    try:
        client = backend._client  # type: ignore[attr-defined]
        found = client.get_collections().collections if hasattr(client, "get_collections") \
            else client.list_collections()
        return sorted(name for c in found if (name := str(getattr(c, "name", c))).startswith(prefix))
    finally:
        backend.close()


def _pg(server: PostgresTestServer, query: str, *params: str) -> list[str]:
    import psycopg

    with psycopg.connect(server.base_url) as conn:
        return sorted(str(row[0]) for row in conn.execute(query, params).fetchall())


def _pg_objects(server: PostgresTestServer, schema: str, prefix: str) -> list[str]:
    """Tables, indexes and functions of `schema` starting with `prefix`, and the schema if `prefix` is ''."""
    return _pg(server, "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                       "WHERE n.nspname = %s AND c.relname LIKE %s UNION ALL "
                       "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                       "WHERE n.nspname = %s AND p.proname LIKE %s UNION ALL "
                       "SELECT nspname FROM pg_namespace WHERE nspname = %s AND %s = ''",
               schema, prefix + "%", schema, prefix + "%", schema, prefix)


CASES = ["memory", "sqlite", "file", "qdrant-disk", "qdrant-memory", "chroma-embedded", "chroma-server",
         "postgres-schema", "postgres-prefix"]


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, Leftovers]:
    """(the store to drop, a neighbour that must survive, what is left of the dropped one)."""
    token = uuid.uuid4().hex[:8]
    name: str = request.param
    if name == "memory":
        from mnemostore.backends import memory

        return f"memory://a{token}", f"memory://b{token}", lambda: [k for k in memory._SHARED if k == f"a{token}"]
    if name in ("sqlite", "file"):
        suffix = ".db" if name == "sqlite" else ""
        return (f"{name}://{'/' if name == 'sqlite' else ''}{tmp_path}/a{suffix}",
                f"{name}://{'/' if name == 'sqlite' else ''}{tmp_path}/b{suffix}", lambda: _files(tmp_path, "a"))
    if name.startswith(("qdrant", "chroma")):
        pytest.importorskip("qdrant_client" if name.startswith("qdrant") else "chromadb")
        engine = tmp_path / "engine"
        base = {"qdrant-disk": f"qdrant://{engine}", "qdrant-memory": f"qdrant://memory/{token}",
                "chroma-embedded": f"chroma://{engine}"}.get(name)
        if base is None:
            base = request.getfixturevalue("chroma_server").base_url
        neighbour = f"{base}?prefix=b{token}_"
        return (f"{base}?prefix=a{token}_", neighbour,  # collections, and a lock file on disk
                lambda: _collections(neighbour, f"a{token}_") + _files(engine, f"a{token}_"))
    server: PostgresTestServer = request.getfixturevalue("postgres_server")
    if name == "postgres-schema":
        return server.url(f"d_{token}"), server.url(f"e_{token}"), lambda: _pg_objects(server, f"d_{token}", "")
    return (server.url(f"p_{token}", table_prefix=f"a{token}_"), server.url(f"p_{token}", table_prefix=f"b{token}_"),
            lambda: _pg_objects(server, f"p_{token}", f"a{token}_"))


def test_drop_removes_the_store_and_leaves_its_neighbour(case: tuple[str, str, Leftovers]) -> None:
    url, neighbour, leftovers = case
    fill(url)
    fill(neighbour)
    assert leftovers(), "the store under test left no trace to remove: the check proves nothing"
    drop_store(url)
    assert leftovers() == []
    with pytest.raises(StoreNotFound):
        mnemostore.open(url, create=False)
    with mnemostore.open(neighbour, create=False) as store:
        assert store.outcomes.count() == 1 and store.checkpoints.latest("run") is not None
    drop_store(url)  # nothing there: nothing to do
    drop_store(neighbour)


def test_a_backend_without_drop_says_so(tmp_path: Path) -> None:
    from mnemostore.backends.memory import MemoryBackend
    from mnemostore.core.registry import registry

    class Undroppable(MemoryBackend):
        name = "undroppable"
        schemes = ("undroppable",)
        drop = MemoryBackend.__mro__[1].drop  # the protocol's default

    registry.register(Undroppable, replace=True)
    try:
        with pytest.raises(UnsupportedCapability, match="the undroppable backend cannot drop a store"):
            drop_store("undroppable://")
    finally:
        registry.unregister("undroppable")
