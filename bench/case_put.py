"""Batch puts: sqlite vs raw sqlite3 executemany, the file backend vs raw JSON lines, and per-put cost vs size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
from custom_kind import Lesson, lessons
from data import heuristic_dicts, unit_vectors
from harness import Results, Row, median, timed
from rawsqlite import connect, insert_heuristics

import mnemostore


def bench_sqlite_put(results: Results, n: int, repeat: int, tmp: Path) -> None:
    dicts = heuristic_dicts(0, n, unit_vectors(n, seed=1))
    models = [mnemostore.Heuristic(**d) for d in dicts]
    ours_models, ours_dicts, raw = [], [], []
    for r in range(repeat):
        with mnemostore.open(f"sqlite:///{tmp / f'put-models-{r}.db'}") as store:
            ours_models.append(timed(lambda store=store: store.heuristics.put(models)))
        with mnemostore.open(f"sqlite:///{tmp / f'put-dicts-{r}.db'}") as store:
            ours_dicts.append(timed(lambda store=store: store.heuristics.put(dicts)))
        conn = connect(tmp / f"put-raw-{r}.db")
        raw.append(timed(lambda conn=conn: insert_heuristics(conn, dicts)))
        conn.close()
    rate = median(raw)
    row = Row(f"sqlite put {n:,} heuristics x384 (models)", median(ours_models), rate, unit="rec/s", per=n,
              baseline_name="sqlite3 executemany", target=">= 0.60x")
    row.met = row.ratio is not None and row.ratio >= 0.6
    results.add(row)
    results.add(Row(f"sqlite put {n:,} heuristics x384 (dicts, validated)", median(ours_dicts), rate, unit="rec/s",
                    per=n, baseline_name="sqlite3 executemany",
                    note="includes building and validating every record from a plain dict"))
    _custom_put(results, models, lessons(dicts), repeat, tmp)


def _custom_put(results: Results, models: list[Any], custom: list[Any], repeat: int, tmp: Path,
                chunk: int = 1000) -> None:
    """Both kinds put into two fresh stores `chunk` records at a time, in turn (each first every other
    time), so both sides see the same load; a repeat's sample is its total per side. Each store gets
    one record first, untimed: the custom kind's first write creates its table (timed apart)."""
    builtin_times, custom_times, first_writes = [], [], []
    for r in range(repeat):
        with (mnemostore.open(f"sqlite:///{tmp / f'put-builtin-{r}.db'}") as a,
              mnemostore.open(f"sqlite:///{tmp / f'put-custom-{r}.db'}") as b):
            a.heuristics.add(models[0].model_copy(update={"id": "warm-up"}))
            first_writes.append(timed(lambda b=b: b.collection(Lesson).add(custom[0].model_copy(
                update={"id": "warm-up"}))))
            sides = {"builtin": (a.heuristics, models, []), "custom": (b.collection(Lesson), custom, [])}
            for i, start in enumerate(range(0, len(models), chunk)):
                for name in ("builtin", "custom") if i % 2 else ("custom", "builtin"):
                    collection, records, times = sides[name]
                    times.append(timed(lambda c=collection, rs=records[start:start + chunk]: c.put(rs)))
            builtin_times.append(sum(sides["builtin"][2]))
            custom_times.append(sum(sides["custom"][2]))
    row = custom_row(f"sqlite put {len(models):,} of an application's kind x384 (models, {chunk:,} at a time)",
                     median(custom_times), median(builtin_times), unit="rec/s", per=len(models))
    row.note += f"; its first write, which creates its table, took {median(first_writes) * 1000:.1f} ms (untimed above)"
    results.add(row)


def custom_row(name: str, custom: float, builtin: float, **shape: Any) -> Row:
    """A custom kind (`custom_kind.Lesson`) beside the built-in heuristic: target >= 0.95x."""
    row = Row(name, custom, builtin, baseline_name="built-in heuristic, same fields", target=">= 0.95x",
              note="a kind declared with register_kind, the heuristic's fields, filters, counters and indexes",
              **shape)
    row.met = row.ratio is not None and row.ratio >= 0.95
    return row


def _raw_jsonl(path: Path, dicts: list[dict[str, Any]]) -> None:
    with path.open("ab") as handle:
        handle.write(b"".join(orjson.dumps(d, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for d in dicts))
        handle.flush()
        os.fsync(handle.fileno())


def bench_file_put(results: Results, n: int, repeat: int, tmp: Path) -> None:
    dicts = heuristic_dicts(0, n, unit_vectors(n, seed=1))
    models = [mnemostore.Heuristic(**d) for d in dicts]
    ours, raw = [], []
    for r in range(repeat):
        with mnemostore.open(f"file://{tmp / f'file-put-{r}'}") as store:
            ours.append(timed(lambda store=store: store.heuristics.put(models)))
        raw.append(timed(lambda r=r: _raw_jsonl(tmp / f"raw-{r}.jsonl", dicts)))
    row = Row(f"file put {n:,} heuristics x384 (models)", median(ours), median(raw), unit="rec/s", per=n,
              baseline_name="JSON lines + fsync", target=">= 5,000 rec/s")
    row.met = n / median(ours) >= 5000
    results.add(row)


def bench_file_single_put(results: Results, small: int, large: int, repeat: int, tmp: Path) -> None:
    """Median cost of one put into a store of `small` records vs one of `large`, interleaved put by put."""
    calls = 200
    stores, extras = {}, {}
    for size in (small, large):
        vectors = unit_vectors(size + calls * repeat, seed=4)
        url = f"file://{tmp / f'file-size-{size}'}"
        with mnemostore.open(url) as store:
            for start in range(0, size, 10_000):
                store.heuristics.put(heuristic_dicts(start, min(size, start + 10_000), vectors[start:]))
        extras[size] = [mnemostore.Heuristic(**d) for d in heuristic_dicts(size, size + calls * repeat,
                                                                           vectors[size:])]
        stores[size] = mnemostore.open(url)
    samples: dict[int, list[float]] = {small: [], large: []}
    try:
        for i in range(calls * repeat):
            for size in (small, large):
                samples[size].append(timed(lambda s=size, i=i: stores[s].heuristics.add(extras[s][i])))
    finally:
        for store in stores.values():
            store.close()
    row = Row(f"file single put at {large:,} records", median(samples[large]), median(samples[small]),
              baseline_name=f"same at {small:,}", target="~1x (size-independent)")
    row.met = row.ratio is not None and 0.67 <= row.ratio <= 1.5
    results.add(row)
