"""Edges where engines differ: hostile strings, awkward metadata keys, huge `in` lists, integers
beyond 64 bits in filters, search freshness across instances, and vectors left behind."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ...core.capabilities import Capability
from ...core.errors import ValidationError
from ...core.filters import F
from ...core.store import Store
from ..factories import batch, make, vectors
from ..oracle import assert_same_records, expected_ids
from ..requirements import requires, since
from . import each_kind

HOSTILE = (
    "'; DROP TABLE mnemo_outcome; --",
    '" OR 1=1 --',
    "$where",
    "a.b[0]",
    "{$gt: ''}",
    "back\\slash",
    "new\nline",
    "%_*?",
    "$.metadata",
)
"""Strings that break engines which splice text into SQL, JSON paths or query documents."""


class EdgeClauses:
    @since("1.1")
    @each_kind
    def test_hostile_strings_are_data_in_ids_values_and_filters(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = [make(kind, i, id=f"id {text}", agent=text, metadata={"text": text})
                   for i, text in enumerate(HOSTILE)]
        collection.put(records)
        for record in records:
            assert_same_records([collection.get(record.id)], [record])
            assert [r.id for r in collection.query(F.agent == record.agent)] == [record.id]
        assert collection.count() == len(HOSTILE)

    @since("1.1")
    @requires(Capability.FILTER_METADATA)
    @each_kind
    def test_metadata_keys_with_quotes_backslashes_and_newlines_filter_exactly(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        keys = ['quote"d', "single'q", "back\\slash", "new\nline", "dot.ted", "$dollar", "a') OR ('1'='1"]
        records = [make(kind, i, metadata={key: i, "other": -1}) for i, key in enumerate(keys)]
        collection.put(records)
        for i, key in enumerate(keys):
            assert [r.id for r in collection.query(F.metadata[key] == i)] == [records[i].id], key
            assert collection.count(F.metadata[key] != None) == 1, key  # noqa: E711
        assert_same_records(collection.all(order_by="id"), sorted(records, key=lambda r: r.id))

    @since("1.1")
    @each_kind
    def test_in_lists_longer_than_engine_parameter_limits(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 30)
        collection.put(records)
        wanted = [r.id for r in records[::3]] + [f"absent-{i}" for i in range(2500)]
        assert {r.id for r in collection.query(F.id.in_(wanted))} == set(wanted[:10])
        assert collection.count(F.id.not_in(wanted)) == 20
        assert len(collection.get_many(wanted)) == 10

    @since("1.1")
    @each_kind
    def test_integers_beyond_64_bits_in_filters_match_nothing_or_are_rejected(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 5)
        collection.put(records)
        huge = 2**70
        numeric = next((name for name, t in type(records[0]).filterable.items() if t is int), None)
        filters = [F.metadata["n"] == huge] if Capability.FILTER_METADATA in store.capabilities else []
        if numeric is not None:
            filters += [getattr(F, numeric) == huge, getattr(F, numeric) != -huge]
            if Capability.FILTER_RANGE in store.capabilities:
                filters += [getattr(F, numeric) < huge, getattr(F, numeric) > -huge, getattr(F, numeric) >= huge]
        for where in filters:
            try:
                found = {r.id for r in collection.query(where)}
            except ValidationError:
                continue  # rejecting an out-of-range value up front is fine too
            assert found == expected_ids(kind, records, where), repr(where)

    @since("1.1")
    @requires(Capability.VECTOR_COSINE)
    @each_kind
    def test_search_sees_what_another_instance_wrote_since(self, open_store: Callable[..., Store], kind: str) -> None:
        reader, writer = open_store(), open_store()
        v = vectors(6, dimension=8, seed=3)
        reader.collection(kind).put([make(kind, i, embedding=v[i]) for i in range(3)])
        assert {h.record.id for h in reader.search(kind, v[4], k=10)} == {make(kind, i).id for i in range(3)}
        writer.collection(kind).put([make(kind, 4, embedding=v[4])])
        writer.collection(kind).delete([make(kind, 0).id])
        writer.collection(kind).update(make(kind, 1).id, set={"embedding": v[5]})
        hits = reader.search(kind, v[4], k=10)
        assert {h.record.id for h in hits} == {make(kind, i).id for i in (1, 2, 4)}
        assert hits[0].record.id == make(kind, 4).id
        assert next(h for h in reader.search(kind, v[5], k=1)).record.id == make(kind, 1).id

    @since("1.1")
    @requires(Capability.VECTOR_COSINE)
    @each_kind
    def test_no_vector_outlives_its_record_or_embedding(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        v = vectors(5, dimension=8, seed=5)
        collection.put([make(kind, i, embedding=v[i]) for i in range(5)])
        collection.put([make(kind, 0, embedding=None)])  # upsert without an embedding
        collection.update(make(kind, 1).id, set={"embedding": None})
        collection.delete([make(kind, 2).id])
        collection.delete(where=F.id == make(kind, 3).id)
        for query in v:
            assert [h.record.id for h in store.search(kind, query, k=5)] == [make(kind, 4).id]
        assert collection.count() == 3

    @since("1.19")
    @requires(Capability.VECTOR_COSINE)
    @each_kind
    def test_a_replace_keeping_created_at_replaces_the_vector_a_search_saw(self, store: Store, kind: str) -> None:
        """`put(keep_created=True)` over records a search has already seen (a backend may keep vectors
        between searches): a new vector, none, one where there was none, in a batch and alone; each search
        then finds every vector as written, once, and none that was replaced."""
        collection = store.collection(kind)
        v = vectors(8, dimension=8, seed=9)
        collection.put([*(make(kind, i, embedding=v[i]) for i in range(4)), make(kind, 4, embedding=None)])
        assert len(store.search(kind, v[0], k=10)) == 4
        collection.put([make(kind, 0, embedding=v[5]), make(kind, 4, embedding=v[6])], keep_created=True)
        collection.put([make(kind, 1, embedding=None)], keep_created=True)
        collection.put([make(kind, 2, embedding=v[7])], keep_created=True)
        written = {make(kind, i).id: v[j] for i, j in ((0, 5), (2, 7), (3, 3), (4, 6))}
        for query in (v[5], v[7], v[3], v[6], v[0], v[1]):
            hits = store.search(kind, query, k=10)
            assert sorted(hit.record.id for hit in hits) == sorted(written)
            for hit in hits:
                assert np.array_equal(hit.record.embedding, written[hit.record.id])
        for i, j in ((0, 5), (2, 7), (4, 6)):
            assert store.search(kind, v[j], k=1)[0].record.id == make(kind, i).id
        assert collection.count() == 5

    @since("1.1")
    @each_kind
    def test_oversized_integers_in_records_are_rejected_before_writing(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        with pytest.raises(ValidationError, match="metadata"):
            collection.put([make(kind, 1, metadata={"n": 2**64})])
        assert collection.count() == 0

    @since("1.1")
    @requires(Capability.FILTER_METADATA)
    @each_kind
    def test_an_upsert_without_a_metadata_key_stops_matching_it(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put([make(kind, 1, metadata={"flag": True, "n": 1}), make(kind, 2, metadata={"flag": True})])
        collection.put([make(kind, 1, metadata={"n": 2})])  # same id: the record is replaced, not merged
        assert [r.id for r in collection.query(F.metadata["flag"] == True)] == [make(kind, 2).id]  # noqa: E712
        assert collection.count(F.metadata["n"] == 1) == 0 and collection.count(F.metadata["n"] == 2) == 1
        assert collection.get(make(kind, 1).id).metadata == {"n": 2}  # type: ignore[union-attr]
