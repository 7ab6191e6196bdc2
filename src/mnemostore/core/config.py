"""Where the store lives: an explicit URL, `MNEMOSTORE_URL`, a config file, or the default.

Config files: `mnemostore.toml` (top-level keys) or `[tool.mnemostore]` in
`pyproject.toml`, looked up in the current directory. Keys: `url`, `tenant`,
`dimension`, `metric`, `embedding_model`, `migrate`, and an `options` table passed to the backend.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from .errors import ConfigError, MnemostoreError
from .records import Identifier

ENV_URL = "MNEMOSTORE_URL"
CONFIG_FILE = "mnemostore.toml"


class StoreConfig(BaseModel):
    """What `mnemostore.open()` needs, wherever it came from."""

    model_config = ConfigDict(extra="forbid")

    url: str
    tenant: Identifier | None = None
    """Scopes every read and write; the same rules as a record's `tenant_id` (1-512 characters, no NUL)."""
    dimension: int | None = Field(default=None, ge=1, le=65_536)
    metric: Literal["cosine", "dot", "l2"] | None = None
    embedding_model: str | None = Field(default=None, min_length=1, max_length=200)
    """The name of the model that made the store's embeddings; checked like the dimension."""
    migrate: Literal["auto", "refuse"] | None = None
    """Pending migrations on open: apply them, or refuse and name the command. Default: the
    backend's choice (auto for embedded stores, refuse for shared servers)."""
    options: dict[str, Any] = Field(default_factory=dict)
    source: str = "argument"
    """Where the URL came from: argument, environment, a config file path, or default."""


def default_url() -> str:
    """The embedded SQLite store in the per-user data directory."""
    from platformdirs import user_data_path

    return f"sqlite:///{user_data_path('mnemostore') / 'memory.db'}"


def find_config_file(directory: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The first config found in `directory` (default: cwd) and its mnemostore table."""
    directory = directory or Path.cwd()
    dedicated = directory / CONFIG_FILE
    if dedicated.is_file():
        return dedicated, _read_toml(dedicated)
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject).get("tool", {}).get("mnemostore")
        if isinstance(table, dict):
            return pyproject, table
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None


def resolve(url: str | None = None, **settings: Any) -> StoreConfig:
    """Combine an explicit URL and settings with the environment and config file.

    Precedence: the `url` argument, then `MNEMOSTORE_URL`, then the config file's `url`,
    then the default embedded SQLite store. Settings given as arguments override the file.
    """
    file_settings: dict[str, Any] = {}
    source = "argument"
    found = find_config_file()
    if found is not None:
        file_settings = dict(found[1])
    if url is None:
        if os.environ.get(ENV_URL):
            url, source = os.environ[ENV_URL], f"environment variable {ENV_URL}"
        elif found is not None and file_settings.get("url"):
            url, source = str(file_settings["url"]), str(found[0])
        else:
            url, source = default_url(), "default"
    file_settings.pop("url", None)
    options = {**file_settings.pop("options", {}), **settings.pop("options", {})}
    backend_options = {k: v for k, v in settings.items() if k not in StoreConfig.model_fields}
    core = {k: v for k, v in settings.items() if k in StoreConfig.model_fields}
    merged = {**file_settings, **core, "url": url, "source": source,
              "options": {**options, **backend_options}}
    try:
        return StoreConfig.model_validate(merged)
    except PydanticValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_url=False)
        )
        raise ConfigError(f"invalid store configuration ({source}): {problems}") from None


@contextmanager
def naming_source(config: StoreConfig) -> Iterator[None]:
    """Errors raised in the block (opening the store, typically) say where its URL came from when
    the caller did not pass it: a wrong MNEMOSTORE_URL or config file entry is then found at once."""
    try:
        yield
    except MnemostoreError as exc:
        if config.source != "argument" and exc.args and isinstance(exc.args[0], str):
            where = ("the default store (no URL given, no MNEMOSTORE_URL, no config file)"
                     if config.source == "default" else config.source)
            exc.args = (f"{exc.args[0]} [store URL from {where}]", *exc.args[1:])
        raise
