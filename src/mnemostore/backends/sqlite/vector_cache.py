"""A cached float32 matrix per (kind, tenant) for exact vector search, kept in step with the file.

A matrix is valid for a database state named by two numbers read in the search's own
snapshot: the kind's vector epoch (bumped by any delete or in-place vector change, in
any process) and the highest `seq` (every insert, and every replace of or by a row with a vector,
takes a higher one; a row without a vector before or after may be replaced in place). When
only `seq` moved, the rows past the old maximum are merged in: they are appended, and the
rows they replaced (same id) are marked dead; otherwise the matrix is rebuilt. Entries are
never changed where a reader could see it: appends write past every published row count,
and anything else builds new arrays. A matrix not in memory comes from its cache file
(`vector_files`) when one holds an earlier state of this snapshot, else from the rows.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.vectorsearch import normalise_rows
from .filter_memo import FilterMemo
from .id_column import IdColumn, LazyIds, id_hash

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .vector_file import Mapped
    from .vector_files import VectorFiles


Version = tuple[int, int]
"""(vector epoch, highest seq) of one kind."""

_lineages = itertools.count(1)
_BUCKET_BITS = 20
"""`Matrix.find` first keeps rows whose id hash shares its top bits with a wanted one's."""
Item = TypeVar("Item", bound="np.generic[Any]")


@dataclass(frozen=True)
class Matrix:
    """The vectors of one kind and tenant at one version; rows [0, n) are valid, less `dead`."""

    version: Version
    n: int
    seqs: npt.NDArray[np.int64]
    """Row seqs, ascending (capacity >= n)."""
    vectors: npt.NDArray[np.float32]
    """One row per record, unit length for cosine (capacity >= n)."""
    norms: npt.NDArray[np.float32]
    """Euclidean norm of each row of `vectors`, or an upper bound for cosine (capacity >= n)."""
    hashes: npt.NDArray[np.uint32]
    """`id_hash` of each row's id (capacity >= n)."""
    ids: IdColumn
    dead: npt.NDArray[np.int64]
    """Rows whose record was replaced since (its id is in a later row), in the order found."""
    lineage: int
    """Names this row order: matrices of one lineage agree on every row and dead row both hold."""
    token: str | None
    """The database's cache-file token read in this lineage's first snapshot (None: it had none)."""

    def rows(self) -> npt.NDArray[np.float32]:
        return self.vectors[: self.n]

    def row_norms(self) -> npt.NDArray[np.float32]:
        return self.norms[: self.n]

    @cached_property
    def live(self) -> npt.NDArray[np.intp] | None:
        """The rows to rank when nothing filters them: None for all of them (no row is dead)."""
        import numpy as np

        if not len(self.dead):
            return None
        keep = np.ones(self.n, dtype=bool)
        keep[self.dead] = False
        found: npt.NDArray[np.intp] = np.flatnonzero(keep)
        return found

    def positions_of(self, seqs: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """Matrix rows holding these seqs (seqs not in the matrix are left out)."""
        import numpy as np

        if self.n == 0:
            return np.zeros(0, dtype=np.intp)
        valid = self.seqs[: self.n]
        found = np.minimum(np.searchsorted(valid, seqs), self.n - 1)
        hit: npt.NDArray[np.intp] = found[valid[found] == seqs]
        return hit

    def find(self, ids: Sequence[str]) -> list[int]:
        """Live rows holding any of these ids."""
        import numpy as np

        if self.n == 0 or not ids:
            return []
        wanted = np.fromiter((id_hash(id_) for id_ in ids), dtype=np.uint32, count=len(ids))
        hashes = self.hashes[: self.n]
        if len(wanted) <= 32:  # np.isin compares with each
            candidates = np.flatnonzero(np.isin(hashes, wanted)).tolist()
        else:  # a table of hash prefixes first: np.isin would sort all n hashes
            buckets = np.zeros(1 << _BUCKET_BITS, dtype=bool)
            buckets[wanted >> (32 - _BUCKET_BITS)] = True
            near = np.flatnonzero(buckets[hashes >> (32 - _BUCKET_BITS)])
            candidates = near[np.isin(hashes[near], wanted)].tolist()
        if not candidates:
            return []
        names, dead = set(ids), set(self.dead.tolist())
        return [p for p in candidates if p not in dead and self.ids[p] in names]

    def last_live(self) -> int:
        """The highest live row, or -1."""
        dead = set(self.dead.tolist())
        return next((p for p in range(self.n - 1, -1, -1) if p not in dead), -1)


class IdsAt(LazyIds):
    """`ids[positions[i]]` without building the list (top_k reads only a few)."""

    def __init__(self, ids: Sequence[str], positions: npt.NDArray[np.intp]) -> None:
        self._ids = ids
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    def _at(self, index: int) -> str:
        return self._ids[int(self._positions[index])]


def read_version(conn: sqlite3.Connection, kind: str, table: str, epoch_table: str) -> Version:
    row = conn.execute(
        f"SELECT (SELECT epoch FROM {epoch_table} WHERE kind = ?), (SELECT max(seq) FROM {table})", (kind,)
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


class VectorCache:
    """Matrices for one open store, and their cache files if `files` is given; thread-safe."""

    def __init__(self, metric: str, files: VectorFiles | None = None) -> None:
        self.metric = metric
        self.files = files
        self._entries: dict[tuple[str, str], Matrix] = {}
        self._lock = threading.Lock()
        self.filters = FilterMemo()
        """The rows recent filters selected (`filter_memo`)."""
        _caches.add(self)
        self.rows_read = 0
        """Rows read from the database to build or merge matrices (a cold start from a file reads few)."""

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
        self.filters.clear()

    def settle(self) -> None:
        """After a search has its answer: start the cache-file writes it found due."""
        if self.files is not None:
            self.files.start()

    def close(self) -> None:
        """Forget the matrices; wait for cache-file writes under way."""
        self.clear()
        if self.files is not None:
            self.files.close()

    def matrix(self, conn: sqlite3.Connection, kind: str, table: str, tenant: str, version: Version) -> Matrix:
        """The matrix for this snapshot (the caller holds a read transaction on `conn`)."""
        key = (kind, tenant)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.version == version:
                return entry
            if entry is not None and entry.version[0] == version[0] and entry.version[1] < version[1]:
                fresh = self._merge(entry, conn, table, tenant, version)
            else:
                fresh = self._load(conn, kind, table, tenant, version) or self._build(conn, table, tenant, version)
            self._entries[key] = fresh
        if self.files is not None:
            self.files.offer(kind, tenant, fresh)
        return fresh

    # building ---------------------------------------------------------------------------
    def _fetch(self, conn: sqlite3.Connection, table: str, tenant: str, after: int
               ) -> tuple[list[int], list[str], list[bytes | None]]:
        """Rows of `tenant` past seq `after` (those without a vector too, for the merge)."""
        if after == 0:
            sql = f"SELECT seq, id, vec FROM {table} WHERE tenant = ? AND vec IS NOT NULL ORDER BY seq"
        else:  # `+tenant`: walk the rowid range, not every row of the tenant's index
            sql = f"SELECT seq, id, vec FROM {table} WHERE +tenant = ? AND seq > ? ORDER BY seq"
        rows = conn.execute(sql, (tenant,) if after == 0 else (tenant, after)).fetchall()
        self.rows_read += len(rows)
        if not rows:
            return [], [], []
        seqs, ids, blobs = zip(*rows, strict=True)
        return list(seqs), list(ids), list(blobs)

    def _prepare(self, blobs: list[bytes]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Vector blobs as matrix rows ready for the metric, and their norms."""
        import numpy as np

        if not blobs:
            return np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.float32)
        dimension = len(blobs[0]) // 4
        block = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dimension)
        if self.metric == "cosine":  # unit rows: 1 bounds every norm, which is all ranking needs
            return normalise_rows(block), np.ones(len(block), dtype=np.float32)
        block = block.copy()
        norms: npt.NDArray[np.float32] = np.sqrt(np.einsum("ij,ij->i", block, block))
        return block, norms

    def _build(self, conn: sqlite3.Connection, table: str, tenant: str, version: Version) -> Matrix:
        import numpy as np

        from .vector_files import read_token

        seqs, ids, blobs = self._fetch(conn, table, tenant, 0)
        vectors, norms = self._prepare(blobs)  # type: ignore[arg-type]
        return Matrix(version, len(ids), np.array(seqs, dtype=np.int64), vectors, norms, _hashes(ids),
                      IdColumn(tail=ids), np.zeros(0, dtype=np.int64), next(_lineages), read_token(conn))

    def _load(self, conn: sqlite3.Connection, kind: str, table: str, tenant: str, version: Version
              ) -> Matrix | None:
        """The matrix from its cache file, merged up to `version`; None unless the file is valid for it."""
        from .vector_files import read_token

        if self.files is None:
            return None
        token = read_token(conn)
        if token is None:
            return None
        mapped = self.files.load(kind, tenant, token, version)
        if mapped is None:
            return None
        header = mapped.header
        loaded = _from_mapped(mapped, token)
        if not self._agrees(conn, table, tenant, loaded, header.check_pos):
            self.files.distrust(kind, tenant, header)
            return None
        self.files.adopt(kind, tenant, loaded, header)
        return loaded if loaded.version == version else self._merge(loaded, conn, table, tenant, version)

    def _agrees(self, conn: sqlite3.Connection, table: str, tenant: str, loaded: Matrix, check: int) -> bool:
        """Whether the database still holds the file's check row (or replaced it later): a file
        left beside a database restored from a copy, or rolled back, would not."""
        import numpy as np

        if check < 0:
            return True
        id_ = loaded.ids[check]
        row = conn.execute(f"SELECT id, vec FROM {table} WHERE seq = ? AND tenant = ?",
                           (int(loaded.seqs[check]), tenant)).fetchone()
        if row is None:
            return conn.execute(f"SELECT 1 FROM {table} WHERE tenant = ? AND id = ? AND seq > ?",
                                (tenant, id_, loaded.version[1])).fetchone() is not None
        if row[0] != id_ or row[1] is None or len(row[1]) != 4 * loaded.vectors.shape[1]:
            return False
        prepared, _ = self._prepare([row[1]])
        return bool(np.allclose(prepared[0], loaded.vectors[check], rtol=1e-5, atol=1e-6))

    # merging ----------------------------------------------------------------------------
    def _merge(self, entry: Matrix, conn: sqlite3.Connection, table: str, tenant: str, version: Version) -> Matrix:
        """`entry` plus the rows written since it was built (inserts and replacements)."""
        import numpy as np

        seqs, ids, blobs = self._fetch(conn, table, tenant, entry.version[1])
        if not seqs:
            return replace(entry, version=version)
        stale = entry.find(ids)
        dead = np.concatenate([entry.dead, np.array(stale, dtype=np.int64)]) if stale else entry.dead
        added = [i for i, blob in enumerate(blobs) if blob is not None]
        block, norms = self._prepare([blobs[i] for i in added])  # type: ignore[misc]
        added_seqs = np.array([seqs[i] for i in added], dtype=np.int64)
        added_ids = [ids[i] for i in added]
        if len(dead) > entry.n // 8:
            return self._compact(replace(entry, dead=dead), version, added_seqs, block, norms, added_ids)
        if not added:
            return replace(entry, version=version, dead=dead)
        return self._append(replace(entry, dead=dead), version, added_seqs, block, norms, added_ids)

    def _compact(self, entry: Matrix, version: Version, seqs: npt.NDArray[np.int64],
                 block: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], ids: list[str]) -> Matrix:
        """New arrays without the dead rows, plus the added ones (a new lineage)."""
        import numpy as np

        keep = np.ones(entry.n, dtype=bool)
        keep[entry.dead] = False
        kept_ids = [entry.ids[p] for p in np.flatnonzero(keep).tolist()] + ids
        parts = [entry.rows()[keep], block] if len(block) else [entry.rows()[keep]]
        return Matrix(version, len(kept_ids), np.concatenate([entry.seqs[: entry.n][keep], seqs]),
                      np.concatenate(parts), np.concatenate([entry.row_norms()[keep], norms]),
                      np.concatenate([entry.hashes[: entry.n][keep], _hashes(ids)]), IdColumn(tail=kept_ids),
                      np.zeros(0, dtype=np.int64), next(_lineages), entry.token)

    def _append(self, entry: Matrix, version: Version, seqs: npt.NDArray[np.int64],
                block: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], ids: list[str]) -> Matrix:
        """Write new rows past `entry.n`, in place when capacity allows (readers see only [0, n))."""
        n, extra = entry.n, len(ids)
        vectors, all_seqs, all_norms, hashes = entry.vectors, entry.seqs, entry.norms, entry.hashes
        if n == 0:
            vectors, all_seqs, all_norms, hashes = block[:0], all_seqs[:0], all_norms[:0], hashes[:0]
        if len(vectors) < n + extra:
            capacity = max(n + extra, int(n * 1.5) + 16)
            vectors, all_seqs, all_norms, hashes = (
                _grown(vectors, n, capacity), _grown(all_seqs, n, capacity), _grown(all_norms, n, capacity),
                _grown(hashes, n, capacity))
        vectors[n : n + extra] = block
        all_seqs[n : n + extra] = seqs
        all_norms[n : n + extra] = norms
        hashes[n : n + extra] = _hashes(ids)
        return replace(entry, version=version, n=n + extra, seqs=all_seqs, vectors=vectors, norms=all_norms,
                       hashes=hashes, ids=entry.ids.extended(n, ids))


_caches: weakref.WeakSet[VectorCache] = weakref.WeakSet()


def _after_fork() -> None:
    """A forked child has only the forking thread: locks another thread held stay held, so renew them."""
    for cache in list(_caches):
        cache._lock = threading.Lock()
        cache.filters = FilterMemo()
        if cache.files is not None:
            cache.files.forked()


os.register_at_fork(after_in_child=_after_fork)


def _grown(array: npt.NDArray[Item], n: int, capacity: int) -> npt.NDArray[Item]:
    """A copy of `array[:n]` with room for `capacity` rows."""
    import numpy as np

    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:n] = array[:n]
    return grown


def _hashes(ids: list[str]) -> npt.NDArray[np.uint32]:
    import numpy as np

    return np.fromiter(map(id_hash, ids), dtype=np.uint32, count=len(ids))


def _from_mapped(mapped: Mapped, token: str) -> Matrix:
    header = mapped.header
    return Matrix((header.epoch, header.seq), header.n, mapped.seqs, mapped.vectors, mapped.norms, mapped.hashes,
                  IdColumn(mapped.id_bytes, mapped.offsets, header.n), mapped.dead, next(_lineages), token)
