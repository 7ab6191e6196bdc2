"""Options and URL forms of the qdrant backends.

`qdrant:///abs/path` (local engine on disk), `qdrant://memory` (a private in-memory store),
`qdrant://memory/NAME` (in memory, shared by every open of NAME in this process),
`qdrant+http://host:6333`, `qdrant+https://host` (a server; an API key may be given as the
URL's password or the `api_key` option).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ...core.errors import ConfigError
from ...core.url import StoreURL

Mode = Literal["memory", "disk", "server"]


class QdrantOptions(BaseModel):
    """`qdrant+https://host?prefix=agents_&prefer_grpc=true&timeout=10`."""

    model_config = ConfigDict(extra="forbid")

    prefix: str = Field("mnemostore_", pattern=r"^[A-Za-z0-9_-]{0,48}$")
    """Collection names are `<prefix><kind>` and `<prefix>meta`: several stores can share a server."""
    api_key: SecretStr | None = None
    prefer_grpc: bool = False
    grpc_port: int = Field(6334, ge=1, le=65535)
    timeout: int | None = Field(None, ge=1)
    """Seconds a server request may take (the client's default if None)."""
    exact: bool = False
    """Server only: full-scan search instead of the HNSW index (local mode is always exact)."""
    batch_size: int = Field(256, ge=1, le=10_000)
    """Points per upsert request (requests are also cut at about 16 MB of payload)."""


@dataclass(frozen=True)
class Location:
    """Where a store lives, parsed from its URL."""

    mode: Mode
    path: str | None = None
    """The directory of an on-disk store."""
    name: str | None = None
    """The process-wide name of a shared in-memory store (None: private)."""
    server_url: str | None = None
    """`http(s)://host:port` of a server (no credentials)."""
    api_key: str | None = None

    def key(self) -> tuple[str, ...] | None:
        """What identifies one store in this process (None for a private in-memory one)."""
        if self.mode == "disk":
            assert self.path is not None
            return ("disk", self.path)
        if self.mode == "memory":
            return None if self.name is None else ("memory", self.name)
        return ("server", self.server_url or "", self.api_key or "")


def parse_location(url: StoreURL, options: QdrantOptions) -> Location:
    """The Location of a `qdrant` / `qdrant+http(s)` URL, or a ConfigError saying how to write it."""
    import os

    if url.scheme == "qdrant":
        if options.api_key is not None or options.prefer_grpc or options.exact:
            raise ConfigError(f"api_key, prefer_grpc and exact apply to a Qdrant server, not to {url.masked}")
        if url.host == "memory":
            name = url.path.strip("/")
            return Location("memory", name=name or None)
        if url.host:
            raise ConfigError(
                f"cannot read {url.masked}: use qdrant:///absolute/path for a local store on disk, "
                f"qdrant://memory for one in memory, or qdrant+http://{url.host}:6333 for a server")
        if not url.path or url.path == "/":
            raise ConfigError(f"{url.masked} names no directory; use qdrant:///absolute/path or qdrant://memory")
        return Location("disk", path=os.path.realpath(os.path.expanduser(url.path)))
    if url.scheme in ("qdrant+http", "qdrant+https"):
        if not url.host:
            raise ConfigError(f"{url.masked} names no host; use e.g. qdrant+http://localhost:6333")
        http = url.scheme.split("+", 1)[1]
        host = f"[{url.host}]" if ":" in url.host else url.host
        port = url.port or 6333
        api_key = options.api_key.get_secret_value() if options.api_key is not None else url.password
        return Location("server", server_url=f"{http}://{host}:{port}{url.path.rstrip('/')}", api_key=api_key)
    raise ConfigError(f"the qdrant backend does not open {url.scheme}:// URLs")
