"""How LangGraph's checkpoints and pending writes map onto mnemostore `Checkpoint` records.

A LangGraph checkpoint is one record: run = thread, branch = namespace ("" is `main`,
any other namespace `ns:<ns>`), parent = the parent checkpoint's record. Its pending
writes are records of their own on the `langgraph:writes` branch of the same run, with
`node_id` (and `parent_ids`) naming the checkpoint record they belong to, and ids that
start with that record's id (so one id-range read finds a checkpoint and its writes); since
format 4 one record holds the regular (or the special) writes of one `put_writes` call.
Values are stored as LangGraph's serializer wrote them. Since format 3 the large one, a
checkpoint's serialized bytes (or a write's value), is the record's `payload` exactly (opaque
bytes: a BLOB/bytea column on SQLite and Postgres, so nothing parses, hashes or base64-encodes
it, and a read hands it to the serializer without a slice or a copy), its type name in the small
JSON `state` (`"type"`) beside the ids a read needs. The metadata (small, and what `list` filters
re-check) is the record's `metadata` when every entry of it is JSON (since format 4: the JSON copy is
then exact, and a read takes it as the document gives it); otherwise it stays [type, base64 text] in
`state` (`core.base64text`), as in formats 1 to 3. Formats 1 and 2 kept the checkpoint and the values
that way too; every format is still read (`checkpoint_of`, `value_of`, `metadata_of`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from operator import itemgetter
from typing import Any, Protocol, cast

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...core.base64text import from_text, to_text
from ...core.codec import trusted_record
from ...core.errors import ValidationError
from ...core.jsonvalues import check_text, find_json_problem
from ...core.records import MAX_ID, hash_exact_state, utcnow
from ...core.records import Checkpoint as Record


class Stored(Protocol):
    """What the saver reads of a checkpoint or write record: a `Record`, or a hot read's stored fields
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
WRITES_BRANCH = "langgraph:writes"
FORMAT = 4
"""Version of the layout, so a later one can still read this one. 4: metadata that is all JSON only in the
record's `metadata`, not also in `state` (`metadata_of`); 3: values in `payload`; 2: a
write's id extends its checkpoint's record id (`call_write_id`); 1 keyed writes by a hash
(`legacy_write_record_id`), so format-1 checkpoints find theirs through `node_id`."""
WRITES_FORMAT = 4
"""Version of the write records' layout. 4: one record holds a call's regular writes (or its special
ones), their values one after another in `payload`; 1-3: one record per write, as `FORMAT` says."""
WRITES_INFIX = ".w."


def branch_for(checkpoint_ns: str) -> str:
    """The branch a namespace's checkpoints live on; reversible by `namespace_of`."""
    return ROOT_BRANCH if checkpoint_ns == "" else NS_BRANCH_PREFIX + checkpoint_ns


def namespace_of(branch_id: str) -> str:
    return "" if branch_id == ROOT_BRANCH else branch_id.removeprefix(NS_BRANCH_PREFIX)


def _digest(*parts: str) -> str:
    return hashlib.sha256(orjson.dumps(parts)).hexdigest()[:32]


def checkpoint_record_id(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """Deterministic, collision-free across threads, and ordered like `checkpoint_id` within a namespace."""
    return _namespace_prefix(thread_id, checkpoint_ns) + checkpoint_id


@lru_cache(maxsize=1024)
def _namespace_prefix(thread_id: str, checkpoint_ns: str) -> str:
    """`lg.<digest of thread and namespace>.`: every call of a step names the same thread (a hash saved)."""
    return f"lg.{_digest(thread_id, checkpoint_ns)}."


@lru_cache(maxsize=1024)
def namespace_range(thread_id: str, checkpoint_ns: str) -> tuple[str, str]:
    """Ids in [low, high) are those of a namespace's checkpoints (and their writes): an index range
    (kept per namespace, as `_namespace_prefix`: a latest read asks it for the same thread each step)."""
    prefix = checkpoint_record_id(thread_id, checkpoint_ns, "")
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def legacy_write_record_id(thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    """A write's id in format 1 (still looked for, so a retried write is not stored twice)."""
    return f"lgw.{_digest(thread_id, checkpoint_ns, checkpoint_id, task_id, str(idx))}"


def record_range(owner: str) -> tuple[str, str]:
    """Ids in [low, high) include the checkpoint record `owner` and all its writes' records.

    They may also include other checkpoints whose ids extend `owner`: callers keep only
    `owner` itself and the writes whose `node_id` is `owner`."""
    return owner, owner + WRITES_INFIX[:-1] + chr(ord(WRITES_INFIX[-1]) + 1)


def is_write_of(record: Stored, owner: str) -> bool:
    return record.branch_id == WRITES_BRANCH and record.node_id == owner


def config_for(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                             "checkpoint_id": checkpoint_id}}


def encode(serde: SerializerProtocol, value: Any) -> list[str]:
    """A small value as the state keeps it: [type, base64 of LangGraph's serialized bytes]."""
    kind, data = serde.dumps_typed(value)
    return [kind, to_text(data)]


def decode(serde: SerializerProtocol, stored: list[str]) -> Any:
    return serde.loads_typed((stored[0], from_text(stored[1])))


def _payload_or_state(serde: SerializerProtocol, record: Stored, key: str) -> Any:
    """The value in the record's payload (format 3), else in `state[key]` (formats 1 and 2)."""
    if record.payload is None:
        return decode(serde, record.state[key])
    return serde.loads_typed((record.state["type"], record.payload))


def checkpoint_of(serde: SerializerProtocol, record: Stored) -> Any:
    """The LangGraph checkpoint a checkpoint record holds (any format)."""
    return _payload_or_state(serde, record, "checkpoint")


def value_of(serde: SerializerProtocol, record: Stored) -> Any:
    """The value a write record holds (any format)."""
    return _payload_or_state(serde, record, "value")


def metadata_of(serde: SerializerProtocol, record: Stored) -> Any:
    """The LangGraph metadata of a checkpoint record (any format): its copy in `state` if it has one,
    else the record's `metadata`, which then holds it exactly (`checkpoint_record`)."""
    stored = record.state.get("metadata")
    return record.metadata if stored is None else decode(serde, stored)


def json_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """The top-level entries every backend can store and filter on; if that leaves any out, the exact
    copy is in `state` too (`checkpoint_record`)."""
    return {key: value for key, value in metadata.items()
            if type(key) is str and check_text(key) is None and find_json_problem(value, key) is None}


def _created_at(ts: Any) -> datetime:
    try:
        parsed = datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        return utcnow()
    return parsed if parsed.tzinfo is not None else utcnow()


def checkpoint_record(serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, parent_id: str | None,
                      checkpoint: dict[str, Any], metadata: dict[str, Any]) -> Record:
    """One LangGraph checkpoint as a mnemostore record (channel values only for versioned channels)."""
    checkpoint_id = checkpoint["id"]
    texts = (thread_id, checkpoint_ns, checkpoint_id, parent_id or "")
    plain = _plain_texts(texts) or _checked_texts(dict(zip(_CHECKPOINT_TEXTS, texts, strict=True)))
    versions = checkpoint.get("channel_versions", {})
    stored = {**checkpoint,
              "channel_values": {k: v for k, v in checkpoint.get("channel_values", {}).items() if k in versions}}
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
    return _record(fields, plain)


_CHECKPOINT_TEXTS = ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id")
"""The names `checkpoint_record` gives its texts in an error."""


def write_records(serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                  task_id: str, task_path: str, writes: list[tuple[int, str, Any]]) -> list[Record]:
    """A task's pending writes of one call, (idx, channel, value) each, as records attached to their
    checkpoint's record by `node_id` and `parent_ids` (format 4): one for the regular writes (idx >= 0),
    one for the special ones (negative idx), each keyed by the task and its idx list (`call_write_id`)."""
    texts = (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, *map(_channel, writes))
    plain = _plain_texts(texts) or _checked_texts(dict(zip(_WRITE_TEXTS + tuple(
        f"writes[{n}].channel" for n in range(len(writes))), texts, strict=True)))
    owner = checkpoint_record_id(thread_id, checkpoint_ns, checkpoint_id)
    now = write_stamp()
    plain = plain and 0 < len(thread_id) <= MAX_ID and len(owner) + len(WRITES_INFIX) + 32 <= MAX_ID
    records: list[Record] = []
    regular = [w for w in writes if w[0] >= 0]
    for group in (regular, [w for w in writes if w[0] < 0] if len(regular) < len(writes) else []):
        if not group:
            continue
        parts: list[list[Any]] = []
        values: list[bytes] = []
        group_plain = plain
        for idx, channel, value in group:
            value_type, value_bytes = serde.dumps_typed(value)
            if type(value_bytes) is not bytes and isinstance(value_bytes, (bytes, bytearray, memoryview)):
                value_bytes = bytes(value_bytes)  # as `Record(...)` would keep it
            group_plain = (group_plain and type(idx) is int and -2**63 <= idx < 2**63
                           and type(value_bytes) is bytes and type(value_type) is str  # `_plain_value`, inlined
                           and (value_type in _SERDE_TYPES or check_text(value_type) is None))
            parts.append([idx, channel, value_type, len(value_bytes) if type(value_bytes) is bytes else -1])
            values.append(value_bytes)
        state = {"format": WRITES_FORMAT, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id,
                 "task_id": task_id, "task_path": task_path, "writes": parts}
        fields: dict[str, Any] = {
            "id": call_write_id(owner, task_id, [w[0] for w in group]), "tenant_id": None, "agent": None,
            "project_id": None, "created_at": now, "updated_at": now, "metadata": {}, "embedding": None,
            "run_id": thread_id, "node_id": owner, "sequence": 0, "branch_id": WRITES_BRANCH, "parent_ids": [owner],
            "state": state, "update": None, "payload": values[0] if len(values) == 1 else _joined(values)}
        if group_plain:  # every field made here, of checked parts: the model's fields exactly
            fields["state_hash"] = hash_exact_state(state)
            records.append(cast(Record, trusted_record(Record, fields, complete=True)))
        else:
            records.append(Record(**fields))
    return records


_channel = itemgetter(1)
"""A numbered write's channel."""
_WRITE_TEXTS = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path")
"""The names `write_records` gives its texts in an error (then `writes[n].channel`)."""


def call_write_id(owner: str, task_id: str, idxs: list[int]) -> str:
    """A write record's id: the checkpoint's record id, `.w.` and a digest of the task and the idx list
    it holds (see `record_range`); a record of one write has the id formats 2 and 3 gave that write."""
    return f"{owner}{WRITES_INFIX}{_digest(task_id, ','.join(map(str, idxs)))}"


def _joined(values: list[Any]) -> Any:
    """The values' bytes one after another (their sizes are in `state["writes"]`); a value that is not
    bytes is left to `Record(...)`, which names it."""
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


def _record(fields: dict[str, Any], plain: bool) -> Record:
    """The record of `fields`, built without pydantic's pass (~10 us a record) when `plain`: every part
    is made by this module or is a text checked by `_checked_texts` (tests hold the result equal to
    `Record(...)`'s); otherwise `Record(...)`, which names the field it refuses."""
    if not plain:
        return Record(**fields)
    data = {**_DEFAULTS, **fields, "state_hash": hash_exact_state(fields["state"])}
    return cast(Record, trusted_record(Record, data, complete=True))


_DEFAULTS: dict[str, Any] = {"tenant_id": None, "agent": None, "project_id": None, "embedding": None,
                             "node_id": "", "sequence": 0, "update": None}
"""Fields `_record` leaves at their defaults unless given (immutable values only: the dict is shared);
with `fields` and `state_hash` they are the model's fields exactly (`trusted_record(..., complete=True)`)."""


def pending_writes(serde: SerializerProtocol, records: Sequence[Stored]) -> list[PendingWrite]:
    """A checkpoint's pending writes from its write records (any format), in LangGraph's order
    (task_path, task_id, idx). Records are replayed in the order they were written, (created_at, id):
    a regular write (idx >= 0) already seen for its (task, idx) is kept, a special one is replaced,
    as LangGraph's savers store them."""
    chosen: dict[tuple[str, int], tuple[str, str, Stored, _Part]] = {}
    for record in sorted(records, key=_written_order):
        state = record.state
        task_id = state["task_id"]
        for part in _parts(state):
            key = (task_id, part[0])
            if part[0] < 0 or key not in chosen:
                chosen[key] = (state["task_path"], part[1], record, part)
    ordered = sorted(chosen.items(), key=lambda item: (item[1][0], item[0][0], item[0][1]))
    return [(task_id, channel, _part_value(serde, record, part))
            for (task_id, _), (_, channel, record, part) in ordered]


_Part = tuple[int, str, str | None, int, int]
"""(idx, channel, value type, start, end) of one write in a write record: its value is the payload's
[start:end] (format 4); type None: the record's one value, wherever its format keeps it (formats 1-3)."""


def _written_order(record: Stored) -> tuple[datetime, str]:
    return record.created_at, record.id


def _parts(state: dict[str, Any]) -> Iterator[_Part]:
    if "writes" not in state:
        yield state["idx"], state["channel"], None, 0, 0
        return
    start = 0
    for idx, channel, value_type, size in state["writes"]:
        yield idx, channel, value_type, start, start + size
        start += size


def _part_value(serde: SerializerProtocol, record: Stored, part: _Part) -> Any:
    _, _, value_type, start, end = part
    payload = record.payload
    if value_type is None or payload is None:
        return value_of(serde, record)
    return serde.loads_typed((value_type, payload if start == 0 and end == len(payload) else payload[start:end]))


def moved(record: Record, thread_id: str) -> Record:
    """A copy of a checkpoint or write record re-keyed for another thread (same checkpoint ids)."""
    state = dict(record.state)
    ns, checkpoint_id = state["checkpoint_ns"], state["checkpoint_id"]
    owner = checkpoint_record_id(thread_id, ns, checkpoint_id)
    if record.branch_id == WRITES_BRANCH:
        idxs = [state["idx"]] if "writes" not in state else [part[0] for part in state["writes"]]
        rid = call_write_id(owner, state["task_id"], idxs)
        return record.model_copy(update={"id": rid, "run_id": thread_id, "node_id": owner, "parent_ids": [owner]})
    state["thread_id"] = thread_id
    parent = state["parent_checkpoint_id"]
    parents = [checkpoint_record_id(thread_id, ns, parent)] if parent else []
    return record.model_copy(update={"id": owner, "run_id": thread_id, "parent_ids": parents, "state": state})
