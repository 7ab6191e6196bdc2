"""`MnemostoreStore`: LangGraph's long-term memory store (`BaseStore`) on any mnemostore `Store`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from operator import attrgetter
from typing import Any, Literal, cast

import langgraph.store.base as langgraph_store_base
import orjson
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from ...core.async_collection import AsyncCollection
from ...core.async_store import AsyncStore
from ...core.capabilities import VECTOR_METRICS, Capability
from ...core.collection import Collection
from ...core.errors import ConfigError, SchemaMismatch, ValidationError
from ...core.filters import Expr, F, Or, all_of
from ...core.jsonvalues import check_text, find_json_problem
from ...core.kinds import register_kind
from ...core.records import utcnow
from ...core.shapes import QueryShape
from ...core.store import Store
from ...core.vectors import Vector, as_vector
from ...kinds.langgraph_items import LangGraphItem
from . import store_filters
from . import store_mapping as mapping
from .bridge import Bridge

_validate_put_namespace: Callable[[tuple[str, ...]], None] | None = getattr(
    langgraph_store_base, "_validate_namespace", None)
"""The check `BaseStore.put` runs. It is private: a LangGraph without it keeps `put` on BaseStore's path."""

_CHUNK = 500
"""Ids or items per store call when a batch touches many."""
_VALUE = attrgetter("value")
"""An op's value (a batch's puts' values in one C call: `_write`)."""
_SHAPES_KEPT = 256
"""Prepared plain searches kept per LangGraph store; past that the cache starts again."""
_NAMESPACES_KEPT = 4096
"""Namespaces a plain put keeps as checked; past that the set starts again."""
_ORDER = "-updated_at"
"""Search without a query lists the most recently updated items first, as LangGraph's SQL stores do."""

Namespace = tuple[str, ...]
ItemKey = tuple[Namespace, str]


@dataclass
class _Plan:
    """A batch, checked and split before anything is embedded or read."""

    ops: list[Op]
    puts: dict[ItemKey, PutOp] = field(default_factory=dict)
    texts: dict[ItemKey, list[str]] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    reads: bool = False
    """Whether any op reads (a get, search or namespace listing): a batch of puts skips the read passes."""

    def own_values(self) -> None:
        """Each put's value as a copy of its own: an awaited batch must write what was checked, not what
        the caller's other tasks changed meanwhile (the sync `batch` writes before it returns)."""
        for item_key, op in self.puts.items():
            if op.value is not None:
                self.puts[item_key] = op._replace(value=dict(op.value))

    def documents(self) -> list[str]:
        """Every distinct text to embed, in first-seen order."""
        return list(dict.fromkeys(text for texts in self.texts.values() for text in texts))


@dataclass(frozen=True)
class _Selection:
    """Records to read: `where` runs in the store; `keep` re-checks it all when `where` is not exact."""

    where: Expr | None
    exact: bool
    keep: Callable[[LangGraphItem], bool]


class MnemostoreStore(BaseStore):
    """LangGraph store items as mnemostore `LangGraphItem` records (layout: `store_mapping`), on any backend.

    Prefixes and filters run in the store (and in vector search) as far as its capabilities allow; the
    rest is checked here, never dropped. `index` enables `query` search as in InMemoryStore; `scope`
    separates LangGraph stores sharing one mnemostore store. No TTL (`supports_ttl = False`). Give it
    a `Store` or an `AsyncStore`: `batch` and `abatch` run one coroutine over it (see `bridge`).
    """

    supports_ttl: bool = False

    def __init__(self, store: Store | AsyncStore, *, index: IndexConfig | None = None,
                 scope: str = "langgraph") -> None:
        register_kind(LangGraphItem)  # registered when its module was imported, unless forgotten since
        self.store = store
        self._item_collection: tuple[AsyncStore, AsyncCollection[LangGraphItem]] | None = None
        self._sync = store if isinstance(store, Store) else None
        """The sync `Store` plain puts call straight (`_put_plain`), if given one."""
        self._sync_items: Collection[LangGraphItem] | None = None
        self._put_namespaces: set[Namespace] = set()
        """Namespaces a plain put found fit (LangGraph's rules and ours): `put`."""
        self._bridge = Bridge(store, type(self).__name__)
        self.scope = mapping.check_scope(scope)
        self.index_config: IndexConfig | None = None
        self.embeddings: Embeddings | None = None
        self._fields: list[tuple[str, str | list[str]]] = []
        self._dims = 0
        self._model = ""
        self._shapes: dict[tuple[Namespace, bytes, bool], QueryShape | None] = {}
        """Prepared plain searches by (prefix, filter as JSON, unvectored): `_plain_shape`."""
        if index:
            self.index_config = index.copy()
            self._dims = self._check_vectors(index.get("dims"))
            embed = index.get("embed")
            self.embeddings = ensure_embeddings(embed)
            self._fields = [(path, path if path == "$" else tokenize_path(path))
                            for path in index.get("fields") or ["$"]]
            self._model = (embed if isinstance(embed, str) else None) or store.params.embedding_model or "unnamed"
            problem = check_text(self._model)  # every record's `model` (`records_for` builds them unvalidated)
            if problem is not None:
                raise ValidationError.one("index.embed", f"model name {self._model!r} {problem}")

    def _check_vectors(self, dims: Any) -> int:
        if type(dims) is not int or dims < 1:
            raise ConfigError(f"index['dims'] must be a positive integer, not {dims!r}")
        params = self._bridge.driven.params
        if params.dimension is not None and params.dimension != dims:
            raise SchemaMismatch(f"index['dims'] is {dims} but this store holds {params.dimension}-dimensional "
                                 "embeddings; use an embedding model of that dimension or another store")
        if params.metric == "l2":
            raise ConfigError("query search ranks by similarity, but this store's metric is 'l2'; "
                              "use a store created with metric='cosine' (or 'dot')")
        self._bridge.driven.require(VECTOR_METRICS[params.metric], "MnemostoreStore query search")
        return dims

    # one put ------------------------------------------------------------------------------
    def put(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any],
            index: Literal[False] | list[str] | None = None, *, ttl: float | NotProvided | None = NOT_PROVIDED) -> None:
        """`BaseStore.put`. A put of a dict under a tuple namespace and a string key, with no index to
        embed for and no TTL, is checked as `BaseStore.put` and a batch of one check it, in their order
        (a namespace that passed LangGraph's rules and ours is kept: `_put_namespaces`), and written
        without the op and batch around it."""
        if (type(value) is dict and type(key) is str and type(namespace) is tuple and self.embeddings is None
                and _validate_put_namespace is not None and (ttl is NOT_PROVIDED or ttl is None)
                and self.ttl_config is None):
            passed = self._put_namespaces
            try:
                known: bool | None = namespace in passed
            except TypeError:  # a label that does not hash is no string: `BaseStore.put` says so
                known = None
            if known is not None:
                if not known:
                    _put_namespace(namespace)
                _check_key(key)
                if not known:
                    mapping.check_namespace(self.scope, namespace)
                    if len(passed) >= _NAMESPACES_KEPT:
                        passed.clear()
                    passed.add(namespace)
                _check_value(value)
                self._put_plain(namespace, key, value)
                return
        super().put(namespace, key, value, index, ttl=ttl)

    # batches ------------------------------------------------------------------------------
    def setup(self) -> None:
        """Make the items' storage now (a table, collections) rather than at the first put, as
        LangGraph's `SqliteStore.setup()` and `PostgresStore.setup()` make theirs; running it again
        changes nothing. Optional: the first put makes what is missing."""
        self._bridge.run(self._items_in(self._bridge.driven).prepare())

    async def asetup(self) -> None:
        """`setup` awaited (LangGraph's async stores name theirs `setup`)."""
        await self._items_in(self._bridge.awaited()).prepare()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops: reads see the store as it was before the batch's writes (as in InMemoryStore)."""
        if type(ops) is list and len(ops) == 1 and self.embeddings is None:  # a batch of one put
            op = ops[0]
            if type(op) is PutOp and type(op.namespace) is tuple and type(op.value) is dict:
                validate_op_namespace(op)
                self._check_put(op)
                self._put_plain(op.namespace, op.key, cast("dict[str, Any]", op.value))
                return [None]
        plan = self._plan(ops)
        embeddings = self.embeddings
        documents: dict[str, Vector] = {}
        queries: dict[str, list[float]] = {}
        if embeddings is not None:
            documents = self._vectors(plan.documents(), embeddings.embed_documents)
            queries = {query: embeddings.embed_query(query) for query in plan.queries}
        return self._bridge.run(self._run(self._bridge.driven, plan, documents, queries))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` with the embeddings' async API, its store calls awaited."""
        plan = self._plan(ops)
        plan.own_values()
        embeddings = self.embeddings
        documents: dict[str, Vector] = {}
        queries: dict[str, list[float]] = {}
        if embeddings is not None:
            texts = plan.documents()
            if texts:
                documents = self._vectors(texts, None, await embeddings.aembed_documents(texts))
            found = await asyncio.gather(*(embeddings.aembed_query(query) for query in plan.queries))
            queries = dict(zip(plan.queries, found, strict=True))
        return await self._run(self._bridge.awaited(), plan, documents, queries)

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        """Check every op before anything runs; keep the last put of each item. A put into a namespace an
        earlier put of the batch passed (LangGraph's labels, ours) runs only the checks left: TTL, key, value."""
        plan = _Plan([op if type(op) is PutOp and type(op.namespace) is tuple and type(op.value) is dict
                      else _normalised(op) for op in ops])
        queries: dict[str, None] = {}
        passed: set[Namespace] = set()
        puts = plan.puts
        for op in plan.ops:
            if isinstance(op, PutOp):
                namespace, key, value, _, ttl = op  # one unpacking, not a property lookup per use
                try:
                    known = namespace in passed
                except TypeError:  # a label that does not hash: validate_op_namespace names it
                    known = False
                if not known:
                    validate_op_namespace(op)
                    self._check_put(op)
                    if value is not None:
                        passed.add(namespace)
                elif ttl is not None or value is None:
                    self._check_put(op, namespace_checked=True)
                else:  # `_check_put`'s checks left, without its call
                    _check_key(key)
                    _check_value(value)
                puts[(namespace, key)] = op
                continue
            validate_op_namespace(op)
            plan.reads = True
            if isinstance(op, SearchOp):
                store_filters.check_filter(op.filter)
                _check_page(op.limit, op.offset)
                if op.query and self.embeddings is not None:
                    queries[op.query] = None
            elif isinstance(op, ListNamespacesOp):
                _check_page(op.limit, op.offset)
            elif isinstance(op, GetOp):
                _check_key(op.key)
        plan.queries = list(queries)
        if self.embeddings is not None:
            for item_key, op in plan.puts.items():
                if op.value is not None and op.index is not False:
                    plan.texts[item_key] = self._texts(dict(op.value), op.index)
        return plan

    def _put_plain(self, namespace: Namespace, key: str, value: dict[str, Any]) -> None:
        """One put of a dict value, checked as a batch checks it (`_check_put`), on a store without an
        index (so no vector, no shard): the record a batch's fields make (`_write`), in one store call without
        a batch's planning; on a sync `Store`, with no coroutine to drive (`Collection._put_built`). A record,
        not fields (`Collection._put_fields`): for one item the fields' per-call work (their pattern, looked up
        in each layer) cost more than the record object it saves (callgrind: ~169k instructions a put against
        ~160k)."""
        now = datetime.now(UTC)  # `utcnow`, without its call
        records = [mapping.plain_record(self.scope, namespace, key, value, now, now)]
        items = self._sync_items
        if items is not None:  # no coroutine to drive: the collection calls the backend straight
            items._put_built(records, keep_created=True)
            return
        bridge = self._bridge
        twin = self._items_in(bridge.driven)
        if self._sync is not None:  # the sync `Store`'s driven store never changes: its collection is kept
            items = self._sync_items = Collection(twin, self._sync._run)
            items._put_built(records, keep_created=True)
            return
        bridge.run(twin._put_built(records, keep_created=True))

    def _check_put(self, op: PutOp, namespace_checked: bool = False) -> None:
        if op.ttl is not None:
            raise NotImplementedError(f"TTL is not supported by {type(self).__name__}. "
                                      "Use a store implementation that supports TTL or set ttl=None.")
        _check_key(op.key)
        if op.value is not None:
            if not namespace_checked:
                mapping.check_namespace(self.scope, op.namespace)
            _check_value(op.value)

    def _storable(self, namespace: Namespace, key: str) -> bool:
        """Whether a put could store an item at `namespace` and `key`: the checks `_check_put` makes of them."""
        try:
            _check_key(key)
            mapping.check_namespace(self.scope, namespace)
        except ValidationError:
            return False
        return True

    def _texts(self, value: dict[str, Any], index: list[str] | None) -> list[str]:
        """The texts to embed, in path order; "$" is the whole value as JSON (as InMemoryStore embeds it)."""
        paths = self._fields if index is None else [(path, path if path == "$" else tokenize_path(path))
                                                     for path in index]
        return [text for _, tokens in paths for text in get_text_at_path(value, tokens)]

    def _vectors(self, texts: list[str], embed: Callable[[list[str]], list[list[float]]] | None,
                 vectors: Sequence[Sequence[float]] | None = None) -> dict[str, Vector]:
        """Each text's vector, validated once (`as_vector`: finite float32 of the index's dimension), so
        records are built from it without a second check, and texts shared by items convert once."""
        if not texts:
            return {}
        if vectors is None:
            assert embed is not None
            vectors = embed(texts)
        if len(vectors) != len(texts):
            raise ValidationError.one("index.embed", f"returned {len(vectors)} vectors for {len(texts)} texts")
        for vector in vectors:
            if len(vector) != self._dims:
                raise ValidationError.one(
                    "index.embed", f"returned a {len(vector)}-dimensional vector, but index['dims'] is {self._dims}")
        return {text: as_vector(vector, "index.embed", self._dims) for text, vector in zip(texts, vectors, strict=True)}

    async def _run(self, store: AsyncStore, plan: _Plan, documents: dict[str, Vector],
                   queries: dict[str, list[float]]) -> list[Result]:
        results: list[Result] = [None] * len(plan.ops)
        if not plan.reads:
            if plan.puts:
                await self._write(store, plan, documents)
            return results
        gets = [(i, op) for i, op in enumerate(plan.ops) if isinstance(op, GetOp)]
        if gets:
            found = await self._items(store, [(op.namespace, op.key) for _, op in gets])
            for i, get in gets:
                results[i] = found.get((get.namespace, get.key))
        for i, op in enumerate(plan.ops):
            if isinstance(op, SearchOp):
                results[i] = await self._search(store, op, queries.get(op.query) if op.query else None)
            elif isinstance(op, ListNamespacesOp):
                results[i] = await self._list_namespaces(store, op)
        if plan.puts:
            await self._write(store, plan, documents)
        return results

    def _items_in(self, store: AsyncStore) -> AsyncCollection[LangGraphItem]:
        """The item collection of `store` (the one this class drives, or a loop's twin), looked up again
        only when the store changes (`AsyncStore.collection` resolves the kind: ~1 us a call). One
        tuple, so a thread never pairs one store with another's collection."""
        kept = self._item_collection
        if kept is not None and kept[0] is store:
            return kept[1]
        found: AsyncCollection[LangGraphItem] = store.collection(LangGraphItem)
        self._item_collection = (store, found)
        return found

    # reading ------------------------------------------------------------------------------
    async def _records(self, store: AsyncStore, item_keys: Sequence[ItemKey]) -> dict[ItemKey, LangGraphItem]:
        """The records of these items that exist (their own records, not their shards)."""
        ids = {mapping.item_id(self.scope, ns, key): (ns, key) for ns, key in item_keys}
        found: dict[ItemKey, LangGraphItem] = {}
        wanted = list(ids)
        for start in range(0, len(wanted), _CHUNK):
            for record in await self._items_in(store).get_many(wanted[start:start + _CHUNK], vectors=False):
                item_key = ids[record.id]
                if mapping.where_it_lives(record) == item_key:
                    found[item_key] = record
        return found

    async def _items(self, store: AsyncStore, item_keys: Sequence[ItemKey]) -> dict[ItemKey, Item]:
        records = await self._records(store, item_keys)
        return {item_key: mapping.to_item(record) for item_key, record in records.items()}

    async def _search(self, store: AsyncStore, op: SearchOp, query: list[float] | None) -> list[SearchItem]:
        if op.limit == 0:
            return []
        end = op.offset + op.limit
        if query is None:
            return [mapping.to_search_item(r, None) for r in (await self._plain(store, op, end))[op.offset:]]
        scored = await self._nearest(store, op, query, end)
        page = [mapping.to_search_item(record, score) for record, score in scored[op.offset:end]]
        if len(scored) < end:  # every scored item is in: items without a vector follow, as in InMemoryStore
            skip = max(0, op.offset - len(scored))
            rest = (await self._plain(store, op, skip + end - max(op.offset, len(scored)), unvectored=True))[skip:]
            page += [mapping.to_search_item(record, None) for record in rest]
        return page

    async def _plain(self, store: AsyncStore, op: SearchOp, count: int, *,
                     unvectored: bool = False) -> list[LangGraphItem]:
        """The first `count` matching items, most recently updated first."""
        if count <= 0:
            return []
        items = self._items_in(store)
        shape = self._plain_shape(store, op, unvectored)
        if shape is not None:
            return await items.fetch(shape, {}, limit=count, vectors=False)
        chosen = self._select(store, [mapping.item_root(self.scope)], op, pushed=True, unvectored=unvectored)
        kept: list[LangGraphItem] = []
        rows = items.iterate(chosen.where, order_by=_ORDER, batch_size=min(max(count, 100), _CHUNK), vectors=False)
        async with aclosing(rows):
            async for record in rows:
                if chosen.keep(record):
                    kept.append(record)
                    if len(kept) == count:
                        break
        return kept

    def _plain_shape(self, store: AsyncStore, op: SearchOp, unvectored: bool) -> QueryShape | None:
        """The prepared query of a search without a vector, when the store runs all of it (prefix and
        filter), made once per (prefix, filter): the store compiles it once, not at every search."""
        try:
            key = (op.namespace_prefix, orjson.dumps(op.filter, option=orjson.OPT_SORT_KEYS), unvectored)
        except TypeError:  # not JSON: the filter's own check has refused it already
            return None
        shapes = self._shapes
        if key in shapes:
            return shapes[key]
        chosen = self._select(store, [mapping.item_root(self.scope)], op, pushed=True, unvectored=unvectored)
        if len(shapes) >= _SHAPES_KEPT:
            shapes.clear()
        found = shapes[key] = None if not chosen.exact or chosen.where is None else \
            QueryShape(LangGraphItem, chosen.where, order_by=_ORDER)
        return found

    async def _nearest(self, store: AsyncStore, op: SearchOp, query: list[float],
                       count: int) -> list[tuple[LangGraphItem, float]]:
        """The best `count` items by their best vector, best first: k grows until enough distinct items match."""
        pushed = Capability.VECTOR_FILTERED in store.capabilities
        chosen = self._select(store, [mapping.item_root(self.scope), mapping.shard_root(self.scope)], op, pushed=pushed)
        k = count
        while True:
            hits = await self._items_in(store).search(query, k, where=chosen.where, vectors=False)
            owners = await self._owners(store, [hit.record.id for hit in hits])
            best: dict[str, tuple[LangGraphItem, float]] = {}
            for hit in hits:
                record: LangGraphItem = hit.record  # type: ignore[assignment]
                owner = mapping.owner_id(record.id)
                if owner != record.id:  # a shard stands for its item as last put, if that put wrote it
                    item = owners.get(owner)
                    if item is None or item.updated_at != record.updated_at:
                        continue
                    record = item
                if chosen.exact or chosen.keep(record):
                    best.setdefault(owner, (record, hit.score))
            if len(best) >= count or len(hits) < k:
                return list(best.values())[:count]
            k *= 2

    async def _owners(self, store: AsyncStore, hit_ids: list[str]) -> dict[str, LangGraphItem]:
        """The item records of the shards among `hit_ids`, by id: the truth for the item's value and
        times (a shard first written by a later put has a later `created_at`), and whether the shard
        is current (it was written by the item's last put: same `updated_at`)."""
        ids = list({mapping.owner_id(id): None for id in hit_ids if mapping.SHARD_MARK in id})
        if not ids:
            return {}
        return {record.id: record for record in await self._items_in(store).get_many(ids, vectors=False)}

    def _select(self, store: AsyncStore, roots: list[str], op: SearchOp, *, pushed: bool,
                unvectored: bool = False) -> _Selection:
        """What the store can run of (namespace prefix, filter, no vector) and the full check."""
        caps = store.capabilities
        starts = [root + mapping.encode_namespace(op.namespace_prefix) for root in roots]
        filter = op.filter

        def keep(record: LangGraphItem) -> bool:
            return (record.namespace.startswith(tuple(starts)) and (not unvectored or record.model == "")
                    and store_filters.matches(record.metadata, filter))

        if not pushed:
            return _Selection(None, False, keep)
        parts: list[Expr | None] = [F.model == "" if unvectored else None]
        exact = True
        if Capability.FILTER_RANGE in caps:
            ranges = [(F.namespace >= start) & (F.namespace < mapping.upper_bound(start)) for start in starts]
            parts.append(ranges[0] if len(ranges) == 1 else Or(tuple(ranges)))
        else:
            exact = False
        if filter:
            if Capability.FILTER_METADATA in caps:
                expr, exact_filter = store_filters.push_down(filter)
                parts.append(expr)
                exact = exact and exact_filter
            else:
                exact = False
        return _Selection(all_of(*parts), exact, keep)

    async def _list_namespaces(self, store: AsyncStore, op: ListNamespacesOp) -> list[Namespace]:
        conditions = op.match_conditions or ()
        depth = op.max_depth
        literal: list[str] = []
        for condition in conditions:  # the longest wildcard-free start of a prefix condition bounds the scan
            if condition.match_type == "prefix":
                head = list(condition.path[:condition.path.index("*")] if "*" in condition.path else condition.path)
                literal = max(literal, head, key=len)
        root = mapping.item_root(self.scope)
        start = root + mapping.encode_namespace(literal)
        found: set[Namespace] = set()
        items = self._items_in(store)
        if Capability.FILTER_RANGE in store.capabilities:
            above: Expr = F.namespace >= start
            while (record := await items.first(above & (F.namespace < mapping.upper_bound(start)),
                                               order_by="namespace", vectors=False)) is not None:
                namespace = mapping.decode_namespace(record.namespace[len(root):])
                above = F.namespace > record.namespace
                if all(_matches_condition(c, namespace) for c in conditions):
                    found.add(namespace)
                    if depth is not None and 0 <= depth <= len(namespace):  # skip what truncates to the same
                        above = F.namespace >= mapping.upper_bound(root + mapping.encode_namespace(namespace[:depth]))
        else:
            async for record in items.iterate(None, order_by="namespace", vectors=False):
                if record.namespace.startswith(start):
                    namespace = mapping.decode_namespace(record.namespace[len(root):])
                    if all(_matches_condition(c, namespace) for c in conditions):
                        found.add(namespace)
        if depth is not None:
            found = {namespace[:depth] for namespace in found}
        return sorted(found)[op.offset:op.offset + op.limit]

    # writing ------------------------------------------------------------------------------
    async def _write(self, store: AsyncStore, plan: _Plan, documents: dict[str, Vector]) -> None:
        """Deletes, then puts, each one store call per chunk, with no read first: the store keeps a
        replaced item's `created_at` (`keep_created`). A deleted item's shards go with it; a put's old
        shards are deleted first only where this store's index can give an item several vectors (a
        shard another index left behind is never returned: see `_nearest`)."""
        now = utcnow()
        doomed: list[ItemKey] = []
        reindexed: list[ItemKey] = []
        records: list[LangGraphItem] = []
        pairs: list[tuple[ItemKey, dict[str, Any]]] = []
        plain: Iterable[tuple[ItemKey, dict[str, Any]]] = pairs  # true when there are any (a zip is never empty here)
        texts = plan.texts
        indexed = self.embeddings is not None
        puts = plan.puts
        if not indexed and puts and None not in (values := list(map(_VALUE, puts.values()))):
            plain, puts = zip(puts, values, strict=True), {}  # puts alone (a batch's usual case): paired in C
        for item_key, op in puts.items():
            value = op.value
            if value is None:
                if self._storable(*item_key):  # an item no put could store is not there to delete
                    doomed.append(item_key)
            elif not indexed:
                pairs.append((item_key, value))  # type: ignore[arg-type]  # a dict since `_normalised`
            else:
                if self._may_shard(op.index):
                    reindexed.append(item_key)
                vectors = [documents[text] for text in texts[item_key]] if item_key in texts else ()
                records += mapping.records_for(self.scope, *item_key, value, vectors, self._model,  # type: ignore[arg-type]
                                               now, now)
        items = self._items_in(store)
        for start in range(0, len(reindexed), _CHUNK):
            await items.delete(where=_shards_of(self.scope, reindexed[start:start + _CHUNK]))
        for start in range(0, len(doomed), _CHUNK):
            chunk = doomed[start:start + _CHUNK]
            ids = [mapping.item_id(self.scope, ns, key) for ns, key in chunk]
            await items.delete(where=F.id.in_(ids) | _shards_of(self.scope, chunk))
        if plain:  # an index-less store's puts: fields, no records (`core.field_puts`)
            await items._put_fields(mapping.plain_common(now, now), mapping.plain_fields(self.scope, plain),
                                    keep_created=True)
        else:
            await items._put_built(records, keep_created=True)  # built from checked parts (`_check_put`)

    def _may_shard(self, index: Literal[False] | list[str] | None) -> bool:
        """Whether this store's puts may give an item several vectors (shards): several paths, or a
        path that picks several texts."""
        if self.embeddings is None:
            return False
        paths = [path for path, _ in self._fields] if index is None or index is False else index
        return len(paths) > 1 or any("*" in path or "{" in path for path in paths)

    def __repr__(self) -> str:
        return f"<MnemostoreStore scope={self.scope!r} {self.store!r}>"


def _shards_of(scope: str, item_keys: Sequence[ItemKey]) -> Expr:
    """The shard records of these items: their namespace and key, grouped by namespace."""
    keys: dict[Namespace, list[str]] = {}
    for ns, key in item_keys:
        keys.setdefault(ns, []).append(key)
    parts = [(F.namespace == mapping.shard_root(scope) + mapping.encode_namespace(ns)) & F.key.in_(names)
             for ns, names in keys.items()]
    return parts[0] if len(parts) == 1 else Or(tuple(parts))


def _matches_condition(condition: MatchCondition, namespace: Namespace) -> bool:
    """LangGraph's prefix/suffix match, "*" matching any one label."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    ends = namespace[:len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(p == "*" or p == label for p, label in zip(path, ends, strict=True))


def _normalised(op: Op) -> Op:
    """The op with tuple namespaces and a plain dict value (LangGraph accepts any sequence and mapping)."""
    if isinstance(op, GetOp):
        got: Op = op._replace(namespace=tuple(op.namespace))
        return got
    if isinstance(op, PutOp):
        if type(op.namespace) is tuple and (op.value is None or type(op.value) is dict):
            return op  # already what the rest reads: no copy
        if op.value is not None and not isinstance(op.value, Mapping):
            raise ValidationError.one("value", f"must be a dict or None, not {type(op.value).__name__}")
        return op._replace(namespace=tuple(op.namespace), value=None if op.value is None else dict(op.value))
    if isinstance(op, SearchOp):
        return op._replace(namespace_prefix=tuple(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp):
        return op
    raise ValueError(f"Unknown operation type: {type(op)}")


def _check_key(key: Any) -> None:
    if type(key) is str and key.isascii() and "\x00" not in key:  # `check_key`'s quick yes, without its call
        return
    if not isinstance(key, str):
        raise ValidationError.one("key", f"must be a string, not {type(key).__name__}")
    mapping.check_key(key)


def _check_value(value: Mapping[str, Any]) -> None:
    problem = find_json_problem(value, "value")
    if problem is not None:
        raise ValidationError([problem])


@lru_cache(maxsize=4096)
def _put_namespace(namespace: Namespace) -> None:
    """A `put`'s namespace checked by LangGraph's rules as `BaseStore.put` checks it (not empty, labels,
    root), once per namespace: a refused one raises, which the cache never keeps."""
    assert _validate_put_namespace is not None  # `put` takes this path only with LangGraph's check
    _validate_put_namespace(namespace)


def _check_page(limit: Any, offset: Any) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        if type(value) is not int or value < 0:
            raise ValidationError.one(name, f"must be a non-negative integer, not {value!r}")
