"""A cached float32 matrix per (kind, tenant) for exact vector search, kept in step with the file.

A matrix is valid for a database state named by two numbers read in the search's own
snapshot: the kind's vector epoch (bumped by any delete or in-place vector change, in
any process) and the highest `seq` (every insert or replace takes a higher one). When
only `seq` moved, the rows past the old maximum are merged in; otherwise the matrix is
rebuilt. Entries are never changed where a reader could see it: appends write past
every published row count, and anything else builds new arrays.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, overload

from ...core.vectorsearch import normalise_rows

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


Version = tuple[int, int]
"""(vector epoch, highest seq) of one kind."""


@dataclass(frozen=True)
class Matrix:
    """The vectors of one kind and tenant at one version; rows [0, n) are valid."""

    version: Version
    n: int
    seqs: npt.NDArray[np.int64]
    """Row seqs, ascending (capacity >= n)."""
    vectors: npt.NDArray[np.float32]
    """One row per record, unit length for cosine (capacity >= n)."""
    norms: npt.NDArray[np.float32]
    """Euclidean norm of each row of `vectors`, or an upper bound for cosine (capacity >= n)."""
    ids: list[str]
    positions: dict[str, int]

    def rows(self) -> npt.NDArray[np.float32]:
        return self.vectors[: self.n]

    def row_norms(self) -> npt.NDArray[np.float32]:
        return self.norms[: self.n]

    def positions_of(self, seqs: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """Matrix rows holding these seqs (seqs not in the matrix are left out)."""
        import numpy as np

        if self.n == 0:
            return np.zeros(0, dtype=np.intp)
        valid = self.seqs[: self.n]
        found = np.minimum(np.searchsorted(valid, seqs), self.n - 1)
        hit: npt.NDArray[np.intp] = found[valid[found] == seqs]
        return hit


class IdsAt(Sequence[str]):
    """`ids[positions[i]]` without building the list (top_k reads only a few)."""

    def __init__(self, ids: list[str], positions: npt.NDArray[np.intp]) -> None:
        self._ids = ids
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self._ids[int(p)] for p in self._positions[index]]
        return self._ids[int(self._positions[index])]


def read_version(conn: sqlite3.Connection, kind: str, table: str, epoch_table: str) -> Version:
    row = conn.execute(
        f"SELECT (SELECT epoch FROM {epoch_table} WHERE kind = ?), (SELECT max(seq) FROM {table})", (kind,)
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


class VectorCache:
    """Matrices for one open store; thread-safe."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self._entries: dict[tuple[str, str], Matrix] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

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
                fresh = self._build(conn, table, tenant, version)
            self._entries[key] = fresh
            return fresh

    def _fetch(self, conn: sqlite3.Connection, table: str, tenant: str, after: int
               ) -> tuple[list[int], list[str], list[bytes | None]]:
        """Rows of `tenant` past seq `after` (those without a vector too, for the merge)."""
        vector_rows_only = "AND vec IS NOT NULL " if after == 0 else ""
        rows = conn.execute(
            f"SELECT seq, id, vec FROM {table} WHERE tenant = ? AND seq > ? {vector_rows_only}ORDER BY seq",
            (tenant, after),
        ).fetchall()
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

        seqs, ids, blobs = self._fetch(conn, table, tenant, 0)
        keep = [i for i, blob in enumerate(blobs) if blob is not None]
        vectors, norms = self._prepare([blobs[i] for i in keep])  # type: ignore[misc]
        kept_ids = [ids[i] for i in keep]
        return Matrix(version, len(keep), np.array([seqs[i] for i in keep], dtype=np.int64), vectors, norms,
                      kept_ids, {id_: i for i, id_ in enumerate(kept_ids)})

    def _merge(self, entry: Matrix, conn: sqlite3.Connection, table: str, tenant: str, version: Version) -> Matrix:
        """`entry` plus the rows written since it was built (inserts and replacements)."""
        import numpy as np

        seqs, ids, blobs = self._fetch(conn, table, tenant, entry.version[1])
        if not seqs:
            return replace(entry, version=version)
        stale = [entry.positions[id_] for id_ in ids if id_ in entry.positions]
        added = [i for i, blob in enumerate(blobs) if blob is not None]
        block, norms = self._prepare([blobs[i] for i in added])  # type: ignore[misc]
        added_seqs = np.array([seqs[i] for i in added], dtype=np.int64)
        added_ids = [ids[i] for i in added]
        if stale:
            keep = np.ones(entry.n, dtype=bool)
            keep[stale] = False
            old_ids = [id_ for id_, kept in zip(entry.ids[: entry.n], keep.tolist(), strict=True) if kept]
            all_ids = old_ids + added_ids
            vectors = np.concatenate([entry.rows()[keep], block]) if len(block) else entry.rows()[keep]
            all_norms = np.concatenate([entry.row_norms()[keep], norms])
            all_seqs = np.concatenate([entry.seqs[: entry.n][keep], added_seqs])
            return Matrix(version, len(all_ids), all_seqs, vectors, all_norms, all_ids,
                          {id_: i for i, id_ in enumerate(all_ids)})
        if not added:
            return replace(entry, version=version)
        return self._append(entry, version, added_seqs, block, norms, added_ids)

    def _append(self, entry: Matrix, version: Version, seqs: npt.NDArray[np.int64],
                block: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], ids: list[str]) -> Matrix:
        """Write new rows past `entry.n`, in place when capacity allows (readers see only [0, n))."""
        import numpy as np

        n, extra = entry.n, len(ids)
        vectors, all_seqs, all_norms = entry.vectors, entry.seqs, entry.norms
        if n == 0:
            vectors, all_seqs, all_norms = block[:0], all_seqs[:0], all_norms[:0]
        if len(vectors) < n + extra:
            capacity = max(n + extra, int(n * 1.5) + 16)
            grown = np.empty((capacity, block.shape[1]), dtype=np.float32)
            grown[:n] = vectors[:n]
            grown_seqs = np.empty(capacity, dtype=np.int64)
            grown_seqs[:n] = all_seqs[:n]
            grown_norms = np.empty(capacity, dtype=np.float32)
            grown_norms[:n] = all_norms[:n]
            vectors, all_seqs, all_norms = grown, grown_seqs, grown_norms
        vectors[n : n + extra] = block
        all_seqs[n : n + extra] = seqs
        all_norms[n : n + extra] = norms
        all_ids = entry.ids
        del all_ids[n:]
        all_ids.extend(ids)
        positions = entry.positions
        positions.update((id_, n + i) for i, id_ in enumerate(ids))
        return Matrix(version, n + extra, all_seqs, vectors, all_norms, all_ids, positions)
