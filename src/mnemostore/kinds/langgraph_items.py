"""LangGraph store items (`MnemostoreStore`, store format 2), as a kind of their own.

A narrow record: the item's value in `metadata` (filters reach it), its first vector in `embedding`,
and only the columns and indexes the store's reads use: `namespace` (prefix ranges, namespace
listing), `key` and `model`. Items are read by id, by namespace range or by vector, never paged
in the default order, so the kind has no `(created_at, id)` index: a put updates one index fewer.
Declared as an application declares a kind; importing this module registers it (it needs no
LangGraph: a copy or export of a store holding it imports it). The item identity (`item_id`,
`decode_namespace`) lives here too, so the record migration that carries store format 1 over
(`migrations.langgraph_items`) runs without LangGraph.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import ClassVar

import orjson

from mnemostore import Record, register_kind

from ..core.records import Identifier, Text


@register_kind
class LangGraphItem(Record):
    """One item, or one further vector of an item (a shard): its encoded `namespace` (scope, mark,
    labels; `integrations.langgraph.store_mapping`), its `key`, and the embedding `model` ("" when
    the item has no vector)."""

    kind: ClassVar[str] = "langgraph_item"
    filterable: ClassVar[dict[str, type]] = {"namespace": str, "key": str, "model": str}
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("namespace",),)
    default_order_index: ClassVar[bool] = False

    namespace: Identifier
    key: Text
    model: Text = ""


KINDS: tuple[type[Record], ...] = (LangGraphItem,)

ITEM_MARK = ":"
"""Between the scope and an item's encoded namespace."""
SHARD_MARK = "#"
"""Between the scope and a shard's encoded namespace, and between an item's id and a shard's number."""


def item_id(scope: str, namespace: Sequence[str], key: str) -> str:
    """An item's record id: the scope and a hash of (scope, namespace, key)."""
    digest = hashlib.sha256(orjson.dumps((scope, namespace, key))).hexdigest()[:40]  # a tuple dumps as a list
    return f"{scope}{ITEM_MARK}{digest}"


def _unescape(label: str) -> str:
    return label.replace("%2F", "/").replace("%25", "%")


@lru_cache(maxsize=4096)
def decode_namespace(encoded: str) -> tuple[str, ...]:
    """An encoded namespace ("a/b%2Fc/") as its labels, once per namespace (every item a search returns
    decodes its own)."""
    return tuple(_unescape(label) for label in encoded.split("/")[:-1])
