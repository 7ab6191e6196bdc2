"""Run the mnemostore benchmarks and print a table of medians beside raw sqlite3/numpy baselines.

    python bench/run.py            # the full run (several minutes; the server groups take most)
    python bench/run.py --quick    # smaller sizes (a few minutes; the sqlite groups alone under a minute)
    python bench/run.py --repeat 7 --only search,checkpoints
    python bench/run.py --only async-postgres   # the async group's postgres rows alone

Not a test: nothing here asserts; the MET column compares each row with the issue's target.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # tests.pgvector_build

import numpy as np
from case_async import bench_async
from case_checkpoints import bench_checkpoints
from case_chroma import bench_chroma
from case_copy import bench_copy
from case_import import bench_import
from case_langgraph import bench_langgraph
from case_postgres import PARTS, bench_postgres
from case_put import bench_file_put, bench_file_single_put, bench_sqlite_put
from case_qdrant import bench_qdrant
from case_search import bench_search
from harness import MIN_RUNS, Results

import mnemostore


@dataclass(frozen=True)
class Sizes:
    put: int
    file_small: int
    file_large: int
    search: tuple[int, ...]
    queries: int
    checkpoints: int
    import_runs: int
    repeat: int
    copy: int
    copy_small: int
    postgres_put: int
    postgres_search: int
    chroma: int
    qdrant_disk: int
    qdrant_memory: int
    langgraph: int
    graph_steps: int
    langgraph_store: int
    async_n: int
    async_postgres_n: int
    async_tasks: int


FULL = Sizes(put=10_000, file_small=1_000, file_large=50_000, search=(10_000, 100_000), queries=50,
             checkpoints=1_000, import_runs=10, repeat=5, copy=100_000, copy_small=10_000,
             postgres_put=10_000, postgres_search=10_000, chroma=5_000, qdrant_disk=2_000, qdrant_memory=10_000,
             langgraph=200, graph_steps=150, langgraph_store=1_000, async_n=10_000, async_postgres_n=2_000,
             async_tasks=100)
QUICK = Sizes(put=10_000, file_small=1_000, file_large=10_000, search=(10_000,), queries=30,
              checkpoints=200, import_runs=5, repeat=3, copy=20_000, copy_small=2_000,
              postgres_put=2_000, postgres_search=2_000, chroma=1_000, qdrant_disk=300, qdrant_memory=2_000,
              langgraph=50, graph_steps=50, langgraph_store=200, async_n=10_000, async_postgres_n=500,
              async_tasks=20)
GROUPS = ("import", "put", "file", "search", "checkpoints", "copy", "postgres", "chroma", "qdrant", "langgraph",
          "async", "async-postgres")
POSTGRES_PARTS = tuple(f"postgres-{part}" for part in PARTS)
"""One part of the postgres group on its own (`--only postgres-search`: the search rows, 100,000 included
in full runs, without the puts and checkpoints)."""


def backend_problem(scheme: str) -> str | None:
    """Why a backend cannot be benchmarked here, or None."""
    try:
        mnemostore.registry.for_scheme(scheme)
    except mnemostore.MnemostoreError as exc:
        return str(exc).split(";")[0]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a few minutes)")
    parser.add_argument("--repeat", type=int, help="repeats per measurement; the median is reported "
                                                   "(default 5, or 3 with --quick)")
    parser.add_argument("--only", help=f"comma-separated groups to run: {','.join(GROUPS + POSTGRES_PARTS)}")
    parser.add_argument("--dir", type=Path, help="where to put the benchmark's stores (default: a temp dir)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    repeat = args.repeat or sizes.repeat
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    groups = set(args.only.split(",")) if args.only else set(GROUPS)
    if groups - set(GROUPS) - set(POSTGRES_PARTS):
        parser.error(f"unknown groups: {', '.join(sorted(groups - set(GROUPS) - set(POSTGRES_PARTS)))}; choose from "
                     f"{', '.join(GROUPS + POSTGRES_PARTS)}")
    postgres_parts = PARTS if "postgres" in groups else tuple(
        part for part in PARTS if f"postgres-{part}" in groups)
    if postgres_parts:
        groups.add("postgres")

    print(f"mnemostore {mnemostore.__version__} | Python {platform.python_version()} | sqlite {sqlite3.sqlite_version}"
          f" | numpy {np.__version__} | {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f}) | repeat {repeat}"
          f"{' | quick' if args.quick else ''}", flush=True)
    results = Results()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mnemostore-bench-", dir=args.dir) as directory:
        tmp = Path(directory)
        plan: list[tuple[str, str | None, Callable[[], None]]] = [
            ("import", None, lambda: bench_import(results, sizes.import_runs)),
            ("put", "sqlite", lambda: bench_sqlite_put(results, sizes.put, repeat, tmp)),
            ("file", "file", lambda: bench_file_put(results, sizes.put, repeat, tmp)),
            ("file", "file", lambda: bench_file_single_put(results, sizes.file_small, sizes.file_large, repeat, tmp)),
            *(("search", "sqlite", lambda n=n: bench_search(results, n, repeat, tmp, sizes.queries,
                                                            with_query=n == sizes.search[0]))
              for n in sizes.search),
            ("checkpoints", "sqlite", lambda: bench_checkpoints(results, sizes.checkpoints, repeat, tmp)),
            ("copy", "sqlite", lambda: bench_copy(results, sizes.copy, sizes.copy_small, min(repeat, 3), tmp)),
            ("postgres", "postgresql", lambda: bench_postgres(results, sizes.postgres_put, sizes.postgres_search,
                                                              repeat, tmp, sizes.queries, postgres_parts)),
            ("chroma", "chroma", lambda: bench_chroma(results, sizes.chroma, repeat, tmp, sizes.queries)),
            ("qdrant", "qdrant", lambda: bench_qdrant(results, sizes.qdrant_disk, sizes.qdrant_memory, repeat, tmp,
                                                      sizes.queries)),
            ("langgraph", "sqlite", lambda: bench_langgraph(results, sizes.langgraph, sizes.graph_steps,
                                                            sizes.langgraph_store, repeat, tmp, sizes.queries)),
            ("async", "sqlite", lambda: bench_async(  # its postgres rows once: in "async-postgres" where that runs
                results, sizes.async_n, sizes.async_postgres_n, sizes.async_tasks, repeat, tmp,
                backend_problem("postgresql") is None and "async-postgres" not in groups)),
            ("async-postgres", "postgresql", lambda: bench_async(
                results, sizes.async_n, sizes.async_postgres_n, sizes.async_tasks, repeat, tmp, True,
                postgres_only=True)),
        ]
        for group, scheme, run in plan:
            if group not in groups:
                continue
            problem = backend_problem(scheme) if scheme else None
            if problem:
                results.skipped(f"{group} ({scheme} backend)", problem)
                continue
            print(f"[{group}]", flush=True)
            run()
    at_least_runs = f" ({MIN_RUNS} for the checkpoint, LangGraph saver and graph rows)" if repeat < MIN_RUNS else ""
    print(f"\nMedians of {repeat} runs{at_least_runs}; RATIO = mnemostore's speed / the baseline's (1.00x = as fast), "
          f"measured in one run on the same data. Took {time.perf_counter() - started:.0f} s; "
          f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.\n")
    print(results.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
