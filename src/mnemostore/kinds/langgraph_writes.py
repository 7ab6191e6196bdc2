"""LangGraph pending writes (`MnemostoreSaver`, writes format 5), as a kind of their own.

A narrow record: one holds the regular (or the special) writes of one `put_writes` call, their values one
after another in `payload` and `[idx, channel, value type, size]` each in `writes`. Its id extends its
thread's, namespace's and checkpoint's prefixes (`kinds.langgraph_ids`), so the saver reads a checkpoint's
writes, and deletes a thread's, by one id range where the store has range filters; elsewhere by `owner`
(the checkpoint's record id) and `thread`. Writes are never paged in the default order, and a write fills
no other column, so the kind has no secondary index: a write updates the id index alone. Declared as an
application declares a kind; importing this module registers it (it needs no LangGraph: a copy or export
of a store holding it imports it). Older formats kept writes as checkpoint records on the
`langgraph:writes` branch (`migrations.langgraph_writes` moves them here).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from mnemostore import Record, register_kind

from ..core.records import Identifier, Text


@register_kind
class LangGraphWrite(Record):
    """The writes of one task in one `put_writes` call, pending on the checkpoint record `owner`."""

    kind: ClassVar[str] = "langgraph_write"
    filterable: ClassVar[dict[str, type]] = {"thread": str, "owner": str}
    default_order_index: ClassVar[bool] = False

    thread: Identifier
    owner: Identifier
    """The id of the checkpoint record the writes are pending on (`mapping.checkpoint_record_id`)."""
    checkpoint_ns: Text
    checkpoint_id: Text
    task_id: Text
    task_path: Text = ""
    writes: list[list[int | str]] = Field(default_factory=list)
    """[idx, channel, value type, size] of each write, in the order their values are in `payload`."""
    payload: bytes = b""


KINDS: tuple[type[Record], ...] = (LangGraphWrite,)
