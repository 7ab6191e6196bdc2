"""`MnemostoreStore` against LangGraph's InMemoryStore (the reference), on real backends, and in a real graph."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import operator
import subprocess
import sys
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server
from tests.seed_kinds import forget_the_items_kind, forget_the_writes_kind, items_storage_made

import mnemostore
from mnemostore.backends.memory import MemoryBackend
from mnemostore.core.capabilities import Capability
from mnemostore.core.registry import registry

pytest.importorskip("langgraph.store.memory", reason="needs the langgraph extra")

from langgraph.store.base import GetOp, Item, ListNamespacesOp, Op, PutOp, SearchItem, SearchOp
from langgraph.store.memory import InMemoryStore

from mnemostore.integrations.langgraph import MnemostoreStore

__all__ = ["postgres_server"]

DIMS = 8


@pytest.fixture(autouse=True)
def _items_kind_forgotten() -> Iterator[None]:
    """`MnemostoreStore` registers its item kind, `MnemostoreSaver` its write kind; forgotten after each test
    (see `forget_the_items_kind`)."""
    yield
    forget_the_items_kind()
    forget_the_writes_kind()


def items(store: mnemostore.Store) -> mnemostore.Collection[Any]:
    """The collection `MnemostoreStore` keeps its items in (store format 2), its kind registered."""
    from mnemostore.kinds.langgraph_items import LangGraphItem

    return store.collection(mnemostore.register_kind(LangGraphItem))


def embed(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic stand-in for an embedding model: equal texts, equal vectors."""
    return [np.random.default_rng(zlib.crc32(text.encode())).normal(size=DIMS).tolist() for text in texts]


class CosineOnlyBackend(MemoryBackend):
    """The reference backend without filter.range, filter.metadata or vector.filtered: every fallback runs."""

    name: ClassVar[str] = "cosine-only-memory"
    schemes: ClassVar[tuple[str, ...]] = ("cosine-only-memory",)
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.VECTOR_COSINE})


@pytest.fixture(params=["memory", "sqlite", "postgres", "cosine-only"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty store on one backend."""
    if request.param == "postgres":
        server: PostgresTestServer = request.getfixturevalue("postgres_server")
        yield server.url()
    elif request.param == "cosine-only":
        registry.register(CosineOnlyBackend, replace=True)
        yield f"cosine-only-memory://{uuid.uuid4().hex}"
        registry.unregister(CosineOnlyBackend.name)
    else:
        yield {"memory": f"memory://{uuid.uuid4().hex}", "sqlite": f"sqlite:///{tmp_path / 's.db'}"}[request.param]


@pytest.fixture
def store(url: str) -> Iterator[mnemostore.Store]:
    with mnemostore.open(url) as opened:
        yield opened


INDEX: Any = {"dims": DIMS, "embed": embed, "fields": ["text", "title"]}


# the layout ------------------------------------------------------------------------------------

ODD_NAMESPACES = [("a",), ("a", "b"), ("a/b",), ("a%2Fb",), ("%", "/"), ("x:y", "z#w"), ("é", "😀", "\t"),
                  ("a", "b", "c", "d", "e"), ("langgraph:", "a")]


def test_namespaces_keys_and_values_round_trip(store: mnemostore.Store) -> None:
    lg = MnemostoreStore(store)
    value = {"text": "é\n", "n": -2**63, "f": 0.1, "nested": {"list": [1, None, {"x": True}]}, "": "empty key"}
    for i, namespace in enumerate(ODD_NAMESPACES):
        for key in ("", "k", "k/1", "%2F", "a.b", "😀"):
            lg.put(namespace, key, {**value, "i": i})
    for i, namespace in enumerate(ODD_NAMESPACES):
        item = lg.get(namespace, "k/1")
        assert item is not None and item.namespace == namespace and item.key == "k/1"
        assert item.value == {**value, "i": i}
        assert {(x.namespace, x.key) for x in lg.search(namespace, limit=100) if x.namespace == namespace} == {
            (namespace, key) for key in ("", "k", "k/1", "%2F", "a.b", "😀")}
    assert lg.list_namespaces(limit=100) == sorted(ODD_NAMESPACES)
    assert lg.get(("a",), "missing") is None and lg.get(("missing",), "k") is None
    assert {x.namespace for x in lg.search(("a",), limit=100)} == {("a",), ("a", "b"), ("a", "b", "c", "d", "e")}


def test_records_follow_the_mapping(store: mnemostore.Store) -> None:
    """One record per item (value in metadata, key in key); each further vector is a shard, replaced on put."""
    lg = MnemostoreStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text", "tags[*]"]})
    lg.put(("users", "u/1"), "prefs", {"text": "likes tea", "tags": ["a", "b"]})
    lg.put(("users", "u/1"), "plain", {"text": "no vector"}, index=False)
    records = {r.id: r for r in items(store).all()}
    assert len(records) == 4  # prefs + 2 shards, plain
    prefs = next(r for r in records.values() if r.key == "prefs" and "#" not in r.id)
    assert prefs.namespace == "langgraph:users/u%2F1/" and prefs.metadata == {"text": "likes tea", "tags": ["a", "b"]}
    assert prefs.model == "unnamed" and prefs.embedding is not None
    assert sorted(r.id for r in records.values() if r.namespace.startswith("langgraph#")) == [
        prefs.id + "#1", prefs.id + "#2"]
    plain = next(r for r in records.values() if r.key == "plain")
    assert plain.model == "" and plain.embedding is None

    lg.put(("users", "u/1"), "prefs", {"text": "likes tea", "tags": ["a"]})  # one shard fewer
    assert items(store).count() == 3
    lg.delete(("users", "u/1"), "prefs")
    assert [r.key for r in items(store).all()] == ["plain"]


def test_created_at_is_kept_and_updated_at_moves(store: mnemostore.Store) -> None:
    lg = MnemostoreStore(store)
    lg.put(("n",), "k", {"v": 1})
    first = lg.get(("n",), "k")
    lg.put(("n",), "k", {"v": 2})
    second = lg.get(("n",), "k")
    assert first is not None and second is not None and second.value == {"v": 2}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert [x.key for x in lg.search(("n",))] == ["k"]


def test_scopes_share_one_store_without_meeting(store: mnemostore.Store) -> None:
    one, two = MnemostoreStore(store, scope="one"), MnemostoreStore(store, scope="two")
    one.put(("a",), "k", {"who": 1})
    two.put(("a",), "k", {"who": 2})
    items(store).add(namespace="langgraph-lookalike", key="k")  # a record that is not an item
    one_item, two_item = one.get(("a",), "k"), two.get(("a",), "k")
    assert one_item is not None and one_item.value == {"who": 1}
    assert two_item is not None and two_item.value == {"who": 2}
    assert [x.value for x in two.search(())] == [{"who": 2}] and two.list_namespaces() == [("a",)]
    with pytest.raises(mnemostore.ConfigError, match="scope"):
        MnemostoreStore(store, scope="a:b")


# the reference: InMemoryStore --------------------------------------------------------------------

POOL_NS = [("a",), ("a", "b"), ("a", "b", "c"), ("a/b",), ("b", "a"), ("x:y", "b")]
INDEXED_KEYS = ["k1", "k/2", "%"]
UNINDEXED_KEYS = ["plain"]
"""Always put with an index path that finds nothing: items without a vector, never stale in the reference."""
WORDS = ["red", "green", "blue"]
TITLES = ["sky", "sea"]
"""Apart from WORDS: InMemoryStore fails on a put whose indexed fields hold the same text twice."""

values = st.fixed_dictionaries(
    {"text": st.sampled_from(WORDS), "title": st.sampled_from(TITLES), "n": st.integers(-2, 2) | st.sampled_from(
        [0.5, -1.5, 2.0])},
    optional={"flag": st.sampled_from([True, False, 1, 0, None]), "color": st.sampled_from(["red", "Red", ""]),
              "tags": st.lists(st.sampled_from(["a", "b"]), max_size=2), "meta": st.fixed_dictionaries(
                  {"a": st.integers(0, 1)}, optional={"b": st.booleans()})})
scalars = st.sampled_from([True, False, 0, 1, 1.0, None, "red", "", 2])
filter_specs = st.one_of(
    st.tuples(st.sampled_from(["flag", "color", "missing"]), scalars),
    st.tuples(st.sampled_from(["flag", "color"]), st.dictionaries(st.sampled_from(["$eq", "$ne"]), scalars,
                                                                  min_size=1)),
    st.tuples(st.just("n"), st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
                                            st.sampled_from([-1, 0, 0.5, 1, 2, True]), min_size=1, max_size=2)),
    st.tuples(st.just("tags"), st.lists(st.sampled_from(["a", "b"]), max_size=2)),
    st.tuples(st.just("meta"), st.sampled_from([{"a": 1}, {"a": 0, "b": True}, {"a": {"$gte": 1}}])),
)
filters = st.one_of(st.none(), st.none(), st.lists(filter_specs, min_size=1, max_size=2).map(dict))
puts = st.builds(lambda ns, key, value: ("put", ns, key, value), st.sampled_from(POOL_NS),
                 st.sampled_from(INDEXED_KEYS + UNINDEXED_KEYS), values)
deletes = st.builds(lambda ns, key: ("delete", ns, key), st.sampled_from(POOL_NS),
                    st.sampled_from(INDEXED_KEYS + UNINDEXED_KEYS))
searches = st.builds(lambda prefix, f, query, limit, offset: ("search", prefix, f, query, limit, offset),
                     st.sampled_from([(), ("a",), ("a", "b"), ("x:y",), ("a/b",), ("zz",)]), filters,
                     st.none() | st.sampled_from(WORDS + TITLES), st.integers(0, 4), st.integers(0, 3))
listings = st.builds(lambda prefix, suffix, depth, limit, offset: ("list", prefix, suffix, depth, limit, offset),
                     st.sampled_from([None, ("a",), ("*", "b"), ("a", "*")]), st.sampled_from([None, ("b",), ("*",)]),
                     st.none() | st.integers(0, 3), st.integers(0, 5), st.integers(0, 2))
operations = st.tuples(st.lists(puts, min_size=3, max_size=12),
                       st.lists(st.one_of(puts, deletes, searches, searches, searches, listings), min_size=4,
                                max_size=25)).map(lambda parts: parts[0] + parts[1])

_SCOPES = itertools.count()
EXAMPLES = {"memory": 200, "sqlite": 150, "postgres": 100, "cosine-only": 150}


@contextmanager
def on_a_loop(url: str) -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """An AsyncStore on `url` opened on an event loop in a thread of its own, and a function that
    calls a factory on that loop (where a LangGraph class over the AsyncStore must be built)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        astore = asyncio.run_coroutine_threadsafe(mnemostore.open_async(url), loop).result()

        async def build(make: Callable[[mnemostore.AsyncStore], Any]) -> Any:
            return make(astore)

        try:
            yield lambda make: asyncio.run_coroutine_threadsafe(build(make), loop).result()
        finally:
            asyncio.run_coroutine_threadsafe(astore.aclose(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.parametrize("facade", ["Store", "AsyncStore"])
def test_same_results_as_in_memory_store(store: mnemostore.Store, url: str, facade: str,
                                         request: pytest.FixtureRequest) -> None:
    """Random puts, deletes, searches (filters, queries, pages) and listings, each example on an emptied store.
    Over an AsyncStore the calls come from this thread and run on the store's loop (fewer examples:
    the coroutines are the same, only the calls differ)."""
    backend = request.node.callspec.params["url"]
    with ExitStack() as stack:
        if facade == "AsyncStore":
            build = stack.enter_context(on_a_loop(url))
        else:
            def build(make: Callable[[Any], Any]) -> Any:
                return make(store)
        compare(store, build, EXAMPLES[backend] // (3 if facade == "AsyncStore" else 1))


def compare(store: mnemostore.Store, build: Callable[[Callable[[Any], Any]], Any], examples: int) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(operations)
    def run(ops: list[tuple[Any, ...]]) -> None:
        items(store).delete(where={})  # the memory backends scan every record on each query
        scope = f"p{next(_SCOPES)}"
        ours = build(lambda over: MnemostoreStore(over, index=INDEX, scope=scope))
        ref = InMemoryStore(index=INDEX)
        for op in ops:
            check_operation(ours, ref, op)
        for namespace in POOL_NS:
            for key in INDEXED_KEYS + UNINDEXED_KEYS:
                assert same_item(ours.get(namespace, key), ref.get(namespace, key))

    run()


def check_operation(ours: MnemostoreStore, ref: InMemoryStore, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "put":
        _, namespace, key, value = op
        index = ["nothing.here"] if key in UNINDEXED_KEYS else None
        ours.put(namespace, key, value, index=index)
        ref.put(namespace, key, value, index=index)
    elif kind == "delete":
        ours.delete(op[1], op[2])
        ref.delete(op[1], op[2])
    elif kind == "search":
        _, prefix, filter, query, limit, offset = op
        everything = ref.search(prefix, filter=filter, query=query, limit=1000)
        page = ours.search(prefix, filter=filter, query=query, limit=limit, offset=offset)
        if query is None:
            full = ours.search(prefix, filter=filter, limit=1000)
            assert sorted(map(describe, full)) == sorted(map(describe, everything))
            assert [x.updated_at for x in full] == sorted((x.updated_at for x in full), reverse=True)
            assert page == full[offset:offset + limit]
        else:
            assert_same_ranking(page, everything[offset:offset + limit], {(x.namespace, x.key): x for x in everything})
    else:
        _, prefix, suffix, depth, limit, offset = op
        expected = live_copy(ref).list_namespaces(prefix=prefix, suffix=suffix, max_depth=depth, limit=limit,
                                                  offset=offset)
        assert ours.list_namespaces(prefix=prefix, suffix=suffix, max_depth=depth, limit=limit,
                                    offset=offset) == expected


def describe(item: Item) -> tuple[tuple[str, ...], str, str]:
    return item.namespace, item.key, repr(item.value)


def same_item(a: Item | None, b: Item | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and describe(a) == describe(b))


def assert_same_ranking(page: list[SearchItem], expected: list[SearchItem],
                        by_key: dict[tuple[tuple[str, ...], str], SearchItem]) -> None:
    """Position by position the same scores (float32 noise aside); each item its own score; ties in any order."""
    assert len(page) == len(expected), (page, expected)
    assert len({(x.namespace, x.key) for x in page}) == len(page)
    for mine, theirs in zip(page, expected, strict=True):
        reference = by_key[(mine.namespace, mine.key)]
        assert repr(mine.value) == repr(reference.value)
        for score in (theirs.score, reference.score):
            assert (mine.score is None) == (score is None)
            if mine.score is not None and score is not None:
                assert mine.score == pytest.approx(score, abs=1e-5)


def live_copy(ref: InMemoryStore) -> InMemoryStore:
    """The reference's items in a fresh InMemoryStore: it lists namespaces it merely saw (emptied, or read)."""
    copy = InMemoryStore()
    for namespace, items in ref._data.items():
        for key, item in items.items():
            copy.put(namespace, key, item.value)
    return copy


# searches -----------------------------------------------------------------------------------------

def test_filters_run_inside_vector_search(store: mnemostore.Store) -> None:
    """k results whenever k match, although far better-scoring items do not match the filter."""
    lg = MnemostoreStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    lg.batch([PutOp(("docs",), f"near{i}", {"text": "red", "kind": "near"}) for i in range(300)]
             + [PutOp(("docs",), f"far{i}", {"text": f"other {i}", "kind": "far", "n": i}) for i in range(5)])
    found = lg.search(("docs",), query="red", filter={"kind": "far"}, limit=5)
    assert sorted(x.key for x in found) == [f"far{i}" for i in range(5)]
    found = lg.search(("docs",), query="red", filter={"n": {"$gte": 3}, "kind": {"$ne": "near"}}, limit=3)
    assert sorted(x.key for x in found) == ["far3", "far4"]
    best = lg.search(("docs",), query="red", limit=3)
    assert [x.score for x in best] == pytest.approx([1.0, 1.0, 1.0])


def test_items_with_several_vectors_rank_by_their_best(store: mnemostore.Store) -> None:
    index = {"dims": DIMS, "embed": embed, "fields": ["title", "paragraphs[*]"]}
    ours, ref = MnemostoreStore(store, index=index), InMemoryStore(index=index)  # type: ignore[arg-type]
    docs: dict[str, dict[str, Any]] = {
        f"d{i}": {"title": WORDS[i % 3], "paragraphs": [f"p{i}", WORDS[(i + 1) % 3], f"q{i}"]} for i in range(12)}
    docs["empty"] = {"title": None, "paragraphs": []}
    for x in (ours, ref):
        for key, value in docs.items():
            x.put(("docs",), key, value)
    for query in [*WORDS, "p3", "q7"]:
        everything = ref.search(("docs",), query=query, limit=100)
        by_key = {(x.namespace, x.key): x for x in everything}
        for offset, limit in ((0, 100), (0, 3), (2, 4), (11, 5)):
            assert_same_ranking(ours.search(("docs",), query=query, limit=limit, offset=offset),
                                everything[offset:offset + limit], by_key)


def test_ranges_compare_numbers_with_numbers_and_strings_with_strings(store: mnemostore.Store) -> None:
    """Where InMemoryStore coerces with float() or raises (missing, bool, text values), only like types match."""
    lg = MnemostoreStore(store)
    for key, n in {"int": 2, "float": 2.5, "bool": True, "text": "3", "none": None, "list": [5]}.items():
        lg.put(("r",), key, {"n": n})
    lg.put(("r",), "missing", {})
    lg.put(("r",), "other", {"m": 1})

    def keys(filter: dict[str, Any]) -> list[str]:
        return sorted(x.key for x in lg.search(("r",), filter=filter, limit=100))

    assert keys({"n": {"$gte": 1}}) == ["float", "int"]
    assert keys({"n": {"$gt": True}}) == ["float", "int"]  # a bool bound is the number 0 or 1
    assert keys({"n": {"$lt": "4"}}) == ["text"]
    assert keys({"n": {"$gt": 2, "$lte": 2.5}}) == ["float"]
    assert keys({"n": 1}) == ["bool"] and keys({"n": {"$ne": None}}) == ["bool", "float", "int", "list", "text"]
    assert keys({"n": None}) == ["missing", "none", "other"] and keys({"n": [5]}) == ["list"]
    assert keys({"m": 1, "n": {"$eq": None}}) == ["other"] and keys({"n": 2**70}) == []


def test_a_put_replaces_the_items_vectors(store: mnemostore.Store) -> None:
    """Unlike InMemoryStore, which keeps an item's old vectors when a put has fewer (or index=False)."""
    lg = MnemostoreStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    lg.put(("a",), "k", {"text": "red"})
    lg.put(("a",), "other", {"text": "blue"})
    lg.put(("a",), "k", {"text": "red"}, index=False)
    found = lg.search(("a",), query="red")
    assert [(x.key, x.score is None) for x in found] == [("other", False), ("k", True)]
    lg.put(("a",), "k", {"text": "red"}, index=["$"])  # "$" is the whole value, per put as in the config
    assert lg.search(("a",), query='{"text": "red"}', limit=1)[0].score == pytest.approx(1.0)


def test_a_shard_stands_for_its_item_only_as_its_last_put_left_it(store: mnemostore.Store) -> None:
    """A put writes without reading the item first: shards an index with fewer paths leaves behind are never
    returned, and a shard first written by a later put reports the item's own times."""
    several = MnemostoreStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text", "tags[*]"]})
    one = MnemostoreStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    one.put(("a",), "k", {"text": "red", "tags": ["green", "blue"]})
    first = one.get(("a",), "k")
    several.put(("a",), "k", {"text": "red", "tags": ["green", "blue"]})  # shards, written after the item
    hit = several.search(("a",), query="blue", limit=1)[0]
    assert first is not None and hit.score == pytest.approx(1.0)
    assert (hit.key, hit.created_at) == ("k", first.created_at)
    one.put(("a",), "k", {"text": "sky", "tags": ["blue"]})  # its shards stay, from the earlier put
    found = several.search(("a",), query="blue", limit=10)
    sky = float(np.dot(*(np.asarray(v) / np.linalg.norm(v) for v in embed(["sky", "blue"]))))
    assert [(x.key, x.value["text"], x.created_at) for x in found] == [("k", "sky", first.created_at)]
    assert found[0].score == pytest.approx(sky, abs=1e-5)
    several.delete(("a",), "k")
    assert items(store).count() == 0


def format_1_records(scope: str, namespace: tuple[str, ...], key: str, value: dict[str, Any],
                     texts: Sequence[str], created_at: datetime) -> list[Any]:
    """An item as store format 1 wrote it: an `Embedding` (the key in `text`) and a shard per further vector."""
    from mnemostore.core.records import Embedding
    from mnemostore.integrations.langgraph import store_mapping as m

    ident, encoded = m.item_id(scope, namespace, key), m.encode_namespace(namespace)
    vectors = embed(list(texts))
    common: dict[str, Any] = {"text": key, "metadata": value, "created_at": created_at, "updated_at": created_at,
                              "model": "unnamed" if vectors else ""}
    return [Embedding(id=ident, namespace=m.item_root(scope) + encoded, embedding=vectors[0] if vectors else None,
                      **common),
            *(Embedding(id=f"{ident}#{n}", namespace=m.shard_root(scope) + encoded, embedding=vector, **common)
              for n, vector in enumerate(vectors[1:], start=1))]


def test_a_format_1_store_moves_its_items_in_a_resumable_migration(store: mnemostore.Store, url: str) -> None:
    """Items format 1 kept as `Embedding`s move to the item kind in `mnemostore.0002_langgraph_item_kind`:
    a store left by older code refuses to open until migrated (when asked); an interrupted run resumes
    (an item an interrupted run already put is left as it is); items then read back, rank and list as
    before and keep their `created_at`; other embeddings (a look-alike, an item-like record whose id is
    not its item id) stay; `down` moves the items back as they were."""
    from mnemostore.kinds.langgraph_ids import item_id
    from mnemostore.migrations.langgraph_items import (
        LANGGRAPH_ITEMS_MIGRATION,
        LANGGRAPH_ITEMS_MIGRATION_ID,
        _to_item,
    )
    from mnemostore.migrations.ledger import LEDGER_KEY, Ledger, LedgerEntry
    from mnemostore.migrations.progress import Silent
    from mnemostore.migrations.records import run_moves
    from mnemostore.migrations.runner import Runner
    from mnemostore.testing.clauses.migrations import Interrupted, InterruptedAfterOneBatch

    then = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    stored = [*format_1_records("langgraph", ("users", "u/1"), "prefs", {"text": "red", "tags": ["blue"], "n": 1},
                                ["red", "blue"], then),
              *format_1_records("langgraph", ("users", "u2"), "plain", {"text": "none", "n": 2}, [], then),
              *format_1_records("langgraph", ("users", "u2"), "carried", {"text": "old", "n": 3}, [], then),
              *format_1_records("other", ("users",), "k", {"n": 4}, [], then)]
    store.embeddings.put(stored)
    store.embeddings.add(id="app", namespace="langgraph-lookalike", text="k")  # not an item
    store.embeddings.add(id="langgraph:", namespace="langgraph:users/", text="k")  # not its item id
    carried, = format_1_records("langgraph", ("users", "u2"), "carried", {"text": "new", "n": 3}, [], then)
    items(store).put([_to_item(carried)])  # what a crashed run put before deleting its batch
    backend = store.backend
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing(LANGGRAPH_ITEMS_MIGRATION_ID).to_json())
    forget_the_items_kind()  # a process of the older code never registered it
    with pytest.raises(mnemostore.PendingMigrations, match=LANGGRAPH_ITEMS_MIGRATION_ID):
        mnemostore.open(url, migrate="refuse")

    moving = dataclasses.replace(LANGGRAPH_ITEMS_MIGRATION, batch_size=3)  # ids: app, langgraph:, an item, ...
    with pytest.raises(Interrupted):
        run_moves(backend, moving, "up", lambda: None, InterruptedAfterOneBatch())
    assert store.embeddings.count() == 6, "the first batch's one item must have moved"
    assert run_moves(backend, moving, "up", lambda: None, Silent()) == 4  # resumed after it: the other items
    assert sorted(r.id for r in store.embeddings.all()) == ["app", "langgraph:"]
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).adding(LedgerEntry.of(LANGGRAPH_ITEMS_MIGRATION)).to_json())

    lg = MnemostoreStore(store, index={"dims": DIMS, "embed": embed, "fields": ["text", "tags[*]"]})
    prefs = lg.get(("users", "u/1"), "prefs")
    assert prefs is not None and prefs.value["n"] == 1 and prefs.created_at == then
    assert {x.key for x in lg.search(("users",), filter={"n": {"$gte": 2}})} == {"carried", "plain"}
    assert [(x.key, round(x.score or 0, 4)) for x in lg.search(("users",), query="blue", limit=1)] == [("prefs", 1.0)]
    assert lg.list_namespaces() == [("users", "u/1"), ("users", "u2")]
    got = lg.get(("users", "u2"), "carried")
    assert got is not None and got.value["text"] == "new"
    assert items(store).count() == 5  # prefs, its shard, plain, carried, other's k
    other = MnemostoreStore(store, scope="other")
    assert [x.value for x in other.search(())] == [{"n": 4}]
    lg.put(("users", "u2"), "plain", {"text": "again"})
    again = lg.get(("users", "u2"), "plain")
    assert again is not None and again.created_at == then and again.updated_at > then

    assert Runner(backend).down() == [LANGGRAPH_ITEMS_MIGRATION_ID]
    assert items(store).count() == 0
    back = {r.id: r for r in store.embeddings.all()}
    plain_id = item_id("langgraph", ("users", "u2"), "plain")
    expected = {r.id: r for r in stored if r.id not in (carried.id, plain_id)}
    assert {id: back[id] for id in expected} == expected
    assert back[carried.id].metadata == {"text": "new", "n": 3} and back[plain_id].metadata == {"text": "again"}
    assert back[plain_id].created_at == then and back["app"].text == "k"
    assert Runner(backend).up() == [LANGGRAPH_ITEMS_MIGRATION_ID] and store.embeddings.count() == 2


def test_moving_items_on_open_leaves_no_kind_registered(tmp_path: Path) -> None:
    """A process that moves a store's items on open (the item kind's module imported for the first time
    by the move) knows no more kinds after it than before: listings and copies see only what it wrote."""
    script = f"""
import mnemostore
from mnemostore.core.kinds import kind_names
from mnemostore.core.records import Embedding
from mnemostore.kinds.langgraph_ids import item_id
from mnemostore.migrations.ledger import LEDGER_KEY, Ledger
url = "sqlite:///{tmp_path / 'old.db'}"
with mnemostore.open(url) as store:
    store.embeddings.put([Embedding(id=item_id("langgraph", ("a",), "k"), namespace="langgraph:a/", text="k")])
    backend = store.backend
    backend.write_meta(LEDGER_KEY, Ledger.read(backend).removing("mnemostore.0002_langgraph_item_kind").to_json())
with mnemostore.open(url) as store:
    print(store.embeddings.count(), kind_names())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 ('outcome', 'heuristic', 'anti_pattern', 'checkpoint', 'embedding')"


def test_batches_read_before_they_write(store: mnemostore.Store) -> None:
    ours, ref = MnemostoreStore(store), InMemoryStore()
    ops: list[Op] = [PutOp(("a",), "k", {"v": 1}), ListNamespacesOp(), SearchOp(("a",)), GetOp(("a",), "k"),
           PutOp(("a",), "k", {"v": 2})]
    assert ours.batch(ops) == ref.batch(ops) == [None, [], [], None, None]
    item = ours.get(("a",), "k")
    assert item is not None and item.value == {"v": 2}


@pytest.mark.parametrize("facade", ["Store", "AsyncStore"])
def test_async_batches(store: mnemostore.Store, url: str, facade: str) -> None:
    async def scenario() -> None:
        async def aembed(texts: Sequence[str]) -> list[list[float]]:
            return embed(texts)

        over: Any = store if facade == "Store" else await mnemostore.open_async(url)
        lg = MnemostoreStore(over, index={"dims": DIMS, "embed": aembed, "fields": ["text"]})
        await lg.aput(("a",), "k1", {"text": "red"})
        await lg.aput(("a",), "k2", {"text": "blue"})
        found = await lg.asearch(("a",), query="blue", limit=1)
        assert [(x.key, round(x.score or 0, 4)) for x in found] == [("k2", 1.0)]
        assert await lg.alist_namespaces() == [("a",)]
        await lg.adelete(("a",), "k1")
        assert await lg.aget(("a",), "k1") is None
        assert [r.key for r in items(store).all()] == ["k2"]  # written to the store the fixture opened
        if facade == "AsyncStore":
            assert await asyncio.to_thread(lg.get, ("a",), "k2") is not None  # sync, from another thread
            await over.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("facade", ["Store", "AsyncStore"])
def test_setup_makes_the_items_storage_before_the_first_put(store: mnemostore.Store, url: str, facade: str) -> None:
    """As LangGraph's `SqliteStore.setup()` and `PostgresStore.setup()`: the items' table exists before any
    put, a second `setup` changes nothing, and the saver's `setup` finds its tables made with the store."""
    from mnemostore.integrations.langgraph import MnemostoreSaver

    items(store)  # the kind registered, as a MnemostoreStore registers it
    assert items_storage_made(store.backend, None) in (False, None)
    if facade == "Store":
        for _ in range(2):
            MnemostoreStore(store).setup()
            MnemostoreSaver(store).setup()
    else:
        async def scenario() -> None:
            async with await mnemostore.open_async(url) as over:
                for _ in range(2):
                    await MnemostoreStore(over).asetup()
                    await MnemostoreSaver(over).asetup()

        asyncio.run(scenario())
    assert items_storage_made(store.backend, None) in (True, None)
    assert items(store).count() == 0 and store.checkpoints.count() == 0
    lg = MnemostoreStore(store)
    lg.put(("a",), "k", {"v": 1})
    item = lg.get(("a",), "k")
    assert item is not None and item.value == {"v": 1}


def test_rejections(store: mnemostore.Store) -> None:
    lg = MnemostoreStore(store)
    with pytest.raises(NotImplementedError, match="TTL"):
        lg.put(("a",), "k", {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError, match="TTL"):
        lg.batch([PutOp(("a",), "k", {"v": 1}, ttl=5.0)])
    with pytest.raises(mnemostore.ValidationError, match=r"value\.when"):
        lg.put(("a",), "k", {"when": object()})
    with pytest.raises(mnemostore.ValidationError, match="64 bits"):
        lg.put(("a",), "k", {"n": 2**70})
    with pytest.raises(mnemostore.ValidationError, match="too long"):
        lg.put(("a" * 300, "b" * 300), "k", {"n": 1})
    with pytest.raises(mnemostore.ValidationError, match="NUL"):
        lg.put(("a",), "k\x00", {"n": 1})
    with pytest.raises(mnemostore.ValidationError, match="unknown operator"):
        lg.search(("a",), filter={"v": {"$regex": "x"}})
    with pytest.raises(mnemostore.ValidationError, match=r"\$gt compares"):
        lg.search(("a",), filter={"v": {"$gt": None}})
    with pytest.raises(ValueError, match="periods"):
        lg.batch([GetOp(("a.b",), "k")])
    lg.put(("a",), "v", {"text": "x"})
    MnemostoreStore(store, index={"dims": DIMS, "embed": embed}).put(("a",), "w", {"x": 1})
    assert items(store).count() == 2 and store.params.dimension == DIMS
    with pytest.raises(mnemostore.SchemaMismatch, match="dims"):
        MnemostoreStore(store, index={"dims": DIMS + 1, "embed": embed})
    with pytest.raises(mnemostore.ValidationError, match=r"index\.embed"):
        MnemostoreStore(store, index={"dims": DIMS, "embed": lambda texts: [[1.0]] * len(texts)}).put(
            ("a",), "x", {"y": 1})


# a real graph ---------------------------------------------------------------------------------------

class Chat(TypedDict):
    user: str
    said: Annotated[list[str], operator.add]


def build_graph(store: mnemostore.Store) -> Any:
    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    from mnemostore.integrations.langgraph import MnemostoreSaver

    def recall(state: Chat, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        memories = runtime.store.search(("memories", state["user"]), query=state["said"][-1], limit=1)
        return {"said": [f"recalled: {memories[0].value['fact']}" if memories else "recalled nothing"]}

    def remember(state: Chat) -> dict[str, Any]:
        fact = state["said"][0]
        get_store().put(("memories", state["user"]), uuid.uuid4().hex, {"fact": fact})
        return {"said": ["remembered"]}

    graph = StateGraph(Chat)
    graph.add_node("recall", recall)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "remember")
    graph.add_edge("remember", END)
    index = {"dims": DIMS, "embed": embed, "fields": ["fact"]}
    return graph.compile(checkpointer=MnemostoreSaver(store), store=MnemostoreStore(store, index=index))  # type: ignore[arg-type]


def test_a_graph_remembers_across_threads_and_reopens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    with mnemostore.open(url) as store:
        graph = build_graph(store)
        first = graph.invoke({"user": "ada", "said": ["likes tea"]}, {"configurable": {"thread_id": "t1"}})
        assert first["said"] == ["likes tea", "recalled nothing", "remembered"]
    with mnemostore.open(url) as store:  # a new store instance on the same file: the memory persisted
        graph = build_graph(store)
        second = asyncio.run(graph.ainvoke({"user": "ada", "said": ["likes tea"]},
                                           {"configurable": {"thread_id": "t2"}}))
        assert second["said"] == ["likes tea", "recalled: likes tea", "remembered"]
        other = graph.invoke({"user": "bob", "said": ["likes tea"]}, {"configurable": {"thread_id": "t3"}})
        assert other["said"][1] == "recalled nothing"
        memories = MnemostoreStore(store).search(("memories",), limit=10)
        assert sorted(m.namespace[1] for m in memories) == ["ada", "ada", "bob"]


def test_lazy_exports() -> None:
    import mnemostore.integrations.langgraph as package

    assert set(package.__all__) == set(package._EXPORTS) == {"MnemostoreSaver", "MnemostoreStore"}
    assert all(getattr(package, name).__name__ == name for name in package.__all__)



labels = st.text(st.characters(blacklist_characters=".\x00"), min_size=1, max_size=6) | st.sampled_from(
    ["lone \ud800", "a" * 300])
"""Namespace labels LangGraph itself accepts (no "." or NUL, not empty), with ones mnemostore refuses."""
item_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**64, 2**64) | st.floats() | st.text(max_size=4)
    | st.sampled_from(["nul\x00", "lone \ud800"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


@settings(max_examples=80, deadline=None)
@given(namespace=st.lists(labels, min_size=1, max_size=3), key=labels | st.sampled_from(["", "k\x00"]),
       value=st.dictionaries(st.text(max_size=4) | st.just("k\x00"), item_values, max_size=3))
def test_an_item_record_is_what_validation_makes_of_its_fields(namespace: list[str], key: str,
                                                                value: dict[str, Any]) -> None:
    """A put's record is built without pydantic's pass from parts the store checked: validating its fields
    gives the same record, and what validation refuses the put refuses, naming the field."""
    from mnemostore.core.errors import ValidationError
    from mnemostore.core.records import utcnow
    from mnemostore.core.vectors import as_vector
    from mnemostore.integrations.langgraph import store_mapping
    from mnemostore.kinds.langgraph_items import LangGraphItem

    with mnemostore.open(f"memory://{uuid.uuid4().hex}") as opened:
        lg = MnemostoreStore(opened)
        now = utcnow()
        try:
            ident = store_mapping.item_id("langgraph", namespace, key)
        except TypeError:  # a lone surrogate does not hash: the key or a label is refused before
            ident = "langgraph:x"
        fields = {"id": ident, "key": key, "metadata": value,
                  "namespace": store_mapping.item_root("langgraph") + store_mapping.encode_namespace(namespace),
                  "created_at": now, "updated_at": now}
        try:
            reference: LangGraphItem | None = LangGraphItem(**fields)
        except ValidationError:
            reference = None
        try:
            lg._plan([PutOp(tuple(namespace), key, value)])
        except ValidationError as refused:
            assert reference is None and refused.errors[0][0].split(".")[0].split("[")[0] in (
                "key", "namespace", "value"), refused.errors
            return
        assert reference is not None
        built, = store_mapping.records_for("langgraph", tuple(namespace), key, value, [], "", now, now)
        assert built.__dict__ == reference.__dict__
        assert LangGraphItem(**built.__dict__).__dict__ == built.__dict__
        vectors = [as_vector([0.5] * DIMS), as_vector([-1.0] * DIMS)]  # an item with a shard
        item, shard = store_mapping.records_for("langgraph", tuple(namespace), key, value, vectors, "m", now, now)
        for record, vector in ((item, vectors[0]), (shard, vectors[1])):
            validated = LangGraphItem(**{**record.__dict__, "embedding": vector.tolist()})
            assert {**validated.__dict__, "embedding": None} == {**record.__dict__, "embedding": None}
            assert validated.embedding.tolist() == record.embedding.tolist()
        assert (item.id, item.namespace, shard.id, shard.namespace) == (
            ident, fields["namespace"], ident + "#1", store_mapping.shard_root("langgraph") + fields["namespace"][10:])


def test_without_langgraphs_private_namespace_check_put_takes_base_stores_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain put reuses LangGraph's private `_validate_namespace`; a LangGraph without it must
    still refuse what `BaseStore.put` refuses and store the rest."""
    from langgraph.store.base import InvalidNamespaceError

    from mnemostore.integrations.langgraph import store as store_module

    monkeypatch.setattr(store_module, "_validate_put_namespace", None)
    with mnemostore.open(f"memory://{uuid.uuid4().hex}") as opened:
        lg = MnemostoreStore(opened)
        with pytest.raises(InvalidNamespaceError, match="langgraph"):
            lg.put(("langgraph", "x"), "k", {"a": 1})
        lg.put(("users", "u1"), "k", {"a": 1})
        item = lg.get(("users", "u1"), "k")
        assert item is not None and item.value == {"a": 1}


def _outcome(call: Callable[[], object], lg: MnemostoreStore, namespace: Any, key: Any) -> object:
    """What a put did: the error it raised (type and message), or the item it left (None: deleted)."""
    try:
        call()
    except Exception as refused:
        return type(refused), str(refused)
    item = lg.get(namespace, str(key))
    return None if item is None else (item.value, item.created_at == item.updated_at)


@settings(max_examples=60, deadline=None)
@given(namespace=st.lists(labels | st.sampled_from(["langgraph", "a.b", "", 7]), max_size=3).map(tuple)
       | st.just(["as", "list"]),
       key=labels | st.sampled_from(["", "k\x00", 7]),
       value=st.dictionaries(st.text(max_size=4), item_values, max_size=2) | st.just(None),
       ttl=st.sampled_from([None, None, 5.0]), engine=st.sampled_from(["memory", "sqlite"]))
@example(namespace=("x" * 600,), key="k", value={"a": 1}, ttl=None, engine="sqlite")
@example(namespace=("\ud800",), key="k", value={"a": 1}, ttl=None, engine="memory")
def test_a_plain_put_checks_and_writes_what_a_batch_of_one_does(
        tmp_path_factory: pytest.TempPathFactory, namespace: Any, key: Any, value: Any, ttl: float | None,
        engine: str) -> None:
    """`MnemostoreStore.put` writes a plain put without the batch around it: it refuses exactly what
    `BaseStore.put` (a batch of one) refuses, with the same error, and otherwise stores the same item."""
    from langgraph.store.base import BaseStore

    url = f"memory://{uuid.uuid4().hex}" if engine == "memory" else \
        f"sqlite:///{tmp_path_factory.mktemp('plain') / 's.db'}"
    with mnemostore.open(url) as opened:
        direct, batched = MnemostoreStore(opened, scope="direct"), MnemostoreStore(opened, scope="batched")
        for _ in range(2):  # the second time, the namespace's checks are cached
            ours = _outcome(lambda: direct.put(namespace, key, value, ttl=ttl), direct, namespace, key)
            reference = _outcome(lambda: BaseStore.put(batched, namespace, key, value, ttl=ttl), batched,
                                 namespace, key)
            assert ours == reference


@settings(max_examples=60, deadline=None)
@given(scope=st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True), namespace=st.lists(st.text(max_size=6), max_size=3),
       key=st.text(max_size=12))
def test_item_ids_are_the_sha256_stores_were_written_with(scope: str, namespace: list[str], key: str) -> None:
    """`item_id` hashes with CPython's own SHA-256 where it has one: the same id as hashlib's, so items an
    earlier version stored are found again."""
    import hashlib

    import orjson

    from mnemostore.kinds.langgraph_ids import item_id

    expected = f"{scope}:{hashlib.sha256(orjson.dumps([scope, namespace, key])).hexdigest()[:40]}"
    assert item_id(scope, tuple(namespace), key) == item_id(scope, namespace, key) == expected


_BATCH_NAMESPACES = st.sampled_from([("a",), ("a", "b"), ("a", "b"), ("langgraph", "x"), ("a.b",), ("",), (7,),
                                     (["unhashable"],), ("x" * 600,), ("\ud800",), ()]) | st.just(["as", "list"])


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(_BATCH_NAMESPACES, st.sampled_from(["k", "k", "j", "", "k\x00", "\ud800", 7]),
                              st.sampled_from([{"a": 1}, {"b": [1.5]}, {"c": float("nan")}, {"\x00": 1}, None]),
                              st.sampled_from([None, None, None, 5.0])), max_size=6),
       engine=st.sampled_from(["memory", "sqlite"]))
@example(ops=[(("x" * 600,), "k", None, None), (("x" * 600,), "k", {"a": 1}, None)], engine="memory")
@example(ops=[(("a",), "k", {"a": 1}, None), (("a",), "k\x00", {"a": 1}, None)], engine="sqlite")
@example(ops=[(("a",), "k", {"a": 1}, None), (("a",), "k", {"a": 1}, 5.0), (("a",), "j", {"c": float("nan")}, None)],
         engine="memory")
@example(ops=[(("a",), "k", {"a": 1}, None), (("\ud800",), "k", None, None)], engine="memory")  # a delete of
# text no put could store: nothing to delete (it raised a TypeError hashing the id, then refused the shard filter)
def test_a_batch_of_puts_refuses_what_checking_each_op_in_turn_refuses(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, Any, Any, Any]], engine: str) -> None:
    """`_plan` checks a put into a namespace an earlier put of the batch passed without checking the
    namespace again: the batch still refuses with the error of its first bad op and check, in order
    (LangGraph's labels, TTL, key, our namespace rules, value), and otherwise writes each item's last put."""
    from langgraph.store.base import validate_op_namespace

    from mnemostore.integrations.langgraph import store as store_module

    url = f"memory://{uuid.uuid4().hex}" if engine == "memory" else \
        f"sqlite:///{tmp_path_factory.mktemp('batch') / 's.db'}"
    puts = [PutOp(namespace, key, value, None, ttl) for namespace, key, value, ttl in ops]
    with mnemostore.open(url) as opened:
        lg = MnemostoreStore(opened)
        try:
            for op in [store_module._normalised(op) for op in puts]:  # each op checked in turn, as `_plan` did
                validate_op_namespace(op)
                lg._check_put(op)
            expected: object = None
        except Exception as refused:
            expected = type(refused), str(refused)
        try:
            lg.batch(puts)
            found: object = None
        except Exception as refused:
            found = type(refused), str(refused)
        assert found == expected
        if expected is None:
            last = {(tuple(op.namespace), op.key): op.value for op in puts}
            for (namespace, key), value in last.items():
                item = lg.get(namespace, key)
                assert (None if item is None else item.value) == value
