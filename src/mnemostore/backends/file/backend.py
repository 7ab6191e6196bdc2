"""`FileBackend`: a directory a person can read, safe under crashes and several processes.

Layout of the directory:

- `format.json`: marks the directory as a store and names the format version;
- `meta.json`: the store's small persistent values (`read_meta`/`write_meta`), replaced atomically;
- `<kind>.jsonl`: one append log per kind (see `log.py`): a header, then one checksummed
  JSON line per batch (`{"op": "put", "records": [...]}` or `{"op": "delete", ...}`);
- `lock`: the flock target; readers share it, writers hold it exclusively;
- `migrate.lock`: the migration runner's lock (`FileLock`), held while a migration runs.

Compaction rewrites a log with only its live records (temp file, fsync, rename) when
more than `compact_ratio` of it is dead, or when `FileBackend.compact()` is called.

Every operation first catches up with what other processes appended (or reloads the
log if compaction replaced it), then answers from an in-memory index. A write appends
one line and fsyncs it before returning, so its cost does not grow with the store.
"""

from __future__ import annotations

import os
import shutil
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ...core.capabilities import Capability
from ...core.declarations import KindChange
from ...core.errors import BackendError, ConfigError, SchemaMismatch, StoreClosed
from ...core.filters import Expr, matches
from ...core.flocks import Flock
from ...core.kinds import kind_names, record_type
from ...core.private_files import make_directories
from ...core.protocol import Backend, Hit, OrderKey, apply_update, link_parent
from ...core.query import parent_ref, sort_records
from ...core.records import Checkpoint, Record
from ...core.url import StoreURL
from ...core.vectors import Vector
from ...core.vectorsearch import prepare_query, scores, top_k
from ...migrations.locking import FileLock, MigrationLock
from .convert import detached, to_json
from .files import replace_atomically
from .index import KindIndex
from .location import directory_from_url
from .log import FORMAT, FORMAT_VERSION, LogFile, encode_line, line_length

FORMAT_FILE = "format.json"
META_FILE = "meta.json"
LOCK_FILE = "lock"
MIGRATE_LOCK_FILE = "migrate.lock"


class FileOptions(BaseModel):
    """Options of the file backend (keyword arguments or `?name=value` in the URL)."""

    model_config = ConfigDict(extra="forbid")

    fsync: bool = True
    """fsync every batch before acknowledging it; off trades durability on power loss for speed
    (a killed process still never leaves a half batch)."""
    compact_ratio: float = Field(default=0.5, gt=0.0, lt=1.0)
    """Rewrite a kind's log when this fraction of it is dead (replaced or deleted records)."""
    compact_min_bytes: int = Field(default=1 << 20, ge=0)
    """Never compact a log smaller than this."""
    vector_encoding: Literal["list", "base64"] = "list"
    """How new lines write embeddings: readable lists of numbers, or base64 float32 (half the
    size, ~3x faster to load). Logs may mix both; compaction rewrites in the current choice."""


class _Kind:
    """One kind's log and index."""

    def __init__(self, directory: Path, kind: str) -> None:
        self.log = LogFile(directory / f"{kind}.jsonl", kind)
        self.index = KindIndex(record_type(kind))


class FileBackend(Backend):
    name: ClassVar[str] = "file"
    schemes: ClassVar[tuple[str, ...]] = ("file",)
    options_model: ClassVar[type[BaseModel]] = FileOptions
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.PERSISTENT,
        Capability.TRANSACTIONS,
        Capability.CRASH_SAFE,
        Capability.ATOMIC_UPDATE,
        Capability.MULTI_PROCESS,
        Capability.FILTER_RANGE,
        Capability.FILTER_METADATA,
        Capability.VECTOR_COSINE,
        Capability.VECTOR_DOT,
        Capability.VECTOR_L2,
        Capability.VECTOR_FILTERED,
        Capability.LARGE_STATE,
        Capability.CHECKPOINT_CHAIN,
    })

    def __init__(self, url: StoreURL, options: BaseModel) -> None:
        super().__init__(url, options)
        assert isinstance(options, FileOptions)
        self._options = options
        self.directory = directory_from_url(url)
        self._lock = Flock(self.directory / LOCK_FILE)
        self._mutex = threading.RLock()
        self._kinds: dict[str, _Kind] = {}
        self._pid = os.getpid()
        self._open = False

    # lifecycle -----------------------------------------------------------------
    def exists(self) -> bool:
        """The directory holds a store's `meta.json` (written the first time a store is opened)."""
        return (self.directory / META_FILE).is_file()

    def drop(self) -> None:
        """Remove the store's directory: it holds nothing but the store (`open` refuses a foreign one)."""
        if self.directory.is_dir():
            shutil.rmtree(self.directory)

    def open(self) -> None:
        directory = self.directory
        try:
            make_directories(directory)
        except FileExistsError:
            raise ConfigError(f"{directory} exists and is not a directory; point the file URL at a directory") from None
        except OSError as exc:
            raise ConfigError(f"cannot create the store directory {directory}: {exc}") from None
        self._refuse_foreign_directory()
        try:
            self._lock.open()
        except OSError as exc:
            raise ConfigError(f"cannot open the lock file in {directory}: {exc}") from None
        with self._lock.exclusive():
            self._check_format()
        self._open = True

    def close(self) -> None:
        with self._mutex:
            for state in self._kinds.values():
                state.log.close()
            self._kinds.clear()
            self._lock.close()
            self._open = False

    def describe(self) -> dict[str, Any]:
        logs = {}
        for path in sorted(self.directory.glob("*.jsonl")):
            logs[path.stem] = path.stat().st_size
        return {"directory": str(self.directory), "fsync": self._options.fsync, "log_bytes": logs}

    def _refuse_foreign_directory(self) -> None:
        # List first, then look for format.json: a store creates format.json before any other
        # file, so a concurrent creator's files are never mistaken for foreign ones.
        names = set(os.listdir(self.directory))
        if FORMAT_FILE in names or (self.directory / FORMAT_FILE).exists():
            return
        foreign = sorted(names - {LOCK_FILE, MIGRATE_LOCK_FILE, FORMAT_FILE + ".tmp"})
        if foreign:
            raise ConfigError(
                f"{self.directory} is not empty ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}) "
                f"and is not a mnemostore file store (it has no {FORMAT_FILE}); "
                "point the file URL at a new or empty directory")

    def _check_format(self) -> None:
        path = self.directory / FORMAT_FILE
        try:
            found = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            replace_atomically(path, [[orjson.dumps({"format": FORMAT, "version": FORMAT_VERSION})]])
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            raise BackendError(f"cannot read {path}: {exc}") from exc
        if not isinstance(found, dict) or found.get("format") != FORMAT:
            raise ConfigError(f"{path} does not describe a mnemostore file store")
        if found.get("version") != FORMAT_VERSION:
            raise SchemaMismatch(f"{self.directory} uses file store format {found.get('version')}; this "
                                 f"mnemostore reads format {FORMAT_VERSION} (upgrade mnemostore)")

    # locking and catching up ------------------------------------------------------
    def _guard(self) -> None:
        if not self._open:
            raise StoreClosed(f"the file store at {self.directory} is closed")
        if os.getpid() != self._pid:  # forked: the inherited lock description is shared with the parent
            self._pid = os.getpid()
            self._mutex = threading.RLock()
            self._lock.reopen()
            for state in self._kinds.values():
                state.log.close()
            self._kinds.clear()

    @contextmanager
    def _reading(self, kind: str) -> Iterator[_Kind]:
        self._guard()
        with self._mutex, self._lock.shared():
            yield self._caught_up(kind, writer=False)

    @contextmanager
    def _writing(self, kind: str) -> Iterator[_Kind]:
        self._guard()
        with self._mutex, self._lock.exclusive():
            yield self._caught_up(kind, writer=True)

    def _caught_up(self, kind: str, writer: bool) -> _Kind:
        """The kind's state after reading what other processes appended since last time."""
        state = self._kinds.get(kind)
        if state is None:
            state = self._kinds[kind] = _Kind(self.directory, kind)
        log, index = state.log, state.index
        status = log.status()
        if status == "replaced":
            index.clear()
            if not log.open():
                log.close()
                status = "missing"
            else:
                status = "grown"
        if status == "grown":
            for entry, size in log.read_new():
                index.apply(entry, size)
        if writer and log.fd is not None:
            log.truncate_torn(self._options.fsync)
        return state

    def _append(self, state: _Kind, parts: list[bytes | memoryview]) -> None:
        """Append one line to the kind's log, creating the log (atomically, with its header) first."""
        if state.log.fd is None:
            state.log.rewrite((), 0, self._options.fsync)
        state.log.append(parts, self._options.fsync)

    # meta ------------------------------------------------------------------------
    def read_meta(self, key: str) -> Any:
        self._guard()
        return self._meta().get(key)

    def write_meta(self, key: str, value: Any) -> None:
        """Set `key` (None removes it), replacing meta.json atomically."""
        self._guard()
        with self._mutex, self._lock.exclusive():
            meta = self._meta()
            if value is None:
                if key not in meta:
                    return
                del meta[key]
            else:
                meta[key] = value
            replace_atomically(self.directory / META_FILE, [[orjson.dumps(meta, option=orjson.OPT_INDENT_2)]],
                               self._options.fsync)

    def _meta(self) -> dict[str, Any]:
        path = self.directory / META_FILE
        try:
            found = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, orjson.JSONDecodeError) as exc:
            raise BackendError(f"cannot read {path}: {exc}") from exc
        if not isinstance(found, dict):
            raise BackendError(f"{path} does not hold a JSON object")
        return found

    # migrations ------------------------------------------------------------------
    def migration_lock(self) -> MigrationLock:
        """`migrate.lock` beside the store's `lock`: readers and writers go on while a runner waits."""
        return FileLock(self.directory / MIGRATE_LOCK_FILE)

    def evolve_kind(self, change: KindChange) -> None:
        """The kind's index is built again from its log (it holds records decoded as the kind was
        declared before), then every record is put again (`Backend.evolve_kind`)."""
        with self._mutex:
            state = self._kinds.pop(change.kind, None)
            if state is not None:
                state.log.close()
        super().evolve_kind(change)

    def tenants(self, kind: str) -> list[str | None]:
        """The tenants of the kind's index (built from its log anyway), skipping emptied ones."""
        record_type(kind)
        with self._reading(kind) as state:
            return [tenant for tenant, rows in state.index.tenants.items() if rows]

    # records ---------------------------------------------------------------------
    def put(self, kind: str, records: Sequence[Record]) -> None:
        if not records:
            return
        kept = [detached(r) for r in records]
        with self._writing(kind) as state:
            self._append_put(state, kept)

    def _append_put(self, state: _Kind, records: Sequence[Record]) -> None:
        parts = encode_line({"op": "put", "records": [to_json(r, self._options.vector_encoding) for r in records]})
        self._append(state, parts)
        state.index.put(records, line_length(parts))
        self._maybe_compact(state)

    def get(self, kind: str, tenant: str | None, ids: Sequence[str], vectors: bool = True) -> list[Record]:
        with self._reading(kind) as state:
            rows = state.index.rows(tenant)
            found = [rows[i].record for i in ids if i in rows]
            return [detached(r, vectors) for r in found]

    def query(self, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
              limit: int | None, vectors: bool = True) -> list[Record]:
        with self._reading(kind) as state:
            found = sort_records(state.index.select(tenant, where), order)
            if limit is not None:
                found = found[:limit]
            return [detached(r, vectors) for r in found]

    def count(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._reading(kind) as state:
            if where is None:
                return len(state.index.rows(tenant))
            return len(state.index.select(tenant, where))

    def delete(self, kind: str, tenant: str | None, where: Expr | None) -> int:
        with self._writing(kind) as state:
            ids = [r.id for r in state.index.select(tenant, where)]
            if ids:
                parts = encode_line({"op": "delete", "tenant": tenant, "ids": ids})
                self._append(state, parts)
                state.index.delete(tenant, ids)
                self._maybe_compact(state)
            return len(ids)

    def update(self, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
               inc: Mapping[str, int | float]) -> Record | None:
        with self._writing(kind) as state:
            row = state.index.rows(tenant).get(id)
            if row is None:
                return None
            record = detached(apply_update(row.record, set, inc))
            self._append_put(state, [record])
            return detached(record)

    def append_checkpoint(self, record: Checkpoint, latest: Expr, order: Sequence[OrderKey]) -> Checkpoint:
        """Look the parent up and append the child under the exclusive lock: racing saves, from
        threads or processes, form one chain."""
        with self._writing("checkpoint") as state:
            linked = link_parent(record, parent_ref(state.index.select(record.tenant_id, latest), order))
            self._append_put(state, [detached(linked)])
        return linked

    def search(self, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
               vectors: bool = True) -> list[Hit]:
        import numpy as np

        metric = self.params.metric
        with self._reading(kind) as state:
            cached = state.index.matrix(tenant, metric)
            if cached is None:
                return []
            records, ids, matrix = cached.records, cached.ids, cached.matrix
            if where is not None:
                keep = [i for i, r in enumerate(records) if matches(where, r)]
                if not keep:
                    return []
                records = [records[i] for i in keep]
                ids = [ids[i] for i in keep]
                matrix = matrix[np.asarray(keep)]
            values = scores(matrix, prepare_query(vector, metric), metric, prepared=True)
            best = top_k(values, ids, k, metric)
            return [Hit(detached(records[i], vectors), score) for i, score in best]

    # compaction ------------------------------------------------------------------
    def compact(self, kind: str | None = None) -> dict[str, tuple[int, int]]:
        """Rewrite the logs (of `kind`, or every kind) to hold only live records.

        Returns {kind: (bytes before, bytes after)}. Safe while other processes use the
        store: it runs under the exclusive lock and they reload the new file.
        """
        if kind is not None:
            record_type(kind)
        kinds = [kind] if kind is not None else list(kind_names())
        result: dict[str, tuple[int, int]] = {}
        for name in kinds:
            with self._writing(name) as state:
                if state.log.fd is None:
                    continue
                before = state.log.end
                self._compact(state)
                result[name] = (before, state.log.end)
        return result

    def _maybe_compact(self, state: _Kind) -> None:
        size = state.log.end
        if size < self._options.compact_min_bytes:
            return
        garbage = size - state.log.header_size - state.index.live_bytes
        if garbage > self._options.compact_ratio * size:
            try:
                self._compact(state)
            except BackendError as exc:  # the write itself succeeded; don't report it as failed
                warnings.warn(f"automatic compaction of {state.log.path} failed, will retry later: {exc}",
                              RuntimeWarning, stacklevel=4)

    def _compact(self, state: _Kind) -> None:
        index = state.index
        sizes: list[int] = []

        def lines() -> Iterator[list[bytes | memoryview]]:
            for row in index.all_rows():
                parts = encode_line({"op": "put", "records": [to_json(row.record, self._options.vector_encoding)]})
                sizes.append(line_length(parts))
                yield parts

        state.log.rewrite(lines(), state.log.generation + 1, self._options.fsync)
        index.resized(iter(sizes))
