"""Where a `file://` URL points: an absolute directory, or one relative to the cwd or home.

Accepted forms (RFC 8089 plus two explicit relative spellings):

- `file:///absolute/dir` and `file://localhost/absolute/dir`: an absolute path;
- `file://./relative/dir` and `file://../dir`: relative to the current directory, resolved
  once when the store is opened;
- `file://~/dir`: relative to the user's home directory.

Anything else in the host position (`file://data/dir`) is rejected: it reads like a
relative path but RFC 8089 makes `data` a remote host, so we refuse to guess.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.errors import ConfigError
from ...core.url import StoreURL

_FORMS = "file:///absolute/dir, file://./relative/dir or file://~/dir"


def directory_from_url(url: StoreURL) -> Path:
    """The absolute directory a `file://` URL names, or a ConfigError saying how to write it."""
    if url.username or url.password or url.port:
        raise ConfigError(f"a file URL names a local directory and takes no user, password or port: "
                          f"{url.masked!r}; write {_FORMS}")
    host = url.host or ""
    path = url.path
    if host in ("", "localhost"):
        if not path.startswith("/") or path.strip("/") == "":
            raise ConfigError(f"the file URL {url.masked!r} names no directory; write {_FORMS}")
        return Path(os.path.normpath(path))
    if host in (".", ".."):
        return Path(os.path.abspath(host + path))
    if host == "~":
        return Path(os.path.normpath(os.path.expanduser("~") + path))
    raise ConfigError(
        f"the file URL {url.masked!r} is ambiguous: {host!r} stands where RFC 8089 puts a host name. "
        f"For a directory relative to the current one write file://./{host}{path}; "
        f"for an absolute one write file:///{host}{path}"
    )
