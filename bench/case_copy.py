"""Copying a whole store (`mnemostore.copy`, verification included) vs raw sqlite3 SELECT + INSERT.

The source is a SQLite store of mixed kinds (heuristics and embeddings with 384-dim vectors,
outcomes, anti-patterns, 1 KB checkpoints; one record in ten in a second tenant). Targets:
another SQLite file (beside the baseline), and where installed Qdrant's local engine on disk
and PostgreSQL (a pgserver started for the run), which get a smaller source: they write a
few thousand records a second at best.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from case_postgres import postgres_server
from data import AGENTS, TOPICS, heuristic_dicts, unit_vectors
from harness import Results, Row, median, timed

import mnemostore
from mnemostore.core.records import KINDS
from mnemostore.migrations.copying import CopyReport, copy

_BASE_TIME = datetime(2025, 1, 1, tzinfo=UTC)
SHARES = {"heuristic": 0.40, "outcome": 0.25, "anti_pattern": 0.10, "checkpoint": 0.15, "embedding": 0.10}
"""Share of each kind in the source store."""
_COPY_BATCH = 1000


def _other(kind: str, i: int, vectors: Any) -> dict[str, Any]:
    created = _BASE_TIME + timedelta(seconds=i)
    common = {"id": f"{kind[0]}{i:08d}", "agent": AGENTS[i % len(AGENTS)], "project_id": f"project-{i % 4}",
              "created_at": created, "updated_at": created, "metadata": {"topic": TOPICS[i % 5], "n": i}}
    if kind == "outcome":
        return {**common, "task_type": TOPICS[i % 5], "success": i % 3 != 0, "strategy_used": f"strategy {i % 7}",
                "duration_ms": i % 5000, "task_description": f"task {i}: touch the {TOPICS[i % 5]} module"}
    if kind == "anti_pattern":
        return {**common, "pattern": f"pattern {i}", "why_bad": "it hides failures", "better_alternative": "fail"}
    if kind == "checkpoint":
        state = {"step": i % 50, "messages": [f"message {j} of run {i // 50}: " + "lorem ipsum " * 6
                                              for j in range(8)]}
        return {**common, "run_id": f"run-{i // 50}", "node_id": f"node-{i % 50}", "sequence": i % 50,
                "state": state}
    return {**common, "namespace": TOPICS[i % 5], "text": f"chunk {i} of the docs", "model": "mini-384",
            "embedding": vectors[i]}


def build_source(url: str, n: int) -> dict[str, int]:
    """Write n mixed records (one in ten in tenant "acme"); return the count per kind."""
    counts = {kind: int(n * share) for kind, share in SHARES.items()}
    counts["heuristic"] += n - sum(counts.values())
    vectors = unit_vectors(counts["heuristic"] + counts["embedding"], seed=11)
    offset = counts["heuristic"]
    with mnemostore.open(url) as default, mnemostore.open(url, tenant="acme") as acme:
        for kind, count in counts.items():
            for start in range(0, count, 10_000):
                stop = min(count, start + 10_000)
                if kind == "heuristic":
                    dicts = heuristic_dicts(start, stop, vectors[start:])
                else:
                    dicts = [_other(kind, i, vectors[offset:]) for i in range(start, stop)]
                for store, tenant_rows in ((default, [d for i, d in enumerate(dicts, start) if i % 10]),
                                           (acme, [d for i, d in enumerate(dicts, start) if not i % 10])):
                    store.collection(kind).put(tenant_rows)
    return counts


def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Each record table's columns except the rowid `seq`."""
    names = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
             if name.removeprefix("mnemo_") in KINDS]
    return {name: [row[1] for row in conn.execute(f'PRAGMA table_info("{name}")') if row[1] != "seq"]
            for name in names}


def raw_copy(source: Path, destination: Path) -> None:
    """The same rows with sqlite3 only: SELECT in (tenant, id) order, INSERT per 1,000, one commit each,
    into a database with the same tables and indexes (WAL, synchronous=NORMAL)."""
    src = sqlite3.connect(source)
    dst = sqlite3.connect(destination, isolation_level=None)
    dst.execute("PRAGMA journal_mode = WAL")
    dst.execute("PRAGMA synchronous = NORMAL")
    for table, columns in _tables(src).items():
        names = ", ".join(f'"{c}"' for c in columns)
        cursor = src.execute(f'SELECT {names} FROM "{table}" ORDER BY tenant, id')
        insert = f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
        while rows := cursor.fetchmany(_COPY_BATCH):
            dst.execute("BEGIN")
            dst.executemany(insert, rows)
            dst.execute("COMMIT")
    src.close()
    dst.close()


def _empty_like(path: Path) -> None:
    """A fresh mnemostore SQLite store (tables and indexes, no rows) for the baseline to fill."""
    mnemostore.open(f"sqlite:///{path}").close()


def bench_copy(results: Results, n: int, small: int, repeat: int, tmp: Path) -> None:
    source = tmp / f"copy-source-{n}.db"
    counts = build_source(f"sqlite:///{source}", n)
    mix = ", ".join(f"{count:,} {kind}" for kind, count in counts.items())
    ours: list[float] = []
    raw: list[float] = []
    reports: list[CopyReport] = []
    for r in range(repeat):  # interleaved, so drift hits both alike
        target = tmp / f"copy-ours-{r}.db"
        ours.append(timed(lambda target=target: reports.append(copy(f"sqlite:///{source}", f"sqlite:///{target}"))))
        baseline = tmp / f"copy-raw-{r}.db"
        _empty_like(baseline)
        raw.append(timed(lambda baseline=baseline: raw_copy(source, baseline)))
        target.unlink()
        baseline.unlink()
    verify = median([sum(k.verify_seconds for k in report.kinds.values()) for report in reports])
    results.add(Row(f"copy {n:,} mixed records sqlite -> sqlite", median(ours), median(raw), unit="rec/s", per=n,
                    baseline_name="sqlite3 SELECT + INSERT",
                    note=f"{mix}; 384-dim vectors on heuristics and embeddings; verification (streaming the "
                         f"destination back and checksumming) is {verify:.1f} s of the {median(ours):.1f} s"))
    _others(results, small, tmp)


def _others(results: Results, n: int, tmp: Path) -> None:
    """Copies of a smaller store into engines that write more slowly than SQLite."""
    source = tmp / f"copy-source-{n}.db"
    build_source(f"sqlite:///{source}", n)
    for name, target in (("qdrant (local, on disk)", _qdrant), ("postgres (pgvector, local pgserver)", _postgres)):
        try:
            with target(tmp) as url:
                report = copy(f"sqlite:///{source}", url)
        except Exception as exc:  # a missing driver or a server that would not start: report, go on
            results.skipped(f"copy {n:,} mixed records sqlite -> {name}", f"{type(exc).__name__}: {exc}"[:200])
            continue
        verify = sum(k.verify_seconds for k in report.kinds.values())
        results.add(Row(f"copy {n:,} mixed records sqlite -> {name}", report.seconds, None, unit="rec/s", per=n,
                        note=f"one run; verification {verify:.1f} s of {report.seconds:.1f} s"))


@contextmanager
def _qdrant(tmp: Path) -> Iterator[str]:
    mnemostore.registry.for_scheme("qdrant")
    yield f"qdrant://{tmp / 'copy-qdrant'}"


@contextmanager
def _postgres(tmp: Path) -> Iterator[str]:
    with postgres_server(tmp) as base:
        yield f"{base}&schema=bench_{uuid.uuid4().hex[:8]}"

