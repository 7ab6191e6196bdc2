"""The library's own record move: LangGraph store items from `Embedding` records to their own kind.

`MnemostoreStore` (store format 1) kept each item, and each further vector of an item (a shard), as an
`Embedding`: the key in `text`. Format 2 keeps them as `LangGraphItem`s (`kinds.langgraph_items`), a
narrow kind with one index fewer, so a put writes less. This step moves every stored item over, on
every backend, through the protocol; `down` moves them back. An embedding is an item only if its id
is the one its scope, namespace and key give (`item_id`), so an application's own embeddings stay.
Older code, which would write items where format 2 never reads them, is locked out. Planning this step
(importing this module) registers no kind: the item kind is registered for the run only.
"""

from __future__ import annotations

import re

from ..core.codec import trusted_record
from ..core.records import Embedding, Record
from ..kinds.langgraph_ids import ITEM_MARK, SHARD_MARK, decode_namespace, item_id
from .model import RecordMove

LANGGRAPH_ITEMS_MIGRATION_ID = "mnemostore.0002_langgraph_item_kind"
_ITEM_NAMESPACE = re.compile(rf"([A-Za-z0-9_-]{{1,64}})([{ITEM_MARK}{SHARD_MARK}])((?:[^/]*/)*)")
"""A format-1 item's namespace: its scope, the item or shard mark, then each label escaped and ended by "/"."""


def is_stored_item(record: Record, key: str) -> bool:
    """Whether `record` is a LangGraph item or shard as `MnemostoreStore` writes it, `key` its key: its
    id is the item id of its scope, namespace and key (and "#<n>" after it for a shard)."""
    found = _ITEM_NAMESPACE.fullmatch(getattr(record, "namespace", ""))
    if found is None:
        return False
    scope, mark, encoded = found.groups()
    owner, _, number = record.id.partition(SHARD_MARK)
    if (mark == SHARD_MARK) != bool(number) or (number and not number.isdigit()):
        return False
    return owner == item_id(scope, decode_namespace(encoded), key)


def _to_item(record: Record) -> Record | None:
    """A format-1 item (an `Embedding`, its key in `text`) as a `LangGraphItem`, every field kept."""
    from ..kinds.langgraph_items import LangGraphItem  # registered for the run (`run_moves`)

    if not isinstance(record, Embedding) or not is_stored_item(record, record.text):
        return None
    data = dict(record.__dict__)
    data["key"] = data.pop("text")
    return trusted_record(LangGraphItem, data)


def _to_embedding(record: Record) -> Record | None:
    """A `LangGraphItem` as format 1 kept it: an `Embedding`, its key in `text`."""
    if record.kind != "langgraph_item":
        return None
    data = dict(record.__dict__)
    data["text"] = data.pop("key")
    return trusted_record(Embedding, data)


LANGGRAPH_ITEMS_MIGRATION = RecordMove(
    LANGGRAPH_ITEMS_MIGRATION_ID, source="embedding", target="mnemostore.kinds.langgraph_items:LangGraphItem",
    move=_to_item, move_back=_to_embedding,
    new_stores=False, locks_out_older=True, after=("mnemostore.0001_state_hash_xxh3",),
    description="LangGraph store items from embedding records to their own kind, langgraph_item (store format 2)")
"""Part of every store's migrations (`plan.library_migrations`): stores written by older code move their
items on open (embedded ones) or refuse to open until `mnemostore migrate up` (servers)."""
