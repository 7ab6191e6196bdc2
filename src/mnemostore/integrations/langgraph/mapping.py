"""How LangGraph's checkpoints and pending writes map onto mnemostore records.

A LangGraph checkpoint is one `Checkpoint` record: run = thread, branch = namespace ("" is `main`,
any other namespace `ns:<ns>`), parent = the parent checkpoint's record. Its pending writes are
`LangGraphWrite` records (`kinds.langgraph_writes`, writes format 5): one holds the regular (or the
special) writes of one `put_writes` call, `owner` names the checkpoint record, and its id extends the
thread's, the namespace's and the checkpoint's prefixes (`kinds.langgraph_ids`), so one id-range read
finds a checkpoint's writes (or a page's). Formats 1 to 4 kept writes as checkpoint records on the
`langgraph:writes` branch; `migrations.langgraph_writes` moves them over when a store is upgraded.
Values are stored as LangGraph's serializer wrote them. Since format 3 the large one, a
checkpoint's serialized bytes (or a call's values), is the record's `payload` exactly (opaque
bytes: a BLOB/bytea column on SQLite and Postgres, so nothing parses, hashes or base64-encodes
it, and a read hands it to the serializer without a slice or a copy), its type name in the small
JSON `state` (`"type"`) beside the ids a read needs. The metadata (small, and what `list` filters
re-check) is the record's `metadata` when every entry of it is JSON (since format 4: the JSON copy is
then exact, and a read takes it as the document gives it); otherwise it stays [type, base64 text] in
`state` (`core.base64text`), as in formats 1 to 3. Formats 1 and 2 kept the checkpoint that way too;
every format of a checkpoint is still read (`checkpoint_tuple`, `metadata_of`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from operator import itemgetter
from typing import Any, Protocol, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...core.base64text import from_text, to_text
from ...core.errors import ValidationError
from ...core.field_puts import records_of
from ...core.jsonvalues import check_text, find_json_problem
from ...core.records import MAX_ID, hash_exact_state, utcnow
from ...core.records import Checkpoint as Record
from ...kinds.langgraph_ids import LEGACY_WRITES_BRANCH, checkpoint_writes_prefix, write_id
from ...kinds.langgraph_ids import checkpoint_record_id as checkpoint_record_id  # the saver's, tests' and bench's name
from ...kinds.langgraph_writes import LangGraphWrite


class Stored(Protocol):
    """What the saver reads of a checkpoint record: a `Record`, or a hot read's stored fields
    (`reads.StoredFields`)."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def branch_id(self) -> str: ...
    @property
    def node_id(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def state(self) -> dict[str, Any]: ...
    @property
    def payload(self) -> bytes | None: ...
    @property
    def metadata(self) -> dict[str, Any]: ...


ROOT_BRANCH = "main"
NS_BRANCH_PREFIX = "ns:"
WRITES_BRANCH = LEGACY_WRITES_BRANCH
"""The branch formats 1 to 4 kept write records on (in the checkpoint kind; none there since format 5)."""
FORMAT = 4
"""Version of the checkpoint records' layout, so a later one can still read this one. 4: metadata that is
all JSON only in the record's `metadata`, not also in `state` (`metadata_of`); 3: the checkpoint in
`payload`; 1 and 2: in `state`."""
WRITES_FORMAT = 5
"""Version of the writes' layout. 5: `LangGraphWrite` records; 4: one checkpoint record held a call's
regular writes (or its special ones), their values one after another in `payload`; 1-3: one record per
write. `migrations.langgraph_writes` moves 1-4 over."""
WritePart = list[Any]
"""[idx, channel, value type, size] of one write of a `LangGraphWrite` (`writes`)."""


def branch_for(checkpoint_ns: str) -> str:
    """The branch a namespace's checkpoints live on; reversible by `namespace_of`."""
    return ROOT_BRANCH if checkpoint_ns == "" else NS_BRANCH_PREFIX + checkpoint_ns


def namespace_of(branch_id: str) -> str:
    return "" if branch_id == ROOT_BRANCH else branch_id.removeprefix(NS_BRANCH_PREFIX)


@lru_cache(maxsize=1024)
def namespace_range(thread_id: str, checkpoint_ns: str) -> tuple[str, str]:
    """Ids in [low, high) are those of a namespace's checkpoints: an index range
    (kept per namespace: a latest read asks it for the same thread each step)."""
    prefix = checkpoint_record_id(thread_id, checkpoint_ns, "")
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def config_for(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                             "checkpoint_id": checkpoint_id}}


def encode(serde: SerializerProtocol, value: Any) -> list[str]:
    """A small value as the state keeps it: [type, base64 of LangGraph's serialized bytes]."""
    kind, data = serde.dumps_typed(value)
    return [kind, to_text(data)]


def decode(serde: SerializerProtocol, stored: list[str]) -> Any:
    return serde.loads_typed((stored[0], from_text(stored[1])))


def checkpoint_tuple(serde: SerializerProtocol, record: Stored, writes: Sequence[dict[str, Any]]) -> CheckpointTuple:
    """The LangGraph tuple of a checkpoint record (any format) and its writes' fields: the checkpoint in the
    record's payload (format 3 on), else in `state["checkpoint"]` (formats 1 and 2). Every read's last step,
    one call (as LangGraph's savers build theirs inline)."""
    state = record.state
    thread_id, ns, parent_id = state["thread_id"], state["checkpoint_ns"], state["parent_checkpoint_id"]
    payload = record.payload
    parent: RunnableConfig | None = None
    if parent_id:
        parent = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
    return CheckpointTuple(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": state["checkpoint_id"]}},
        decode(serde, state["checkpoint"]) if payload is None else serde.loads_typed((state["type"], payload)),
        metadata_of(serde, record),
        parent,
        pending_writes(serde, writes) if writes else [],
    )


def metadata_of(serde: SerializerProtocol, record: Stored) -> Any:
    """The LangGraph metadata of a checkpoint record (any format): its copy in `state` if it has one,
    else the record's `metadata`, which then holds it exactly (`checkpoint_record`)."""
    stored = record.state.get("metadata")
    return record.metadata if stored is None else decode(serde, stored)


def json_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """The top-level entries every backend can store and filter on; if that leaves any out, the exact
    copy is in `state` too (`checkpoint_fields`). All of them, LangGraph's usual metadata, in one walk."""
    if find_json_problem(metadata, "metadata") is None:
        return dict(metadata)
    return {key: value for key, value in metadata.items()
            if type(key) is str and check_text(key) is None and find_json_problem(value, key) is None}


def _created_at(ts: Any) -> datetime:
    try:
        parsed = datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        return utcnow()
    return parsed if parsed.tzinfo is not None else utcnow()


CHECKPOINT_COMMON: dict[str, Any] = {"agent": None, "project_id": None, "node_id": "", "update": None}
"""The fields every checkpoint record of the saver holds alike: with the store's tenant, no vector and
`CHECKPOINT_OWN`, every field of the record (`Collection._field_writer`)."""
CHECKPOINT_OWN = ("id", "run_id", "branch_id", "parent_ids", "sequence", "created_at", "updated_at", "metadata",
                  "state", "payload", "state_hash")
"""The names of a checkpoint record's own fields that `checkpoint_fields` gives when they are plain."""


def checkpoint_fields(serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, parent_id: str | None,
                      checkpoint: dict[str, Any], metadata: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """One LangGraph checkpoint (channel values only for versioned channels) as its record's own fields, and
    whether they are plain: every part made here or checked, so with `CHECKPOINT_COMMON` they are the model's
    fields exactly (`CHECKPOINT_OWN`: `state_hash` among them); else `checkpoint_of_fields` validates them,
    naming what it refuses."""
    checkpoint_id = checkpoint["id"]
    texts = (thread_id, checkpoint_ns, checkpoint_id, parent_id or "")
    plain = _plain_texts(texts) or _checked_texts(dict(zip(_CHECKPOINT_TEXTS, texts, strict=True)))
    versions = checkpoint.get("channel_versions", {})
    values = checkpoint.get("channel_values", {})
    stored = checkpoint if values.keys() <= versions.keys() else {  # a copy only when one is left out
        **checkpoint, "channel_values": {k: v for k, v in values.items() if k in versions}}
    step = metadata.get("step")
    checkpoint_type, checkpoint_bytes = serde.dumps_typed(stored)
    filterable = json_metadata(metadata)
    state = {"format": FORMAT, "thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
             "checkpoint_id": checkpoint_id, "parent_checkpoint_id": parent_id, "type": checkpoint_type}
    plain_metadata = len(filterable) == len(metadata)  # all JSON: the record's `metadata` holds it exactly
    if not plain_metadata:
        state["metadata"] = encode(serde, metadata)
        plain_metadata = check_text(state["metadata"][0]) is None
    record_id = checkpoint_record_id(thread_id, checkpoint_ns, checkpoint_id)
    parents = [checkpoint_record_id(thread_id, checkpoint_ns, parent_id)] if parent_id else []
    branch = branch_for(checkpoint_ns)
    fields = {
        "id": record_id, "run_id": thread_id, "branch_id": branch, "parent_ids": parents,
        "sequence": step + 1 if type(step) is int and -1 <= step < 2**62 else 0,
        "created_at": _created_at(checkpoint.get("ts")), "updated_at": utcnow(),
        "metadata": filterable, "state": state, "payload": checkpoint_bytes,
    }
    plain = (plain and 0 < len(thread_id) <= MAX_ID and max(len(record_id), len(branch), *map(len, parents)) <= MAX_ID
             and _plain_value(checkpoint_type, checkpoint_bytes) and plain_metadata)
    if plain:
        fields["state_hash"] = hash_exact_state(state)
    return fields, plain


def checkpoint_of_fields(fields: dict[str, Any], plain: bool) -> Record:
    """The record of `checkpoint_fields`' fields: made without pydantic's pass (~10 us a record) when they are
    plain (tests hold it equal to `Record(...)`'s), else `Record(...)`, which names the field it refuses."""
    if not plain:
        return Record(**CHECKPOINT_COMMON, **fields)
    return cast(Record, records_of(Record, _CHECKPOINT_SHARED, [fields])[0])


def checkpoint_record(serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, parent_id: str | None,
                      checkpoint: dict[str, Any], metadata: dict[str, Any]) -> Record:
    """One LangGraph checkpoint as a mnemostore record (`checkpoint_fields`)."""
    return checkpoint_of_fields(*checkpoint_fields(serde, thread_id, checkpoint_ns, parent_id, checkpoint, metadata))


_CHECKPOINT_TEXTS = ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id")
"""The names `checkpoint_fields` gives its texts in an error."""


WRITE_COMMON: dict[str, Any] = {"agent": None, "project_id": None, "metadata": {}}
"""The fields every pending write's record holds alike: with the store's tenant, no vector and
`WRITE_OWN`, every field of the record (`Collection._field_writer`)."""
WRITE_OWN = ("id", "created_at", "updated_at", "thread", "owner", "checkpoint_ns", "checkpoint_id", "task_id",
             "task_path", "writes", "payload")
"""The names of a write record's own fields, as `write_fields` gives them."""


def write_fields(serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                 task_id: str, task_path: str, writes: list[tuple[int, str, Any]]) -> list[tuple[dict[str, Any], bool]]:
    """A task's pending writes of one call, (idx, channel, value) each, as the own fields (`WRITE_OWN`) of
    `LangGraphWrite` records pending on their checkpoint's record (`owner`): one for the regular writes
    (idx >= 0), one for the special ones (negative idx), each keyed by the task and its idx list
    (`langgraph_ids.write_id`); each with whether it is plain (every part made here or checked: with
    `WRITE_COMMON` the model's fields exactly; else `write_of_fields` validates them)."""
    texts = (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, *map(_channel, writes))
    plain = _plain_texts(texts) or _checked_texts(dict(zip(_WRITE_TEXTS + tuple(
        f"writes[{n}].channel" for n in range(len(writes))), texts, strict=True)))
    owner = checkpoint_record_id(thread_id, checkpoint_ns, checkpoint_id)
    prefix = checkpoint_writes_prefix(thread_id, checkpoint_ns, checkpoint_id)
    now = write_stamp()
    plain = plain and 0 < len(thread_id) <= MAX_ID and max(len(owner), len(prefix) + 32) <= MAX_ID
    made: list[tuple[dict[str, Any], bool]] = []
    regular = [w for w in writes if w[0] >= 0]
    for group in (regular, [w for w in writes if w[0] < 0] if len(regular) < len(writes) else []):
        if not group:
            continue
        parts: list[WritePart] = []
        values: list[bytes] = []
        group_plain = plain
        for idx, channel, value in group:
            value_type, value_bytes = serde.dumps_typed(value)
            if type(value_bytes) is not bytes and isinstance(value_bytes, (bytes, bytearray, memoryview)):
                value_bytes = bytes(value_bytes)  # as `LangGraphWrite(...)` would keep it
            group_plain = (group_plain and type(idx) is int and -2**63 <= idx < 2**63
                           and type(value_bytes) is bytes and type(value_type) is str  # `_plain_value`, inlined
                           and (value_type in _SERDE_TYPES or check_text(value_type) is None))
            parts.append([idx, channel, value_type, len(value_bytes) if type(value_bytes) is bytes else -1])
            values.append(value_bytes)
        made.append(({
            "id": write_id(prefix, task_id, [w[0] for w in group]), "created_at": now, "updated_at": now,
            "thread": thread_id, "owner": owner, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id,
            "task_id": task_id, "task_path": task_path, "writes": parts,
            "payload": values[0] if len(values) == 1 else _joined(values)}, group_plain))
    return made


def write_of_fields(fields: dict[str, Any], plain: bool) -> LangGraphWrite:
    """The record of `write_fields`' fields: made without pydantic's pass when they are plain (tests hold it
    equal to `LangGraphWrite(...)`'s), else `LangGraphWrite(...)`, which names the field it refuses."""
    if not plain:
        return LangGraphWrite(**WRITE_COMMON, **fields)
    return cast(LangGraphWrite, records_of(LangGraphWrite, _WRITE_SHARED, [fields])[0])


def write_records(serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                  task_id: str, task_path: str, writes: list[tuple[int, str, Any]]) -> list[LangGraphWrite]:
    """`write_fields`' records."""
    return [write_of_fields(fields, plain) for fields, plain in
            write_fields(serde, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, writes)]


_WRITE_SHARED = {**WRITE_COMMON, "tenant_id": None, "embedding": None}
_CHECKPOINT_SHARED = {**CHECKPOINT_COMMON, "tenant_id": None, "embedding": None}
"""The common fields of the records made here (`records_of`): no tenant (a put gives them the store's)."""
_channel = itemgetter(1)
"""A numbered write's channel."""
_WRITE_TEXTS = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path")
"""The names `write_fields` gives its texts in an error (then `writes[n].channel`)."""


def _joined(values: list[Any]) -> Any:
    """The values' bytes one after another (their sizes are in `writes`); a value that is not bytes is left
    to `LangGraphWrite(...)`, which names it."""
    wrong = [value for value in values if type(value) is not bytes]
    return wrong[0] if wrong else b"".join(values)


_last_stamp: list[datetime] = [datetime.min.replace(tzinfo=UTC)]
_stamp_lock = threading.Lock()


def write_stamp() -> datetime:
    """Now, but later than the last stamp this process gave: a task's write records are replayed in
    (created_at, id) order (`pending_writes`), so calls of one process keep their order."""
    now = utcnow()
    with _stamp_lock:
        last = _last_stamp[0]
        if now <= last:
            now = last + timedelta(microseconds=1)
        _last_stamp[0] = now
    return now


def _plain_texts(texts: tuple[Any, ...]) -> bool:
    """Whether every text is a str of ASCII without NUL: storable as it is, with no need to name one."""
    return {*map(type, texts)} == _STR and (joined := "".join(texts)).isascii() and "\x00" not in joined


_STR = {str}


def _checked_texts(texts: dict[str, Any]) -> bool:
    """Refuse a text that cannot be stored, naming it, before any id is made of it; whether all are str
    (a value of another type is left to `Record(...)`, which names it)."""
    every_str = True
    for name, text in texts.items():
        if type(text) is not str:
            every_str = False
            continue
        problem = check_text(text)
        if problem is not None:
            raise ValidationError.one(name, f"string {problem}")
    return every_str


def _plain_value(value_type: Any, value_bytes: Any) -> bool:
    return (type(value_bytes) is bytes and type(value_type) is str
            and (value_type in _SERDE_TYPES or check_text(value_type) is None))


_SERDE_TYPES = frozenset({"msgpack", "json", "bytes", "bytearray", "null", "pickle"})
"""Type names LangGraph's serializers write: texts already checked."""


def pending_writes(serde: SerializerProtocol, writes: Sequence[dict[str, Any]]) -> list[PendingWrite]:
    """A checkpoint's pending writes from its `LangGraphWrite` records' fields (`record.__dict__`, or a flat
    read's documents), in LangGraph's order (task_path, task_id, idx). Records are replayed in the order
    they were written, (created_at, id): a regular write (idx >= 0) already seen for its (task, idx) is kept,
    a special one is replaced, as LangGraph's savers store them."""
    ordered = _alone_in_order(writes[0]) if len(writes) == 1 else None
    if ordered is None:
        ordered = _replayed(writes)
    return [(task_id, channel, serde.loads_typed(
                (value_type, payload if start == 0 and end == len(payload) else payload[start:end])))
            for task_id, channel, value_type, payload, start, end in ordered]


_Chosen = tuple[str, str, str, Any, int, int]
"""A pending write found in a record: (task_id, channel, type, the record's payload, start, end of its bytes)."""


def _alone_in_order(write: dict[str, Any]) -> list[_Chosen] | None:
    """The writes of a lone record (one task's `put_writes`, a step's usual) whose idx strictly ascend: no
    two share a key, and the record's order is LangGraph's, so nothing to replay or sort; None otherwise."""
    task_id, payload = write["task_id"], write["payload"]
    chosen: list[_Chosen] = []
    start, last = 0, None
    for idx, channel, value_type, size in write["writes"]:
        if last is not None and idx <= last:
            return None
        chosen.append((task_id, channel, value_type, payload, start, start + size))
        start, last = start + size, idx
    return chosen


def _replayed(writes: Sequence[dict[str, Any]]) -> list[_Chosen]:
    """The writes `pending_writes` keeps of several records (or of a lone one whose idx do not strictly ascend),
    replayed in the order they were written and sorted as LangGraph orders them."""
    chosen: dict[tuple[str, int], tuple[str, str, str, Any, int, int]] = {}
    for write in sorted(writes, key=_written_order) if len(writes) > 1 else writes:
        task_id, task_path, payload = write["task_id"], write["task_path"], write["payload"]
        start = 0
        for idx, channel, value_type, size in write["writes"]:
            key = (task_id, idx)
            if idx < 0 or key not in chosen:
                chosen[key] = (task_path, channel, value_type, payload, start, start + size)
            start += size
    ordered = sorted(chosen.items(), key=lambda item: (item[1][0], item[0][0], item[0][1]))
    return [(task_id, channel, value_type, payload, start, end)
            for (task_id, _), (_, channel, value_type, payload, start, end) in ordered]


def _written_order(write: dict[str, Any]) -> tuple[datetime, str]:
    created = write["created_at"]  # a datetime in a record's fields, RFC 3339 text in a flat read's
    return created if type(created) is datetime else datetime.fromisoformat(created), write["id"]


def moved(record: Record, thread_id: str) -> Record:
    """A copy of a checkpoint record re-keyed for another thread (same checkpoint ids)."""
    state = dict(record.state)
    ns, checkpoint_id = state["checkpoint_ns"], state["checkpoint_id"]
    state["thread_id"] = thread_id
    parent = state["parent_checkpoint_id"]
    parents = [checkpoint_record_id(thread_id, ns, parent)] if parent else []
    return record.model_copy(update={"id": checkpoint_record_id(thread_id, ns, checkpoint_id), "run_id": thread_id,
                                     "parent_ids": parents, "state": state})


def moved_write(record: LangGraphWrite, thread_id: str) -> LangGraphWrite:
    """A copy of a write record re-keyed for another thread (same checkpoint ids)."""
    ns, checkpoint_id = record.checkpoint_ns, record.checkpoint_id
    prefix = checkpoint_writes_prefix(thread_id, ns, checkpoint_id)
    return record.model_copy(update={
        "id": write_id(prefix, record.task_id, [part[0] for part in record.writes]), "thread": thread_id,
        "owner": checkpoint_record_id(thread_id, ns, checkpoint_id)})
