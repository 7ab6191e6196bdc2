"""`dumps_json_document`'s proof (one msgpack pack and byte scans) refuses exactly what the walk
refuses, on values of every size, and what it accepts reads back equal."""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mnemostore.core.errors import ValidationError
from mnemostore.core.jsonvalues import dumps_json_document, find_json_problem


class _Colour(enum.Enum):
    RED = 1


class _Text(str):
    pass


_EXACT = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    # bytes that look like msgpack's float64 or uint64 markers, and the escape of a NUL, as text
    st.sampled_from([203, 127, -1, 207, 2**53, 2**60, "\\u0000", "\u02cb\u02ff", "null", 1e308]))
_LOSSY = st.sampled_from([float("nan"), float("inf"), -float("inf"), 2**63, 2**64 - 1, 2**64, -(2**63) - 1,
                          "a\x00b", "\ud800", (1, 2), _Colour.RED, uuid.UUID(int=7), _Text("t"), b"x",
                          frozenset({1})])


def _values(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaf, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner,
                                                                                            max_size=6),
                        max_leaves=120)


@settings(max_examples=150, deadline=None)
@given(_values(_EXACT | _LOSSY | _EXACT | _EXACT))
def test_the_proof_refuses_what_the_walk_refuses(value: Any) -> None:
    problem = find_json_problem(value, "state")
    if problem is None:
        assert orjson.loads(dumps_json_document(value, "state")) == value
    else:
        with pytest.raises(ValidationError) as refused:
            dumps_json_document(value, "state")
        assert refused.value.errors == [problem]


@pytest.mark.parametrize("lossy", [float("nan"), float("inf"), 2**63, (1,), _Colour.RED, _Text("t"), "\x00"],
                         ids=repr)
def test_a_lossy_part_deep_in_a_large_state_is_named(lossy: Any) -> None:
    messages: list[Any] = [{"role": "user", "content": f"message {i}", "score": i / 7, "note": None}
                           for i in range(300)]
    messages[211]["meta"] = [1, lossy]
    with pytest.raises(ValidationError) as refused:
        dumps_json_document({"messages": messages}, "state")
    assert refused.value.errors[0][0] == "state.messages[211].meta[1]"


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_a_checkpoint_changed_after_its_validation_is_written_as_it_is_now(url: str, tmp_path: Any) -> None:
    """The state JSON a validation made is reused only by the write that follows it inside a save."""
    import mnemostore
    from mnemostore import Checkpoint

    with mnemostore.open(f"sqlite:///{tmp_path}/s.db" if url == "sqlite" else url) as store:
        record = Checkpoint(run_id="run", state={"step": 1, "messages": ["a"]})
        record.state["step"] = 2
        record.state["messages"].append("b")
        store.checkpoints.put([record])
        assert store.checkpoints[record.id].state == {"step": 2, "messages": ["a", "b"]}
        saved = store.checkpoints.save("run", {"z": 1, "a": [1.5, None]}, parent=None)
        assert store.checkpoints[saved.id].state == {"z": 1, "a": [1.5, None]}


def _reference_problem(value: Any, path: str, depth: int = 0) -> tuple[str, str] | None:
    """`find_json_problem` as plainly written: every part visited by a call of its own."""
    from mnemostore.core.jsonvalues import MAX_DEPTH, check_text

    kind = type(value)
    if value is None or kind is bool:
        return None
    scalars: dict[type, Callable[[], str | None]] = {
        str: lambda: None if (text := check_text(value)) is None else f"string {text}",
        int: lambda: None if -(2**63) <= value < 2**63 else "integer does not fit in 64 bits",
        float: lambda: None if math.isfinite(value) else f"{value} is not a finite number"}
    if kind in scalars:
        problem = scalars[kind]()
        return None if problem is None else (path, problem)
    if kind not in (dict, list):
        return path, f"{kind.__name__} is not JSON (use str, int, float, bool, None, list or dict)"
    if depth >= MAX_DEPTH:
        short = path if len(path) <= 60 else path[:40] + "..."
        return short, f"nests lists and objects deeper than {MAX_DEPTH} levels"
    for name, item in (value.items() if kind is dict else enumerate(value)):
        if kind is dict and type(name) is not str:
            return f"{path}[{name!r}]", f"key must be a string, not {type(name).__name__}"
        if kind is dict and (text := check_text(name)) is not None:
            return f"{path}[{name!r}]", f"key {text}"
        found = _reference_problem(item, f"{path}.{name}" if kind is dict else f"{path}[{name}]", depth + 1)
        if found:
            return found
    return None


_KEYS = st.text(max_size=4) | st.sampled_from(["\x00", "a\ud800", "\u00e9"]) | st.sampled_from([1, None, (1,)])


@settings(max_examples=300, deadline=None)
@given(st.recursive(_EXACT | _LOSSY | st.sampled_from([True, False, -0.0, 2**63 - 1, -(2**63)]),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_KEYS, inner, max_size=5),
                    max_leaves=40))
@example({"a": 1.5, "b": float("nan")})
@example({"a": [float("-inf")], "b": {"\x00": 1}})
@example({"a": True, "b": 2**63, "c": "x\x00"})
@example({"a": _Text("t"), "\ud800": 1})
def test_the_walk_names_the_first_problem_a_plain_walk_names(value: Any) -> None:
    """The walk's inline quick checks (keys, scalars, finite floats) change its speed, not its answer."""
    assert find_json_problem(value, "value") == _reference_problem(value, "value")
