"""A caller changing objects it gave to or got from the store changes nothing stored.

Records, their metadata, checkpoint states and parent lists are mutable, and a numpy
vector may be a read-only view over a buffer its owner still writes: a backend that
keeps (or hands out) references instead of copies lets a caller rewrite the store.
"""

from __future__ import annotations

from typing import Any

from ...core.capabilities import Capability
from ...core.records import Record, hash_state
from ...core.store import Store
from ..factories import fields, make, nested_metadata, vectors
from ..oracle import assert_same_records, record_difference
from ..requirements import requires
from . import each_kind

MARK = "scribbled"


def scribble_json(value: Any) -> None:
    """Change every dict and list inside `value` in place (add a key, append an item)."""
    if isinstance(value, dict):
        for item in list(value.values()):
            scribble_json(item)
        value[MARK] = True
    elif isinstance(value, list):
        for item in list(value):
            scribble_json(item)
        value.append(MARK)


def scribble(record: Record) -> None:
    """Change everything a caller can change about a record: its containers, a writeable vector, a field."""
    for value in record.__dict__.values():
        scribble_json(value)
    vector = record.embedding
    if vector is not None and vector.flags.writeable:
        vector += 1.0
    record.agent = MARK


def extras(kind: str) -> dict[str, Any]:
    """Fields beyond the defaults that give the kind more nested mutable values."""
    return {"parent_ids": ["parent-a", "parent-b"]} if kind == "checkpoint" else {}


def checkpoint_state() -> dict[str, Any]:
    return {"messages": [{"role": "user", "text": "hi", "tags": ["a"]}], "counters": {"n": 1}, "seen": []}


class IsolationClauses:
    @each_kind
    def test_mutating_a_record_after_put_changes_nothing_stored(self, store: Store, kind: str) -> None:
        matrix = vectors(2, 8)
        view = matrix[0]
        view.setflags(write=False)  # read-only, so taken as it is, but its owner can still write it
        record = make(kind, 1, metadata=nested_metadata(), embedding=view, **extras(kind))
        expected = make(kind, 1, metadata=nested_metadata(), embedding=matrix[0].copy(), **extras(kind))
        written = store.collection(kind).put([record])
        scribble(record)
        scribble(written[0])
        matrix[0] *= -1.0
        assert record_difference(record, expected) is not None  # the scribbling did change it
        assert_same_records([store.collection(kind).get(expected.id)], [expected])
        assert_same_records(store.collection(kind).all(), [expected])

    @each_kind
    def test_mutating_the_fields_given_to_put_changes_nothing_stored(self, store: Store, kind: str) -> None:
        given = fields(kind, 1, metadata=nested_metadata(), embedding=[0.5, -1.0, 2.0], **extras(kind))
        expected = make(kind, 1, metadata=nested_metadata(), embedding=[0.5, -1.0, 2.0], **extras(kind))
        store.collection(kind).put([given])
        scribble_json(given)
        assert_same_records([store.collection(kind).get(expected.id)], [expected])

    @each_kind
    def test_mutating_records_read_back_changes_nothing_stored(self, store: Store, kind: str) -> None:
        collection = store.collection(kind)
        collection.put([make(kind, 1, metadata=nested_metadata(), embedding=vectors(1, 8)[0], **extras(kind)),
                        make(kind, 2, embedding=vectors(2, 8)[1])])
        expected = [make(kind, 1, metadata=nested_metadata(), embedding=vectors(1, 8)[0], **extras(kind)),
                    make(kind, 2, embedding=vectors(2, 8)[1])]
        first, second = collection.get(expected[0].id), collection.get(expected[0].id)
        assert first is not None and second is not None and first == second
        assert_same_records([first, second], [expected[0], expected[0]])
        read: list[Record] = [first, second, *collection.get_many([r.id for r in expected]), *collection.all(),
                              *collection.query(limit=1), *collection.iterate(batch_size=1)]
        for record in read:
            scribble(record)
        assert_same_records([collection.get(expected[0].id)], [expected[0]])
        assert_same_records(collection.all(order_by="id"), expected)

    def test_mutating_what_an_update_took_or_returned_changes_nothing_stored(self, store: Store) -> None:
        original = make("heuristic", 1, occurrence_count=2)
        store.heuristics.put([original])
        changes: dict[str, Any] = {"metadata": nested_metadata(), "agent": "updater"}
        updated = store.heuristics.update(original.id, set=changes, inc={"occurrence_count": 1})
        expected = make("heuristic", 1, metadata=nested_metadata(), agent="updater", occurrence_count=3,
                        updated_at=updated.updated_at)
        scribble_json(changes)
        scribble(updated)
        assert_same_records([store.heuristics.get(original.id)], [expected])

    def test_mutating_a_saved_checkpoint_state_changes_nothing_stored(self, store: Store) -> None:
        given = checkpoint_state()
        saved = store.checkpoints.save("run", given)
        scribble_json(given)
        scribble(saved)
        latest = store.checkpoints.latest("run")
        assert latest is not None and latest.id == saved.id
        assert latest.state == checkpoint_state() and latest.parent_ids == []
        assert latest.state_hash == hash_state(checkpoint_state())
        scribble(latest)
        for record in store.checkpoints.history("run"):
            scribble(record)
        again = store.checkpoints.latest("run")
        assert again is not None and again.state == checkpoint_state() and again.parent_ids == []
        child = store.checkpoints.save("run", checkpoint_state())
        assert child.parent_ids == [saved.id]
        assert [c.state for c in store.checkpoints.history("run")] == [checkpoint_state(), checkpoint_state()]

    @requires(Capability.VECTOR_COSINE)
    def test_mutating_search_hits_changes_nothing_stored(self, store: Store) -> None:
        matrix = vectors(4, 8)
        store.embeddings.put([make("embedding", i, metadata=nested_metadata(), embedding=matrix[i])
                              for i in range(4)])
        expected = {r.id: r for r in (make("embedding", i, metadata=nested_metadata(), embedding=matrix[i])
                                      for i in range(4))}
        before = store.embeddings.search(matrix[0], k=4)
        for hit in before:
            scribble(hit.record)
        after = store.embeddings.search(matrix[0], k=4)
        assert [(h.record.id, h.score) for h in after] == [(h.record.id, h.score) for h in before]
        assert_same_records([h.record for h in after], [expected[h.record.id] for h in after])
