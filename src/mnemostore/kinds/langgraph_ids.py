"""LangGraph records' identity: store items' ids and encoded namespaces (`MnemostoreStore`'s layout), and
the ids of a saver's pending writes (`MnemostoreSaver`'s).

Apart from the kinds (`kinds.langgraph_items`, `kinds.langgraph_writes`, which register themselves when
imported), so what only needs a record's identity (the record migrations that move older formats over,
`migrations.langgraph_items` and `migrations.langgraph_writes`) registers no kind and needs no LangGraph.
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


def digest(*parts: str) -> str:
    """32 hex digits of SHA-256 over the parts as a JSON list: the saver's ids are made of these."""
    hexdigest: str = _sha256(orjson.dumps(parts)).hexdigest()
    return hexdigest[:32]


LEGACY_WRITES_BRANCH = "langgraph:writes"
"""The checkpoint branch writes formats 1 to 4 kept their records on (checkpoint records themselves)."""
LEGACY_WRITES_INFIX = ".w."
"""Between a checkpoint's record id and a digest, in the ids of format 2 to 4 write records."""
WRITES_MARK = "lgw."


def checkpoint_record_id(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """A LangGraph checkpoint's record id (the `owner` its writes name): deterministic, collision-free across
    threads, and ordered like `checkpoint_id` within a namespace."""
    return _namespace_prefix(thread_id, checkpoint_ns) + checkpoint_id


@lru_cache(maxsize=1024)
def _namespace_prefix(thread_id: str, checkpoint_ns: str) -> str:
    """`lg.<digest of thread and namespace>.`: every call of a step names the same thread (a hash saved)."""
    return f"lg.{digest(thread_id, checkpoint_ns)}."


def legacy_write_id(owner: str, task_id: str, idxs: Sequence[int | str]) -> str:
    """The id writes formats 2 to 4 gave the record of a task's writes `idxs` pending on the checkpoint
    record `owner`."""
    return f"{owner}{LEGACY_WRITES_INFIX}{digest(task_id, ','.join(map(str, idxs)))}"
"""The start of every pending write's id (`thread_writes_prefix`)."""


@lru_cache(maxsize=1024)
def thread_writes_prefix(thread_id: str) -> str:
    """`lgw.<digest of the thread>.`: every pending write of a thread has an id that starts so, so a thread's
    writes are one id range (`prefix_range`); kept per thread (each call of a step names the same one)."""
    return f"{WRITES_MARK}{digest(thread_id)}."


@lru_cache(maxsize=1024)
def namespace_writes_prefix(thread_id: str, checkpoint_ns: str) -> str:
    """The thread's prefix, then a digest of the thread and namespace: a namespace's writes are one id range."""
    return f"{thread_writes_prefix(thread_id)}{digest(thread_id, checkpoint_ns)}."


def checkpoint_writes_prefix(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The namespace's prefix, the checkpoint id and `.`: a checkpoint's writes are one id range (which also
    holds those of checkpoints whose ids extend its id with `.`: readers keep the writes of their `owner`)."""
    return f"{namespace_writes_prefix(thread_id, checkpoint_ns)}{checkpoint_id}."


def checkpoints_writes_range(thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> tuple[str, str]:
    """The one id range [low, high) that holds the writes of these checkpoints of a namespace: the span of their
    `prefix_range`s of `checkpoint_writes_prefix` (with the writes of checkpoints between them), the namespace's
    prefix made once."""
    prefix = namespace_writes_prefix(thread_id, checkpoint_ns)
    return (prefix + min(checkpoint_id + "." for checkpoint_id in checkpoint_ids),  # not min(ids) + ".": "a-." < "a."
            prefix + max(checkpoint_id + "/" for checkpoint_id in checkpoint_ids))


def write_id(prefix: str, task_id: str, idxs: Sequence[int | str]) -> str:
    """The id of the record holding a task's writes `idxs` of one call: the checkpoint's prefix and a digest
    of the task and the idx list (so a retried call finds the record it stored)."""
    return prefix + digest(task_id, ",".join(map(str, idxs)))


def prefix_range(prefix: str) -> tuple[str, str]:
    """Ids in [low, high) are those that start with `prefix` (which ends with `.`)."""
    return prefix, prefix[:-1] + "/"


def _unescape(label: str) -> str:
    return label.replace("%2F", "/").replace("%25", "%")


@lru_cache(maxsize=4096)
def decode_namespace(encoded: str) -> tuple[str, ...]:
    """An encoded namespace ("a/b%2Fc/") as its labels, once per namespace (every item a search returns
    decodes its own)."""
    return tuple(_unescape(label) for label in encoded.split("/")[:-1])
