"""The chroma backend (embedded, on disk) vs raw chromadb on the same records: batch put and top-10 search.

Two raw baselines write the same records with `collection.upsert` in Chroma's max batch size:
the rows mnemostore writes (the same ids, vectors, metadata and documents, built before the
clock starts: the ratio is the cost of mnemostore's own work), and rows a hand-written
application would write (its orjson document and the filter fields as metadata, built inside
the timed call). Searches query mnemostore's own collection, through a second client on its directory.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from case_search import numpy_top_k
from data import AGENTS, heuristic_dicts, unit_vectors
from harness import Results, Row, median, timed

import mnemostore
from mnemostore.backends.chroma.options import ChromaOptions

K = 10
FILTER_AGENT = AGENTS[3]
COLLECTION = "mnemo_heuristic"
"""mnemostore's collection of heuristics (default prefix, default tenant)."""


def _client(path: Path) -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))


def _collection(client: Any, name: str) -> Any:
    """A collection configured as mnemostore configures its own (cosine, its HNSW defaults)."""
    defaults = ChromaOptions()
    hnsw = {"space": "cosine", "ef_search": defaults.ef_search, "ef_construction": defaults.ef_construction,
            "max_neighbors": defaults.max_neighbors}
    return client.create_collection(name, embedding_function=None, configuration={"hnsw": hnsw})


def same_rows(models: list[mnemostore.Heuristic]) -> tuple[list[str], np.ndarray, list[str], list[dict[str, Any]]]:
    """(ids, vectors, documents, metadatas) exactly as mnemostore's chroma backend writes them (cosine)."""
    from mnemostore.backends.chroma.rows import document_of, index_vector, metadata_of

    return ([m.id for m in models], np.stack([index_vector(m.embedding, "cosine") for m in models]),  # type: ignore[arg-type]
            [document_of(m) for m in models], [metadata_of(m, True) for m in models])


def hand_rows(dicts: list[dict[str, Any]]) -> tuple[list[str], np.ndarray, list[str], list[dict[str, Any]]]:
    """What an application would write: the record as an orjson document, its filter fields as metadata."""
    documents = [orjson.dumps({k: v for k, v in d.items() if k != "embedding"}).decode() for d in dicts]
    metadatas = [{"agent": d["agent"], "project_id": d["project_id"], "confidence": d["confidence"],
                  "created_at": int(d["created_at"].timestamp() * 1_000_000), "topic": d["metadata"]["topic"]}
                 for d in dicts]
    return [d["id"] for d in dicts], np.stack([d["embedding"] for d in dicts]), documents, metadatas


def upsert(client: Any, collection: Any, rows: tuple[list[str], np.ndarray, list[str], list[dict[str, Any]]]) -> None:
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
    vectors = unit_vectors(n, seed=1)
    dicts = heuristic_dicts(0, n, vectors)
    models = [mnemostore.Heuristic(**d) for d in dicts]
    warm_dict = heuristic_dicts(n, n + 1, unit_vectors(1, seed=9))[0]
    warm = mnemostore.Heuristic(**warm_dict)
    rows = same_rows(models)
    t: dict[str, list[float]] = {"ours": [], "same": [], "hand": []}
    for r in range(repeat):  # interleaved, so drift hits all alike; the first store is searched
        with mnemostore.open(f"chroma://{tmp / f'chroma-ours-{r}'}") as store:
            store.heuristics.put([warm])  # creates the collections and records the store's dimension
            store.heuristics.delete(warm.id)
            t["ours"].append(timed(lambda store=store: store.heuristics.put(models)))
        for key, build in (("same", lambda: rows), ("hand", lambda: hand_rows(dicts))):
            client = _client(tmp / f"chroma-{key}-{r}")
            collection = _collection(client, COLLECTION)
            upsert(client, collection, same_rows([warm]) if key == "same" else hand_rows([warm_dict]))
            collection.delete(ids=[warm.id])
            t[key].append(timed(lambda client=client, collection=collection, build=build:
                                upsert(client, collection, build())))
            batch = client.get_max_batch_size()
            client.close()
            shutil.rmtree(tmp / f"chroma-{key}-{r}")
        if r:
            shutil.rmtree(tmp / f"chroma-ours-{r}")
    row = Row(f"chroma put {n:,} heuristics x384 (embedded, on disk)", median(t["ours"]), median(t["same"]),
              unit="rec/s", per=n, baseline_name=f"collection.upsert per {batch:,}, same rows", target=">= 0.80x")
    row.met = row.ratio is not None and row.ratio >= 0.8
    results.add(row)
    results.add(Row(f"chroma put {n:,} heuristics x384, vs hand-written rows", median(t["ours"]), median(t["hand"]),
                    unit="rec/s", per=n, baseline_name="collection.upsert, hand-written rows",
                    note="the application's rows: an orjson document and 5 metadata fields, without mnemostore's "
                         "exact-vector copy (base64 in metadata) and typed projections"))
    _bench_search(results, tmp / "chroma-ours-0", vectors, repeat, queries)


def _bench_search(results: Results, path: Path, vectors: np.ndarray, repeat: int, queries: int) -> None:
    """mnemostore's search beside raw queries of its own collection, through a second client on the directory."""
    n = len(vectors)
    qs = unit_vectors(queries, seed=3)
    where = mnemostore.F.agent == FILTER_AGENT
    with mnemostore.open(f"chroma://{path}") as store:
        client = _client(path)  # same settings as mnemostore's: Chroma shares one system per directory
        collection = client.get_collection(COLLECTION)
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
        client.close()
    m = {key: median(values) for key, values in t.items()}
    label = f"chroma top-{K} search {n:,} x384"
    row = Row(label, m["ours"], m["raw"], baseline_name="collection.query", target="<= 1.3x time (>= 0.77x)",
              note=f"mnemostore's own collection; recall@{K} vs numpy's exact top-{K}: mnemostore {recall:.3f}, "
                   f"raw query {raw_recall:.3f} (HNSW, ef_search {ChromaOptions().ef_search}; uniformly random "
                   "vectors are its hardest case)")
    row.met = row.ratio is not None and row.ratio >= 1 / 1.3
    results.add(row)
    results.add(Row(f"{label}, agent filter (10%)", m["ours_f"], m["raw_f"],
                    baseline_name="collection.query, where agent"))


def interleaved_per_call(fns: dict[str, Callable[[int], object]], calls: int) -> dict[str, float]:
    """Median seconds of each `fn(i)` over `calls` calls, the functions taking turns call by call:
    on a shared machine load comes and goes within a second, and a block of one function's calls
    then the other's would each catch a different load."""
    samples: dict[str, list[float]] = {key: [] for key in fns}
    for i in range(calls):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn(i)
            samples[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in samples.items()}


def _recall(found: list[list[str]], truth: list[list[str]]) -> float:
    """Mean share of the exact top-k found."""
    return float(np.mean([len(set(ids) & set(exact)) / K for ids, exact in zip(found, truth, strict=True)]))
