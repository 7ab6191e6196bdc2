"""The library's own record move: LangGraph pending writes from `Checkpoint` records to their own kind.

`MnemostoreSaver` (writes formats 1 to 4) kept pending writes as checkpoint records on the
`langgraph:writes` branch; format 5 keeps them as `LangGraphWrite`s (`kinds.langgraph_writes`), whose
ids are one range per thread, namespace and checkpoint. This step moves every stored write record over
(its writes and values as format 4 holds them), on every backend, through the protocol; `down` moves
them back as format-4 records. Checkpoints themselves (other branches) stay. Older code, which would
look for writes where format 5 never puts them, is locked out. Planning this step (importing this
module) registers no kind: the write kind is registered for the run only.
"""

from __future__ import annotations

from typing import Any

from ..core.base64text import from_text
from ..core.codec import trusted_record
from ..core.records import MAX_ID, Checkpoint, Record, hash_exact_state
from ..kinds.langgraph_ids import LEGACY_WRITES_BRANCH, checkpoint_writes_prefix, legacy_write_id, write_id
from .model import RecordMove

LANGGRAPH_WRITES_MIGRATION_ID = "mnemostore.0003_langgraph_write_kind"


def _writes_and_payload(record: Checkpoint) -> tuple[list[list[Any]], bytes]:
    """A write record's [idx, channel, value type, size] of each write and their values' bytes joined, in
    any format: 4 lists them in `state["writes"]`; 1-3 hold one write, its value in `payload` (3) or as
    [type, base64] in `state["value"]` (1, 2)."""
    state = record.state
    if "writes" in state:
        return [list(part) for part in state["writes"]], record.payload or b""
    if record.payload is not None:
        value_type, value = state["type"], record.payload
    else:
        value_type, text = state["value"]
        value = from_text(text)
    return [[state["idx"], state["channel"], value_type, len(value)]], value


def _to_write(record: Record) -> Record | None:
    """A write record of formats 1-4 (a checkpoint on the legacy writes branch) as a `LangGraphWrite`:
    its writes and values as format 4 holds them, its shared fields kept."""
    from ..kinds.langgraph_writes import LangGraphWrite  # registered for the run (`run_moves`)

    if not isinstance(record, Checkpoint) or record.branch_id != LEGACY_WRITES_BRANCH:
        return None
    state = record.state
    writes, payload = _writes_and_payload(record)
    thread, ns, checkpoint_id, task_id = record.run_id, state["checkpoint_ns"], state["checkpoint_id"], state["task_id"]
    data = {
        "id": write_id(checkpoint_writes_prefix(thread, ns, checkpoint_id), task_id, [part[0] for part in writes]),
        "tenant_id": record.tenant_id, "agent": record.agent, "project_id": record.project_id,
        "created_at": record.created_at, "updated_at": record.updated_at, "metadata": record.metadata,
        "embedding": None, "thread": thread, "owner": record.node_id, "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id, "task_id": task_id, "task_path": state.get("task_path", ""),
        "writes": writes, "payload": payload}
    if len(data["id"]) > MAX_ID:  # a checkpoint id past ~400 characters: validation names the field it breaks
        return LangGraphWrite(**data)
    return trusted_record(LangGraphWrite, data, complete=True)


def _to_checkpoint(record: Record) -> Record | None:
    """A `LangGraphWrite` as format 4 kept it: a checkpoint record on the legacy writes branch, its id
    the owner's, `.w.` and a digest of the task and idx list."""
    if record.kind != "langgraph_write":
        return None
    fields: dict[str, Any] = record.__dict__
    owner, task_id, writes = fields["owner"], fields["task_id"], [list(part) for part in fields["writes"]]
    state = {"format": 4, "checkpoint_ns": fields["checkpoint_ns"], "checkpoint_id": fields["checkpoint_id"],
             "task_id": task_id, "task_path": fields["task_path"], "writes": writes}
    data = {
        "id": legacy_write_id(owner, task_id, [part[0] for part in writes]),
        "tenant_id": record.tenant_id, "agent": record.agent, "project_id": record.project_id,
        "created_at": record.created_at, "updated_at": record.updated_at, "metadata": record.metadata,
        "embedding": record.embedding, "run_id": fields["thread"], "node_id": owner, "sequence": 0,
        "branch_id": LEGACY_WRITES_BRANCH, "parent_ids": [owner], "state": state,
        "state_hash": hash_exact_state(state), "update": None, "payload": fields["payload"]}
    return trusted_record(Checkpoint, data, complete=True)


LANGGRAPH_WRITES_MIGRATION = RecordMove(
    LANGGRAPH_WRITES_MIGRATION_ID, source="checkpoint", target="mnemostore.kinds.langgraph_writes:LangGraphWrite",
    move=_to_write, move_back=_to_checkpoint,
    new_stores=False, locks_out_older=True, after=("mnemostore.0002_langgraph_item_kind",),
    description="LangGraph pending writes from checkpoint records to their own kind, langgraph_write "
                "(saver writes format 5)")
"""Part of every store's migrations (`plan.library_migrations`): stores written by older code move their
writes on open (embedded ones) or refuse to open until `mnemostore migrate up` (servers)."""
