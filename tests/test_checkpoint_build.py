"""`build_checkpoint` (the hand-checked construction saves, applies and merges use) against `Checkpoint(...)`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.core.checkpoint_build import _plain_checkpoint, build_checkpoint
from mnemostore.core.errors import ValidationError
from mnemostore.core.records import Checkpoint
from mnemostore.core.vectors import vectors_equal

plain_texts = st.text(max_size=6)
odd_texts = st.sampled_from(["", "a" * 512, "a" * 513, "nul\x00", "lone \ud800", "é", None, 3, b"x"])
identifiers = st.text(min_size=1, max_size=6) | odd_texts
keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=4)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=6)
odd_values = st.sampled_from([float("nan"), 2**64, "nul\x00", (1, 2), {1: 2}, b"x", 1.5, {"k": [float("inf")]}])
odd_documents = st.sampled_from([None, [], {1: 2}]) | st.dictionaries(keys, odd_values, min_size=1, max_size=2)
documents = st.dictionaries(keys, json_values, max_size=4)
stamps = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]))
odd_stamps = st.sampled_from([None, datetime(2026, 1, 1), "2026-11-26T10:00:00+00:00", 0])
plain_fields = st.fixed_dictionaries({"run_id": st.text(min_size=1, max_size=6)}, optional={
    "id": st.text(min_size=1, max_size=6), "branch_id": st.text(min_size=1, max_size=6),
    "tenant_id": st.none() | st.text(min_size=1, max_size=6), "node_id": plain_texts,
    "agent": st.none() | plain_texts, "project_id": st.none() | plain_texts, "sequence": st.integers(0, 2**63 - 1),
    "parent_ids": st.lists(st.text(min_size=1, max_size=6), max_size=2), "state": documents,
    "metadata": documents, "update": st.none() | documents, "state_hash": plain_texts,
    "created_at": stamps, "updated_at": stamps, "payload": st.none() | st.binary(max_size=3),
    "embedding": st.none()})
odd_values_by_field = {
    "run_id": odd_texts, "id": odd_texts, "branch_id": odd_texts, "tenant_id": odd_texts, "node_id": odd_texts,
    "agent": odd_texts, "project_id": odd_texts,
    "sequence": st.sampled_from([-1, 2**63, True, 1.0, "1", None]),
    "parent_ids": st.lists(identifiers, min_size=1, max_size=2) | st.tuples(identifiers) | st.sampled_from([None, "p"]),
    "state": odd_documents, "metadata": odd_documents, "update": odd_documents,
    "state_hash": st.sampled_from([None, 1, b"x"]), "created_at": odd_stamps, "updated_at": odd_stamps,
    "payload": st.sampled_from([bytearray(b"x"), "x"]), "embedding": st.sampled_from([[1.0, 2.0]]),
    "bogus": st.just(1)}
one_odd_field = st.one_of(*(st.fixed_dictionaries({name: values}) for name, values in odd_values_by_field.items()))
fields_of_a_checkpoint = st.builds(
    lambda plain, odd, drop: {k: v for k, v in {**plain, **odd}.items() if k != drop}, plain_fields,
    st.just({}) | one_odd_field | st.fixed_dictionaries({}, optional=odd_values_by_field),
    st.none() | st.just("run_id"))


def _built(make: Any, fields: dict[str, Any]) -> Checkpoint | list[tuple[str, str]]:
    try:
        return make(fields)
    except ValidationError as exc:
        return exc.errors


@settings(max_examples=400, deadline=None)
@given(fields=fields_of_a_checkpoint)
def test_build_checkpoint_accepts_refuses_and_builds_as_the_model_does(fields: dict[str, Any]) -> None:
    """Same refusals (field and rule) and equal records; ids and stamps the model would make are fresh."""
    fast = _built(build_checkpoint, fields)
    model = _built(lambda given: Checkpoint(**given), fields)
    if isinstance(model, list):
        assert fast == model
        return
    assert isinstance(fast, Checkpoint)
    mine, theirs = dict(fast.__dict__), dict(model.__dict__)
    for generated in ("id", "created_at", "updated_at"):
        if fields.get(generated) is None:
            assert type(mine.pop(generated)) is type(theirs.pop(generated))
    assert vectors_equal(mine.pop("embedding"), theirs.pop("embedding"))
    assert mine == theirs
    for name in ("state", "metadata", "parent_ids", "update"):  # copies, as the model's are
        assert fields.get(name) is None or mine[name] is not fields[name]


_ODD = ["", "a" * 513, "nul\x00", "lone \ud800", None, 3, -1, 2**63, True, 1.0, "1", b"x", bytearray(b"x"), (),
        ("p",), [], ["p", ""], [1], {}, {1: 2}, {"a": float("nan")}, {"a": (1,)}, {"a": "\x00"}, {"a": 2**64},
        datetime(2026, 1, 1), "2026-11-26T10:00:00+00:00", [1.0, 2.0]]


def test_each_field_takes_and_refuses_each_odd_value_as_the_model_does() -> None:
    """Every field against every odd value, alone beside a plain run id: the same record or refusal."""
    for name in Checkpoint.model_fields:
        for value in _ODD:
            fields = {"run_id": "r", name: value}
            fast, model = _built(build_checkpoint, fields), _built(lambda given: Checkpoint(**given), fields)
            if isinstance(model, list) or isinstance(fast, list):
                assert fast == model, (name, value)
            else:
                assert {**fast.__dict__, "embedding": None} == {**model.__dict__, **{
                    k: fast.__dict__[k] for k in ("id", "created_at", "updated_at") if k != name},
                    "embedding": None}, (name, value)


def test_what_saves_give_is_built_without_the_model_and_what_is_odd_by_it() -> None:
    """The fast path is taken for a save's plain fields (else this module saves nothing), and not for a
    value the model would convert (a tuple of parents, a str sequence)."""
    plain = {"run_id": "r", "state": {"a": [1, "x"]}, "node_id": "", "branch_id": "main", "parent_ids": ["p"],
             "sequence": 1, "metadata": {"k": 1}, "agent": "ag", "state_hash": ""}
    built = _plain_checkpoint(plain)
    assert built is not None and built.state_hash == Checkpoint(**plain).state_hash
    assert _plain_checkpoint({**plain, "parent_ids": ("p",)}) is None
    assert _plain_checkpoint({**plain, "sequence": "1"}) is None
    assert build_checkpoint({**plain, "sequence": "1"}).sequence == 1


def test_save_apply_and_merge_refuse_bad_fields_naming_them_and_write_nothing() -> None:
    with mnemostore.open("memory://") as store:
        cps = store.checkpoints
        root = cps.save("r", {"a": 1}, parent=None)
        for call, field in ((lambda: cps.save("r", {"a": float("nan")}), "state"),
                            (lambda: cps.save("", {"a": 1}), "run_id"),
                            (lambda: cps.save("r", {"a": 1}, branch="x" * 513), "branch_id"),
                            (lambda: cps.apply("r", {"a": 2}, node_id="n\x00"), "node_id"),
                            (lambda: cps.merge("r", [root], agent=5), "agent")):
            try:
                call()
            except ValidationError as exc:
                assert field in exc.errors[0][0], exc.errors
            else:
                raise AssertionError(f"{field} was not refused")
        assert [c.id for c in cps.history("r")] == [root.id]
        child = cps.apply("r", {"a": 2}, node_id="n")
        assert child.state == {"a": 2} and child.update == {"a": 2} and child.parent_ids == [root.id]
        assert cps.get(child.id) == child
