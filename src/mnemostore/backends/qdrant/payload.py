"""Records as Qdrant payloads: the whole record losslessly, plus typed projections for filters.

`_doc` holds core's JSON document (every field but the embedding) and `_vec` the embedding
as base64 float32 bytes: Qdrant normalises cosine vectors on insert, so its own copy cannot
give the original back. Filters read projections: `f_<field>` for each filterable field
(datetimes as integer microseconds since the epoch, so ranges compare instants) and, for
each top-level metadata key, one key per JSON type (`m_<hex>_s|n|b`) plus `m_<hex>_p`, true
when the value is present and not None. A value never shares a key with another type, so
Qdrant's matching can never equate `True` with `1` or `"1"` with `1`. None is never stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from ...core import codec
from ...core.base64text import from_text, to_text
from ...core.kinds import record_type
from ...core.records import Record

TENANT = "_t"
DOC = "_doc"
VEC = "_vec"
WITH_VECTOR = [DOC, VEC]
WITHOUT_VECTOR = [DOC]


def tenant_value(tenant: str | None) -> str:
    """The `_t` value of a tenant ("" is the default tenant; real tenants are never empty)."""
    return tenant or ""


def field_key(name: str) -> str:
    return "f_" + name


def metadata_key(key: str, suffix: str) -> str:
    """The projection of metadata key `key`: suffix s (string), n (number), b (bool) or p (present)."""
    return f"m_{key.encode().hex()}_{suffix}"


def metadata_suffix(value: Any) -> str | None:
    """Which typed projection a metadata value lands in (None for lists and objects)."""
    kind = type(value)
    if kind is str:
        return "s"
    if kind is bool:
        return "b"
    if kind is int or kind is float:
        return "n"
    return None


def encode(record: Record) -> dict[str, Any]:
    """The payload of one record (a hot path of put: key names come from caches)."""
    payload: dict[str, Any] = {TENANT: record.tenant_id or "", DOC: codec.encode_document(record).decode()}
    embedding = record.embedding
    if embedding is not None:
        try:  # the array's own buffer, without copying it first (`tobytes`)
            payload[VEC] = to_text(embedding)
        except ValueError:  # a strided view is not one buffer
            payload[VEC] = to_text(embedding.tobytes())
    values = record.__dict__
    plain, instants = _field_keys(type(record))
    for name, key in plain:
        value = values[name]
        if value is not None:
            payload[key] = value
    for name, key in instants:
        value = values[name]
        if value is not None:
            payload[key] = codec.instant_micros(value)
    for key, value in record.metadata.items():
        if value is None:
            continue
        keys = _METADATA_KEYS.get(key) or _metadata_keys(key)
        payload[keys[0]] = True
        kind = type(value)
        if kind is str:
            payload[keys[1]] = value
        elif kind is bool:
            payload[keys[3]] = value
        elif kind is int or kind is float:
            payload[keys[2]] = value
    return payload


_Keys = tuple[tuple[str, str], ...]
_FIELD_KEYS: dict[type[Record], tuple[_Keys, _Keys]] = {}
_METADATA_KEYS: dict[str, tuple[str, str, str, str]] = {}
_METADATA_KEYS_MAX = 10_000
"""Metadata keys are the application's: the cache stops growing past this many."""


def _field_keys(cls: type[Record]) -> tuple[_Keys, _Keys]:
    """(field, payload key) of the filterable fields of `cls`: the others, then the datetimes."""
    found = _FIELD_KEYS.get(cls)
    if found is None:
        fields = cls.filterable.items()
        found = _FIELD_KEYS[cls] = (tuple((name, field_key(name)) for name, kind in fields if kind is not datetime),
                                    tuple((name, field_key(name)) for name, kind in fields if kind is datetime))
    return found


def _metadata_keys(key: str) -> tuple[str, str, str, str]:
    """The p, s, n and b projection keys of metadata key `key` (see `metadata_key`)."""
    keys = (metadata_key(key, "p"), metadata_key(key, "s"), metadata_key(key, "n"), metadata_key(key, "b"))
    if len(_METADATA_KEYS) < _METADATA_KEYS_MAX:
        _METADATA_KEYS[key] = keys
    return keys


def decode(kind: str, payload: dict[str, Any], embedding: bool = True) -> Record:
    """The record a payload holds (its embedding too, if `_vec` was read and `embedding` is true)."""
    vector = payload.get(VEC) if embedding else None
    return codec.decode(kind, payload[DOC], from_text(vector) if vector is not None else None)


def encode_meta(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": orjson.dumps(value).decode()}


def decode_meta(payload: dict[str, Any]) -> Any:
    return orjson.loads(payload["value"])


def kind_fields(kind: str) -> dict[str, type]:
    """The filterable fields of a kind and their Python types."""
    return record_type(kind).filterable
