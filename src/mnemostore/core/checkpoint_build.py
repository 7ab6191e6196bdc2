"""A `Checkpoint` built from the fields a save, apply or merge gives, checked by hand as pydantic checks
them (~12 us cheaper a save); anything this does not take as plainly valid goes to `Checkpoint(...)`,
so every refusal is pydantic's, naming the field and the rule."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .codec import trusted_record
from .errors import ValidationError
from .jsonvalues import check_text, dumps_json_document, find_json_problem, remember_proven
from .records import MAX_ID, Checkpoint, new_id, state_digest, utcnow

_INT64_MAX = 2**63 - 1


def build_checkpoint(fields: Mapping[str, Any]) -> Checkpoint:
    """`Checkpoint(**fields)`: the same record, or the same `ValidationError`."""
    record = _plain_checkpoint(fields)
    return record if record is not None else Checkpoint(**fields)


def _plain_checkpoint(fields: Mapping[str, Any]) -> Checkpoint | None:
    """The checkpoint of `fields` if every one is plainly valid (exact types, within bounds); else None."""
    if not fields.keys() <= _FIELDS:
        return None
    get = fields.get
    parent_ids = get("parent_ids", _NO_PARENTS)
    sequence = get("sequence", 0)
    if not (_identifier(fields["run_id"]) if "run_id" in fields else False) or not _text(get("node_id", "")) \
            or not _identifier(get("branch_id", "main")) or type(parent_ids) is not list \
            or not all(map(_identifier, parent_ids)) or type(sequence) is not int or not 0 <= sequence <= _INT64_MAX \
            or not _optional_identifier(get("tenant_id")) or not _optional_text(get("agent")) \
            or not _optional_text(get("project_id")) or get("embedding") is not None:
        return None
    record_id = get("id")
    if record_id is None:
        if "id" in fields:
            return None  # pydantic refuses None: let it name the field
        record_id = new_id()
    elif not _identifier(record_id):
        return None
    state, metadata, update = get("state", _EMPTY), get("metadata", _EMPTY), get("update")
    if not _str_keys(state) or not _str_keys(metadata) or find_json_problem(metadata, "") is not None \
            or not (update is None or _str_keys(update)):
        return None
    state_hash, payload = get("state_hash", ""), get("payload")
    if type(state_hash) is not str or not (payload is None or type(payload) is bytes):
        return None
    now = None
    stamps = []
    for name in ("created_at", "updated_at"):
        stamp = get(name)
        if stamp is None:
            if name in fields:
                return None
            stamp = now = now or utcnow()
        elif type(stamp) is not datetime or stamp.utcoffset() is None:
            return None
        stamps.append(stamp)
    state = dict(state)
    try:
        data = dumps_json_document(state, "state")
        if update is not None:
            update = dict(update)
            dumps_json_document(update, "update")
    except ValidationError:
        return None
    remember_proven(state, data)
    return trusted_record(Checkpoint, {  # type: ignore[return-value]
        "id": record_id, "tenant_id": get("tenant_id"), "agent": get("agent"), "project_id": get("project_id"),
        "created_at": stamps[0], "updated_at": stamps[1], "metadata": dict(metadata), "embedding": None,
        "run_id": fields["run_id"], "node_id": get("node_id", ""), "sequence": sequence,
        "branch_id": get("branch_id", "main"), "parent_ids": list(parent_ids), "state": state,
        "state_hash": state_hash or state_digest(data), "update": update, "payload": payload}, complete=True)


_FIELDS = frozenset(Checkpoint.model_fields)
_EMPTY: Any = {}
_NO_PARENTS: Any = []
"""Defaults never written to: every dict and list taken is copied, as pydantic copies them."""


def _identifier(value: Any) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_ID and check_text(value) is None


def _text(value: Any) -> bool:
    return type(value) is str and check_text(value) is None


def _optional_identifier(value: Any) -> bool:
    return value is None or _identifier(value)


def _optional_text(value: Any) -> bool:
    return value is None or _text(value)


def _str_keys(value: Any) -> bool:
    return type(value) is dict and all(type(key) is str for key in value)
