"""Round-trip fidelity: what is written reads back identical, through every read path."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from ...core.capabilities import Capability
from ...core.filters import F
from ...core.records import Record
from ...core.store import Store
from ..factories import (
    AWKWARD_TEXT,
    ODD_OFFSETS,
    TEXT_FIELDS,
    all_none,
    fields,
    large_state,
    make,
    nested_metadata,
    payload_bytes,
)
from ..oracle import assert_same_records
from ..requirements import requires, since
from . import SpecimenFixtures, each_kind, each_kind_and_specimen


def open_memory_copy() -> Store:
    """An empty in-memory store (a destination for copies: it takes the source's parameters)."""
    from ... import open

    return open("memory://")


def read_back_everywhere(store: Store, records: list[Record]) -> None:
    """Every read path (get, get_many, query, iterate) returns records identical to `records`."""
    collection = store.collection(records[0].kind)
    ids = [r.id for r in records]
    assert_same_records([collection.get(i) for i in ids], records)
    assert_same_records(collection.get_many(ids), records)
    by_id = sorted(records, key=lambda r: r.id)
    assert_same_records(collection.all(order_by="id"), by_id)
    assert_same_records(list(collection.iterate(order_by="id", batch_size=2)), by_id)
    assert_same_records(collection.get_many(ids, vectors=False), records, vectors=False)


class FidelityClauses(SpecimenFixtures):
    @each_kind_and_specimen
    def test_unicode_text_round_trips_unchanged(self, store: Store, kind: str) -> None:
        records = []
        for i, text in enumerate(AWKWARD_TEXT):
            overrides: dict[str, Any] = dict.fromkeys(TEXT_FIELDS[kind], text)
            if kind == "outcome" and not text:
                overrides["task_type"] = "-"
            records.append(make(kind, i, agent=text, project_id=text, metadata={text: text, "v": [text]},
                                **overrides))
        store.collection(kind).put(records)
        read_back_everywhere(store, records)

    @each_kind
    def test_unicode_is_not_normalised_by_filters(self, store: Store, kind: str) -> None:
        decomposed, composed = make(kind, 1, agent="e\u0301"), make(kind, 2, agent="\u00e9")
        store.collection(kind).put([decomposed, composed])
        assert [r.id for r in store.collection(kind).all(F.agent == "e\u0301")] == [decomposed.id]
        assert [r.id for r in store.collection(kind).all(F.agent == "\u00e9")] == [composed.id]
        assert [r.id for r in store.collection(kind).all(F.agent == "🧠🤖")] == []

    @each_kind
    def test_awkward_ids_round_trip(self, store: Store, kind: str) -> None:
        ids = ["🧠", "מזהה", "e\u0301", "../../etc/passwd", "a/b\\c", "with space", "'; DROP TABLE x; --",
               "%_*?", "CON", ".", "x" * 512, "Ab", "aB"]
        records = [make(kind, i, id=record_id) for i, record_id in enumerate(ids)]
        store.collection(kind).put(records)
        read_back_everywhere(store, records)
        assert store.collection(kind).count() == len(ids)

    @each_kind
    def test_nested_metadata_round_trips_with_exact_types(self, store: Store, kind: str) -> None:
        records = [make(kind, 1, metadata=nested_metadata()), make(kind, 2, metadata={})]
        store.collection(kind).put(records)
        read_back_everywhere(store, records)

    @each_kind_and_specimen
    def test_datetimes_keep_their_offset_and_microseconds(self, store: Store, kind: str) -> None:
        from ..factories import DATETIME_FIELDS, offset_time

        records = []
        for i, zone in enumerate(ODD_OFFSETS):
            moment = offset_time(i).astimezone(zone).replace(microsecond=(i * 104_729) % 1_000_000)
            records.append(make(kind, i, **dict.fromkeys(DATETIME_FIELDS[kind], moment)))
        store.collection(kind).put(records)
        read_back_everywhere(store, records)

    @each_kind_and_specimen
    def test_none_values_stay_none_and_empty_strings_stay_empty(self, store: Store, kind: str) -> None:
        empty: dict[str, Any] = {name: "" for name in TEXT_FIELDS[kind] if name != "task_type"}
        records = [
            store.collection(kind).record_cls(**all_none(kind, 1)),
            make(kind, 2, agent="", project_id="", metadata={"k": None, "": ""}, **empty),
        ]
        store.collection(kind).put(records)
        read_back_everywhere(store, records)
        assert store.collection(kind).count(F.agent == None) == 1  # noqa: E711
        assert store.collection(kind).count(F.agent == "") == 1

    @each_kind
    def test_floats_in_metadata_are_exact(self, store: Store, kind: str) -> None:
        values = [0.1, 0.2 + 0.1, 1 / 3, -0.0, 1e-300, 5e-324, 1.7976931348623157e308, 123456789.123456789,
                  -2.5e-8, 2.0**53, 1e21, 1e-7]
        record = make(kind, 1, metadata={"floats": values, "single": 0.30000000000000004})
        store.collection(kind).put([record])
        read_back_everywhere(store, [record])

    @each_kind
    def test_embeddings_are_exact_as_float32(self, store: Store, kind: str) -> None:
        given = [0.1, 1 / 3, -0.0, 1e-40, 3.4e38, -1.17549435e-38, 2.0**-149, 123456.789]
        record = make(kind, 1, embedding=given)
        store.collection(kind).put([record])
        got = store.collection(kind).get(record.id)
        assert got is not None and got.embedding is not None
        assert got.embedding.dtype == np.float32
        assert got.embedding.tobytes() == np.asarray(given, dtype=np.float32).tobytes()  # bit for bit, -0.0 too
        read_back_everywhere(store, [record])

    @each_kind
    def test_large_text_and_metadata_round_trip(self, store: Store, kind: str) -> None:
        text = "long 🧠 text " * 20_000
        record = make(kind, 1, agent=text, metadata={"long": text, "many": list(range(10_000))})
        store.collection(kind).put([record])
        read_back_everywhere(store, [record])

    def test_checkpoint_state_round_trips_with_exact_types(self, store: Store) -> None:
        state = {**nested_metadata(), "messages": [{"role": "user", "content": AWKWARD_TEXT[0]}]}
        record = make("checkpoint", 1, state=state)
        store.checkpoints.put([record])
        read_back_everywhere(store, [record])
        assert store.checkpoints[record.id].state_hash == record.state_hash

    def test_heuristic_confidence_is_exact(self, store: Store) -> None:
        records = [make("heuristic", i, confidence=value)
                   for i, value in enumerate((0.1, 0.30000000000000004, 1 / 3, 0.0, 1.0, 5e-324))]
        store.heuristics.put(records)
        read_back_everywhere(store, records)

    @requires(Capability.LARGE_STATE)
    def test_large_checkpoint_state_round_trips(self, store: Store) -> None:
        state = large_state(5.5)
        saved = store.checkpoints.save("big-run", state)
        again = store.checkpoints.save("big-run", {**state, "summary": "second"})
        assert store.checkpoints.latest("big-run") == again
        got = store.checkpoints.get(saved.id)
        assert got is not None
        assert got.state == state
        assert got.state_hash == saved.state_hash
        assert len(got.state["messages"]) == len(state["messages"])

    @since("1.4")
    def test_checkpoint_payloads_round_trip_byte_for_byte(self, store: Store, tmp_path: Path) -> None:
        """A checkpoint's `payload` (opaque bytes beside the state) reads back exactly through every
        read path, `latest` and `history`, an update, a copy and an export/import: every byte value,
        empty bytes, and None; `state_hash` does not cover it."""
        from ...migrations import copy, export_archive, import_archive
        state = {"step": 1}
        records = [make("checkpoint", i, run_id="bytes", sequence=i, state=state, payload=payload)
                   for i, payload in enumerate((payload_bytes(3), b"", None, bytes(range(255, -1, -1))))]
        store.checkpoints.put(records)
        read_back_everywhere(store, records)
        assert len({r.state_hash for r in records}) == 1  # the same state, whatever the payload
        assert store.checkpoints.latest("bytes") == records[-1]
        assert [r.payload for r in store.checkpoints.history("bytes")] == [r.payload for r in records]
        updated = store.checkpoints.update(records[2].id, set={"payload": b"\x00new\xff"})
        assert updated.payload == b"\x00new\xff"
        assert store.checkpoints[records[2].id].payload == b"\x00new\xff"
        records[2] = updated
        with open_memory_copy() as copied:
            copy(store, copied)
            assert_same_records(copied.checkpoints.all(order_by="id"), records)
        export_archive(store, tmp_path / "payloads.jsonl")
        with open_memory_copy() as imported:
            import_archive(tmp_path / "payloads.jsonl", imported)
            assert_same_records(imported.checkpoints.all(order_by="id"), records)
            store.checkpoints.delete([r.id for r in records])
            copy(imported, store, overwrite=True)  # and back into this backend
        assert_same_records(store.checkpoints.all(order_by="id"), records)

    @since("1.4")
    @requires(Capability.LARGE_STATE)
    def test_a_large_checkpoint_payload_round_trips(self, store: Store) -> None:
        payload = payload_bytes(5 * 1024 * 1024 // 256 + 1)
        saved = store.checkpoints.save("big-payload", {"step": 1}, payload=payload)
        again = store.checkpoints.save("big-payload", {"step": 2}, payload=payload[::-1])
        assert store.checkpoints.latest("big-payload") == again
        got = store.checkpoints.get(saved.id)
        assert got is not None and got.payload == payload
        assert got.state_hash == saved.state_hash

    @each_kind_and_specimen
    def test_fields_of_every_kind_round_trip(self, store: Store, kind: str) -> None:
        record = store.collection(kind).record_cls(**fields(kind, 3, metadata=nested_metadata(),
                                                            embedding=[0.5, -0.25]))
        store.collection(kind).put([record])
        read_back_everywhere(store, [record])

    @each_kind_and_specimen
    @since("1.12")
    def test_records_handed_over_as_fields_are_stored_as_records(self, store: Store, kind: str) -> None:
        """Records given as their fields (`Collection._put_fields`: the LangGraph store's batch writes; a
        backend's optional `put_fields`, else the records' `put`) read back as those records: a second batch
        replacing some keeps their stored `created_at`; one keeping existing records leaves them."""
        items = store.collection(kind)
        first = [make(kind, i, embedding=None) for i in range(4)]
        later = [make(kind, i, embedding=None, agent="later", created_at=first[-1].created_at + timedelta(days=1))
                 for i in range(2, 6)]
        items._put_fields(*_as_fields(first))
        items._put_fields(*_as_fields(later), keep_created=True)
        kept = {r.id: r.created_at for r in first}
        expected = first[:2] + [r.model_copy(update={"created_at": kept.get(r.id, r.created_at)}) for r in later]
        read_back_everywhere(store, expected)
        items._put_fields(*_as_fields([make(kind, i, embedding=None, agent="ignored") for i in range(6)]),
                          keep_existing=True)
        read_back_everywhere(store, expected)


    @each_kind_and_specimen
    @since("1.15")
    def test_records_written_one_by_one_as_fields_are_stored_as_records(self, store: Store, kind: str) -> None:
        """Records given one at a time to a prepared field write (`Collection._field_writer`: the LangGraph
        saver's `put` and `put_writes`; a backend's optional `field_writer`, else `_put_fields`) read back as
        those records; one that keeps existing records leaves them."""
        items = store.collection(kind)
        first = [make(kind, i, embedding=None) for i in range(4)]
        common, each = _as_fields(first)
        write = items._field_writer(common, list(each[0]))
        for own in each:
            write(own)
        read_back_everywhere(store, first)
        later = [make(kind, i, embedding=None, agent="later", created_at=first[-1].created_at + timedelta(days=1))
                 for i in range(2, 6)]
        common, each = _as_fields(later)
        keep = items._field_writer(common, list(each[0]), keep_existing=True)
        for own in each:
            keep(own)
        read_back_everywhere(store, [*first, *later[2:]])


def _as_fields(records: list[Record]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(common, each) for `Collection._put_fields`: the fields every record holds alike, then each one's own
    (neither `tenant_id` nor `embedding`, which `_put_fields` sets: the store's tenant, no vector)."""
    own = [{name: value for name, value in record.__dict__.items() if name not in ("tenant_id", "embedding")}
           for record in records]
    common = {name: value for name, value in own[0].items()
              if name != "id" and all(repr(fields[name]) == repr(value) for fields in own)}
    return common, [{name: value for name, value in fields.items() if name not in common} for fields in own]
