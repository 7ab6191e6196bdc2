"""Store URLs: parsing, query-string options, and password masking."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import ConfigError


@dataclass(frozen=True)
class StoreURL:
    """A parsed `scheme://[user[:password]@]host[:port]/path?option=value` URL."""

    raw: str = field(repr=False)
    scheme: str
    username: str | None
    password: str | None = field(repr=False)
    host: str | None
    port: int | None
    path: str
    query: dict[str, str]

    @classmethod
    def parse(cls, url: str) -> StoreURL:
        if not isinstance(url, str) or "://" not in url:
            raise ConfigError(
                f"not a store URL: {mask_password(str(url))!r}; expected scheme://..., "
                "e.g. sqlite:///memory.db, memory://, postgresql://user@host/db"
            )
        scheme = url.split("://", 1)[0].lower()
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            # urllib's message may quote part of the password, so only show it when there is none.
            detail = "percent-encode special characters in the user name and password" if "@" in url else exc
            raise ConfigError(f"cannot parse store URL {mask_password(url)!r}: {detail}") from None
        return cls(
            raw=url,
            scheme=scheme,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            host=parts.hostname,
            port=port,
            path=unquote(parts.path),
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
        )

    @property
    def masked(self) -> str:
        """The URL with any password replaced by ***: safe for logs, reprs and errors."""
        return mask_password(self.raw)

    def __str__(self) -> str:
        return self.masked


def mask_password(url: str) -> str:
    """Replace the password in `scheme://user:password@host` with ***."""
    head, sep, rest = url.partition("://")
    if not sep or rest.startswith("/") or "@" not in rest:
        return url
    # Up to the last "@": a password with an unencoded "/", "?" or "@" is still masked whole.
    userinfo, _, tail = rest.rpartition("@")
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{head}://{userinfo}@{tail}"
