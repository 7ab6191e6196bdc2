"""The C walk of `prove_json_document` (`core/_proof.c`) gives the Python proof's bytes for every value
that proof accepts, and leaves every value it refuses to it (so the refusal names the same problem)."""

from __future__ import annotations

import shutil
import sysconfig
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.test_json_documents import _EXACT, _KEYS, _LOSSY

from mnemostore.core import jsonvalues
from mnemostore.core.errors import ValidationError
from mnemostore.core.jsonvalues import MAX_DEPTH, prove_in_python

prove_in_c = jsonvalues._prove_in_c
needs_c = pytest.mark.skipif(prove_in_c is None, reason="installed without a C compiler: the Python proof runs")


def test_the_c_proof_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the install keeps the Python proof")
    assert prove_in_c is not None, "a C compiler is here but `pip install` did not build mnemostore.core._proof"


def _agree(value: Any) -> None:
    """The C walk's answer is the Python proof's: the same two encodings, or None where it refuses."""
    assert prove_in_c is not None
    found = prove_in_c(value, orjson.dumps)
    try:
        data, packed = prove_in_python(value, "state")
    except ValidationError:
        assert found is None
    else:
        assert found == (data, bytes(packed))


_TEXT = st.text(st.sampled_from('ab "\\\n\t\x01\x1f\x7f\u00e9\u2028\U0001f600/'), max_size=150)
"""Text with every kind of escape, at any offset of the walk's 16- and 64-byte blocks."""
_LEAVES = _EXACT | _LOSSY | _TEXT | st.sampled_from([True, False, -0.0, 2**63 - 1, -(2**63), -33, 2**32, 0.1, 1e16])


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=20)
                    | st.dictionaries(_KEYS | _TEXT | st.text(min_size=25, max_size=40), inner, max_size=20),
                    max_leaves=80))
@example({"a\x00": 1})
@example({"k" * 31: 1, "k" * 30: [2**16, -(2**31) - 1, "x" * 70_000]})
@example([[]] * 16 + [{}] * 17)
def test_the_c_proof_gives_the_python_proof_s_bytes(value: Any) -> None:
    _agree(value)


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.data())
def test_dicts_sharing_key_objects_in_any_order_are_written_sorted(data: st.DataObject) -> None:
    """The walk remembers a small dict's key order by its key objects: dicts with the same keys in
    another order, or with one key more or less, are sorted anew."""
    keys = data.draw(st.lists(_KEYS | _TEXT, max_size=18, unique=True))
    rows = []
    for _ in range(data.draw(st.integers(0, 12))):
        order = data.draw(st.permutations(keys))
        taken = order[:data.draw(st.integers(0, len(order)))]
        rows.append({key: data.draw(_LEAVES) for key in taken})
    _agree({"rows": rows, "more": [dict(row) for row in rows]})


@needs_c
@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
@pytest.mark.parametrize("container", [list, dict])
def test_nesting_past_max_depth_is_left_to_the_python_proof(depth: int, container: type) -> None:
    value: Any = 1
    for _ in range(depth):
        value = [value] if container is list else {"k": value}
    _agree(value)
    assert (prove_in_c(value, orjson.dumps) is None) == (depth > MAX_DEPTH)  # type: ignore[misc]
