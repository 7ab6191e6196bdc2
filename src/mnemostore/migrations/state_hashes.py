"""The library's own record migration: stored checkpoints' `state_hash` from SHA-256 to xxh3-128.

A `state_hash` is stored and filterable, so a store must never mix algorithms: a filter on one
state's hash has to find every checkpoint of that state. Checkpoints written before this step
carry the SHA-256 (64 hex digits) of their canonical state JSON; this code stamps xxh3-128 (32 hex
digits, `core.records.state_digest`). The step rewrites each stored hash that is its state's SHA-256,
through the protocol, so every backend and every plugin gets it; `down` puts SHA-256 back. A hash
that is neither (one an application gave its checkpoint) is left as it is, which also makes the
step idempotent, as a resumable record migration must be.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ..core.jsonvalues import dumps_json_document
from ..core.records import Checkpoint, Record, state_digest
from .model import RecordMigration

STATE_HASH_MIGRATION_ID = "mnemostore.0001_state_hash_xxh3"


def sha256_state_digest(canonical_json: bytes) -> str:
    """The `state_hash` mnemostore stamped before xxh3-128: SHA-256 (hex) of the canonical JSON."""
    return hashlib.sha256(canonical_json).hexdigest()


def _rehashed(record: Record, stored: Callable[[bytes], str], wanted: Callable[[bytes], str]) -> dict[str, Any] | None:
    """The checkpoint's `wanted` hash if its stored one is its state's `stored` hash; None otherwise."""
    if not isinstance(record, Checkpoint):
        return None
    canonical = dumps_json_document(record.state, "state")
    if record.state_hash != stored(canonical):
        return None
    return {"state_hash": wanted(canonical)}


def _to_xxh3(record: Record) -> dict[str, Any] | None:
    return _rehashed(record, sha256_state_digest, state_digest)


def _to_sha256(record: Record) -> dict[str, Any] | None:
    return _rehashed(record, state_digest, sha256_state_digest)


STATE_HASH_MIGRATION = RecordMigration(
    STATE_HASH_MIGRATION_ID, kinds=("checkpoint",), change=_to_xxh3, revert=_to_sha256, new_stores=False,
    locks_out_older=True,
    description="checkpoints' state_hash from SHA-256 to xxh3-128 (a fast digest of equal states)")
"""Part of every store's migrations (`plan.known_migrations`): stores written by older code rehash
on open (embedded ones) or refuse to open until `mnemostore migrate up` (servers)."""
