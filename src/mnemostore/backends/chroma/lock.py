"""The migration lock of a Chroma server store: a lock row taken with Chroma's insert-if-absent.

Chroma's `add` ignores an id that already exists, and the server applies writes in one
order, so of several runners adding the lock row at once exactly one row survives and each
runner sees by reading it back whether it is its own: no settle time, unlike `MetaLock`.
The row (id `migration_lock` in the store's meta collection) carries the holder as its
document and its token as metadata, so release and the takeover of an expired lock are
deletes conditional on the token. It expires unless refreshed (`ttl`), so a crashed holder
blocks others for at most `ttl` seconds.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

import orjson

from ...core.errors import LockHeld
from ...migrations.locking import LOCK_KEY, LockInfo, MigrationLock
from .rows import placeholders

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

TOKEN = "token"
"""Metadata key of the lock row: the holder's token, for conditional deletes."""


class ChromaRowLock(MigrationLock):
    """The lock row in `collection` (the store's meta collection); see the module docstring."""

    def __init__(self, collection: Collection, ttl: float = 120.0) -> None:
        self.collection = collection
        self.ttl = ttl

    def try_acquire(self, info: LockInfo) -> bool:
        row = self._row()
        if row is not None:
            current = row[1]
            if current is not None and not current.expired():
                return False
            self._delete(row)  # expired, or not a lock record: only that row, never a newer one
        self._write("add", info)
        row = self._row()
        return row is not None and row[0] == info.token

    def release(self, info: LockInfo) -> None:
        self.collection.delete(ids=[LOCK_KEY], where={TOKEN: info.token})

    def holder(self) -> LockInfo | None:
        row = self._row()
        return None if row is None else row[1]

    def force_release(self) -> LockInfo | None:
        current = self.holder()
        self.collection.delete(ids=[LOCK_KEY])
        return current

    def refresh(self, info: LockInfo) -> LockInfo:
        row = self._row()
        if row is None or row[0] != info.token:
            raise LockHeld("this runner's migration lock row expired and was taken over; stopping "
                           "(raise the lock ttl if batches take longer than it)")
        refreshed = info.extended(self.ttl or 0)
        self._write("update", refreshed)
        return refreshed

    def _row(self) -> tuple[str | None, LockInfo | None] | None:
        """(token, holder) of the lock row, or None when there is none."""
        found = self.collection.get(ids=[LOCK_KEY], include=cast(Any, ["documents", "metadatas"]))
        if not found["ids"]:
            return None
        metadata = found["metadatas"][0] if found["metadatas"] else None
        document = found["documents"][0] if found["documents"] else None
        token = (metadata or {}).get(TOKEN)
        try:
            current = LockInfo.from_json(orjson.loads(document)) if document else None
        except orjson.JSONDecodeError:
            current = None
        return (token if isinstance(token, str) else None), current

    def _delete(self, row: tuple[str | None, LockInfo | None]) -> None:
        """Delete the lock row read as `row`, but not a row another runner wrote since."""
        token, current = row
        if token is not None:
            self.collection.delete(ids=[LOCK_KEY], where={TOKEN: token})
        elif current is not None and current.token:  # a lock record written by `MetaLock` (no metadata)
            self.collection.delete(ids=[LOCK_KEY], where_document={"$contains": current.token})
        else:  # no lock record at all (a None left by `write_meta`)
            self.collection.delete(ids=[LOCK_KEY], where_document={"$not_contains": f'"{TOKEN}"'})

    def _write(self, how: str, info: LockInfo) -> None:
        getattr(self.collection, how)(ids=[LOCK_KEY], embeddings=placeholders(1),
                                      documents=[orjson.dumps(asdict(info)).decode()],
                                      metadatas=[{TOKEN: info.token}])
