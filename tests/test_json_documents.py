"""`dumps_json_document`'s proof (one msgpack pack and byte scans) refuses exactly what the walk
refuses, on values of every size, and what it accepts reads back equal."""

from __future__ import annotations

import enum
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
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
