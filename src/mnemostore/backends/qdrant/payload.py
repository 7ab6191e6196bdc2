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

import base64
from datetime import datetime
from typing import Any

import orjson

from ...core import codec
from ...core.records import Record, record_type

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
    """The payload of one record."""
    payload: dict[str, Any] = {TENANT: tenant_value(record.tenant_id), DOC: codec.encode_document(record).decode()}
    if record.embedding is not None:
        payload[VEC] = base64.b64encode(record.embedding.tobytes()).decode("ascii")
    values = record.__dict__
    for name in record.filterable:
        value = values[name]
        if value is None:
            continue
        payload[field_key(name)] = codec.instant_micros(value) if isinstance(value, datetime) else value
    for key, value in record.metadata.items():
        if value is None:
            continue
        payload[metadata_key(key, "p")] = True
        suffix = metadata_suffix(value)
        if suffix is not None:
            payload[metadata_key(key, suffix)] = value
    return payload


def decode(kind: str, payload: dict[str, Any]) -> Record:
    """The record a payload holds (its embedding too, if `_vec` was read)."""
    vector = payload.get(VEC)
    return codec.decode(kind, payload[DOC], base64.b64decode(vector) if vector is not None else None)


def encode_meta(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": orjson.dumps(value).decode()}


def decode_meta(payload: dict[str, Any]) -> Any:
    return orjson.loads(payload["value"])


def kind_fields(kind: str) -> dict[str, type]:
    """The filterable fields of a kind and their Python types."""
    return record_type(kind).filterable
