"""Checks that a value is plain JSON that every engine stores losslessly."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
import ormsgpack


def _c_proof() -> Callable[[Any, Callable[[float], bytes]], tuple[bytes, bytes] | None] | None:
    """The C walk of `prove_json_document` (`_proof.c`), or None where no C compiler built it at install."""
    try:
        from ._proof import prove
    except ImportError:
        return None
    return prove


_prove_in_c = _c_proof()

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DEPTH = 250
"""Lists and objects nest at most this deep in a JSON value (a state, metadata): orjson encodes
254 levels, and a record's document wraps a value in a few more."""
_TOO_DEEP = f"nests lists and objects deeper than {MAX_DEPTH} levels"


def plain_text(value: Any) -> bool:
    """Whether `value` is text `check_text` passes at a glance (ASCII, no NUL): most ids and names, so
    hot checks take it before the full rule."""
    return type(value) is str and value.isascii() and "\x00" not in value


def check_text(value: str) -> str | None:
    """Return why `value` cannot be stored as text, or None if it can."""
    if "\x00" in value:
        return "contains a NUL character (U+0000), which PostgreSQL and others cannot store"
    if value.isascii():  # O(1) for str: no encode needed
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (contains a lone surrogate)"
    return None


def find_json_problem(value: Any, path: str, depth: int = 0) -> tuple[str, str] | None:
    """Walk `value` and return (path, problem) for the first non-JSON part, or None.

    `depth` counts the lists and objects around `value`; deeper than `MAX_DEPTH` is a problem
    (so the walk never recurses further than that)."""
    if value is None or value is True or value is False:
        return None
    kind = type(value)
    if kind is str:
        problem = check_text(value)
        return (path, f"string {problem}") if problem else None
    if kind is int:
        if not INT64_MIN <= value <= INT64_MAX:
            return path, "integer does not fit in 64 bits"
        return None
    if kind is float:
        return None if math.isfinite(value) else (path, f"{value} is not a finite number")
    if (kind is dict or kind is list) and depth >= MAX_DEPTH:
        return (path if len(path) <= 60 else path[:40] + "..."), _TOO_DEEP
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"{path}[{key!r}]", f"key must be a string, not {type(key).__name__}"
            if not key.isascii() or "\x00" in key:  # `check_text`'s quick yes inline: no call per key
                problem = check_text(key)
                if problem:
                    return f"{path}[{key!r}]", f"key {problem}"
            of = type(item)  # `_plainly_fine` inline, floats too: a call per value costs more than its check
            if of is str:
                if item.isascii() and "\x00" not in item:
                    continue
            elif of is int:
                if INT64_MIN <= item <= INT64_MAX:
                    continue
            elif of is float:
                if item - item == 0.0:  # finite (an infinity or NaN gives NaN)
                    continue
            elif item is None or of is bool:
                continue
            found = find_json_problem(item, f"{path}.{key}", depth + 1)
            if found:
                return found
        return None
    if kind is list:
        for index, item in enumerate(value):
            if not _plainly_fine(item):
                found = find_json_problem(item, f"{path}[{index}]", depth + 1)
                if found:
                    return found
        return None
    return path, f"{kind.__name__} is not JSON (use str, int, float, bool, None, list or dict)"


def _plainly_fine(value: Any) -> bool:
    """A quick yes for the common scalars (ASCII text without NUL, 64-bit ints, None, bools): the walk
    skips its call and path for them (a small metadata dict checks ~2x faster); False means "walk it"."""
    kind = type(value)
    if kind is str:
        return value.isascii() and "\x00" not in value
    if kind is int:
        return bool(INT64_MIN <= value <= INT64_MAX)
    return value is None or kind is bool


_STRICT = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
           | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_SORT_KEYS)
_PROVEN = _STRICT | orjson.OPT_STRICT_INTEGER
"""The first dump also refuses ints past 53 bits: past 64 would not be JSON, and the rare state
holding one in between is proven by the walk."""
_EXACT_TYPES = (ormsgpack.OPT_PASSTHROUGH_BIG_INT | ormsgpack.OPT_PASSTHROUGH_DATACLASS
                | ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_ENUM
                | ormsgpack.OPT_PASSTHROUGH_SUBCLASS | ormsgpack.OPT_PASSTHROUGH_TUPLE
                | ormsgpack.OPT_PASSTHROUGH_UUID | ormsgpack.OPT_SORT_KEYS)
"""With these, ormsgpack refuses every type orjson writes as another (tuple, enum, UUID, subclasses);
by default it refuses non-str keys and lone surrogates: what it packs holds JSON's types only. Keys
sorted, as the C proof packs them: a state's stored bytes do not depend on how it was proven."""


def dumps_json_document(value: Any, path: str) -> bytes:
    """Serialise a JSON document (sorted keys), rejecting anything that would not read back equal
    (`prove_json_document`, its JSON alone)."""
    return prove_json_document(value, path)[0]


def prove_json_document(value: Any, path: str) -> tuple[bytes, memoryview]:
    """A JSON document's sorted JSON and its msgpack (keys sorted too), rejecting anything that would
    not read back equal from either.

    One C walk (`_proof.c`: ~2x faster) proves and encodes the values it can, the same bytes as
    `prove_in_python`, which proves the rest (and every value where no C compiler built the walk)
    and names the problem of a value refused.
    """
    if _prove_in_c is not None:
        proven = _prove_in_c(value, orjson.dumps)
        if proven is not None:
            return proven[0], memoryview(proven[1])
    return prove_in_python(value, path)


def prove_in_python(value: Any, path: str) -> tuple[bytes, memoryview]:
    """`prove_json_document` by orjson and ormsgpack.

    The proof costs one msgpack pack, not a load and compare: orjson makes the bytes (refusing
    ints past 53 bits), ormsgpack refuses any type that is not JSON's and depth past MAX_DEPTH,
    and what JSON loses of what both take (NaN, infinities as null; NUL) shows in their bytes.
    The pack is kept: a backend may store it (SQLite's checkpoint states: `codec.encode_framed_document`).
    Anything refused or suspect goes to the walk, which names the path or clears the value.
    """
    try:
        data = orjson.dumps(value, option=_PROVEN)
        # Wrapped in 5 lists for ormsgpack, whose recursion limit (255 levels) then refuses what nests past
        # MAX_DEPTH; the value's own bytes follow the 5 one-byte list headers (a view, not a copy).
        packed = ormsgpack.packb([[[[[value]]]]], option=_EXACT_TYPES)
        if not _may_hold_nul(data) and not _may_hold_nan(data, packed):
            return data, memoryview(packed)[_WRAPPING:]
    except (TypeError, orjson.JSONEncodeError):
        pass
    found = find_json_problem(value, path)
    if found is None:  # a false alarm (text with a "\\u0000" in it, say) or an int past 53 bits
        return orjson.dumps(value, option=_STRICT), memoryview(ormsgpack.packb(value, option=_EXACT_TYPES))
    from .errors import ValidationError

    raise ValidationError([found])


_WRAPPING = 5
"""The bytes of the lists `prove_json_document` wraps a value in for ormsgpack, before the value's own."""


_proven: tuple[Any, bytes, memoryview] | None = None
"""The last value a record's validator proved (`remember_proven`), its JSON and its msgpack."""


def remember_proven(value: Any, data: bytes, packed: memoryview) -> None:
    """Keep the JSON (and msgpack) `prove_json_document` made of a record's `value` for the write that
    follows its validation (`take_proven`), so the record's document does not encode it again."""
    global _proven
    _proven = (value, data, packed)


def take_proven(value: Any) -> bytes | None:
    """The JSON remembered for this very object (identity, not equality), once; else None."""
    proven = _take(value)
    return None if proven is None else proven[1]


def take_proven_msgpack(value: Any) -> memoryview | None:
    """The msgpack remembered for this very object, once (as `take_proven`); else None."""
    proven = _take(value)
    return None if proven is None else proven[2]


def _take(value: Any) -> tuple[Any, bytes, memoryview] | None:
    """What was remembered for this very object, forgotten as it is taken."""
    global _proven
    proven = _proven
    if proven is None or proven[0] is not value:
        return None
    _proven = None
    return proven


def is_proven(value: Any) -> bool:
    """Whether something is remembered for this very object (`take_proven` would give it), left remembered."""
    proven = _proven
    return proven is not None and proven[0] is value


def forget_proven() -> None:
    """Drop what was remembered: a record handed in by a caller may have changed since it was proven."""
    global _proven
    _proven = None


def _may_hold_nul(data: bytes) -> bool:
    """Whether JSON bytes may hold a NUL (written as an escape): a one-byte scan first, as
    one byte is found ~40x faster than a longer pattern."""
    return b"\\" in data and b"\\u0000" in data


def _may_hold_nan(data: bytes, packed: bytes) -> bool:
    """Whether a value may hold a NaN or an infinity: ormsgpack wrote a float64 (0xcb) whose sign and
    exponent bits start 0x7f or 0xff, and orjson a null. The first few 0xcb bytes are looked at one
    by one (a one-byte scan is ~40x faster than a two-byte one); past them, both patterns at once."""
    at = packed.find(b"\xcb")
    for _ in range(_LOOKS):
        if at < 0:
            return False
        if packed[at + 1:at + 2] in _RISKY_EXPONENTS:
            return b"null" in data
        at = packed.find(b"\xcb", at + 1)
    return (b"\xcb\x7f" in packed or b"\xcb\xff" in packed) and b"null" in data


_LOOKS = 16
_RISKY_EXPONENTS = (b"\x7f", b"\xff")
