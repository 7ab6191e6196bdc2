"""How LangGraph store items map onto mnemostore `LangGraphItem` records, reversibly.

An item is one record: `namespace` = the scope, ":" and each label escaped and ended by "/"
(so a namespace prefix is a string prefix, and ("a", "b") never meets ("a/b",)); `key` = the
key; `metadata` = the value (filters reach its top-level keys); `embedding` = its first vector;
`model` = the embedding model, or "" when the item has no vector. The record id is a hash of
(scope, namespace, key). An item indexed with several texts keeps each further vector in a
shard record (id `<item id>#<n>`, namespace under "<scope>#", same key and value).

Store format 1 (before the item kind) kept the same records as `Embedding`s, the key in `text`;
the record migration `migrations.langgraph_items` carries a store over.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from langgraph.store.base import Item, SearchItem

from ...core.codec import trusted_record, trusted_records
from ...core.errors import ConfigError, ValidationError
from ...core.jsonvalues import check_text
from ...core.vectors import Vector
from ...kinds.langgraph_ids import ITEM_MARK as ITEM_MARK
from ...kinds.langgraph_ids import SHARD_MARK as SHARD_MARK
from ...kinds.langgraph_ids import decode_namespace as decode_namespace
from ...kinds.langgraph_ids import item_id as item_id
from ...kinds.langgraph_items import LangGraphItem

_SCOPE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_AFTER_SCOPE = re.compile(f"[{ITEM_MARK}{SHARD_MARK}]")
_MAX_NAMESPACE = 512
"""The `namespace` field is an identifier of at most 512 characters."""


def check_scope(scope: str) -> str:
    """A scope names one LangGraph store inside a mnemostore store; its characters never clash with the marks."""
    if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
        raise ConfigError(f"scope {scope!r} must be 1-64 letters, digits, '_' or '-'")
    return scope


def _escape(label: str) -> str:
    return label.replace("%", "%25").replace("/", "%2F")


def encode_namespace(namespace: Sequence[str]) -> str:
    """Each label escaped and followed by "/": ("a", "b/c") -> "a/b%2Fc/"."""
    return _encoded(namespace if type(namespace) is tuple else tuple(namespace))


@lru_cache(maxsize=4096)
def _encoded(namespace: tuple[str, ...]) -> str:
    """`encode_namespace`, once per namespace: an agent writes to a few namespaces over and over."""
    return "".join(_escape(label) + "/" for label in namespace)


def item_root(scope: str) -> str:
    return scope + ITEM_MARK


def shard_root(scope: str) -> str:
    return scope + SHARD_MARK


def upper_bound(prefix: str) -> str:
    """The least string above every string that starts with `prefix` (which ends in an ASCII mark)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def owner_id(record_id: str) -> str:
    """The item id a record (the item's own or one of its shards) belongs to."""
    return record_id.split(SHARD_MARK, 1)[0]


def check_key(key: str) -> None:
    problem = check_text(key)
    if problem is not None:
        raise ValidationError.one("key", f"{key!r} {problem}")


@lru_cache(maxsize=4096)
def check_namespace(scope: str, namespace: tuple[str, ...]) -> None:
    """An item's namespace must fit the record's `namespace` field once encoded (checked once per
    namespace: a refused one raises, which the cache never keeps)."""
    encoded = shard_root(scope) + encode_namespace(namespace)
    if len(encoded) > _MAX_NAMESPACE:
        raise ValidationError.one(
            "namespace", f"{tuple(namespace)!r} is too long: encoded it must fit in {_MAX_NAMESPACE} characters")
    problem = check_text(encoded)
    if problem is not None:
        raise ValidationError.one("namespace", f"{tuple(namespace)!r} {problem}")


def records_for(scope: str, namespace: tuple[str, ...], key: str, value: dict[str, Any], vectors: Sequence[Vector],
                model: str, created_at: datetime, updated_at: datetime) -> list[LangGraphItem]:
    """The item's record (with its first vector) and one shard per further vector, built as validation
    would build them, without pydantic's pass: the key, namespace, value and model were checked
    (`check_key`, `check_namespace`, the value's JSON check, the model's text) and each vector is a
    validated one (`vectors.as_vector`: float32, finite, the index's dimension). Each record's fields are
    exactly the kind's (`trusted_record(complete=True)`: no comparison of field names per record)."""
    if not vectors:
        return [plain_record(scope, namespace, key, value, created_at, updated_at)]
    encoded = encode_namespace(namespace)
    ident = item_id(scope, namespace, key)
    return [trusted_record(LangGraphItem, {  # type: ignore[misc]
        "id": ident if n == 0 else f"{ident}{SHARD_MARK}{n}", "tenant_id": None, "agent": None, "project_id": None,
        "created_at": created_at, "updated_at": updated_at, "metadata": value, "embedding": vector,
        "namespace": (item_root(scope) if n == 0 else shard_root(scope)) + encoded, "key": key, "model": model},
        complete=True) for n, vector in enumerate(vectors)]


def plain_common(created_at: datetime, updated_at: datetime) -> dict[str, Any]:
    """The fields the records of items without a vector share (`records_for`'s), but for the tenant and
    embedding (the collection's: `Collection._put_fields`); `plain_fields` holds each item's own."""
    return {"agent": None, "project_id": None, "created_at": created_at, "updated_at": updated_at, "model": ""}


def plain_fields(scope: str,
                 items: Iterable[tuple[tuple[tuple[str, ...], str], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each item's own fields ((namespace, key), value) of the record `records_for` makes of an item without
    a vector, beside `plain_common`'s: no record object (`core.field_puts`). A batch's namespaces are
    encoded once each."""
    root = item_root(scope)
    roots: dict[tuple[str, ...], str] = {}
    made: list[dict[str, Any]] = []
    for (namespace, key), value in items:
        encoded = roots.get(namespace)
        if encoded is None:
            encoded = roots[namespace] = root + encode_namespace(namespace)
        made.append({"id": item_id(scope, namespace, key), "metadata": value, "namespace": encoded, "key": key})
    return made


_new_item = trusted_records(LangGraphItem)


def plain_record(scope: str, namespace: tuple[str, ...], key: str, value: dict[str, Any], created_at: datetime,
                 updated_at: datetime) -> LangGraphItem:
    """`records_for`'s one record of an item without a vector: `plain_common` and `plain_fields` as a
    record, its fields in the kind's order (a lone `put`'s: for one record, handing fields over costs more
    than the record they save, `MnemostoreStore._put_plain`). Its namespace is a tuple: `_encoded` and the
    item root (`item_root`) without their calls."""
    return _new_item({"id": item_id(scope, namespace, key), "tenant_id": None, "agent": None,  # type: ignore[return-value]
                      "project_id": None, "created_at": created_at, "updated_at": updated_at, "metadata": value,
                      "embedding": None, "namespace": scope + ITEM_MARK + _encoded(namespace), "key": key,
                      "model": ""})


def where_it_lives(record: LangGraphItem) -> tuple[tuple[str, ...], str]:
    """(namespace, key) of an item's record or shard."""
    encoded = _AFTER_SCOPE.split(record.namespace, 1)[1]  # the scope holds neither mark
    return decode_namespace(encoded), record.key


def to_item(record: LangGraphItem) -> Item:
    namespace, key = where_it_lives(record)
    return Item(value=record.metadata, key=key, namespace=namespace,
                created_at=record.created_at, updated_at=record.updated_at)


def to_search_item(record: LangGraphItem, score: float | None) -> SearchItem:
    namespace, key = where_it_lives(record)
    return SearchItem(namespace=namespace, key=key, value=record.metadata, created_at=record.created_at,
                      updated_at=record.updated_at, score=score)
