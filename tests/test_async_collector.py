"""The first `open_async` of a process freezes the long-lived objects (`core/collector.py`), once,
and leaves the collector working on everything newer; an application's own GC choice is kept."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def run(code: str, tmp_path: Path) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def test_the_first_open_freezes_what_lives_then_and_newer_cycles_are_still_collected(tmp_path: Path) -> None:
    out = run("""
        import asyncio, gc, weakref
        import mnemostore

        class Node:
            pass

        async def main():
            assert gc.get_freeze_count() == 0
            async with await mnemostore.open_async("sqlite:///a.db") as store:
                frozen = gc.get_freeze_count()
                assert frozen > 1000, frozen
                a, b = Node(), Node()
                a.other, b.other = b, a  # a cycle made after the freeze
                gone = weakref.ref(a)
                del a, b
                gc.collect()
                assert gone() is None
                await store.heuristics.add(condition="c", strategy="s")
            async with await mnemostore.open_async("sqlite:///b.db"):
                assert gc.get_freeze_count() <= frozen  # once per process (frozen objects may be freed)
            print("ok")

        asyncio.run(main())
    """, tmp_path)
    assert out == "ok"


def test_an_application_that_turned_the_collector_off_or_froze_itself_is_left_alone(tmp_path: Path) -> None:
    out = run("""
        import asyncio, gc
        import mnemostore

        async def main():
            gc.disable()
            async with await mnemostore.open_async("sqlite:///a.db"):
                assert gc.get_freeze_count() == 0 and not gc.isenabled()
            print("ok")

        asyncio.run(main())
    """, tmp_path)
    assert out == "ok"
    out = run("""
        import asyncio, gc
        import mnemostore

        async def main():
            gc.freeze()
            mine = gc.get_freeze_count()
            [object() for _ in range(10)]
            junk = [[i] for i in range(5000)]  # alive now: a freeze of ours would take these too
            async with await mnemostore.open_async("sqlite:///a.db"):
                assert gc.get_freeze_count() <= mine
            print("ok")

        asyncio.run(main())
    """, tmp_path)
    assert out == "ok"
