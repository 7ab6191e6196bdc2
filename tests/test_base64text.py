"""core.base64text: the SIMD codec writes and reads exactly what the standard library does."""

from __future__ import annotations

import base64
import binascii

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemostore.core.base64text import from_text, to_text


@given(st.binary(max_size=4096))
def test_text_is_the_standard_librarys_and_reads_back(data: bytes) -> None:
    text = to_text(data)
    assert text == base64.b64encode(data).decode("ascii")
    assert from_text(text) == from_text(text.encode("ascii")) == data
    assert to_text(memoryview(data)) == text


@pytest.mark.parametrize("text", ["YW!j", "YWJ", "YW Jj", "YWJj\n", "Y"])
def test_text_that_is_not_strict_base64_is_refused(text: str) -> None:
    with pytest.raises(binascii.Error):
        from_text(text)
