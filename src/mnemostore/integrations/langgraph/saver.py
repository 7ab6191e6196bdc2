"""`MnemostoreSaver`: a LangGraph checkpointer storing its checkpoints in any mnemostore `Store`."""

from __future__ import annotations

import builtins
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import aclosing
from types import MappingProxyType
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base import Checkpoint as LGCheckpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...core.async_store import AsyncStore
from ...core.calls import iterate_sync
from ...core.capabilities import Capability
from ...core.errors import ValidationError
from ...core.filters import Expr, F, all_of, bind
from ...core.kinds import register_kind
from ...core.records import Checkpoint as Record
from ...core.shapes import Param, QueryShape
from ...core.store import Store
from ...kinds.langgraph_ids import (
    checkpoint_writes_prefix,
    checkpoints_writes_range,
    namespace_writes_prefix,
    prefix_range,
    thread_writes_prefix,
)
from ...kinds.langgraph_writes import LangGraphWrite
from . import mapping
from .bridge import Bridge
from .mapping import Stored
from .reads import FlatReads, Reads, awaited_reads_for, reads_for

_S = TypeVar("_S", bound=Stored)

_CHUNK = 200
"""Records per batch when a call touches many (writes lookup, copy, delete)."""
_LIST_PAGE = 25
"""Checkpoints per page of `list` when its filter is the store's: a page of 200 large checkpoints held
~19 MB at once and cost ~20% more CPU per item (cache misses) than pages of 25 (~1 us of statements each)."""


class MnemostoreSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints and their metadata as mnemostore checkpoint records, pending writes as
    `LangGraphWrite` records (`mapping` gives the layout).

    Works on every backend; filters go to the backend when it declares the capability and are
    re-checked here. Give it a `Store` (`mnemostore.open`) or an `AsyncStore` (`open_async`): each
    method runs one coroutine over the store (see `bridge`), except that on a sync `Store` the sync
    writes call the backend straight; on sqlite and postgres, a `Store`'s sync reads and any store's async
    reads read its rows flat (`reads`).
    """

    def __init__(self, store: Store | AsyncStore, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        register_kind(LangGraphWrite)  # registered on import, unless a migration run unregistered it since
        self.store = store
        self._bridge = Bridge(store, type(self).__name__)
        self._reads = reads_for(store)
        """The reads of the sync methods (`reads.reads_for`: flat on a sync sqlite or postgres store)."""
        self._awaited: Reads | None = None
        """The async methods' reads (`reads.awaited_reads_for`), of the store they last awaited (`_awaited_reads`)."""
        self._sync = store if isinstance(store, Store) else None
        """The sync `Store` the sync writes call straight (`Collection._field_writer`), if given one."""
        self._write_checkpoint: Callable[[dict[str, Any]], None] | None = None
        self._write_writes: dict[bool, Callable[[dict[str, Any]], None]] = {}
        """The sync writes' prepared writes of plain fields (a checkpoint's; writes kept if stored, or replaced)."""
        if self._sync is not None:
            self._write_checkpoint = self._sync.checkpoints._field_writer(mapping.CHECKPOINT_COMMON,
                                                                          mapping.CHECKPOINT_OWN)
            writes = self._sync.collection(LangGraphWrite)
            self._write_writes = {
                keep: writes._field_writer(mapping.WRITE_COMMON, mapping.WRITE_OWN, keep_existing=keep)
                for keep in (False, True)}
        self._latest_reads: dict[tuple[Any, Any], _TupleRead] = {}
        """`get_tuple`'s reads of a thread's latest checkpoint, by (thread, namespace) (`_TupleRead.kept`)."""
        self._set_up = False
        """Whether `setup` ran: the first put runs it, so the writes' table is there before a read looks for it
        (a read of a kind with no table yet asks the engine for it every time), as LangGraph's savers make
        their tables at first use."""

    def setup(self) -> None:
        """Make the checkpoints' and the writes' storage now rather than at the first put (the writes' table,
        its declaration recorded; a store makes its built-in kinds' tables when it is created), as LangGraph's
        `SqliteSaver.setup()` and `PostgresSaver.setup()` do; running it again changes nothing."""
        self._bridge.run(_prepare(self._bridge.driven))
        self._set_up = True

    async def asetup(self) -> None:
        """`setup` awaited (LangGraph's async savers name theirs `setup`)."""
        await _prepare(self._bridge.awaited())
        self._set_up = True

    # sync methods: the coroutines below, driven to their result --------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        flat = self._reads
        if isinstance(flat, FlatReads):  # its one read made by a plain call where it can be (`read_with_writes`)
            read = _TupleRead.kept(config, self._latest_reads)
            found = flat.read_with_writes(*read.reads)
            if found is not None:
                answer = read.answer(self.serde, *found)
                return self._bridge.run(self._with_writes(flat, found[0][0])) if isinstance(answer, _More) else answer
        return self._bridge.run(self._get_tuple(flat, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id within a thread and namespace)."""
        listing = _Listing(config, filter, before)
        flat = self._reads
        if isinstance(flat, FlatReads) and listing.by_pages(flat):
            return self._flat_list(flat, listing, limit)
        pages = self._list(flat, listing, limit)
        return itertools.chain.from_iterable(iterate_sync(pages, self._bridge.run))

    def put(self, config: RunnableConfig, checkpoint: LGCheckpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        fields, plain, saved = self._checkpoint(config, checkpoint, metadata)
        if plain and self._write_checkpoint is not None:
            self._write_checkpoint(fields)
        else:
            self._bridge.run(_put_checkpoint(self._bridge.driven, fields, plain))
        if not self._set_up:
            self.setup()
        return saved

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes; a regular write already stored is kept, special ones are replaced."""
        groups, keep = self._writes(config, writes, task_id, task_path)
        if len(groups) == 1 and groups[0][1] and self._write_writes:
            self._write_writes[keep](groups[0][0])
        else:
            self._bridge.run(self._put_writes(self._bridge.driven, groups, keep))

    def delete_thread(self, thread_id: str) -> None:
        self._bridge.run(self._delete_thread(self._bridge.driven, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of these LangGraph runs."""
        self._bridge.run(self._delete_for_runs(self._bridge.driven, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of a thread, keeping checkpoint ids and lineage."""
        self._bridge.run(self._copy_thread(self._bridge.driven, source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest` keeps the newest checkpoint of each namespace (with its writes); `delete` drops all."""
        self._bridge.run(self._prune(self._bridge.driven, thread_ids, strategy))

    # async methods: the same coroutines, awaited ------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._get_tuple(self._awaited_reads(), config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async with aclosing(self._list(self._awaited_reads(), _Listing(config, filter, before), limit)) as pages:
            async for page in pages:
                for item in page:
                    yield item

    async def aput(self, config: RunnableConfig, checkpoint: LGCheckpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        fields, plain, saved = self._checkpoint(config, checkpoint, metadata)
        await _put_checkpoint(self._bridge.awaited(), fields, plain)
        if not self._set_up:
            await self.asetup()
        return saved

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._put_writes(self._bridge.awaited(), *self._writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._delete_thread(self._bridge.awaited(), thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._delete_for_runs(self._bridge.awaited(), run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._copy_thread(self._bridge.awaited(), source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._prune(self._bridge.awaited(), thread_ids, strategy)

    # reading --------------------------------------------------------------------------
    def _awaited_reads(self) -> Reads:
        """The reads the async methods await, made again when they await another store (a sync `Store`'s twin
        on another event loop)."""
        store = self._bridge.awaited()
        reads = self._awaited
        if reads is None or reads.store is not store:
            reads = self._awaited = awaited_reads_for(store)
        return reads

    async def _get_tuple(self, reads: Reads, config: RunnableConfig) -> CheckpointTuple | None:
        store = reads.store
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        record: Stored | None
        if reads.ranges:  # one read (`_TupleRead`), and another for a latest checkpoint that has writes
            read = _TupleRead(config)
            found, writes = await reads.fetch_with_writes(*read.reads)
            answer = read.answer(self.serde, found, writes)
            if not isinstance(answer, _More):
                return answer
            record = found[0]
        elif checkpoint_id:
            record = await store.checkpoints.get(mapping.checkpoint_record_id(thread_id, ns, checkpoint_id))
        else:
            where = (F.run_id == thread_id) & (F.branch_id == mapping.branch_for(ns))
            record = await store.checkpoints.first(where, order_by="-id")
        return None if record is None else await self._with_writes(reads, record)

    async def _with_writes(self, reads: Reads, record: Stored) -> CheckpointTuple:
        """The tuple of a checkpoint record with its pending writes read."""
        return mapping.checkpoint_tuple(self.serde, record, (await self._writes_by_owner(reads, [record]))[record.id])

    async def _list(self, reads: Reads, listing: _Listing,
                    limit: int | None) -> AsyncGenerator[builtins.list[CheckpointTuple], None]:
        """The listed tuples a page at a time (a step of an async generator per page, not per tuple)."""
        if limit is not None and limit <= 0:
            return
        keep = listing.keeper(self.serde)
        remaining = limit
        if listing.by_pages(reads):
            chunks = _thread_pages(reads, _ThreadPages(listing, min(limit or reads.page, reads.page)), keep)
        else:
            where, exact = _list_where(reads.store, listing)
            batch = min(limit or _LIST_PAGE, _LIST_PAGE) if exact else _CHUNK
            chunks = _chunks(reads.store.checkpoints.iterate(where, order_by="-id", batch_size=batch, vectors=False),
                             batch, keep)
        async with aclosing(chunks) as pages:
            async for chunk in pages:
                tuples = await self._tuples(reads, chunk if remaining is None else chunk[:remaining])
                yield tuples
                if remaining is not None:
                    remaining -= len(tuples)
                    if remaining == 0:
                        return

    def _flat_list(self, flat: FlatReads, listing: _Listing, limit: int | None) -> Iterator[CheckpointTuple]:
        """`_list` of a thread's pages (`_Listing.by_pages`) on flat reads, by plain calls, as `get_tuple`'s
        read: no coroutine a page (`list(limit=10)` of 50 KB states 2.5-3% faster than through `_list`)."""
        if limit is not None and limit <= 0:
            return
        run = self._bridge.run
        keep = listing.keeper(self.serde)
        pages = _ThreadPages(listing, min(limit or flat.page, flat.page))
        remaining = limit
        while True:
            page = flat.read(pages.shape, pages.values, pages.batch, run)
            kept = [record for record in page if keep(record)]
            if remaining is not None:
                kept = kept[:remaining]
                remaining -= len(kept)
            if kept:
                found: builtins.list[dict[str, Any]] = []
                for values in _writes_ranges(kept):
                    found += flat.read_writes(_WRITES_IN_RANGE, values, run)
                writes = _owned(kept, found)
                yield from [mapping.checkpoint_tuple(self.serde, record, writes[record.id]) for record in kept]
            if remaining == 0 or not pages.more(page):
                return

    async def _tuples(self, reads: Reads, records: Sequence[Stored]) -> builtins.list[CheckpointTuple]:
        """Checkpoint tuples for these records, with their pending writes fetched in few queries."""
        writes = await self._writes_by_owner(reads, records)
        return [mapping.checkpoint_tuple(self.serde, record, writes[record.id]) for record in records]

    async def _writes_by_owner(self, reads: Reads,
                               records: Sequence[Stored]) -> dict[str, builtins.list[dict[str, Any]]]:
        """The fields of each checkpoint record's writes: by their id ranges (`_writes_ranges`) where the store
        has range filters; elsewhere they are found by `owner`."""
        found: builtins.list[dict[str, Any]] = []
        if reads.ranges:
            for values in _writes_ranges(records):
                found += await reads.fetch_writes(_WRITES_IN_RANGE, values)
        else:
            owners = [record.id for record in records]
            found = [write.__dict__ for write in await reads.writes.all(F.owner.in_(owners))]
        return _owned(records, found)

    # writing --------------------------------------------------------------------------
    def _checkpoint(self, config: RunnableConfig, checkpoint: LGCheckpoint,
                    metadata: CheckpointMetadata) -> tuple[dict[str, Any], bool, RunnableConfig]:
        """The fields of the record `put` stores and whether they are plain (`mapping.checkpoint_fields`), and
        the config it returns."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        fields, plain = mapping.checkpoint_fields(
            self.serde, thread_id, ns, conf.get("checkpoint_id"), dict(checkpoint),
            dict(get_serializable_checkpoint_metadata(config, metadata)))
        return fields, plain, mapping.config_for(thread_id, ns, checkpoint["id"])

    def _writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                task_path: str) -> tuple[builtins.list[tuple[dict[str, Any], bool]], bool]:
        """The fields of the records `put_writes` stores, each with whether they are plain
        (`mapping.write_fields`), and whether a lone one is kept if already stored (regular writes:
        insert-or-ignore) rather than replaced (special ones)."""
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        numbered = [(WRITES_IDX_MAP.get(channel, position), channel, value)
                    for position, (channel, value) in enumerate(writes)]
        groups = mapping.write_fields(self.serde, thread_id, ns, checkpoint_id, task_id, task_path, numbered)
        return groups, bool(numbered) and numbered[0][0] >= 0

    async def _put_writes(self, store: AsyncStore, groups: Sequence[tuple[dict[str, Any], bool]], keep: bool) -> None:
        writes = store.collection(LangGraphWrite)
        records = [mapping.write_of_fields(fields, plain) for fields, plain in groups]
        if len(records) == 1:  # regular writes: insert-or-ignore; special ones: replace (one write, no read)
            await writes._put_built(records, keep_existing=keep)
        elif records:  # both kinds (rare): the regular record is kept if stored, in one write with the special one
            regular, special = records
            if await writes.get_many([regular.id], vectors=False):
                records = [special]
            await writes._put_built(records)

    # deleting and copying -----------------------------------------------------------------
    async def _delete_thread(self, store: AsyncStore, thread_id: str) -> None:
        await store.checkpoints.delete(where=F.run_id == thread_id)
        await store.collection(LangGraphWrite).delete(where=_thread_writes(store, thread_id))

    async def _delete_for_runs(self, store: AsyncStore, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return
        where: Expr = F.branch_id != mapping.WRITES_BRANCH
        if Capability.FILTER_METADATA in store.capabilities:
            where = where & F.metadata["run_id"].in_(sorted(runs))
        doomed = [r async for r in store.checkpoints.iterate(where, batch_size=_CHUNK, vectors=False)
                  if r.metadata.get("run_id") in runs]
        await _delete_checkpoints(store, doomed)

    async def _copy_thread(self, store: AsyncStore, source_thread_id: str, target_thread_id: str) -> None:
        source = store.checkpoints.iterate(F.run_id == source_thread_id, batch_size=_CHUNK)
        async for chunk in _chunks(source, _CHUNK):
            await store.checkpoints.put([mapping.moved(record, target_thread_id) for record in chunk])
        writes = store.collection(LangGraphWrite)
        async for part in _chunks(writes.iterate(_thread_writes(store, source_thread_id), batch_size=_CHUNK), _CHUNK):
            await writes.put([mapping.moved_write(write, target_thread_id) for write in part])

    async def _prune(self, store: AsyncStore, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValidationError.one("strategy", f"unknown prune strategy {strategy!r}; use keep_latest or delete")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self._delete_thread(store, thread_id)
                continue
            seen: set[str] = set()
            doomed: builtins.list[Record] = []
            where = (F.run_id == thread_id) & (F.branch_id != mapping.WRITES_BRANCH)
            async for record in store.checkpoints.iterate(where, order_by="-id", batch_size=_CHUNK, vectors=False):
                if record.branch_id in seen:
                    doomed.append(record)
                seen.add(record.branch_id)
            await _delete_checkpoints(store, doomed)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Zero-padded string versions (as LangGraph's own SQL savers use): they sort as they grow."""
        current_v = 0 if current is None else int(str(current).split(".")[0])
        return f"{current_v + 1:032}"

    def __repr__(self) -> str:
        return f"<MnemostoreSaver {self.store!r}>"


class _Listing:
    """What a `list` call asks for (its config, filter and `before`), and which records it keeps."""

    __slots__ = ("before_id", "checkpoint_id", "ns", "thread_id", "wanted")

    def __init__(self, config: RunnableConfig | None, filter: dict[str, Any] | None,
                 before: RunnableConfig | None) -> None:
        conf = config["configurable"] if config else {}
        self.thread_id: str | None = conf.get("thread_id")
        self.ns: str | None = conf.get("checkpoint_ns")
        self.checkpoint_id: str | None = conf.get("checkpoint_id")
        self.before_id = get_checkpoint_id(before) if before else None
        self.wanted = dict(filter or {})

    def by_pages(self, reads: Reads) -> bool:
        """Whether it reads a thread's pages by id range (`_ThreadPages`): a thread's checkpoints, with no
        checkpoint id nor filter, on a store whose id ranges are index ranges."""
        return self.thread_id is not None and not self.checkpoint_id and not self.wanted and reads.ranges

    def keeper(self, serde: SerializerProtocol) -> Callable[[Stored], bool]:
        """Whether a record read is one listed: the store's filter is re-checked here."""
        checkpoint_id, before_id, wanted = self.checkpoint_id, self.before_id, self.wanted

        def keep(record: Stored) -> bool:
            state = record.state
            if checkpoint_id and state["checkpoint_id"] != checkpoint_id:
                return False
            if before_id and not state["checkpoint_id"] < before_id:
                return False
            if wanted:  # re-checked on the exact metadata: the pushed-down filter sees its JSON copy
                metadata = mapping.metadata_of(serde, record)
                return all(metadata.get(key) == value for key, value in wanted.items())
            return True

        return keep


class _ThreadPages:
    """The reads of a thread's checkpoints (of one namespace if its `ns` is not None), newest first, `batch` at
    a time through the list shapes. A namespace's are read by its id range (`mapping.namespace_range`), from
    below the checkpoint `before_id` if given: one statement a page, in the id index's order."""

    __slots__ = ("_shapes", "batch", "values")

    def __init__(self, listing: _Listing, batch: int) -> None:
        thread_id, ns, before_id = listing.thread_id, listing.ns, listing.before_id
        assert thread_id is not None  # `_Listing.by_pages`
        self.batch = batch
        self.values = {"run": thread_id}
        self._shapes = (_THREAD_LIST, _THREAD_LIST_BELOW)  # (without, with) `values["high"]`
        if ns is not None:
            low, high = mapping.namespace_range(thread_id, ns)
            if before_id:
                high = min(high, mapping.checkpoint_record_id(thread_id, ns, before_id))
            self.values.update(branch=mapping.branch_for(ns), low=low, high=high)
            self._shapes = (_NAMESPACE_LIST, _NAMESPACE_LIST)

    @property
    def shape(self) -> QueryShape:
        """The shape of the next page's read (its values: `values`, its limit: `batch`)."""
        return self._shapes["high" in self.values]

    def more(self, page: Sequence[Stored]) -> bool:
        """Whether there is more to read after `page` (the last read's): if so, the next read starts below it."""
        if len(page) < self.batch:
            return False
        self.values["high"] = page[-1].id
        return True


async def _thread_pages(reads: Reads, pages: _ThreadPages,
                        keep: Callable[[Stored], bool]) -> AsyncGenerator[builtins.list[Stored], None]:
    """The thread's checkpoints `keep` accepts, a page at a time (pages left empty skipped)."""
    while True:
        page = await reads.fetch(pages.shape, pages.values, limit=pages.batch)
        kept = [record for record in page if keep(record)]
        if kept:
            yield kept
        if not pages.more(page):
            return


def _writes_ranges(records: Sequence[Stored]) -> builtins.list[dict[str, str]]:
    """The values of the `_WRITES_IN_RANGE` reads that find these checkpoint records' writes: their ids extend
    their checkpoint's writes prefix, so a namespace's records are served by one id range (an index range)."""
    by_namespace: dict[tuple[str, str], builtins.list[str]] = {}
    for record in records:
        state = record.state
        by_namespace.setdefault((state["thread_id"], state["checkpoint_ns"]), []).append(state["checkpoint_id"])
    ranges = []
    for (thread_id, ns), checkpoint_ids in by_namespace.items():
        low, high = checkpoints_writes_range(thread_id, ns, checkpoint_ids)
        ranges.append({"low": low, "high": high})
    return ranges


def _owned(records: Sequence[Stored], writes: Sequence[dict[str, Any]]) -> dict[str, builtins.list[dict[str, Any]]]:
    """The writes found (their fields) of each record, by its id (a range may hold writes of others)."""
    owned: dict[str, builtins.list[dict[str, Any]]] = {record.id: [] for record in records}
    for write in writes:
        into = owned.get(write["owner"])
        if into is not None:
            into.append(write)
    return owned


_RANGE = (F.id >= Param("low")) & (F.id < Param("high"))
_BY_ID = QueryShape(Record, F.id == Param("id"))
_NEWEST_IN_RANGE = QueryShape(Record, _RANGE, "-id")
_WRITES_IN_RANGE = QueryShape(LangGraphWrite, _RANGE, "id")
_NEWEST_WRITE_IN_RANGE = QueryShape(LangGraphWrite, _RANGE, "-id")
_THREAD_LIST = QueryShape(Record, (F.branch_id != mapping.WRITES_BRANCH) & (F.run_id == Param("run")), "-id")
_THREAD_LIST_BELOW = QueryShape(
    Record, (F.branch_id != mapping.WRITES_BRANCH) & (F.run_id == Param("run")) & (F.id < Param("high")), "-id")
_NAMESPACE_LIST = QueryShape(Record, (F.branch_id == Param("branch")) & (F.run_id == Param("run"))
                             & (F.id >= Param("low")) & (F.id < Param("high")), "-id")
"""The saver's reads, each compiled once per store (`QueryShape`): a checkpoint by id, the newest of a
namespace's id range, the writes (or the newest write) in an id range (`langgraph_ids.prefix_range`), and a
thread's pages for `list` (without, then with, a bound)."""


class _More:
    """`_TupleRead.answer` for a latest checkpoint that has writes: read them (`_writes_by_owner`)."""


_MORE = _More()


class _TupleRead:
    """`get_tuple`'s one read on a store with range filters (`Reads.fetch_with_writes`), and the tuple it gives: a
    checkpoint by id with its writes' id range, or a namespace's newest checkpoint with the namespace's newest
    write (its id alone: whether the checkpoint has writes)."""

    __slots__ = ("_ns", "_owner", "_thread_id", "reads")

    kept_at_most = 256
    """Latest reads `kept` per saver: a process's agents' threads (more are made again, not kept)."""

    @classmethod
    def kept(cls, config: RunnableConfig, latest: dict[tuple[Any, Any], _TupleRead]) -> _TupleRead:
        """The read of `config`; a thread's latest read is kept in `latest` and given again, its values the same
        read-only mappings each time, so the flat read binds them once (`shape_readers._Plan`)."""
        conf = config["configurable"]
        if get_checkpoint_id(config):
            return cls(config)
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""))
        read = latest.get(key)
        if read is None:
            read = cls(config)
            read.reads = tuple(MappingProxyType(part) if type(part) is dict else part for part in read.reads)
            if len(latest) >= cls.kept_at_most:
                latest.clear()
            latest[key] = read
        return read

    def __init__(self, config: RunnableConfig) -> None:
        conf = config["configurable"]
        self._thread_id, self._ns = thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        self._owner: str | None = None
        if checkpoint_id:
            self._owner = owner = mapping.checkpoint_record_id(thread_id, ns, checkpoint_id)
            low, high = prefix_range(checkpoint_writes_prefix(thread_id, ns, checkpoint_id))
            self.reads: tuple[Any, ...] = (_BY_ID, {"id": owner}, 1, _WRITES_IN_RANGE, {"low": low, "high": high},
                                           None)
        else:
            low, high = mapping.namespace_range(thread_id, ns)
            write_low, write_high = prefix_range(namespace_writes_prefix(thread_id, ns))
            self.reads = (_NEWEST_IN_RANGE, {"low": low, "high": high}, 1,
                          _NEWEST_WRITE_IN_RANGE, {"low": write_low, "high": write_high}, 1, ("id",))

    def answer(self, serde: SerializerProtocol, found: Sequence[Stored],
               writes: Sequence[dict[str, Any]]) -> CheckpointTuple | _More | None:
        """The tuple, None where no checkpoint was found, or `_MORE` for a latest one whose writes are to read."""
        if not found:
            return None
        owner = self._owner
        if owner is not None:
            return mapping.checkpoint_tuple(serde, found[0], [write for write in writes if write["owner"] == owner])
        record = found[0]  # no writes if every write of it would sort after the namespace's newest:
        if not writes or writes[0]["id"] < checkpoint_writes_prefix(self._thread_id, self._ns,
                                                                    record.state["checkpoint_id"]):
            return mapping.checkpoint_tuple(serde, record, [])
        return _MORE


def _list_where(store: AsyncStore, listing: _Listing) -> tuple[Expr | None, bool]:
    """The filter to push down, and whether it selects exactly the wanted metadata (so pages can be small)."""
    thread_id, ns, checkpoint_id, before_id = listing.thread_id, listing.ns, listing.checkpoint_id, listing.before_id
    caps = store.capabilities
    parts: builtins.list[Expr | None] = [
        F.branch_id == mapping.branch_for(ns) if ns is not None else F.branch_id != mapping.WRITES_BRANCH]
    if thread_id is not None:
        parts.append(F.run_id == thread_id)
        if ns is not None and checkpoint_id:
            parts.append(F.id == mapping.checkpoint_record_id(thread_id, ns, checkpoint_id))
        if ns is not None and before_id and Capability.FILTER_RANGE in caps:
            parts.append(F.id < mapping.checkpoint_record_id(thread_id, ns, before_id))
    exact = Capability.FILTER_METADATA in caps
    for key, value in listing.wanted.items():
        if exact and _pushable(value):
            try:
                parts.append(bind(F.metadata[key] == value, Record.filterable))
                continue
            except (ValidationError, TypeError):
                pass
        exact = False
    return all_of(*parts), exact


async def _delete_checkpoints(store: AsyncStore, records: Sequence[Stored]) -> None:
    """Delete these checkpoint records and their writes, `_CHUNK` at a time: where the store has range
    filters, each checkpoint's writes by their id range (an index range; `owner` has no index), else by `owner`."""
    writes = store.collection(LangGraphWrite)
    ranged = Capability.FILTER_RANGE in store.capabilities
    for start in range(0, len(records), _CHUNK):
        chunk = records[start:start + _CHUNK]
        ids = [record.id for record in chunk]
        if not ranged:
            await writes.delete(where=F.owner.in_(ids))
        for record in chunk if ranged else ():
            state = record.state
            prefix = checkpoint_writes_prefix(state["thread_id"], state["checkpoint_ns"], state["checkpoint_id"])
            await writes.delete(where=_prefixed(prefix) & (F.owner == record.id))
        await store.checkpoints.delete(ids)


async def _put_checkpoint(store: AsyncStore, fields: dict[str, Any], plain: bool) -> None:
    """Store the checkpoint record of `mapping.checkpoint_fields`' fields (validated unless plain)."""
    await store.checkpoints._put_built([mapping.checkpoint_of_fields(fields, plain)])


async def _prepare(store: AsyncStore) -> None:
    await store.checkpoints.prepare()
    await store.collection(LangGraphWrite).prepare()


def _thread_writes(store: AsyncStore, thread_id: str) -> Expr:
    """A thread's writes: one id range where the store has range filters, else by `thread`."""
    if Capability.FILTER_RANGE in store.capabilities:
        return _prefixed(thread_writes_prefix(thread_id))
    return F.thread == thread_id


def _prefixed(prefix: str) -> Expr:
    low, high = prefix_range(prefix)
    return (F.id >= low) & (F.id < high)


def _pushable(value: Any) -> bool:
    """Metadata values whose equality the store's filters decide as Python does (bool is not 1 there)."""
    return type(value) in (str, int, float)


async def _chunks(items: AsyncIterator[_S], size: int,
                  keep: Callable[[_S], bool] | None = None) -> AsyncGenerator[builtins.list[_S], None]:
    """The items (those `keep` accepts) in lists of `size`, the last one shorter."""
    chunk: builtins.list[_S] = []
    async for item in items:
        if keep is None or keep(item):
            chunk.append(item)
            if len(chunk) >= size:
                yield chunk
                chunk = []
    if chunk:
        yield chunk
