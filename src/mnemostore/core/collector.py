"""Keeps the cyclic garbage collector's full collections short while an `AsyncStore` works.

A batch of records is tens of thousands of new objects, and CPython collects its oldest generation
once it has grown by a quarter: a full collection walks every tracked object of the process with
the interpreter's lock held, so the event loop stops for as long (13.6 ms in the benchmark's small
process after a 10,000-record put; 50 ms and more in an application that imports LangGraph). The
objects alive when an application first opens an async store are mostly its long-lived set-up
(modules, classes, configuration): frozen (`gc.freeze`, after a collection), later full collections
skip them (5.9 ms in the same process). The collector stays on: newer objects are collected as
before, and frozen ones are still freed when nothing refers to them; only a cycle among objects
frozen then is never collected (`gc.unfreeze()` undoes it).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_done = False


def freeze_long_lived() -> None:
    """Once per process: collect, then freeze what survives; left alone if the application turned
    the collector off or froze objects itself (its own choice)."""
    global _done
    with _lock:
        if _done:
            return
        _done = True
        if gc.isenabled() and gc.get_freeze_count() == 0:
            gc.collect()
            gc.freeze()
