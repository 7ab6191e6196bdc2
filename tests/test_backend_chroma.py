"""The chroma backend under the conformance suite: embedded, in memory, and against a real server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from tests.chroma_server import ChromaTestServer, chroma_server

import mnemostore
from mnemostore.backends.chroma.backend import ChromaBackend
from mnemostore.backends.chroma.registry import LABEL, MARKER_KEY
from mnemostore.core import codec
from mnemostore.core.approximate_ranking import approximate, rank_approximate
from mnemostore.core.vectorsearch import scores
from mnemostore.testing import ConformanceSuite
from mnemostore.testing.factories import make, vectors
from mnemostore.testing.oracle import reference_search

__all__ = ["chroma_server"]

DIMENSION = 8


class TestChromaEmbedded(ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"chroma://{tmp_path}/chroma"


class TestChromaServer(ConformanceSuite):
    @pytest.fixture
    def store_url(self, chroma_server: ChromaTestServer) -> str:
        return chroma_server.url()


# search: Chroma's order, near-ties rescored exactly -----------------------------------------
def test_duplicates_beyond_the_candidates_fetched_are_ranked_by_id(tmp_path: Path) -> None:
    """30 records share one vector: the first answer's k + 1 candidates form one tie run reaching
    past what Chroma returned, so the search widens until it sees them all, then orders by id."""
    base = vectors(2, DIMENSION, seed=4)
    ids = [f"r{(i * 7) % 30:02d}" for i in range(30)]  # written out of id order
    written = [make("embedding", i, id=record_id, embedding=base[0]) for i, record_id in enumerate(ids)]
    written.append(make("embedding", 99, id="other", embedding=base[1]))
    with mnemostore.open(f"chroma://{tmp_path}/c", dimension=DIMENSION) as store:
        store.embeddings.put(written)
        for k in (1, 5, 12):
            hits = store.embeddings.search(base[0], k=k)
            expected = reference_search(written, base[0], k, "cosine")
            assert [h.record.id for h in hits] == [record_id for record_id, _ in expected]
            assert [h.score for h in hits] == pytest.approx([score for _, score in expected], abs=1e-6)
            assert hits[0].record.embedding is not None and hits[0].record.embedding.tobytes() == base[0].tobytes()


def _exact(matrix: np.ndarray, query: np.ndarray) -> Callable[[list[int]], Any]:
    return lambda positions: scores(matrix[positions].astype(np.float64), query.astype(np.float64), "cosine")


def test_rank_approximate_rescores_a_near_tie_run_and_keeps_clear_gaps() -> None:
    """Chroma's scores put b before a (a float32 rounding); they are within the slack, so the run
    is rescored exactly: a first. c is clearly apart and keeps Chroma's score."""
    query = np.array([1.0, 0.0], dtype=np.float32)
    matrix = np.array([[1.0, 1e-4], [1.0, 0.0], [0.5, 0.5]], dtype=np.float32)  # b, a, c
    ids = ["b", "a", "c"]
    approx = [1.0, 1.0 - 1e-9, 0.7071]
    best = rank_approximate(approx, range(3), ids, 3, "cosine", True, 2, _exact(matrix, query))
    assert best is not None and [ids[p] for p, _ in best] == ["a", "b", "c"]
    assert best[0][1] == pytest.approx(1.0) and best[2][1] == 0.7071


def test_rank_approximate_asks_for_more_while_the_kth_is_not_clear() -> None:
    query = np.array([1.0, 0.0], dtype=np.float32)
    matrix = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=np.float32)
    ids = ["x", "y", "z"]
    rescore = _exact(matrix, query)
    # the 2nd and the last returned tie: an unreturned candidate could tie with them too
    assert rank_approximate([1.0, 0.0, 0.0], range(3), ids, 2, "cosine", False, 2, rescore) is None
    assert rank_approximate([1.0, 0.0, 0.0], range(3), ids, 1, "cosine", False, 2, rescore) == [(0, 1.0)]
    # filtered out: only one kept candidate, but more might match beyond those returned
    assert rank_approximate([1.0, 0.0, 0.0], [0], ids, 2, "cosine", False, 2, rescore) is None
    assert rank_approximate([1.0, 0.0, 0.0], [0], ids, 2, "cosine", True, 2, rescore) == [(0, 1.0)]


def test_dot_and_overflowed_distances_are_never_ordered_by_chroma() -> None:
    assert approximate([0.5, 1.0], "dot") is None
    assert approximate([float("inf"), 1.0], "l2") is None
    assert approximate([4.0, 0.0], "l2") == [2.0, 0.0]
    assert approximate([0.25], "cosine") == [0.75]


# the tenant registry -------------------------------------------------------------------------
def _ghost_tenant(store: mnemostore.Store, tenant: str) -> None:
    """Records of `tenant` written the way a version without the registry wrote them."""
    backend = store.backend
    assert isinstance(backend, ChromaBackend) and backend._client is not None
    name = backend.collection_name("outcome", tenant)
    labels = {"mnemostore": "records", "kind": "outcome", "tenant": tenant, "metric": "cosine"}
    main = backend._client.create_collection(name, embedding_function=None, metadata=labels,
                                             configuration=cast(Any, {"hnsw": {"space": "cosine"}}))
    backend._client.create_collection(name + "-novec", embedding_function=None,
                                      metadata={**labels, "mnemostore": "records, no vectors"})
    record = make("outcome", 1, tenant_id=tenant)
    main.add(ids=[record.id], embeddings=np.ones((1, DIMENSION), dtype=np.float32),
             documents=[codec.encode_document(record).decode()])


def test_tenants_come_from_the_registry_not_a_listing_of_collections(tmp_path: Path) -> None:
    url = f"chroma://{tmp_path}/c"
    with mnemostore.open(url, tenant="acme", dimension=DIMENSION) as store:
        store.outcomes.put([make("outcome", 1, tenant_id="acme")])
        _ghost_tenant(store, "ghost")  # holds rows, but no writer registered it
        with mnemostore.open(url, dimension=DIMENSION) as default:
            default.outcomes.put([make("outcome", 2)])
        assert store.backend.tenants("outcome") == [None, "acme"]
        assert store.backend.tenants("heuristic") == []
        meta = store.backend._meta  # type: ignore[attr-defined]
        rows = meta.get(where={"registry": LABEL}, include=["metadatas"])
        assert sorted((m["kind"], m["tenant"]) for m in rows["metadatas"]) == [("outcome", ""), ("outcome", "acme")]


def test_a_store_from_before_the_registry_is_listed_once_then_registered(tmp_path: Path) -> None:
    url = f"chroma://{tmp_path}/c"
    with mnemostore.open(url, tenant="acme", dimension=DIMENSION) as store:
        store.outcomes.put([make("outcome", 1, tenant_id="acme")])
        _ghost_tenant(store, "ghost")
        meta = store.backend._meta  # type: ignore[attr-defined]
        meta.delete(ids=[MARKER_KEY])  # as a store written before the registry
        meta.delete(where={"registry": LABEL})
    with mnemostore.open(url, dimension=DIMENSION) as store:
        assert store.backend.read_meta(MARKER_KEY) is None
        assert store.backend.tenants("outcome") == ["acme", "ghost"]  # found by the one listing
        assert store.backend.read_meta(MARKER_KEY) == {"format": 1}
        registered = store.backend._meta.get(where={"registry": LABEL}, include=["metadatas"])  # type: ignore[attr-defined]
        assert sorted(m["tenant"] for m in registered["metadatas"]) == ["acme", "ghost"]
        store.backend._meta.delete(ids=[  # type: ignore[attr-defined]
            i for i, m in zip(registered["ids"], registered["metadatas"], strict=True) if m["tenant"] == "ghost"])
        assert store.backend.tenants("outcome") == ["acme"]  # complete now: no second listing
