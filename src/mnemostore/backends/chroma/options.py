"""Options of the chroma backend and where a URL points, validated before anything connects."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ...core.errors import ConfigError
from ...core.url import StoreURL

DEFAULT_PORT = 8000


class ChromaOptions(BaseModel):
    """`chroma+http://host:8000?database=agents&prefix=app_`, or the same as keyword arguments.

    `chroma_tenant` and `database` name Chroma's own tenant and database (mnemostore's
    `tenant=` is a separate, per-record scope). `prefix` starts every collection name, so
    several stores can share one Chroma database. `token` is sent as `Authorization: Bearer`
    (or in `X-Chroma-Token` with `token_header`); a URL's user and password as Basic auth.
    """

    model_config = ConfigDict(extra="forbid")

    prefix: str = Field("mnemo_", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,200}$")
    chroma_tenant: str = Field("default_tenant", min_length=3, max_length=128)
    database: str = Field("default_database", min_length=3, max_length=128)
    create_database: bool = False
    """Create `chroma_tenant` and `database` if they do not exist yet."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    token: SecretStr | None = None
    token_header: Literal["Authorization", "X-Chroma-Token"] = "Authorization"
    verify_ssl: bool = True
    ef_search: int = Field(100, ge=1, le=100_000)
    """HNSW search breadth of new collections; results are re-ranked exactly either way."""
    ef_construction: int = Field(100, ge=1, le=100_000)
    max_neighbors: int = Field(16, ge=2, le=1000)
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    """Documents per write request are split so one request stays below this size."""


Mode = Literal["persistent", "ephemeral", "http"]


@dataclass(frozen=True)
class Location:
    """Where a chroma URL points: a directory, the process's in-memory Chroma, or a server."""

    mode: Mode
    path: str | None = None
    host: str | None = None
    port: int | None = None
    ssl: bool = False

    @property
    def key(self) -> tuple[object, ...]:
        """Identifies the Chroma instance, for the process-wide write locks."""
        return (self.mode, self.path, self.host, self.port)


def locate(url: StoreURL) -> Location:
    """`chroma:///dir`, `chroma://memory`, `chroma+http://host:port`, `chroma+https://host:port`."""
    if url.scheme in ("chroma+http", "chroma+https"):
        if not url.host:
            raise ConfigError(f"{url.masked}: give the server's host, e.g. chroma+http://localhost:8000")
        if url.path.strip("/"):
            raise ConfigError(f"{url.masked}: a Chroma server URL has no path; choose the database with ?database=")
        return Location("http", host=url.host, port=url.port or DEFAULT_PORT, ssl=url.scheme == "chroma+https")
    if url.host == "memory" and not url.path.strip("/"):
        return Location("ephemeral")
    if url.host:
        raise ConfigError(
            f"{url.masked}: an embedded Chroma store needs an absolute directory (chroma:///path/to/dir, "
            "three slashes) or chroma://memory")
    if not url.path or url.path == "/":
        raise ConfigError(f"{url.masked}: give a directory, e.g. chroma:///var/lib/agents/chroma")
    return Location("persistent", path=os.path.realpath(url.path))
