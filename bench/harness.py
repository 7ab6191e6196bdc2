"""Timing helpers and the result table: medians over repeats, each row beside its baseline."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Row:
    """One benchmark line. `ours`/`baseline` are seconds per unit of `per` (lower is better)."""

    name: str
    ours: float | None
    baseline: float | None
    unit: str = "ms"
    """How to show a value: "ms" (per operation) or "rec/s" (records per second, `per` records)."""
    per: int = 1
    baseline_name: str = ""
    target: str = ""
    met: bool | None = None
    note: str = ""
    ratio_text: str | None = None

    @property
    def ratio(self) -> float | None:
        """Our speed divided by the baseline's: 1.0 is as fast, 0.5 half as fast, 2.0 twice as fast."""
        if self.ours is None or self.baseline is None or self.ours == 0:
            return None
        return self.baseline / self.ours

    def show(self, seconds: float | None) -> str:
        if seconds is None:
            return "-"
        if self.unit == "rec/s":
            return f"{self.per / seconds:,.0f} rec/s"
        ms = seconds / self.per * 1000
        return f"{ms:.3f} ms" if ms < 10 else f"{ms:.1f} ms"


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        print(f"  {row.name}: {row.show(row.ours)} vs {row.show(row.baseline)}"
              + (f"  [{row.note}]" if row.note else ""), flush=True)
        return row

    def skipped(self, name: str, reason: str) -> None:
        self.add(Row(name, None, None, note=f"skipped: {reason}"))

    def table(self) -> str:
        headers = ("BENCHMARK", "MNEMOSTORE", "BASELINE", "RATIO", "TARGET", "MET")
        lines = []
        for row in self.rows:
            ratio = row.ratio_text or (f"{row.ratio:.2f}x" if row.ratio is not None else "-")
            met = "-" if row.met is None else ("yes" if row.met else "NO")
            baseline = row.show(row.baseline) + (f" ({row.baseline_name})" if row.baseline_name else "")
            lines.append((row.name, row.show(row.ours), baseline if row.baseline is not None else "-",
                          ratio, row.target, met))
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
        out = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip(),
               "  ".join("-" * w for w in widths)]
        out += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines]
        notes = [f"  {row.name}: {row.note}" for row in self.rows if row.note]
        if notes:
            out += ["", "Notes:", *notes]
        return "\n".join(out)


MIN_RUNS = 9
"""Runs per side at least, whatever `--repeat` says, of the rows that sit near their line (the LangGraph savers',
the graph's and the checkpoint group's): one run's time moves by 10-40% on a shared machine (GC, the other
side's heap, the load of its moment), so the medians of 3 runs moved the graph's ratio from 0.92x to 1.05x, a
facade `latest` of the varied state from 1.57x to 0.62x between two runs of one commit."""


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed_both(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call: on a loaded machine the CPU time is
    the steadier comparison, and on a disk that syncs each write the wall time is mostly the disk's."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def timed_clean(fn: Callable[[], object]) -> float:
    """`timed` after a full garbage collection: the checkpoint and LangGraph rows keep many decoded
    50 KB states alive, and how many full collections that costs depends on the heap's history (up to 2x)."""
    gc.collect()
    return timed(fn)


def at_least(row: Row, ratio: float = 1.0) -> Row:
    """`row` with the target "ratio >= `ratio`" and whether its measured ratio meets it."""
    row.target = f">= {ratio:.2f}x"
    row.met = row.ratio is not None and row.ratio >= ratio
    return row


def interleaved_per_call(fns: dict[str, Callable[[int], object]], calls: int) -> dict[str, float]:
    """Median seconds of each `fn(i)` over `calls` calls, the functions taking turns call by call:
    on a shared machine load comes and goes within a second, and a block of one function's calls
    then the other's would each catch a different load."""
    return {key: statistics.median(values) for key, values in interleaved_samples(fns, calls).items()}


def interleaved_samples(fns: dict[str, Callable[[int], object]], calls: int) -> dict[str, list[float]]:
    """Seconds of each of `calls` calls `fn(i)` of each function, the functions taking turns call by call,
    the lead moving one place each call (A B, B A, A B, ...): in a fixed order the first place paid or
    gained a few % of its own (two identical savers: postgres `put_writes` 2-6% slower first, a sqlite
    `list(limit=10)` 1-5% faster), which every call of one side then carried."""
    keys = list(fns)
    samples: dict[str, list[float]] = {key: [] for key in keys}
    for i in range(calls):
        lead = i % len(keys)
        for key in keys[lead:] + keys[:lead]:
            fn = fns[key]
            start = time.perf_counter()
            fn(i)
            samples[key].append(time.perf_counter() - start)
    return samples


def record_turns(timings: dict[str, list[float]], fns: dict[str, Callable[[int], object]], calls: int) -> None:
    """`interleaved_samples` of `fns`: each one's median call and mean call, times `calls`, appended to `timings`
    under its key and `<key>_mean` (a row compares the medians; `turns_note` gives the means' ratio)."""
    for key, values in interleaved_samples(fns, calls).items():
        timings.setdefault(key, []).append(statistics.median(values) * calls)
        timings.setdefault(f"{key}_mean", []).append(statistics.fmean(values) * calls)


def turns_note(m: dict[str, float], ours: str, theirs: str, *, by_mean: bool = False) -> str:
    """A row's note for calls timed by `record_turns`: the ratio of their means (of their medians where the
    row compares means, `by_mean`)."""
    if by_mean:
        return f"means of a call, the sides taking turns; medians {m[theirs] / m[ours]:.2f}x"
    return f"medians of a call, the sides taking turns; means {m[theirs + '_mean'] / m[ours + '_mean']:.2f}x"


def median(values: list[float]) -> float:
    return statistics.median(values)


def per_call(fn: Callable[[int], object], calls: int) -> float:
    """Median seconds of `fn(i)` over `calls` calls."""
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
