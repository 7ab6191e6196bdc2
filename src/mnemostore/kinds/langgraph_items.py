"""LangGraph store items (`MnemostoreStore`, store format 2), as a kind of their own.

A narrow record: the item's value in `metadata` (filters reach it), its first vector in `embedding`,
and only the columns and indexes the store's reads use: `namespace` (prefix ranges, namespace
listing), `key` and `model`. Items are read by id, by namespace range or by vector, never paged
in the default order, so the kind has no `(created_at, id)` index: a put updates one index fewer.
Declared as an application declares a kind; importing this module registers it (it needs no
LangGraph: a copy or export of a store holding it imports it). Item ids and namespaces are in
`kinds.langgraph_ids`, which registers nothing.
"""

from __future__ import annotations

from typing import ClassVar

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
