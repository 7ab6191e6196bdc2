"""Passwords in store URLs never appear in reprs, strings or error messages."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import mnemostore
from mnemostore.core.errors import ConfigError
from mnemostore.core.url import StoreURL, mask_password
from mnemostore.testing.strategies import examples

secrets = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=6, max_size=24).filter(
    lambda s: s.strip() == s and "***" not in s)
users = st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=10)


@examples(200)
@given(user=users, password=secrets, scheme=st.sampled_from(["postgresql", "qdrant+http", "chroma+https"]))
def test_an_encoded_password_never_shows(user: str, password: str, scheme: str) -> None:
    url = f"{scheme}://{user}:{quote(password, safe='')}@db.example:5432/agents?sslmode=require"
    assume(quote(password, safe="") not in f"{scheme}://{user}:***@db.example:5432/agents?sslmode=require")
    parsed = StoreURL.parse(url)
    assert parsed.password == password
    assert parsed.username == user
    for shown in (parsed.masked, str(parsed), repr(parsed), mask_password(url)):
        assert quote(password, safe="") not in shown
        assert f"{user}:***@db.example:5432/agents?sslmode=require" in shown or shown == repr(parsed)


@pytest.mark.parametrize(("url", "masked"), [
    ("postgresql://app:s3cret@db/agents", "postgresql://app:***@db/agents"),
    ("postgresql://app@db/agents", "postgresql://app@db/agents"),
    ("postgresql://app:p@ss@db/agents", "postgresql://app:***@db/agents"),
    ("postgresql://:only-password@db/x", "postgresql://:***@db/x"),
    ("postgresql://app:pa/ss@db/agents", "postgresql://app:***@db/agents"),
    ("postgresql://app:pa?ss#x@db/agents", "postgresql://app:***@db/agents"),
    ("sqlite:///home/me/memory.db", "sqlite:///home/me/memory.db"),
    ("file:///data/at@home:8", "file:///data/at@home:8"),
    ("memory://name?x=a@b", "memory://name?x=a@b"),
    ("memory://", "memory://"),
    ("not a url", "not a url"),
])
def test_masking_examples(url: str, masked: str) -> None:
    assert mask_password(url) == masked


@pytest.mark.parametrize("url", [
    "nosuchscheme://app:hunter2-secret@db/agents",
    "postgresql://app:hunter2-secret@db:notaport/agents",
    "postgresql://app:hunter2-secret/with-slash@db/agents",
    "postgresql://ap:hunter2-secret?x@db/agents",
    "memory://app:hunter2-secret@host/x?unknown_option=1",
])
def test_errors_do_not_leak_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        mnemostore.open(url)
    assert "hunter2-secret" not in str(caught.value)
    assert "hunter2-secret" not in repr(caught.value)


def test_store_repr_masks_the_password() -> None:
    store = mnemostore.open("memory://app:hunter2-secret@masking-test")
    try:
        assert "hunter2-secret" not in repr(store)
        assert "hunter2-secret" not in repr(store.backend.url)
    finally:
        store.close()
