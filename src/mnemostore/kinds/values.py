"""Value rules the shipped kinds share, as pydantic annotations an application could write itself.

Each raises ValueError with a message that, behind the field name the model adds, says the rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field

Name = Annotated[str, Field(min_length=1, max_length=512)]
"""An identifier a record is found by (a workflow, a run, a user, a session): never empty."""
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
"""A confidence: 0.0 to 1.0."""
Seconds = Annotated[float, Field(ge=0.0)]
Count = Annotated[int, Field(ge=0)]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
_DIGEST_LENGTHS = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
_HEX = re.compile(r"^[0-9a-f]+$")


def one_of(*choices: str) -> Callable[[str], str]:
    """A check that a text is one of `choices` (an enumeration kept as a plain, filterable str)."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    return check


def _uri(value: str) -> str:
    """An absolute URI: a scheme (s3, file, https, ...) and something after it, no spaces."""
    scheme, colon, rest = value.partition(":")
    if not colon or not _SCHEME.match(scheme) or not rest:
        raise ValueError(f"must be an absolute URI such as s3://bucket/key or file:///path (got {value[:80]!r})")
    if any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise ValueError("must not contain whitespace or control characters (percent-encode them)")
    return value


def _checksum(value: str) -> str:
    """`algorithm:hexdigest` with a known algorithm and a digest of its length, kept lowercase."""
    algorithm, _, digest = value.partition(":")
    digest = digest.lower()
    length = _DIGEST_LENGTHS.get(algorithm.lower())
    if length is None or len(digest) != length or not _HEX.match(digest):
        raise ValueError("must be 'algorithm:hexdigest' with algorithm md5, sha1, sha256 or sha512 and a digest "
                         f"of its length, e.g. 'sha256:' and 64 hex digits (got {value[:80]!r})")
    return f"{algorithm.lower()}:{digest}"


Uri = Annotated[str, Field(max_length=8192), AfterValidator(_uri)]
Checksum = Annotated[str, AfterValidator(_checksum)]
