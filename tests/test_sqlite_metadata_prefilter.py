"""SQLite tests a metadata text equality with a substring test on the stored JSON before parsing it
(`sql_filters._metadata_equal`): it must select exactly what the reference backend does, whatever
the text holds (quotes, backslashes, control characters, non-ASCII, the same text under another key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemostore

TEXTS = st.sampled_from(['a"b', "a\\b", "tab\there", "new\nline", "é", "\u2028", "x", "", "[1]", "{}"]) | st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=4)
VALUES = st.one_of(TEXTS, st.integers(-2, 2), st.booleans(), st.none(), st.lists(TEXTS, max_size=2),
                   st.dictionaries(st.sampled_from(["k", "topic"]), TEXTS, max_size=2))
METADATA = st.dictionaries(st.sampled_from(["topic", "other", 'q"k']), VALUES, max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(METADATA, min_size=1, max_size=8), key=st.sampled_from(["topic", "other"]), wanted=TEXTS)
def test_text_equality_on_metadata_selects_what_the_reference_does(tmp_path: Path, rows: list[dict[str, object]],
                                                                    key: str, wanted: str) -> None:
    found = []
    for url in ("memory://", f"sqlite:///{tmp_path / 'prefilter.db'}"):
        with mnemostore.open(url) as store:
            store.embeddings.delete(where={})
            store.embeddings.put([{"id": f"r{i}", "metadata": meta} for i, meta in enumerate(rows)])
            found.append(sorted(r.id for r in store.embeddings.query({f"metadata.{key}": wanted}).items))
            found.append(sorted(r.id for r in store.embeddings.query(
                {f"metadata.{key}": {"$ne": wanted}}).items))
    assert found[:2] == found[2:]


TRICKY = ['a"b', "a\\b", "tab\there", "é", "\u2028", "", "[1]", "{}", "topic"]


def rows_holding(text: str) -> list[dict[str, object]]:
    """The text as the key's value, under another key, inside a list, nested, as a prefix, and absent."""
    return [{"topic": text}, {"other": text}, {"topic": [text]}, {"topic": {"k": text}}, {"topic": text + "x"}, {},
            {"topic": 1}, {"topic": None}]


@pytest.mark.parametrize("text", TRICKY)
def test_text_equality_finds_escaped_and_unicode_texts(tmp_path: Path, text: str) -> None:
    found = []
    for url in ("memory://", f"sqlite:///{tmp_path / 'tricky.db'}"):
        with mnemostore.open(url) as store:
            store.embeddings.put([{"id": f"r{i}", "metadata": meta} for i, meta in enumerate(rows_holding(text))])
            found.append([sorted(r.id for r in store.embeddings.query(where).items)
                          for where in ({"metadata.topic": text}, {"metadata.topic": {"$ne": text}})])
    assert found[0] == found[1]
    assert found[1][0] == ["r0"]
