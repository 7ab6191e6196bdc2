"""Put and get, upserts, missing ids, counts and deletes for every kind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from ...core.capabilities import Capability
from ...core.errors import NotFound, ValidationError
from ...core.filters import F
from ...core.store import Store
from ..factories import batch, make, vectors
from ..oracle import assert_same_records
from ..requirements import requires, since
from . import SpecimenFixtures, each_kind, each_kind_and_specimen


class BasicClauses(SpecimenFixtures):
    @each_kind_and_specimen
    def test_put_then_get_returns_equal_record(self, store: Store, kind: str) -> None:
        record = make(kind, 1)
        assert store.collection(kind).put([record]) == [record]
        assert_same_records([store.collection(kind).get(record.id)], [record])

    @each_kind
    def test_put_assigns_ids_and_timestamps_when_absent(self, store: Store, kind: str) -> None:
        fields = make(kind, 1).model_dump(exclude={"id", "created_at", "updated_at"})
        first, second = store.collection(kind).put([fields, fields])
        assert first.id and second.id and first.id != second.id
        assert first.created_at.utcoffset() is not None
        assert_same_records(store.collection(kind).get_many([first.id, second.id]), [first, second])

    @each_kind
    def test_put_of_an_empty_batch_writes_nothing(self, store: Store, kind: str) -> None:
        assert store.collection(kind).put([]) == []
        assert store.collection(kind).count() == 0

    @each_kind
    def test_putting_the_same_batch_twice_equals_putting_it_once(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 7)
        collection.put(records)
        collection.put(records)
        assert collection.count() == 7
        assert_same_records(collection.all(order_by="id"), sorted(records, key=lambda r: r.id))

    @each_kind
    def test_upsert_replaces_every_field_by_id(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put([make(kind, 1, embedding=[1.0, 2.0, 3.0]), make(kind, 2)])
        changed = make(kind, 5, id=make(kind, 1).id, agent=None, metadata={"new": True})
        collection.put([changed])
        assert collection.count() == 2
        assert_same_records([collection.get(changed.id)], [changed])  # the old embedding is gone too
        assert collection.count(F.agent == make(kind, 1).agent) == 0

    @since("1.13")
    @each_kind_and_specimen
    def test_prepare_leaves_a_kind_empty_and_writable(self, store: Store, kind: str) -> None:
        """`Collection.prepare()` (`Backend.prepare`: a LangGraph store's or saver's `setup()`) makes the kind's
        storage, or nothing; either way the kind reads empty, a second call changes nothing, and its first put
        reads back."""
        collection = store.collection(kind)
        for _ in range(2):
            collection.prepare()
            assert collection.count() == 0 and collection.all() == []
        written = batch(kind, 3)
        collection.put(written)
        assert_same_records(collection.all(order_by="id"), sorted(written, key=lambda r: r.id))

    @since("1.4")
    @each_kind_and_specimen
    def test_put_keeping_existing_records_writes_only_the_new_ones(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        stored = batch(kind, 3)
        collection.put(stored)
        changed = make(kind, 9, id=stored[0].id, metadata={"changed": True})
        new = [make(kind, 10 + i) for i in range(2)]
        for _ in range(2):  # a retried call changes nothing more
            assert collection.put([changed, *new], keep_existing=True) == [changed, *new]
            assert collection.count() == 5
            assert_same_records(collection.all(order_by="id"), sorted([*stored, *new], key=lambda r: r.id))

    @since("1.7")
    @each_kind_and_specimen
    def test_put_keeping_created_replaces_records_but_their_created_at(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        india = timezone(timedelta(hours=5, minutes=30))  # the stored offset is kept too, not only the instant
        stored = [make(kind, i, created_at=datetime(2024, 6, 1, 12, i, tzinfo=india)) for i in range(3)]
        collection.put(stored)
        later = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
        changed = make(kind, 9, id=stored[0].id, metadata={"changed": True}, created_at=later, updated_at=later)
        new = [make(kind, 10 + i, created_at=later, updated_at=later) for i in range(2)]
        kept = changed.model_copy(update={"created_at": stored[0].created_at})
        for _ in range(2):  # a retried call gives the same store
            assert collection.put([changed, *new], keep_created=True) == [changed, *new]
            assert collection.count() == 5
            assert_same_records(collection.all(order_by="id"),
                                sorted([kept, *stored[1:], *new], key=lambda r: r.id))
        read = collection[changed.id]
        assert read.created_at.utcoffset() == india.utcoffset(None) and read.updated_at == later
        alone = make(kind, 9, id=stored[1].id, updated_at=later)  # one record: its own path on some engines
        collection.put([alone], keep_created=True)
        assert_same_records([collection.get(alone.id)],
                            [alone.model_copy(update={"created_at": stored[1].created_at})])

    @each_kind
    def test_get_of_missing_ids(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        present = make(kind, 1)
        collection.put([present])
        assert collection.get("no-such-id") is None
        assert collection.get_many(["no-such-id", "other-missing"]) == []
        assert_same_records(collection.get_many(["no-such-id", present.id]), [present])
        with pytest.raises(NotFound):
            collection["no-such-id"]
        assert collection.get_many([]) == []

    @each_kind
    def test_get_many_returns_records_in_the_order_asked(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 6)
        collection.put(records)
        wanted = [records[4], records[0], records[5], records[2]]
        assert_same_records(collection.get_many([r.id for r in wanted]), wanted)
        repeated = [records[3].id, records[1].id, records[3].id]
        assert_same_records(collection.get_many(repeated), [records[3], records[1]])

    @each_kind_and_specimen
    def test_count_with_and_without_filter(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put(batch(kind, 9))
        assert collection.count() == 9
        assert collection.count(F.agent == "coder") == 3
        assert collection.count({"agent": "coder", "project_id": "beta"}) == 1
        assert collection.count(F.agent == "nobody") == 0

    @each_kind
    def test_delete_by_ids(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 6)
        collection.put(records)
        assert collection.delete([records[1].id, records[3].id, "no-such-id"]) == 2
        assert collection.delete(records[0].id) == 1
        assert collection.delete([records[0].id]) == 0
        survivors = [records[2], records[4], records[5]]
        assert_same_records(collection.all(order_by="id"), survivors)

    @each_kind_and_specimen
    def test_delete_by_filter(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put(batch(kind, 9))
        assert collection.delete(where=F.agent == "coder") == 3
        assert collection.count() == 6
        assert collection.count(F.agent == "coder") == 0
        assert collection.delete(where=F.agent == "coder") == 0

    @each_kind
    def test_delete_by_ids_and_filter_deletes_only_records_matching_both(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 6)
        collection.put(records)
        ids = [r.id for r in records[:4]]
        assert collection.delete(ids, where=F.project_id == "alpha") == 2  # records 0 and 2
        assert sorted(r.id for r in collection.all()) == sorted(r.id for r in (records[1], records[3], *records[4:]))

    @each_kind
    def test_delete_everything_needs_an_explicit_empty_filter(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put(batch(kind, 4))
        with pytest.raises(ValidationError):
            collection.delete()
        assert collection.count() == 4
        assert collection.delete(where={}) == 4
        assert collection.count() == 0
        assert collection.all() == []

    @each_kind
    def test_deleted_records_never_come_back_from_get_query_or_count(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        records = batch(kind, 5)
        collection.put(records)
        collection.delete([records[0].id])
        collection.delete(where=F.id == records[1].id)
        gone = {records[0].id, records[1].id}
        assert collection.get(records[0].id) is None
        assert collection.get_many(sorted(gone)) == []
        assert not gone & {r.id for r in collection.all()}
        assert not gone & {r.id for r in collection.iterate(batch_size=2)}
        assert collection.count(F.id.in_(sorted(gone))) == 0
        assert collection.count() == 3

    @each_kind
    @requires(Capability.VECTOR_COSINE)
    def test_deleted_records_never_come_back_from_search(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        matrix = vectors(6, 8)
        records = [make(kind, i, embedding=matrix[i]) for i in range(6)]
        collection.put(records)
        collection.delete([records[0].id])
        collection.delete(where=F.id == records[1].id)
        found = {hit.record.id for hit in collection.search(matrix[0], k=6)}
        assert found == {r.id for r in records[2:]}
        collection.delete(where={})
        assert collection.search(matrix[0], k=6) == []

    @each_kind
    def test_put_returns_records_scoped_to_the_store(self, store: Store, kind: str) -> None:
        written = store.collection(kind).put([make(kind, 1)])
        assert written[0].tenant_id == store.tenant
        assert store.collection(kind).get(written[0].id).tenant_id == store.tenant  # type: ignore[union-attr]

    @since("1.3")
    @each_kind
    def test_a_repeated_id_is_read_deleted_and_filtered_once(self, store: Store, kind: str) -> None:
        """Rule: ids in `get_many`, `delete` and `in`/`not in` filters form a set (first occurrence
        kept for ordering); a missing id among them changes nothing."""
        collection = store.collection(kind)
        a, b, c = make(kind, 1), make(kind, 2), make(kind, 3)
        collection.put([a, b, c])
        assert [r.id for r in collection.get_many([b.id, a.id, b.id, "missing", a.id])] == [b.id, a.id]
        assert collection.count(F.id.in_([a.id, a.id, b.id, b.id])) == 2
        assert collection.count(F.id.not_in([a.id, a.id])) == 2
        assert [r.id for r in collection.all(F.id.in_([c.id, c.id]))] == [c.id]
        assert collection.delete([a.id, a.id]) == 1
        assert collection.delete([b.id, b.id, "missing", "missing"]) == 1
        assert collection.delete(where=F.id.in_([c.id, c.id, a.id])) == 1
        assert collection.count() == 0

    @since("1.3")
    @each_kind
    def test_a_batch_naming_one_id_twice_is_refused_and_writes_nothing(self, store: Store, kind: str) -> None:
        """Rule: one `put` holds each id once; a repeat is a ValidationError naming both positions,
        never a silent pick (which copy would win differs between engines)."""
        collection = store.collection(kind)
        first = make(kind, 1)
        again = make(kind, 2, id=first.id)
        with pytest.raises(ValidationError, match=r"records\[2\]\.id.*records\[0\]"):
            collection.put([first, make(kind, 3), again])
        assert collection.count() == 0
