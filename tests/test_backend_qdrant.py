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
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tests.native_async_qdrant import NativeQdrant

import mnemostore
from mnemostore import F, registry
from mnemostore.backends.qdrant.ordered import delegable
from mnemostore.core.errors import StoreNotFound
from mnemostore.core.protocol import ID_ORDER, OrderKey
from mnemostore.core.url import StoreURL
from mnemostore.testing import ConformanceSuite
from mnemostore.testing.factories import BASE_TIME, make, vectors
from mnemostore.testing.oracle import expected_order, reference_search

SERVER_URL = os.environ.get("MNEMOSTORE_TEST_QDRANT_URL")


class TestQdrantInMemory(ConformanceSuite):
    @pytest.fixture
    def store_url(self) -> str:
        return f"qdrant://memory/{uuid.uuid4().hex}"


class TestQdrantOnDisk(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"qdrant://{tmp_path / 'store'}"


@pytest.fixture
def native_qdrant() -> Iterator[None]:
    """`native-qdrant://`: the server's native async side over the local engine (tests/native_async_qdrant.py)."""
    registry.register(NativeQdrant, replace=True)
    yield
    registry.unregister(NativeQdrant.name)


class TestQdrantNativeAsync(ConformanceSuite):
    """The async clauses through `QdrantAsyncSide` (a server store's native side), held to the results
    the sync side gives in TestQdrantInMemory; the sync clauses are that class's."""

    @pytest.fixture(autouse=True)
    def _async_only(self, request: pytest.FixtureRequest) -> None:
        callspec = getattr(request.node, "callspec", None)
        if callspec is None or callspec.params.get("facade") != "async":
            pytest.skip("the same engine's sync side runs in TestQdrantInMemory")

    @pytest.fixture
    def store_url(self, native_qdrant: None) -> str:
        return f"native-qdrant://memory/{uuid.uuid4().hex}"


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


def paged(store: mnemostore.Store, where: Any, order_by: str, limit: int) -> list[str]:
    """Every page of a heuristics query, concatenated by following cursors."""
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = store.heuristics.query(where, order_by=order_by, limit=limit, cursor=cursor)
        ids.extend(r.id for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return ids


def test_order_by_pages_match_the_reference_through_ties_missing_values_and_superset_filters() -> None:
    """Pages ordered by a number or datetime (read with Qdrant's `order_by`) match `sort_records`:
    tie groups larger than a page, missing values, integers past 2**53, instants written in
    other offsets, another tenant's records, and a filter Qdrant can only narrow (a string range)."""
    moments = [BASE_TIME, BASE_TIME.astimezone(timezone(timedelta(hours=-5))), BASE_TIME + timedelta(seconds=1)]
    written = [make("heuristic", i, id=f"h{(i * 37) % 90:03d}", agent=("a", "b", "c")[i % 3],
                    confidence=(0.1, 0.5, 0.5, 0.9)[i % 4], occurrence_count=(0, 2**60, 2**60 + 1, 7, 7)[i % 5],
                    last_validated=None if i % 4 == 0 else moments[i % 3], created_at=moments[(i // 7) % 3])
               for i in range(90)]
    url = f"qdrant://memory/{uuid.uuid4().hex}"
    store, other = mnemostore.open(url), mnemostore.open(url, tenant="other")
    try:
        store.heuristics.put(written)
        other.heuristics.put([make("heuristic", i, id=f"h{i:03d}", confidence=0.5) for i in range(20)])
        for where in (None, F.agent == "b", F.agent >= "b"):
            for field in ("confidence", "occurrence_count", "last_validated", "created_at"):
                for order_by in (field, "-" + field):
                    want = expected_order("heuristic", written, where, order_by)
                    for limit in (1, 25, 100):
                        got = [r.id for r in store.heuristics.query(where, order_by=order_by, limit=limit)]
                        assert got == want[:limit], (where, order_by, limit)
                    for limit in (7,):
                        assert paged(store, where, order_by, limit) == want, (where, order_by, limit)
    finally:
        store.close()
        other.close()


def test_queries_the_backend_hands_to_order_by() -> None:
    """One number or datetime key with a limit goes to Qdrant; strings, booleans, several keys
    and unlimited queries are ordered in Python."""
    ordered = (OrderKey("confidence", True), ID_ORDER)
    assert delegable("heuristic", ordered, 10) == OrderKey("confidence", True)
    assert delegable("outcome", (OrderKey("created_at"), ID_ORDER), 1) == OrderKey("created_at")
    assert delegable("heuristic", ordered, None) is None
    assert delegable("heuristic", (OrderKey("agent"), ID_ORDER), 10) is None
    assert delegable("outcome", (OrderKey("success"), ID_ORDER), 10) is None
    assert delegable("heuristic", (OrderKey("confidence"), OrderKey("created_at"), ID_ORDER), 10) is None
    assert delegable("heuristic", (ID_ORDER,), 10) is None


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_search_reads_past_a_tie_group_larger_than_k(metric: str) -> None:
    """30 identical vectors tie for first place: the k hits are the lowest ids, whatever Qdrant returns first."""
    base = vectors(5, 16, seed=5)
    written = [make("heuristic", i, id=f"t{(i * 7) % 30:02d}", embedding=base[0]) for i in range(30)]
    written += [make("heuristic", 30 + i, id=f"o{i}", embedding=base[1 + i % 4]) for i in range(12)]
    store = mnemostore.open(f"qdrant://memory/{uuid.uuid4().hex}", metric=metric)
    try:
        store.heuristics.put(written)
        for k in (1, 10, 29, 31, 42):
            hits = store.heuristics.search(base[0], k=k)
            assert [h.record.id for h in hits] == [rid for rid, _ in reference_search(written, base[0], k, metric)]
    finally:
        store.close()


def test_point_ids_are_the_uuid5_of_tenant_and_id() -> None:
    """Point ids stay `uuid5(namespace, "tenant\\0id")`, as stores written before the fast path hold them."""
    from mnemostore.backends.qdrant.ids import _NAMESPACE, meta_point_id, point_id

    namespace = uuid.UUID(bytes=_NAMESPACE)
    for tenant in (None, "acme", "t\u00e9nant"):
        for record_id in ("h00000001", "", "with space/and\u2603", "x" * 300):
            assert point_id(tenant, record_id) == str(uuid.uuid5(namespace, f"{tenant or ''}\x00{record_id}"))
    assert meta_point_id("params") == str(uuid.uuid5(namespace, "meta\x00params"))


@pytest.mark.parametrize("server", [False, True])
def test_built_points_equal_model_construct_and_serialise_alike(server: bool) -> None:
    """`point_builder`'s points equal `PointStruct.model_construct`'s, field set included, and a server
    client sends them alike (REST JSON and gRPC), so local and remote stores share one put path."""
    from qdrant_client import models
    from qdrant_client.conversions.conversion import RestToGrpc

    from mnemostore.backends.qdrant.ids import point_id
    from mnemostore.backends.qdrant.payload import encode
    from mnemostore.backends.qdrant.points import point_builder

    build = point_builder()
    for record in (make("heuristic", 1, embedding=vectors(1, 8, seed=1)[0], metadata={"k": 1, "s": "v"}),
                   make("outcome", 2, embedding=None)):
        vector = {} if record.embedding is None else {
            "embedding": record.embedding.tolist() if server else record.embedding}
        args = (point_id(record.tenant_id, record.id), vector, encode(record))
        ours, theirs = build(*args), models.PointStruct.model_construct(id=args[0], vector=args[1], payload=args[2])
        assert ours == theirs and ours.model_fields_set == theirs.model_fields_set
        assert ours.__pydantic_extra__ == theirs.__pydantic_extra__ and ours.__pydantic_private__ is None
        if server:
            assert models.PointsList(points=[ours]).model_dump_json() == \
                models.PointsList(points=[theirs]).model_dump_json()
            assert RestToGrpc.convert_point_struct(ours) == RestToGrpc.convert_point_struct(theirs)


def test_a_strided_embedding_is_stored_as_its_own_values() -> None:
    """An embedding given as a read-only strided view (no single buffer) reads back exactly."""
    import numpy as np

    matrix = vectors(8, 6, seed=3).T.copy()  # 6 x 8: a column is a strided view of 8 floats
    column = matrix[:, 2]
    column.setflags(write=False)
    assert not column.flags.c_contiguous
    store = mnemostore.open(f"qdrant://memory/{uuid.uuid4().hex}")
    try:
        store.heuristics.put([make("heuristic", 1, id="strided", embedding=column)])
        got = store.heuristics.get("strided")
        assert got.embedding is not None and got.embedding.tobytes() == np.ascontiguousarray(column).tobytes()
    finally:
        store.close()


def test_an_in_memory_store_exists_by_its_prefix_not_by_its_location() -> None:
    """Two stores share one in-memory location under different prefixes: opening the location
    made one of them, not the other (as on a server, where the prefix's meta collection decides)."""
    location = f"qdrant://memory/{uuid.uuid4().hex}"
    with mnemostore.open(f"{location}?prefix=a_") as store:
        store.outcomes.add(task_type="t", success=True)
    with pytest.raises(StoreNotFound):
        mnemostore.open(f"{location}?prefix=b_", create=False)
    with mnemostore.open(f"{location}?prefix=a_", create=False) as store:
        assert store.outcomes.count() == 1
    with mnemostore.open(f"{location}?prefix=b_") as store:  # created on demand, empty
        assert store.outcomes.count() == 0


@pytest.mark.parametrize("first", ["a record without a vector", "prepare"])
def test_a_vector_reaches_a_collection_made_before_the_store_knew_a_dimension(tmp_path: Path, first: str) -> None:
    """The collection was made without the vector (no dimension yet); the first vector adds it
    (`layout._add_vector`: qdrant-client 1.20's `DenseVectorNameConfig` takes a `DenseVectorConfig`)."""
    with mnemostore.open(f"qdrant://{tmp_path / 'q'}") as store:
        if first == "prepare":
            store.heuristics.prepare()
        else:
            store.heuristics.add(condition="c", strategy="s", id="plain")
        store.heuristics.add(condition="c", strategy="s", id="vectored", embedding=vectors(1, 4, seed=1)[0])
        assert [hit.record.id for hit in store.heuristics.search(vectors(1, 4, seed=1)[0], k=2)] == ["vectored"]
    with mnemostore.open(f"qdrant://{tmp_path / 'q'}") as store:
        assert [hit.record.id for hit in store.heuristics.search(vectors(1, 4, seed=1)[0], k=2)] == ["vectored"]
