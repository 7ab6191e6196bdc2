"""`LMDBBackend`: records in an LMDB environment, one named database per kind (opened on first use,
so a kind an application registers needs no code here).

A record is stored under `tenant NUL id` as its JSON document and its float32 vector
(`mnemostore.core.codec`). LMDB gives every write transaction to one writer at a time,
across processes, so batches are all-or-nothing and increments lose nothing. Filters,
ordering and vector search run in Python over a tenant's key range, with core's helpers.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar

import lmdb
import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field

from mnemostore import Backend, Capability, ConfigError, Hit, OrderKey, Record, StoreClosed
from mnemostore.core import codec
from mnemostore.core.filters import Expr, matches
from mnemostore.core.protocol import apply_update, link_parent
from mnemostore.core.query import parent_ref, sort_records
from mnemostore.core.records import Checkpoint
from mnemostore.core.vectorsearch import scores, top_k
from mnemostore.migrations import FileLock, MigrationLock

_LENGTH = struct.Struct("<I")
MIGRATE_LOCK = "migrate.lock"
MAX_KINDS = 127
"""Named databases an environment holds (one per kind, plus "meta"); LMDB fixes the number at open."""
_OPENING = threading.Lock()
"""LMDB opens named databases one at a time per process."""


class _Environments:
    """LMDB allows one open environment per file per process: opens of one path share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[int, str], tuple[lmdb.Environment, int]] = {}

    def acquire(self, directory: Path, options: LMDBOptions) -> lmdb.Environment:
        key = (os.getpid(), str(directory.resolve()))
        with self._lock:
            env, users = self._open.get(key, (None, 0))
            if env is None:
                env = lmdb.open(key[1], map_size=options.map_size, max_dbs=MAX_KINDS + 1,
                                sync=options.sync, metasync=options.sync)
            self._open[key] = (env, users + 1)
            return env

    def release(self, directory: Path) -> None:
        key = (os.getpid(), str(directory.resolve()))
        with self._lock:
            env, users = self._open.pop(key, (None, 0))
            if env is not None and users > 1:
                self._open[key] = (env, users - 1)
            elif env is not None:
                env.close()


_ENVIRONMENTS = _Environments()


class LMDBOptions(BaseModel):
    """Options of the lmdb backend (URL query or keyword arguments)."""

    model_config = ConfigDict(extra="forbid")

    map_size: int = Field(default=1 << 30, ge=1 << 20)
    """The most bytes the store may grow to (LMDB reserves address space, not disk)."""
    sync: bool = True
    """Flush to disk at each commit; False trades durability against power loss for speed."""


_MAX_ID = 400
"""LMDB keys hold at most 511 bytes: longer ids are stored under a digest (UTF-8 never has 0xFF)."""


def _tenant_prefix(tenant: str | None) -> bytes:
    """16 bytes per tenant, so a tenant's records are one key range whatever its name."""
    return bytes(16) if tenant is None else hashlib.sha256(tenant.encode()).digest()[:16]


def _key(tenant: str | None, id: str) -> bytes:
    raw = id.encode()
    return _tenant_prefix(tenant) + (raw if len(raw) <= _MAX_ID else b"\xff" + hashlib.sha256(raw).digest())


def _pack(record: Record) -> bytes:
    document = codec.encode_document(record)
    return _LENGTH.pack(len(document)) + document + (codec.encode_vector(record) or b"")


def _unpack(kind: str, value: bytes) -> Record:
    (length,) = _LENGTH.unpack_from(value)
    vector = value[4 + length:]
    return codec.decode(kind, value[4:4 + length], vector or None)


class LMDBBackend(Backend):
    name: ClassVar[str] = "lmdb"
    schemes: ClassVar[tuple[str, ...]] = ("lmdb",)
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.PERSISTENT,
        Capability.TRANSACTIONS,
        Capability.ATOMIC_UPDATE,
        Capability.MULTI_PROCESS,
        Capability.CRASH_SAFE,
        Capability.FILTER_RANGE,
        Capability.FILTER_METADATA,
        Capability.VECTOR_COSINE,
        Capability.VECTOR_DOT,
        Capability.VECTOR_L2,
        Capability.VECTOR_FILTERED,
        Capability.LARGE_STATE,
        Capability.CHECKPOINT_CHAIN,
    })
    options_model: ClassVar[type[BaseModel]] = LMDBOptions
    requires: ClassVar[tuple[str, ...]] = ("lmdb",)

    _env: lmdb.Environment | None = None

    def open(self) -> None:
        options = self.options
        assert isinstance(options, LMDBOptions)
        if self.url.host or not self.url.path:
            raise ConfigError(f"{self.url.masked}: use lmdb:///absolute/directory")
        self.directory = Path(self.url.path).expanduser()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._env = _ENVIRONMENTS.acquire(self.directory, options)
        except (OSError, lmdb.Error) as exc:
            raise ConfigError(f"cannot open the LMDB store at {self.directory}: {exc}") from None
        self._dbs: dict[str, Any] = {}

    def close(self) -> None:
        if self._env is not None:
            self._env = None
            _ENVIRONMENTS.release(self.directory)

    def drop(self) -> None:
        """Remove the store's files (LMDB's data and lock files, the migration lock), then its
        directory if nothing else is in it (the conformance suite calls this after each test)."""
        directory = Path(self.url.path).expanduser()
        for name in ("data.mdb", "lock.mdb", MIGRATE_LOCK):
            (directory / name).unlink(missing_ok=True)
        with suppress(OSError):
            directory.rmdir()

    def _db(self, name: str) -> Any:
        """The named database of a kind (or "meta"), created the first time it is asked for."""
        found = self._dbs.get(name)
        if found is None:
            with _OPENING, self.env.begin(write=True) as txn:  # waits for the writer without holding the GIL
                found = self._dbs[name] = self.env.open_db(name.encode(), txn=txn)
        return found

    @property
    def env(self) -> lmdb.Environment:
        if self._env is None:
            raise StoreClosed(f"the LMDB store at {self.url.masked} is closed")
        return self._env

    # meta and migrations -------------------------------------------------------------
    def read_meta(self, key: str) -> Any:
        with self.env.begin(db=self._db("meta")) as txn:
            value = txn.get(key.encode())
        return None if value is None else orjson.loads(value)

    def write_meta(self, key: str, value: Any) -> None:
        with self.env.begin(db=self._db("meta"), write=True) as txn:
            txn.put(key.encode(), orjson.dumps(value))

    def migration_lock(self) -> MigrationLock:
        return FileLock(self.directory / MIGRATE_LOCK)

    def tenants(self, kind: str) -> list[str | None]:
        found: list[str | None] = []
        with self.env.begin(db=self._db(kind)) as txn:
            cursor = txn.cursor()
            more = cursor.first()
            while more:  # one record per tenant, then jump past that tenant's key range
                found.append(_unpack(kind, bytes(cursor.value())).tenant_id)
                prefix = int.from_bytes(bytes(cursor.key())[:16]) + 1
                more = prefix < 1 << 128 and cursor.set_range(prefix.to_bytes(16))
        return found

    # records ----------------------------------------------------------------------------
    def put(self, kind: str, records: Sequence[Record]) -> None:
        rows = [(_key(r.tenant_id, r.id), _pack(r)) for r in records]
        with self.env.begin(db=self._db(kind), write=True) as txn:
            for key, value in rows:
                txn.put(key, value)

    def _scan(self, txn: lmdb.Transaction, kind: str, tenant: str | None, where: Expr | None) -> Iterator[Record]:
        prefix = _tenant_prefix(tenant)
        cursor = txn.cursor()
        if not cursor.set_range(prefix):
            return
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                return
            record = _unpack(kind, bytes(value))
            if matches(where, record):
                yield record

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        with self.env.begin(db=self._db(kind)) as txn:
            found = sort_records(list(self._scan(txn, kind, tenant, where)), order)
        return found if limit is None else found[:limit]

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        with self.env.begin(db=self._db(kind)) as txn:
            values = [txn.get(_key(tenant, id)) for id in dict.fromkeys(ids)]
        return [_unpack(kind, value) for value in values if value is not None]

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self.env.begin(db=self._db(kind)) as txn:
            return sum(1 for _ in self._scan(txn, kind, tenant, where))

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self.env.begin(db=self._db(kind), write=True) as txn:
            doomed = [record.id for record in self._scan(txn, kind, tenant, where)]
            for id in doomed:
                txn.delete(_key(tenant, id))
        return len(doomed)

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        key = _key(tenant, id)
        with self.env.begin(db=self._db(kind), write=True) as txn:  # the one writer: read-modify-write is atomic
            value = txn.get(key)
            if value is None:
                return None
            record = apply_update(_unpack(kind, bytes(value)), set, inc)
            txn.put(key, _pack(record))
        return record

    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        """Look the parent up and write the child in one write transaction (LMDB has one writer at a
        time): racing saves form one chain."""
        with self.env.begin(db=self._db("checkpoint"), write=True) as txn:
            linked = link_parent(record, parent_ref(list(self._scan(txn, "checkpoint", record.tenant_id, latest)),
                                                    order))
            txn.put(_key(linked.tenant_id, linked.id), _pack(linked))
        return linked

    def search(self, kind: str, tenant: str | None, vector: Any, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        with self.env.begin(db=self._db(kind)) as txn:
            candidates = [r for r in self._scan(txn, kind, tenant, where) if r.embedding is not None]
        if not candidates:
            return []
        matrix = np.stack([r.embedding for r in candidates]).astype(np.float64)
        values = scores(matrix, np.asarray(vector, dtype=np.float64), self.params.metric)
        best = top_k(values, [r.id for r in candidates], k, self.params.metric)
        return [Hit(candidates[i], score) for i, score in best]

    def describe(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "lmdb": ".".join(map(str, lmdb.version()))}
