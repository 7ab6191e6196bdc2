"""Passwords in store URLs never appear in reprs, strings or error messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
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


SECRET = "S3cret-value-42"
SECRET_URLS = {  # one per backend: a secret in the query string, where the backend's users would put it
    "memory": f"memory://masking?token={SECRET}",
    "sqlite": f"sqlite:///masking.db?password={SECRET}",
    "file": f"file://./masking?api_key={SECRET}",
    "postgres": f"postgresql://app@127.0.0.1:1/agents?password={SECRET}&sslpassword={SECRET}&connect_timeout=1",
    "chroma": f"chroma+http://127.0.0.1:1?token={SECRET}",
    "qdrant": f"qdrant+http://127.0.0.1:1?api_key={SECRET}",
}


@pytest.mark.parametrize("backend", sorted(SECRET_URLS))
def test_secret_options_never_show_in_urls_or_errors(backend: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = SECRET_URLS[backend]
    assert SECRET not in mask_password(url) and SECRET not in StoreURL.parse(url).masked
    with pytest.raises(mnemostore.MnemostoreError) as caught:  # unknown option, or no server on port 1
        mnemostore.open(url)
    shown = f"{caught.value}{caught.value!r}"
    assert SECRET not in shown and "***" in shown
    cli = subprocess.run([sys.executable, "-m", "mnemostore", "info", url], capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 1 and SECRET not in cli.stdout + cli.stderr
    assert len(cli.stderr.strip().splitlines()) >= 1


def test_a_string_that_is_not_a_url_never_echoes_its_userinfo() -> None:
    with pytest.raises(ConfigError) as caught:
        mnemostore.open(f"alice:{SECRET}@127.0.0.1")
    assert SECRET not in str(caught.value) and "scheme://" in str(caught.value)


def test_a_store_with_a_secret_option_masks_it_in_repr_describe_info_copy_and_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chroma's in-process mode takes `token` (it is ignored there), so a store opens with one."""
    monkeypatch.chdir(tmp_path)
    url = f"chroma://memory?token={SECRET}"
    with mnemostore.open(url) as store:
        store.outcomes.add(task_type="t", success=True)
        assert SECRET not in repr(store) and SECRET not in str(store.backend.describe())
    archive = tmp_path / "out.jsonl"
    from mnemostore.migrations import copy as copy_store
    from mnemostore.migrations import export_archive

    with mnemostore.open(url) as source:
        source.outcomes.add(task_type="t", success=True)
    report = copy_store(url, "memory://masking-copy")
    assert SECRET not in repr(report) and SECRET not in str(report)
    export_archive(url, str(archive))
    assert SECRET not in archive.read_text()
