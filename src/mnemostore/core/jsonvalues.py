"""Checks that a value is plain JSON that every engine stores losslessly."""

from __future__ import annotations

import math
from typing import Any

import orjson

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DEPTH = 250
"""Lists and objects nest at most this deep in a JSON value (a state, metadata): orjson encodes
254 levels, and a record's document wraps a value in a few more."""
_PAD = 4
"""Levels `dumps_json_document` wraps a value in, so orjson's own limit enforces `MAX_DEPTH`."""
_TOO_DEEP = f"nests lists and objects deeper than {MAX_DEPTH} levels"


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
            problem = check_text(key)
            if problem:
                return f"{path}[{key!r}]", f"key {problem}"
            found = find_json_problem(item, f"{path}.{key}", depth + 1)
            if found:
                return found
        return None
    if kind is list:
        for index, item in enumerate(value):
            found = find_json_problem(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
        return None
    return path, f"{kind.__name__} is not JSON (use str, int, float, bool, None, list or dict)"


_STRICT = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
           | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_SORT_KEYS)


WALK_BUDGET = 64
"""Values of at most this many parts are proven by a type walk (~0.2 µs a part, whatever the
strings' length); larger ones by orjson's load-and-compare (~1 µs per KB, whatever the parts)."""


def _few_exact_parts(value: Any, budget: int) -> int:
    """What is left of `budget` after walking `value` if every part of it is exactly JSON (no
    subclass, tuple, NaN, NUL or lone surrogate, within MAX_DEPTH); -1 past the budget or at
    anything else. A LangGraph checkpoint's state is a dozen parts around two long strings."""
    stack = [(value, 0)]
    while stack:
        budget -= 1
        if budget < 0:
            return -1
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if check_text(item) is not None:
                return -1
        elif kind is dict:
            if depth >= MAX_DEPTH or len(item) > budget:
                return -1
            for key, member in item.items():
                if type(key) is not str or check_text(key) is not None:
                    return -1
                stack.append((member, depth + 1))
        elif kind is list:
            if depth >= MAX_DEPTH or len(item) > budget:
                return -1
            stack.extend((member, depth + 1) for member in item)
        elif kind is int:
            if not INT64_MIN <= item <= INT64_MAX:
                return -1
        elif kind is float:
            if not math.isfinite(item):
                return -1
        elif not (item is None or item is True or item is False):
            return -1
    return budget


def dumps_json_document(value: Any, path: str) -> bytes:
    """Serialise a JSON document (sorted keys), rejecting anything that would not read back equal.

    orjson does the work. The round trip is proven by a type walk for a value of few parts, by
    a load-and-compare otherwise; a failed or lossy dump (NaN, tuples, datetimes, subclasses,
    NUL) falls back to a walk that names the path.
    """
    try:
        # Wrapped in `_PAD` lists, so orjson's recursion limit refuses what nests past MAX_DEPTH.
        data = orjson.dumps([[[[value]]]], option=_STRICT)[_PAD:-_PAD]
        if _few_exact_parts(value, WALK_BUDGET) >= 0:
            return data
        # NUL is written as an escape: look for one only if there is any escape (memchr-fast)
        if not (b"\\" in data and b"\\u0000" in data) and orjson.loads(data) == value:
            return data
    except (TypeError, orjson.JSONEncodeError):
        pass
    found = find_json_problem(value, path)
    if found is None:  # equal-but-different values such as NaN inside a list
        found = (path, "does not survive a JSON round trip (NaN or infinity?)")
    from .errors import ValidationError

    raise ValidationError([found])
