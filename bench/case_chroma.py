"""The chroma backend vs raw chromadb on the same records: batch put and top-10 search, embedded
(on disk) and over HTTP (a `chroma run` server started for the run, as the tests start it).

Two raw baselines write the same records with `collection.upsert` in Chroma's max batch size:
the rows mnemostore writes (the same ids, vectors, metadata and documents, built before the
clock starts: the ratio is the cost of mnemostore's own work), and rows a hand-written
application would write (its orjson document and the filter fields as metadata, built inside
the timed call). Searches query mnemostore's own collection through a second client: on its
directory (embedded), or a raw `HttpClient` on the same server (HTTP).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson
from case_search import numpy_top_k
from data import AGENTS, heuristic_dicts, unit_vectors
from harness import Results, Row, interleaved_per_call, median, timed

import mnemostore
from mnemostore.backends.chroma.options import ChromaOptions

if TYPE_CHECKING:
    from tests.chroma_server import ChromaTestServer

K = 10
FILTER_AGENT = AGENTS[3]
COLLECTION = "mnemo_heuristic"
"""mnemostore's collection of heuristics (default prefix, default tenant)."""
Rows = tuple[list[str], np.ndarray, list[str], list[dict[str, Any]]]


def _client(path: Path) -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))


def _http_client(port: int) -> Any:
    """A raw `HttpClient` made as mnemostore makes its own (telemetry off, same TLS setting); held for
    the run, as mnemostore holds its client for every store of a process."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    settings.chroma_server_ssl_verify = ChromaOptions().verify_ssl
    return chromadb.HttpClient(host="127.0.0.1", port=port, ssl=False, headers={}, settings=settings)


def _collection(client: Any, name: str) -> Any:
    """A collection configured as mnemostore configures its own (cosine, its HNSW defaults)."""
    defaults = ChromaOptions()
    hnsw = {"space": "cosine", "ef_search": defaults.ef_search, "ef_construction": defaults.ef_construction,
            "max_neighbors": defaults.max_neighbors}
    return client.create_collection(name, embedding_function=None, configuration={"hnsw": hnsw})


class Mode(Protocol):
    """Where one mode's stores live: mnemostore's store of repeat r, the raw baselines' collections."""

    label: str
    """Names the mode in search rows."""
    place: str
    """Names the mode in put rows: where the records go."""

    def store_url(self, r: int) -> str: ...

    def raw_collection(self, name: str) -> tuple[Any, Any]:
        """A fresh (client, collection) for a raw baseline."""

    def drop_raw(self, client: Any, name: str) -> None: ...

    def drop_store(self, r: int) -> None: ...

    def reader(self, r: int) -> AbstractContextManager[tuple[Any, str]]:
        """A raw client seeing store r, and the name of its heuristics collection."""


class Embedded:
    """Stores in directories of the run's temp dir; each raw baseline its own `PersistentClient`."""

    label = "embedded"
    place = "embedded, on disk"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def store_url(self, r: int) -> str:
        return f"chroma://{self.tmp / f'chroma-ours-{r}'}"

    def raw_collection(self, name: str) -> tuple[Any, Any]:
        client = _client(self.tmp / f"chroma-{name}")
        return client, _collection(client, COLLECTION)

    def drop_raw(self, client: Any, name: str) -> None:
        client.close()
        shutil.rmtree(self.tmp / f"chroma-{name}")

    def drop_store(self, r: int) -> None:
        shutil.rmtree(self.tmp / f"chroma-ours-{r}")

    @contextmanager
    def reader(self, r: int) -> Iterator[tuple[Any, str]]:
        client = _client(self.tmp / f"chroma-ours-{r}")  # mnemostore's settings: one system per directory
        try:
            yield client, COLLECTION
        finally:
            client.close()


class Server:
    """Stores on one `chroma run` server, each under its own collection prefix (as the tests
    isolate stores); the raw baselines' collections beside them, through one `HttpClient`."""

    label = "HTTP"
    place = "HTTP, local server"

    def __init__(self, server: ChromaTestServer) -> None:
        self.base_url = server.base_url
        self.client = _http_client(server.port)

    @staticmethod
    def prefix(r: int) -> str:
        return f"bench{r}_"

    def store_url(self, r: int) -> str:
        return f"{self.base_url}?prefix={self.prefix(r)}"

    def raw_collection(self, name: str) -> tuple[Any, Any]:
        return self.client, _collection(self.client, f"raw_{name}")

    def drop_raw(self, client: Any, name: str) -> None:
        client.delete_collection(f"raw_{name}")

    def drop_store(self, r: int) -> None:
        for collection in self.client.list_collections():
            if collection.name.startswith(self.prefix(r)):
                self.client.delete_collection(collection.name)

    def reader(self, r: int) -> AbstractContextManager[tuple[Any, str]]:
        return nullcontext((self.client, f"{self.prefix(r)}heuristic"))

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True)
class Data:
    """The run's records, built once and written alike by every mode."""

    vectors: np.ndarray
    dicts: list[dict[str, Any]]
    models: list[mnemostore.Heuristic]
    rows: Rows
    warm_dict: dict[str, Any]
    warm: mnemostore.Heuristic

    @classmethod
    def build(cls, n: int) -> Data:
        vectors = unit_vectors(n, seed=1)
        dicts = heuristic_dicts(0, n, vectors)
        models = [mnemostore.Heuristic(**d) for d in dicts]
        warm_dict = heuristic_dicts(n, n + 1, unit_vectors(1, seed=9))[0]
        return cls(vectors, dicts, models, same_rows(models), warm_dict, mnemostore.Heuristic(**warm_dict))


def same_rows(models: list[mnemostore.Heuristic]) -> Rows:
    """(ids, vectors, documents, metadatas) exactly as mnemostore's chroma backend writes them (cosine)."""
    from mnemostore.backends.chroma.rows import document_of, index_vector, metadata_of

    return ([m.id for m in models], np.stack([index_vector(m.embedding, "cosine") for m in models]),  # type: ignore[arg-type]
            [document_of(m) for m in models], [metadata_of(m, True) for m in models])


def hand_rows(dicts: list[dict[str, Any]]) -> Rows:
    """What an application would write: the record as an orjson document, its filter fields as metadata."""
    documents = [orjson.dumps({k: v for k, v in d.items() if k != "embedding"}).decode() for d in dicts]
    metadatas = [{"agent": d["agent"], "project_id": d["project_id"], "confidence": d["confidence"],
                  "created_at": int(d["created_at"].timestamp() * 1_000_000), "topic": d["metadata"]["topic"]}
                 for d in dicts]
    return [d["id"] for d in dicts], np.stack([d["embedding"] for d in dicts]), documents, metadatas


def upsert(client: Any, collection: Any, rows: Rows) -> None:
    """`collection.upsert` in batches of Chroma's max batch size."""
    ids, vectors, documents, metadatas = rows
    step = client.get_max_batch_size()
    for start in range(0, len(ids), step):
        stop = start + step
        collection.upsert(ids=ids[start:stop], embeddings=vectors[start:stop], documents=documents[start:stop],
                          metadatas=metadatas[start:stop])  # type: ignore[arg-type]


def raw_search(collection: Any, query: np.ndarray, agent: str | None = None) -> list[Any]:
    """`collection.query` for the top k (documents, metadata, distances), documents decoded."""
    found = collection.query(query_embeddings=[query], n_results=K, where={"agent": agent} if agent else None)
    return [(id, orjson.loads(doc), distance)
            for id, doc, distance in zip(found["ids"][0], found["documents"][0], found["distances"][0], strict=True)]


def bench_chroma(results: Results, n: int, repeat: int, tmp: Path, queries: int) -> None:
    """Both modes on the same records: embedded first, then over HTTP to a local server."""
    data = Data.build(n)
    _bench_mode(results, Embedded(tmp), data, repeat, queries)
    with ExitStack() as stack:
        try:
            from tests.chroma_server import ChromaTestServer  # as the tests start it

            server = ChromaTestServer()
        except Exception as exc:  # no `chroma` CLI or a server that would not start: report, go on
            results.skipped("chroma (HTTP server)", f"{type(exc).__name__}: {exc}"[:200])
            return
        stack.callback(server.stop)
        mode = Server(server)
        stack.callback(mode.close)
        _bench_mode(results, mode, data, repeat, queries)


def _bench_mode(results: Results, mode: Mode, data: Data, repeat: int, queries: int) -> None:
    n = len(data.models)
    t: dict[str, list[float]] = {"ours": [], "same": [], "hand": []}
    batch = 0
    for r in range(repeat):  # interleaved, so drift hits all alike; the first store is searched
        with mnemostore.open(mode.store_url(r)) as store:
            store.heuristics.put([data.warm])  # creates the collections and records the store's dimension
            store.heuristics.delete(data.warm.id)
            t["ours"].append(timed(lambda store=store: store.heuristics.put(data.models)))
        for key, build in (("same", lambda: data.rows), ("hand", lambda: hand_rows(data.dicts))):
            name = f"{key}-{r}"
            client, collection = mode.raw_collection(name)
            upsert(client, collection, same_rows([data.warm]) if key == "same" else hand_rows([data.warm_dict]))
            collection.delete(ids=[data.warm.id])
            t[key].append(timed(lambda client=client, collection=collection, build=build:
                                upsert(client, collection, build())))
            batch = client.get_max_batch_size()
            mode.drop_raw(client, name)
        if r:
            mode.drop_store(r)
    row = Row(f"chroma put {n:,} heuristics x384 ({mode.place})", median(t["ours"]), median(t["same"]),
              unit="rec/s", per=n, baseline_name=f"collection.upsert per {batch:,}, same rows", target=">= 0.80x")
    row.met = row.ratio is not None and row.ratio >= 0.8
    results.add(row)
    results.add(Row(f"chroma put {n:,} heuristics x384 ({mode.label}), vs hand-written rows", median(t["ours"]),
                    median(t["hand"]), unit="rec/s", per=n, baseline_name="collection.upsert, hand-written rows",
                    note="the application's rows: an orjson document and 5 metadata fields, without mnemostore's "
                         "exact-vector copy (base64 in metadata) and typed projections"))
    _bench_search(results, mode, data.vectors, repeat, queries)


def _bench_search(results: Results, mode: Mode, vectors: np.ndarray, repeat: int, queries: int) -> None:
    """mnemostore's search beside raw queries of its own collection, through a second client."""
    n = len(vectors)
    qs = unit_vectors(queries, seed=3)
    where = mnemostore.F.agent == FILTER_AGENT
    with mnemostore.open(mode.store_url(0)) as store, mode.reader(0) as (client, name):
        collection = client.get_collection(name)
        search = store.heuristics.search
        search(qs[0], k=K, vectors=False)
        raw_search(collection, qs[0])
        found = [[hit.record.id for hit in search(q, k=K, vectors=False)] for q in qs]
        truth = [[f"h{i:08d}" for i in numpy_top_k(vectors, q, K)] for q in qs]
        raw_found = [[hit[0] for hit in raw_search(collection, q)] for q in qs]
        recall, raw_recall = _recall(found, truth), _recall(raw_found, truth)
        t: dict[str, list[float]] = {"ours": [], "raw": [], "ours_f": [], "raw_f": []}
        for _ in range(repeat):
            for key, value in interleaved_per_call({
                "ours": lambda i: search(qs[i], k=K, vectors=False),
                "raw": lambda i: raw_search(collection, qs[i]),
                "ours_f": lambda i: search(qs[i], k=K, where=where, vectors=False),
                "raw_f": lambda i: raw_search(collection, qs[i], FILTER_AGENT),
            }, queries).items():
                t[key].append(value)
    m = {key: median(values) for key, values in t.items()}
    label = f"chroma top-{K} search {n:,} x384 ({mode.label})"
    row = Row(label, m["ours"], m["raw"], baseline_name="collection.query", target="<= 1.3x time (>= 0.77x)",
              note=f"mnemostore's own collection; recall@{K} vs numpy's exact top-{K}: mnemostore {recall:.3f}, "
                   f"raw query {raw_recall:.3f} (HNSW, ef_search {ChromaOptions().ef_search}; uniformly random "
                   "vectors are its hardest case)")
    row.met = row.ratio is not None and row.ratio >= 1 / 1.3
    results.add(row)
    results.add(Row(f"{label}, agent filter (10%)", m["ours_f"], m["raw_f"],
                    baseline_name="collection.query, where agent"))


def _recall(found: list[list[str]], truth: list[list[str]]) -> float:
    """Mean share of the exact top-k found."""
    return float(np.mean([len(set(ids) & set(exact)) / K for ids, exact in zip(found, truth, strict=True)]))
