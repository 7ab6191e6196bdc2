"""The SQLite vector cache files: a cold search maps its matrix from `<db>-vectors/` instead of
reading every vector row, and a damaged, stale, foreign or half-written file is never used.

The oracle is core's own exact scoring (`scores` + `top_k`, ties by id) over what the database
holds, read back with sqlite3.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.forks import forked_exit_code, held_by_another_thread

import mnemostore
from mnemostore.backends.sqlite import vector_file, vector_files
from mnemostore.backends.sqlite.vector_files import replace_token
from mnemostore.core.vectorsearch import normalise_rows, prepare_query, scores, top_k
from mnemostore.testing.factories import make

DIM = 16
N = 1_500
"""Above `vector_files.MIN_ROWS`: matrices this size get a file."""


def vectors(n: int, seed: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def heuristics(vecs: np.ndarray[Any, Any], start: int = 0, **fields: Any) -> list[Any]:
    return [make("heuristic", start + i, embedding=v, **fields) for i, v in enumerate(vecs)]


def stored(db: Path, tenant: str = "") -> tuple[list[str], np.ndarray[Any, np.dtype[np.float32]]]:
    """Ids and vectors of the heuristics the database holds for `tenant`."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute('SELECT id, vec FROM "mnemo_heuristic" WHERE tenant = ? AND vec IS NOT NULL',
                            (tenant,)).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows], np.array([np.frombuffer(r[1], dtype=np.float32) for r in rows]).reshape(-1, DIM)


def expected(db: Path, query: np.ndarray[Any, Any], k: int = 10, tenant: str = "") -> list[tuple[str, float]]:
    ids, matrix = stored(db, tenant)
    if not ids:
        return []
    best = top_k(scores(normalise_rows(matrix), prepare_query(query, "cosine"), "cosine", prepared=True), ids, k,
                 "cosine")
    return [(ids[i], score) for i, score in best]


def found(store: mnemostore.Store, query: np.ndarray[Any, Any], k: int = 10) -> list[tuple[str, float]]:
    return [(hit.record.id, hit.score) for hit in store.heuristics.search(query, k=k, vectors=False)]


def rows_read(store: mnemostore.Store) -> int:
    return int(store.backend._cache.rows_read)  # type: ignore[attr-defined]


def cache_file(db: Path, tenant: str = "") -> Path:
    return vector_files.VectorFiles(db, None, "cosine").path("heuristic", tenant)  # type: ignore[arg-type]


def assert_exact(store: mnemostore.Store, db: Path, queries: np.ndarray[Any, Any], tenant: str = "") -> None:
    for query in queries:
        assert found(store, query) == expected(db, query, tenant=tenant)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def open_store(db: Path) -> Iterator[Callable[..., mnemostore.Store]]:
    opened: list[mnemostore.Store] = []

    def opener(**options: Any) -> mnemostore.Store:
        store = mnemostore.open(f"sqlite:///{db}", **options)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def seeded(open_store: Callable[..., mnemostore.Store], db: Path, n: int = N) -> None:
    """A store of n heuristics whose cache file is written (a search, then close waits for the writer)."""
    store = open_store()
    store.heuristics.put(heuristics(vectors(n, seed=1)))
    store.heuristics.search(vectors(1, seed=2)[0], k=3)
    store.close()
    assert vector_file.read_header(cache_file(db)) is not None


def test_a_cold_search_maps_the_file_and_reads_only_rows_written_since(
        open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    queries = vectors(5, seed=3)
    seeded(open_store, db)
    path = cache_file(db)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    reader = open_store()
    assert_exact(reader, db, queries)
    assert rows_read(reader) == 0  # nothing but the file: no vector row was read

    writer = open_store()  # another instance: 5 new records, 2 replaced with new vectors, 1 without one now
    writer.heuristics.put(heuristics(vectors(5, seed=4), start=N))
    writer.heuristics.put(heuristics(vectors(2, seed=5), start=10))
    writer.heuristics.put([make("heuristic", 20, embedding=None)])
    old_vectors = vectors(N, seed=1)
    assert_exact(reader, db, np.concatenate([queries, old_vectors[[10, 11, 20]]]))
    assert rows_read(reader) == 8  # only the rows written since
    assert [h.record.id for h in reader.heuristics.search(old_vectors[20], k=N + 10)].count(
        make("heuristic", 20).id) == 0

    again = open_store()  # the file is as it was (8 rows behind): a cold start merges them
    assert_exact(again, db, np.concatenate([queries, old_vectors[[10, 11, 20]]]))
    assert rows_read(again) == 8


def test_a_file_brought_up_to_date_keeps_replaced_rows_out(
        open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    seeded(open_store, db)
    before = vector_file.read_header(cache_file(db))
    store = open_store()
    assert found(store, vectors(1, seed=3)[0])
    store.heuristics.put(heuristics(vectors(100, seed=5), start=200))  # replaced: their old rows are dead
    store.heuristics.put(heuristics(vectors(vector_files.LAG_ROWS - 100, seed=6), start=N))  # a lag in all
    assert found(store, vectors(1, seed=3)[0])
    store.close()
    after = vector_file.read_header(cache_file(db))
    assert before is not None and after is not None
    assert (after.nonce, after.n, after.dead_n) == (before.nonce, N + vector_files.LAG_ROWS, 100)  # appended
    reader = open_store()
    queries = np.concatenate([vectors(N, seed=1)[200:205], vectors(3, seed=5), vectors(2, seed=3)])
    assert_exact(reader, db, queries)
    assert rows_read(reader) == 0

    with open(cache_file(db), "r+b") as f:  # the append's header torn: the one before it still holds
        f.seek(after.generation % vector_file.SLOTS * vector_file.PAGE + 100)
        f.write(b"\xff" * 8)
    assert vector_file.read_header(cache_file(db)) == before
    older = open_store()
    assert_exact(older, db, queries)
    assert rows_read(older) == vector_files.LAG_ROWS


DAMAGES: dict[str, Callable[[Path], None]] = {}


def damage(name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def register(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        DAMAGES[name] = fn
        return fn
    return register


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x40]))


@damage("a vector byte flipped")
def _vector_byte(path: Path) -> None:
    _flip(path, vector_file.SLOTS * vector_file.PAGE + 7 * DIM * 4 + 3)  # row 7, the query's best match


@damage("a seq byte flipped")
def _seq_byte(path: Path) -> None:
    header = vector_file.read_header(path)
    assert header is not None
    _flip(path, header.layout.offsets[1] + 8 * 100)


@damage("an id byte flipped")
def _id_byte(path: Path) -> None:
    header = vector_file.read_header(path)
    assert header is not None
    _flip(path, header.layout.offsets[5] + 5)


@damage("both headers torn")
def _headers(path: Path) -> None:
    with open(path, "r+b") as f:
        for slot in range(vector_file.SLOTS):
            f.seek(slot * vector_file.PAGE + 40)
            f.write(b"\xff" * 60)


@damage("truncated")
def _truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@damage("emptied")
def _emptied(path: Path) -> None:
    os.truncate(path, 0)


@pytest.mark.parametrize("how", sorted(DAMAGES))
def test_a_damaged_file_is_detected_and_the_answer_stays_exact(
        open_store: Callable[..., mnemostore.Store], db: Path, how: str) -> None:
    seeded(open_store, db)
    DAMAGES[how](cache_file(db))
    store = open_store()
    assert_exact(store, db, np.concatenate([vectors(N, seed=1)[[7]], vectors(3, seed=3)]))
    assert rows_read(store) == N  # rebuilt from the rows
    store.close()
    fresh = open_store()  # the rebuild wrote a good file again
    assert_exact(fresh, db, vectors(2, seed=3))
    assert rows_read(fresh) == 0


def test_a_file_from_another_database_or_before_a_migration_is_not_used(
        open_store: Callable[..., mnemostore.Store], db: Path, tmp_path: Path) -> None:
    other = tmp_path / "other" / "store.db"
    other.parent.mkdir()
    with mnemostore.open(f"sqlite:///{other}") as elsewhere:  # the same ids, other vectors
        elsewhere.heuristics.put(heuristics(vectors(N, seed=9)))
        elsewhere.heuristics.search(vectors(1, seed=2)[0], k=1)
    seeded(open_store, db)
    shutil.copyfile(cache_file(other), cache_file(db))
    store = open_store()
    assert_exact(store, db, vectors(3, seed=3))
    assert rows_read(store) == N
    store.close()

    store = open_store()
    assert found(store, vectors(1, seed=3)[0]) and rows_read(store) == 0
    store.backend.db.write(replace_token)  # type: ignore[attr-defined]  # what every layout migration does
    again = open_store()
    assert_exact(again, db, vectors(3, seed=3))
    assert rows_read(again) == N


def test_deletes_and_reembeddings_elsewhere_make_the_file_stale_not_wrong(
        open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    seeded(open_store, db)
    other = open_store()
    other.heuristics.delete([make("heuristic", 3).id])
    other.heuristics.update(make("heuristic", 4).id, set={"embedding": vectors(1, seed=6)[0]})
    store = open_store()
    assert_exact(store, db, np.concatenate([vectors(N, seed=1)[[3, 4]], vectors(1, seed=6), vectors(3, seed=3)]))
    assert rows_read(store) == N - 1  # the vector epoch moved: rebuilt


def test_a_database_restored_from_a_copy_never_trusts_the_newer_file(
        open_store: Callable[..., mnemostore.Store], db: Path, tmp_path: Path) -> None:
    seeded(open_store, db)
    backup = tmp_path / "backup.db"
    shutil.copyfile(db, backup)  # closed: the WAL is checkpointed into the file
    store = open_store()
    store.heuristics.put(heuristics(vectors(vector_files.LAG_ROWS + 50, seed=7), start=N))
    store.heuristics.search(vectors(1, seed=2)[0], k=1)
    store.close()
    newer = vector_file.read_header(cache_file(db))
    assert newer is not None and newer.seq == N + vector_files.LAG_ROWS + 50  # the file followed the writes

    shutil.copyfile(backup, db)  # restored: the file is ahead of the database
    restored = open_store()
    assert_exact(restored, db, vectors(3, seed=3))
    assert rows_read(restored) == N
    restored.close()
    shutil.copyfile(backup, db)
    writer = open_store()  # other records take the seqs the file knows, and no search updates it
    writer.heuristics.put(heuristics(vectors(vector_files.LAG_ROWS + 50, seed=8), start=5 * N))
    writer.close()
    assert vector_file.read_header(cache_file(db)) == newer
    reader = open_store()
    assert_exact(reader, db, np.concatenate([vectors(2, seed=7), vectors(2, seed=8), vectors(2, seed=3)]))
    assert rows_read(reader) == N + vector_files.LAG_ROWS + 50


def test_a_cache_that_cannot_be_written_costs_speed_only(
        open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    db.parent.mkdir(exist_ok=True)
    cache_file(db).parent.write_text("not a directory")  # mkdir fails even for root
    for _ in range(2):
        store = open_store()
        if not store.heuristics.count():
            store.heuristics.put(heuristics(vectors(N, seed=1)))
        assert_exact(store, db, vectors(3, seed=3))
        assert rows_read(store) == N
        store.close()


def test_each_tenant_has_its_own_file(db: Path) -> None:
    tenants = ["team/../a", "ünïcode tenant", "x" * 300]
    for i, tenant in enumerate(tenants):
        with mnemostore.open(f"sqlite:///{db}", tenant=tenant) as store:
            store.heuristics.put(heuristics(vectors(N, seed=20 + i)))
            store.heuristics.search(vectors(1, seed=3)[0], k=1)
    assert len(list(cache_file(db).parent.glob("*.vec"))) == len(tenants)
    for tenant in tenants:
        with mnemostore.open(f"sqlite:///{db}", tenant=tenant) as store:
            assert_exact(store, db, vectors(3, seed=3), tenant=tenant)
            assert rows_read(store) == 0


_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import mnemostore
    from mnemostore.testing.factories import make

    db, dim, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = np.random.default_rng(start)
    with mnemostore.open(f"sqlite:///{db}") as store:
        i = start
        while True:  # writes and searches until killed: builds, merges, file writes and appends
            batch = rng.standard_normal((700, dim)).astype(np.float32)
            store.heuristics.put([make("heuristic", i + j, embedding=v) for j, v in enumerate(batch)])
            store.heuristics.put([make("heuristic", (i * 7) % 500, embedding=batch[0] * -1)])  # a replacement
            store.heuristics.search(batch[1], k=5)
            if i == start:
                print("searched", flush=True)
            i += len(batch)
""")


def test_a_writer_killed_at_any_moment_leaves_exact_answers(
        open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    seeded(open_store, db, n=3_000)
    queries = vectors(3, seed=3)
    for round_, delay in enumerate([0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8]):
        process = subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(DIM), str(100_000 * (round_ + 1))],
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "searched"
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        store = open_store()
        assert_exact(store, db, queries)
        store.close()


def test_a_half_written_temporary_file_is_ignored(open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    seeded(open_store, db)
    path = cache_file(db)
    leftover = path.with_name(f".{path.name}.999999999.abcd.tmp")
    leftover.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    store = open_store()
    assert_exact(store, db, vectors(2, seed=3))
    assert rows_read(store) == 0


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 40), st.integers(1, 30)),
    st.tuples(st.just("replace"), st.integers(0, 40), st.integers(1, 5)),
    st.tuples(st.just("drop_vector"), st.integers(0, 40), st.just(1)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.just(1)),
    st.tuples(st.just("reembed"), st.integers(0, 40), st.just(1)),
    st.tuples(st.just("search"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
), min_size=1, max_size=25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_any_history_of_writes_reopens_and_searches_gives_exact_answers(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, ops: list[tuple[str, int, int]],
        seed: int) -> None:
    monkeypatch.setattr(vector_files, "MIN_ROWS", 1)  # every matrix gets a file, updated at once
    monkeypatch.setattr(vector_files, "LAG_ROWS", 1)
    db = tmp_path_factory.mktemp("history") / "store.db"
    rng = np.random.default_rng(seed)
    url = f"sqlite:///{db}"
    reader, writer = mnemostore.open(url), mnemostore.open(url)  # the writer is another instance
    try:
        for op, at, count in ops:
            ids = [make("heuristic", at + j).id for j in range(count)]
            if op == "put":
                writer.heuristics.put(heuristics(rng.standard_normal((count, DIM)).astype(np.float32), start=at))
            elif op == "replace":
                reader.heuristics.put(heuristics(rng.standard_normal((count, DIM)).astype(np.float32), start=at))
            elif op == "drop_vector":
                writer.heuristics.put([make("heuristic", at, embedding=None)])
            elif op == "delete":
                writer.heuristics.delete(ids)
            elif op == "reembed" and writer.heuristics.get_many(ids):
                writer.heuristics.update(ids[0], set={"embedding": rng.standard_normal(DIM).astype(np.float32)})
            elif op == "reopen":
                reader.close()
                reader = mnemostore.open(url)
            elif op == "search" and stored(db)[0]:
                assert_exact(reader, db, rng.standard_normal((2, DIM)).astype(np.float32))
        if stored(db)[0]:
            assert_exact(reader, db, rng.standard_normal((2, DIM)).astype(np.float32))
            reader.close()
            reader = mnemostore.open(url)
            assert_exact(reader, db, rng.standard_normal((2, DIM)).astype(np.float32))
    finally:
        reader.close()
        writer.close()


def _search_in_child(store: mnemostore.Store, db: Path, result: Any) -> None:
    store.heuristics.put(heuristics(vectors(3, seed=30), start=N))
    result.put(found(store, vectors(1, seed=3)[0]) == expected(db, vectors(1, seed=3)[0]))
    store.close()


def test_a_child_forked_while_another_thread_holds_the_cache_searches(
        open_store: Callable[..., mnemostore.Store], db: Path) -> None:
    import multiprocessing

    seeded(open_store, db)
    store = open_store()
    assert found(store, vectors(1, seed=3)[0])
    cache = store.backend._cache  # type: ignore[attr-defined]
    # as a thread building a matrix (or writing a file) holds them at the moment of the fork
    with held_by_another_thread(cache._lock, cache.files._lock):
        result = multiprocessing.get_context("fork").Queue()
        assert forked_exit_code(_search_in_child, (store, db, result)) == 0 and result.get(timeout=5) is True
