"""Cache files beside the database, so the first search after `open` maps its matrix instead of rebuilding it.

Each (kind, tenant) matrix of `MIN_ROWS` rows or more is kept in
`<database>-vectors/<kind>-<sha256 of the tenant>.vec` (owner-only; format in `vector_file`),
stamped with the database's token (a random value in the meta table, replaced by every
layout migration) and the version it holds. A cold search uses a file only if token,
metric, checksums and version fit its snapshot and the file's check row still matches the
database, then merges what changed since, as for a matrix in memory: a file can be stale,
never wrong. A background thread keeps files close to the matrices in memory: it writes
one after a rebuild and, once a file lags `LAG_ROWS` seqs behind, appends what this
process merged since (or writes a new one). Failing to write (a read-only directory, a
full disk) only makes the next cold start slower. Deleting the directory is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from ...core.errors import MnemostoreError
from ...core.private_files import make_directories
from . import vector_file
from .schema import META_TABLE
from .vector_file import PAGE, Header, Mapped, Rows

if TYPE_CHECKING:
    from .connections import Connections
    from .vector_cache import Matrix, Version

VECTORS_SUFFIX = "-vectors"
"""The cache directory beside the database: `<database>-vectors`."""
TOKEN_KEY = "sqlite.vector_files"
"""Meta key of the token that names the database's current content lineage for cache files."""
MIN_ROWS = 1024
"""Smaller matrices are rebuilt from their rows (about 10 ms or less) rather than kept in files."""
LAG_ROWS = 512
"""A file more seqs than this behind a process's matrix is brought up to date: a cold start then
merges at most about this many rows (a few ms), unless they came from processes that never search."""


def read_token(conn: sqlite3.Connection) -> str | None:
    row = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (TOKEN_KEY,)).fetchone()
    return None if row is None else str(orjson.loads(row[0]))


def replace_token(conn: sqlite3.Connection) -> None:
    """Give the database a new token: no cache file written before is used again (layout migrations)."""
    conn.execute(f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES (?, ?)",
                 (TOKEN_KEY, orjson.dumps(secrets.token_hex(16)).decode()))


def tenant_digest(tenant: str) -> bytes:
    return hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Mark:
    """What this process last did with one file."""

    lineage: int
    version: Version
    header: Header | None
    """The file's header while the file holds a prefix of `lineage` (as this process wrote or read it)."""


class VectorFiles:
    """The cache files of one database: loading them, and a writer thread keeping them current."""

    def __init__(self, database: Path, db: Connections, metric: str) -> None:
        self.directory = database.with_name(database.name + VECTORS_SUFFIX)
        self.metric = metric
        self._db = db
        self._marks: dict[tuple[str, str], Mark] = {}
        self._distrusted: dict[tuple[str, str], Header] = {}
        self._pending: dict[tuple[str, str], Matrix] = {}
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()

    def path(self, kind: str, tenant: str) -> Path:
        return self.directory / f"{kind}-{tenant_digest(tenant).hex()[:32]}.vec"

    def load(self, kind: str, tenant: str, token: str, version: Version) -> Mapped | None:
        """The file of (kind, tenant) mapped, if it is whole, made for this database and metric, and
        holds a state of the database up to `version` (same vector epoch, no higher seq)."""
        def wanted(header: Header) -> bool:
            return self._ours(header, kind, tenant, token) and header.epoch == version[0] and \
                header.seq <= version[1]

        found = vector_file.load(self.path(kind, tenant), wanted)
        if isinstance(found, Header):  # a whole header over damaged data
            self.distrust(kind, tenant, found)
            return None
        return found

    def distrust(self, kind: str, tenant: str, header: Header) -> None:
        """The file under `header` must not be used: the next write replaces it, however current it looks."""
        with self._lock:
            self._distrusted[kind, tenant] = header

    def _ours(self, header: Header, kind: str, tenant: str, token: str) -> bool:
        return (header.token, header.kind, header.tenant, header.metric) == \
            (token, kind[:64], tenant_digest(tenant), self.metric)  # kinds are ASCII identifiers

    def adopt(self, kind: str, tenant: str, matrix: Matrix, header: Header) -> None:
        """Record that the file holds `matrix` (just loaded from it)."""
        with self._lock:
            self._marks[kind, tenant] = Mark(matrix.lineage, matrix.version, header)

    def offer(self, kind: str, tenant: str, matrix: Matrix) -> None:
        """Note a write to do if `matrix` is new to the file or the file lags far behind it (cheap
        otherwise); `start` begins it, once the search that made the matrix has its answer."""
        key = (kind, tenant)
        with self._lock:
            mark = self._marks.get(key)
            if mark is not None and mark.lineage == matrix.lineage and \
                    matrix.version[1] - mark.version[1] < LAG_ROWS:
                return
            if matrix.n < MIN_ROWS and (mark is None or mark.header is None):
                return
            self._pending[key] = matrix

    def start(self) -> None:
        """Start the writer thread if writes are waiting and it is not running."""
        if not self._pending:
            return
        with self._lock:
            if self._pending and (self._writer is None or not self._writer.is_alive()):
                self._writer = threading.Thread(target=self._write_pending, name="mnemostore-vector-files")
                self._writer.start()

    def forked(self) -> None:
        """In a forked child: the parent's writer thread is not here, and its lock may be held."""
        self._lock = threading.Lock()
        self._pending.clear()
        self._writer = None

    def close(self) -> None:
        """Wait until the writes scheduled so far are done."""
        self.start()
        with self._lock:
            writer = self._writer
        if writer is not None and writer is not threading.current_thread():
            writer.join()

    # the writer thread ------------------------------------------------------------------
    def _write_pending(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._writer = None
                    return
                key = next(iter(self._pending))
                matrix = self._pending.pop(key)
                mark = self._marks.get(key)
            try:
                header = self._sync(key, matrix, mark)
            except (OSError, MnemostoreError, sqlite3.Error):
                header = None  # a slower next cold start, nothing worse
            with self._lock:
                self._marks[key] = Mark(matrix.lineage, matrix.version, header)

    def _sync(self, key: tuple[str, str], matrix: Matrix, mark: Mark | None) -> Header | None:
        """Bring the file of `key` up to `matrix`: the file's header afterwards if it holds a prefix of
        `matrix`'s lineage, None if it was left as it was."""
        kind, tenant = key
        path = self.path(kind, tenant)
        if matrix.n < max(MIN_ROWS, 1):  # rebuilt quickly from rows: a file would only go stale
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return None
        token = matrix.token or self._new_token()
        if token is None:
            return None
        current = vector_file.read_header(path)
        with self._lock:
            distrusted = self._distrusted.get(key)
        if mark is not None and mark.header is not None and mark.lineage == matrix.lineage and current == mark.header:
            appended = vector_file.append(path, current, _rows(matrix, current.n, current.id_bytes, current.dead_n),
                                          matrix.version, matrix.last_live())
            if appended is not None:
                return appended
            current = vector_file.read_header(path)  # changed meanwhile, or the rows do not fit
        if current is not None and current != distrusted and self._ours(current, kind, tenant, token) and \
                (current.epoch, current.seq) > (matrix.version[0], matrix.version[1] - LAG_ROWS):
            return None  # another process keeps it about as current (or more)
        make_directories(self.directory)
        _remove_abandoned(self.directory, path.name)
        rows = _rows(matrix, 0, 0, 0)
        return vector_file.write_new(path, self._template(matrix, kind, tenant, token, len(rows.id_bytes)), rows)

    def _template(self, matrix: Matrix, kind: str, tenant: str, token: str, id_bytes: int) -> Header:
        """The identity and capacities of a new file for `matrix` (writing fills in counts and checksums)."""
        n = matrix.n
        capacity = n + max(n // 4, MIN_ROWS)
        room = (capacity - n) * 2 * max(16, id_bytes // max(n, 1))
        return Header(0, b"", token, kind, tenant_digest(tenant), self.metric, matrix.vectors.shape[1], capacity,
                      -(-(id_bytes + room) // PAGE) * PAGE, max(MIN_ROWS, capacity // 8), 0, 0, 0,
                      matrix.version[0], matrix.version[1], matrix.last_live(), 0, 0, 0, 0, 0, 0, 0)

    def _new_token(self) -> str | None:
        """A token for a database that has none; None if another process set one since the matrix's
        snapshot (a migration may have changed the data under it)."""
        token = secrets.token_hex(16)

        def work(conn: sqlite3.Connection) -> bool:
            return conn.execute(f"INSERT OR IGNORE INTO {META_TABLE} (key, value) VALUES (?, ?)",
                                (TOKEN_KEY, orjson.dumps(token).decode())).rowcount == 1

        return token if self._db.write(work) else None


def _rows(matrix: Matrix, start: int, id_start: int, dead_start: int) -> Rows:
    """`matrix`'s rows [start, n) and dead rows [dead_start, ...), ids packed from offset `id_start`."""
    id_bytes, id_ends = matrix.ids.packed(start, matrix.n, id_start)
    end = matrix.n
    return Rows(matrix.vectors[start:end], matrix.seqs[start:end], matrix.norms[start:end],
                matrix.hashes[start:end], id_ends, id_bytes, matrix.dead[dead_start:])


def _remove_abandoned(directory: Path, name: str) -> None:
    """Delete temporary files of `name` left by processes that died while writing them."""
    for leftover in directory.glob(f".{name}.*.tmp"):
        pid = leftover.name[len(name) + 2:].split(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
