"""Store URLs: parsing, query-string options, and password masking."""

from __future__ import annotations

import re
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
            if parts.netloc and _MISPLACED_AT.match(url[len(scheme) + 3 + len(parts.netloc):]):
                # `user:p/ss@host`: urllib splits the password at '/', '?' or '#' and takes a piece
                # of it for the host. Say so without echoing any of it.
                raise ConfigError(
                    f"cannot parse the {scheme}:// store URL: its user name or password seems to hold '/', "
                    "'?', '#' or '@'; percent-encode them (%2F, %3F, %23, %40), e.g. with "
                    "urllib.parse.quote(password, safe='')")
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
        """The URL with its password and secret options replaced by ***: safe for logs, reprs and errors."""
        return mask_password(self.raw)

    @property
    def secrets(self) -> list[str]:
        """The password and the values of secret options (`is_secret_option`), as given."""
        found = [self.password] if self.password else []
        found.extend(value for name, value in self.query.items() if value and is_secret_option(name))
        return found

    def scrub(self, text: str) -> str:
        """`text` (a driver's error message, say) with every secret of this URL replaced by ***."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text[:500]

    def __str__(self) -> str:
        return self.masked


_MISPLACED_AT = re.compile(r"[/?#][^=&]*@")
"""After the authority, an '@' before any query option: the rest of a user name or password that
held '/', '?' or '#' unencoded (a server URL's database or collection name has no '@')."""

SECRET_WORDS = ("pass", "token", "secret", "key", "auth", "credential", "header")
"""A query option whose name contains one of these (any case) is secret: libpq's `password` and
`sslpassword`, Chroma's `token` and `headers`, Qdrant's `api_key`, and a plugin's options named alike."""


def is_secret_option(name: str) -> bool:
    """Whether a URL query option's value is masked wherever the URL is shown."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def mask_password(url: str) -> str:
    """`url` with the password in `scheme://user:password@host` and the values of secret query
    options (`?password=`, `?token=`, `?api_key=`, …) replaced by ***. A string that is not a URL
    but holds `@` keeps only what follows the last `@`, so `user:secret@host` never shows whole."""
    head, sep, rest = url.partition("://")
    if not sep:
        return f"***@{url.rpartition('@')[2]}" if "@" in url else url
    if not rest.startswith("/") and "@" in rest:
        # Up to the last "@": a password with an unencoded "/", "?" or "@" is still masked whole.
        userinfo, _, tail = rest.rpartition("@")
        if ":" in userinfo:
            rest = userinfo.split(":", 1)[0] + ":***@" + tail
    return f"{head}://{_mask_query(rest)}"


def _mask_query(rest: str) -> str:
    """The part after `scheme://` with each secret option's value in the query string masked."""
    base, sep, query = rest.partition("?")
    if not sep:
        return rest
    fragment = ""
    if "#" in query:
        query, fragment = query.split("#", 1)
        fragment = "#" + fragment
    parts = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        parts.append(f"{name}=***" if eq and value and is_secret_option(unquote(name)) else item)
    return f"{base}?{'&'.join(parts)}{fragment}"
