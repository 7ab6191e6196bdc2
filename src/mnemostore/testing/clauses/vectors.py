"""Vector search: exact top-k against numpy for each metric, filters applied inside the search."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from ...core.capabilities import VECTOR_METRICS, Capability
from ...core.errors import UnsupportedCapability, UnsupportedFilter, ValidationError
from ...core.filters import F
from ...core.protocol import Hit
from ...core.records import Record
from ...core.store import Store
from ..factories import make, vectors
from ..oracle import assert_same_records, reference_search
from ..requirements import requirement, requires, skip_if_declared
from . import SpecimenFixtures, each_kind, each_kind_and_specimen

DIMENSION = 16

each_metric = pytest.mark.parametrize(
    "metric", [pytest.param(metric, marks=requirement(capability)) for metric, capability in VECTOR_METRICS.items()])
"""Run a clause once per metric, each gated on its own capability."""


def assert_hits(hits: Sequence[Hit], expected: Sequence[tuple[str, float]], records: Sequence[Record]) -> None:
    """Hits have the expected ids in order, scores within float32 precision, full records."""
    assert [hit.record.id for hit in hits] == [record_id for record_id, _ in expected]
    for hit, (_, score) in zip(hits, expected, strict=True):
        assert hit.score == pytest.approx(score, rel=1e-4, abs=1e-4)
    by_id = {record.id: record for record in records}
    assert_same_records([hit.record for hit in hits], [by_id[hit.record.id] for hit in hits])


def scored_batch(kind: str, n: int, seed: int = 7, **overrides: object) -> list[Any]:
    matrix = vectors(n, DIMENSION, seed)
    return [make(kind, i, embedding=matrix[i], **overrides) for i in range(n)]


class VectorClauses(SpecimenFixtures):
    @each_kind
    @each_metric
    def test_top_k_matches_numpy_exactly(self, open_store: Callable[..., Store], kind: str, metric: str) -> None:
        store = open_store(metric=metric)
        written = scored_batch(kind, 60)
        store.collection(kind).put(written)
        assert store.params.metric == metric and store.params.dimension == DIMENSION
        for query in vectors(4, DIMENSION, seed=11):
            for k in (1, 5, 10, 60, 75):
                hits = store.collection(kind).search(query, k=k)
                assert_hits(hits, reference_search(written, query, k, metric), written)

    @each_metric
    def test_ties_are_broken_by_id(self, open_store: Callable[..., Store], metric: str) -> None:
        store = open_store(metric=metric)
        base = vectors(3, DIMENSION, seed=3)
        ids = ["d", "b", "e", "a", "c", "f"]
        written = [make("embedding", i, id=record_id, embedding=base[i % 3]) for i, record_id in enumerate(ids)]
        store.embeddings.put(written)
        for query in base:
            for k in (1, 2, 3, 6):
                assert_hits(store.embeddings.search(query, k=k), reference_search(written, query, k, metric), written)

    @each_metric
    @requires(Capability.VECTOR_FILTERED)
    def test_filtered_search_returns_k_whenever_k_match(self, open_store: Callable[..., Store], metric: str) -> None:
        store = open_store(metric=metric)
        matrix = vectors(500, DIMENSION, seed=5)
        written = [make("embedding", i, agent="needle" if i % 10 == 3 else "hay", embedding=matrix[i])
                   for i in range(500)]
        store.embeddings.put(written)
        for query in vectors(3, DIMENSION, seed=13):
            for where in (F.agent == "needle", {"agent": "needle"}, (F.agent == "needle") & (F.project_id == "beta")):
                hits = store.embeddings.search(query, k=10, where=where)
                assert len(hits) == 10
                assert all(hit.record.agent == "needle" for hit in hits)
                assert_hits(hits, reference_search(written, query, 10, metric, where), written)
            rare = F.id.in_([written[3].id, written[250].id, written[499].id])
            assert_hits(store.embeddings.search(query, k=10, where=rare),
                        reference_search(written, query, 10, metric, rare), written)
            assert store.embeddings.search(query, k=10, where=F.agent == "nobody") == []

    @requires(Capability.VECTOR_FILTERED, Capability.VECTOR_COSINE, Capability.FILTER_METADATA, Capability.FILTER_RANGE)
    def test_filtered_search_with_metadata_and_ranges(self, store: Store) -> None:
        written = scored_batch("heuristic", 200)
        store.heuristics.put(written)
        query = vectors(1, DIMENSION, seed=17)[0]
        for where in (F.metadata["parity"] == "odd", F.confidence >= 0.8,
                      ~(F.agent == "coder") & (F.metadata["i"] < 50)):
            assert_hits(store.heuristics.search(query, k=7, where=where),
                        reference_search(written, query, 7, "cosine", where), written)

    @each_kind_and_specimen
    @requires(Capability.VECTOR_COSINE)
    def test_records_without_embeddings_are_never_returned(self, store: Store, kind: str) -> None:
        with_vectors = scored_batch(kind, 10)
        without = [make(kind, i) for i in range(10, 30)]
        store.collection(kind).put(with_vectors + without)
        hits = store.collection(kind).search(vectors(1, DIMENSION, seed=2)[0], k=30)
        assert {hit.record.id for hit in hits} == {r.id for r in with_vectors}

    @requires(Capability.VECTOR_COSINE)
    def test_search_on_an_empty_store_returns_nothing(self, open_store: Callable[..., Store]) -> None:
        store = open_store(dimension=DIMENSION)  # a known dimension: the search reaches the backend
        query = vectors(1, DIMENSION)[0]
        assert store.embeddings.search(query, k=5) == []
        assert store.outcomes.search(query, k=5) == []
        store.embeddings.put([make("embedding", 1, embedding=query)])
        assert store.outcomes.search(query, k=5) == []  # another kind: still empty
        assert open_store(tenant="elsewhere").embeddings.search(query, k=5) == []
        store.embeddings.delete(where={})
        assert store.embeddings.search(query, k=5) == []

    @requires(Capability.VECTOR_COSINE)
    def test_search_is_scoped_to_the_kind(self, store: Store) -> None:
        store.embeddings.put(scored_batch("embedding", 5))
        store.heuristics.put(scored_batch("heuristic", 5, seed=8))
        hits = store.embeddings.search(vectors(1, DIMENSION, seed=2)[0], k=10)
        assert len(hits) == 5 and all(hit.record.kind == "embedding" for hit in hits)

    @requires(Capability.VECTOR_COSINE)
    def test_cosine_ignores_vector_length(self, store: Store) -> None:
        matrix = vectors(20, DIMENSION, seed=21)
        scale = np.linspace(0.001, 1000.0, 20, dtype=np.float32)[:, None]
        written = [make("embedding", i, embedding=row) for i, row in enumerate(matrix * scale)]
        store.embeddings.put(written)
        query = matrix[4] * np.float32(250.0)
        hits = store.embeddings.search(query, k=20)
        assert hits[0].record.id == written[4].id
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert_hits(hits, reference_search(written, query, 20, "cosine"), written)

    @requires(Capability.VECTOR_COSINE)
    def test_invalid_searches_are_rejected(self, store: Store) -> None:
        store.embeddings.put(scored_batch("embedding", 3))
        query = vectors(1, DIMENSION)[0]
        for bad_vector in (query[:-1], [float("nan")] * DIMENSION, [], "text"):
            with pytest.raises(ValidationError):
                store.embeddings.search(bad_vector, k=3)
        for bad_k in (0, -1, 1.5, None):
            with pytest.raises(ValidationError):
                store.embeddings.search(query, k=bad_k)  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            store.embeddings.search(query, k=3, where=F.no_such_field == 1)

    def test_search_without_the_metric_raises_unsupported_capability(self, store: Store) -> None:
        skip_if_declared(store.capabilities, VECTOR_METRICS[store.params.metric])
        with pytest.raises(UnsupportedCapability):
            store.embeddings.search(vectors(1, DIMENSION)[0], k=3)

    @requires(Capability.VECTOR_COSINE)
    def test_filtered_search_without_the_capability_raises(self, store: Store) -> None:
        skip_if_declared(store.capabilities, Capability.VECTOR_FILTERED)
        store.embeddings.put(scored_batch("embedding", 3))
        with pytest.raises((UnsupportedCapability, UnsupportedFilter)):
            store.embeddings.search(vectors(1, DIMENSION)[0], k=3, where=F.agent == "coder")
