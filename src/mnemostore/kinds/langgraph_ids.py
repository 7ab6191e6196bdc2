"""LangGraph store items' identity: record ids and encoded namespaces (`MnemostoreStore`'s layout).

Apart from the item kind (`kinds.langgraph_items`, which registers itself when imported), so what
only needs an item's identity (the record migration that moves store format 1 over,
`migrations.langgraph_items`) registers no kind and needs no LangGraph.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import orjson

ITEM_MARK = ":"
"""Between the scope and an item's encoded namespace."""
SHARD_MARK = "#"
"""Between the scope and a shard's encoded namespace, and between an item's id and a shard's number."""


def _short_input_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (`_sha2`, `_sha256` before 3.12): the same digest as OpenSSL's, in less than
    half its time for an id's few dozen bytes (0.27 us against 0.61: no EVP context to set up); else hashlib's."""
    for name in ("_sha2", "_sha256"):
        try:
            found: Callable[[bytes], Any] = importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return found
    return hashlib.sha256


_sha256 = _short_input_sha256()


def item_id(scope: str, namespace: Sequence[str], key: str) -> str:
    """An item's record id: the scope and a hash of (scope, namespace, key). Text no item can hold (a lone
    surrogate, which a put refuses) still has an id, found nowhere: a get or delete of it finds nothing."""
    try:
        named = orjson.dumps((scope, namespace, key))  # a tuple dumps as a list
    except TypeError:
        named = repr((scope, tuple(namespace), key)).encode("utf-8", "backslashreplace")  # never valid JSON
    return f"{scope}{ITEM_MARK}{_sha256(named).hexdigest()[:40]}"


def _unescape(label: str) -> str:
    return label.replace("%2F", "/").replace("%25", "%")


@lru_cache(maxsize=4096)
def decode_namespace(encoded: str) -> tuple[str, ...]:
    """An encoded namespace ("a/b%2Fc/") as its labels, once per namespace (every item a search returns
    decodes its own)."""
    return tuple(_unescape(label) for label in encoded.split("/")[:-1])
