"""Record ids as Qdrant point ids: a UUIDv5 of (tenant, id), so any string id works.

Qdrant accepts only unsigned integers and UUIDs as point ids. Ids are unique per
(kind, tenant) and each kind has its own collection, so the point id folds in the
tenant; the original id travels in the payload. Neither part may contain NUL (core
rejects it) and a tenant is never empty, so "" stands for the default tenant unambiguously.
"""

from __future__ import annotations

import hashlib
import uuid

_NAMESPACE = uuid.UUID("6f0c5b1e-4d2a-5c7e-9a43-2b8f1d6e0a57").bytes
_NAMESPACED = hashlib.sha1(_NAMESPACE)
"""SHA-1 state after the namespace: each id copies it instead of hashing the namespace again."""
_VARIANT = {digit: format(int(digit, 16) & 0x3 | 0x8, "x") for digit in "0123456789abcdef"}
"""A hex digit with its top two bits set to RFC 4122's variant (10)."""


def _uuid5(name: str) -> str:
    """`str(uuid.uuid5(namespace, name))` from the hex digest, without UUID objects (a hot path of put)."""
    sha = _NAMESPACED.copy()
    sha.update(name.encode())
    h = sha.hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def point_id(tenant: str | None, record_id: str) -> str:
    """The deterministic point id of record `record_id` in `tenant` (None: the default tenant)."""
    return _uuid5(f"{tenant or ''}\x00{record_id}")


def meta_point_id(key: str) -> str:
    """The point id of a store-level meta value."""
    return _uuid5(f"meta\x00{key}")
