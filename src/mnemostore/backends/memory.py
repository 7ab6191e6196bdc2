"""The in-memory reference backend: the simplest correct implementation, the suite's oracle.

`memory://` is a fresh store; `memory://NAME` is shared by every open of NAME in this
process (so two Store instances can exercise concurrency).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..core import codec
from ..core.capabilities import Capability
from ..core.filters import Expr, matches
from ..core.protocol import Backend, Hit, OrderKey, apply_update
from ..core.query import sort_records
from ..core.records import Checkpoint, Record
from ..core.vectors import Vector
from ..core.vectorsearch import scores, top_k
from ..migrations.locking import MigrationLock, ProcessLock

_Rows = dict[tuple[str | None, str], tuple[bytes, bytes | None]]


class _Data:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.kinds: dict[str, _Rows] = {}
        self.meta: dict[str, Any] = {}
        self.migration_lock = ProcessLock()


_SHARED: dict[str, _Data] = {}
_SHARED_LOCK = threading.Lock()


class MemoryBackend(Backend):
    name: ClassVar[str] = "memory"
    schemes: ClassVar[tuple[str, ...]] = ("memory",)
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.TRANSACTIONS,
        Capability.ATOMIC_UPDATE,
        Capability.FILTER_RANGE,
        Capability.FILTER_METADATA,
        Capability.VECTOR_COSINE,
        Capability.VECTOR_DOT,
        Capability.VECTOR_L2,
        Capability.VECTOR_FILTERED,
        Capability.LARGE_STATE,
        Capability.CHECKPOINT_CHAIN,
    })

    @property
    def _name(self) -> str:
        return (self.url.host or "") + self.url.path.strip("/")

    def exists(self) -> bool:
        """A named store exists once opened in this process; `memory://` is always a fresh, empty one."""
        return not self._name or self._name in _SHARED

    def open(self) -> None:
        name = self._name
        if name:
            with _SHARED_LOCK:
                self._data = _SHARED.setdefault(name, _Data())
        else:
            self._data = _Data()

    def close(self) -> None:
        pass

    def drop(self) -> None:
        """Forget a named store (it lives as long as the process otherwise); `memory://` has nothing to drop."""
        with _SHARED_LOCK:
            _SHARED.pop(self._name, None)

    def read_meta(self, key: str) -> Any:
        return self._data.meta.get(key)

    def write_meta(self, key: str, value: Any) -> None:
        self._data.meta[key] = value

    def migration_lock(self) -> MigrationLock:
        return self._data.migration_lock

    def tenants(self, kind: str) -> list[str | None]:
        with self._data.lock:
            return list({tenant for tenant, _ in self._rows(kind)})

    def _rows(self, kind: str) -> _Rows:
        return self._data.kinds.setdefault(kind, {})

    def _scan(self, kind: str, tenant: str | None, where: Expr | None) -> list[Record]:
        found = []
        for (row_tenant, _), (document, vector) in self._rows(kind).items():
            if row_tenant != tenant:
                continue
            record = codec.decode(kind, document, vector)
            if matches(where, record):
                found.append(record)
        return found

    def put(self, kind: str, records: Sequence[Record]) -> None:
        encoded = {(r.tenant_id, r.id): (codec.encode_document(r), codec.encode_vector(r)) for r in records}
        with self._data.lock:
            self._rows(kind).update(encoded)

    def put_keeping_created(self, kind: str, records: Sequence[Record]) -> None:
        """The default read and put, under the store's lock: one step."""
        with self._data.lock:
            super().put_keeping_created(kind, records)

    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        """The default lookup and put, under the store's lock: racing saves form one chain."""
        with self._data.lock:
            return super().append_checkpoint(record, latest, order)

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        with self._data.lock:
            found = sort_records(self._scan(kind, tenant, where), order)
        return found if limit is None else found[:limit]

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._data.lock:
            return len(self._scan(kind, tenant, where))

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._data.lock:
            doomed = self._scan(kind, tenant, where)
            rows = self._rows(kind)
            for record in doomed:
                del rows[(tenant, record.id)]
        return len(doomed)

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        with self._data.lock:
            rows = self._rows(kind)
            row = rows.get((tenant, id))
            if row is None:
                return None
            record = apply_update(codec.decode(kind, *row), set, inc)
            rows[(tenant, id)] = (codec.encode_document(record), codec.encode_vector(record))
            return record

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        import numpy as np

        with self._data.lock:
            candidates = [r for r in self._scan(kind, tenant, where) if r.embedding is not None]
        if not candidates:
            return []
        matrix = np.stack([r.embedding for r in candidates]).astype(np.float64)
        values = scores(matrix, np.asarray(vector, dtype=np.float64), self.params.metric)  # type: ignore[arg-type]
        best = top_k(values, [r.id for r in candidates], k, self.params.metric)
        return [Hit(candidates[i], score) for i, score in best]
