"""Where a store comes from: argument, environment, config file, default; option validation."""

from __future__ import annotations

from pathlib import Path

import pytest

import mnemostore
from mnemostore.core.config import ENV_URL, resolve
from mnemostore.core.errors import ConfigError, SchemaMismatch


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_URL, raising=False)
    return tmp_path


def test_default_is_embedded_sqlite_in_user_data_dir() -> None:
    config = resolve()
    assert config.url.startswith("sqlite:///") and config.url.endswith("memory.db")
    assert config.source == "default"


def test_precedence_argument_then_environment_then_file(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated / "mnemostore.toml").write_text('url = "memory://from-file"\ntenant = "t1"\n')
    assert resolve().url == "memory://from-file"
    assert resolve().tenant == "t1"
    monkeypatch.setenv(ENV_URL, "memory://from-env")
    assert resolve().url == "memory://from-env"
    assert resolve("memory://from-arg").url == "memory://from-arg"
    assert resolve("memory://from-arg", tenant="t2").tenant == "t2"


def test_pyproject_tool_table(isolated: Path) -> None:
    (isolated / "pyproject.toml").write_text('[tool.mnemostore]\nurl = "memory://pp"\ndimension = 8\n')
    config = resolve()
    assert (config.url, config.dimension) == ("memory://pp", 8)


def test_bad_config_file_is_a_clear_error(isolated: Path) -> None:
    (isolated / "mnemostore.toml").write_text('url = "memory://x"\ndimension = -3\n')
    with pytest.raises(ConfigError, match=r"dimension"):
        resolve()
    (isolated / "mnemostore.toml").write_text("url = [unterminated\n")
    with pytest.raises(ConfigError, match=r"mnemostore.toml"):
        resolve()


def test_unknown_backend_option_is_rejected_with_its_name() -> None:
    with pytest.raises(ConfigError, match=r"memory.*no_such_option"):
        mnemostore.open("memory://", no_such_option=1)
    with pytest.raises(ConfigError, match=r"no_such_option"):
        mnemostore.open("memory://?no_such_option=1")


def test_password_is_masked_everywhere() -> None:
    from mnemostore.core.url import StoreURL, mask_password

    url = "postgresql://app:s3cr%40t@db.example:5432/agents?sslmode=require"
    parsed = StoreURL.parse(url)
    assert parsed.password == "s3cr@t"
    for text in (parsed.masked, str(parsed), repr(parsed), mask_password(url)):
        assert "s3cr" not in text
    assert parsed.masked == "postgresql://app:***@db.example:5432/agents?sslmode=require"
    with pytest.raises(ConfigError) as info:
        mnemostore.open("nosuchscheme://user:hunter2@host/db")
    assert "hunter2" not in str(info.value)


def test_stored_parameters_are_checked_on_open() -> None:
    store = mnemostore.open("memory://params-check", dimension=4, metric="dot")
    assert (store.params.dimension, store.params.metric) == (4, "dot")
    with pytest.raises(SchemaMismatch, match=r"4-dimensional.*8"):
        mnemostore.open("memory://params-check", dimension=8)
    with pytest.raises(SchemaMismatch, match=r"'dot'.*'l2'"):
        mnemostore.open("memory://params-check", metric="l2")
    assert mnemostore.open("memory://params-check").params.dimension == 4


def test_closed_store_refuses_calls() -> None:
    store = mnemostore.open("memory://")
    store.close()
    with pytest.raises(mnemostore.StoreClosed):
        store.outcomes.count()
