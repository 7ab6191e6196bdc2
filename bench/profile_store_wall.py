"""Where a LangGraph store batch's wall time goes: `MnemostoreStore` on sqlite beside `SqliteStore` (both without
an index), one `batch` of `--n` PutOps into a store that already holds a batch (its tables made, its statements
prepared), with the process's CPU time and the WAL bytes each batch adds. Callgrind's instruction counts
(`profile_store.py`) miss what a wide row and a random key cost in caches and pages; this is the other view.

    python bench/profile_store_wall.py                     # 1,000 items a batch, 7 batches each
    python bench/profile_store_wall.py --n 300 --batches 11

Ours is also split into its parts, each timed around its call: the checks (`_plan`), the items' fields
(`plain_fields`), the rows (`FieldRows.rows`) and the write (`Connections.write`: executemany and commit).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from case_langgraph_store import _items, _sqlite_store
from langgraph.store.base import PutOp

import mnemostore
from mnemostore.integrations.langgraph import MnemostoreStore, store_mapping

PARTS = ("checks", "fields", "rows", "write")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _wal(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _timed(parts: dict[str, list[float]], name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """`call`, its seconds added to `parts[name]`'s last entry (none before the timed batches)."""
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            if parts[name]:
                parts[name][-1] += time.perf_counter() - start
    return timed


def _batches(store: Any, path: Path, items: list[Any], n: int, batches: int,
             parts: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Seconds, CPU seconds and WAL bytes of each batch after the first (which makes the tables)."""
    store.batch([PutOp(*item) for item in items[:n]])
    seen: dict[str, list[float]] = {"wall": [], "cpu": [], "wal": []}
    for b in range(1, batches + 1):
        ops = [PutOp(*item) for item in items[b * n:(b + 1) * n]]
        for values in (parts or {}).values():
            values.append(0.0)
        gc.collect()
        wal, cpu, start = _wal(path), _cpu(), time.perf_counter()
        store.batch(ops)
        seen["wall"].append(time.perf_counter() - start)
        seen["cpu"].append(_cpu() - cpu)
        seen["wal"].append(_wal(path) - wal)
    return seen


def _ours(where: Path, items: list[Any], n: int, batches: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    parts: dict[str, list[float]] = {name: [] for name in PARTS}
    path = where / "ours.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        ours = MnemostoreStore(store)
        ours._plan = _timed(parts, "checks", ours._plan)  # type: ignore[method-assign]
        fields = store_mapping.plain_fields
        store_mapping.plain_fields = _timed(parts, "fields", fields)  # type: ignore[assignment]
        backend: Any = store.backend
        prepared = backend._written_kind("langgraph_item")
        field_rows = prepared.field_rows

        def timed_rows(common: dict[str, Any], own: dict[str, Any]) -> Any:
            plan = field_rows(common, own)
            return plan if plan is None else dataclasses.replace(plan, rows=_timed(parts, "rows", plan.rows))

        object.__setattr__(prepared, "field_rows", timed_rows)  # a frozen dataclass: patched for this run only
        db = backend.db
        db.write = _timed(parts, "write", db.write)
        try:
            seen = _batches(ours, path, items, n, batches, parts)
        finally:
            store_mapping.plain_fields = fields  # type: ignore[assignment]
    return seen, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="items a batch")
    parser.add_argument("--batches", type=int, default=7, help="timed batches each side")
    args = parser.parse_args()
    items = _items((args.batches + 1) * args.n)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        ours, parts = _ours(where, items, args.n, args.batches)
        with _sqlite_store(where, None, "theirs") as store:
            theirs = _batches(store, where / "lgstore-theirs-theirs.db", items, args.n, args.batches)
    per = 1e6 / args.n
    print(f"a batch of {args.n:,} puts into a store holding {args.n:,}: medians of {args.batches} batches, per item")
    print(f"  {'':14} {'wall us':>8} {'cpu us':>8} {'WAL bytes':>10}")
    for who, seen in (("MnemostoreStore", ours), ("SqliteStore", theirs)):
        print(f"  {who:14} {statistics.median(seen['wall']) * per:8.2f} {statistics.median(seen['cpu']) * per:8.2f} "
              f"{statistics.median(seen['wal']) / args.n:10.0f}")
    print("  MnemostoreStore's parts, wall us per item: "
          + ", ".join(f"{name} {statistics.median(values) * per:.2f}" for name, values in parts.items()))


if __name__ == "__main__":
    main()
