"""`import mnemostore` in a fresh interpreter vs the bare interpreter."""

from __future__ import annotations

import subprocess
import sys

from harness import Results, Row, median, timed


def _run(code: str) -> float:
    return timed(lambda: subprocess.run([sys.executable, "-c", code], check=True))


def bench_import(results: Results, runs: int) -> None:
    bare, imported, opened = [], [], []
    for _ in range(runs):  # interleaved, so drift hits all three alike
        bare.append(_run("pass"))
        imported.append(_run("import mnemostore"))
        opened.append(_run("import mnemostore; mnemostore.open('memory://').close()"))
    base = median(bare)
    for name, values, target in (("import mnemostore", imported, "<= +150 ms"),
                                 ("import mnemostore + open('memory://')", opened, "")):
        ours = median(values)
        added = ours - base
        results.add(Row(f"{name} (fresh interpreter, median of {runs})", ours, base, baseline_name="python -c pass",
                        target=target, met=added <= 0.150 if target else None,
                        ratio_text=f"+{added * 1000:.0f} ms"))
