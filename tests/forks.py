"""Forking while another thread holds a lock: the child has only the forking thread, so a lock that
thread held stays held in it unless the code renews it at the fork (`os.register_at_fork`)."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any


@contextmanager
def held_by_another_thread(*locks: AbstractContextManager[Any]) -> Iterator[None]:
    """Hold `locks` on another thread for the block, as a thread in the middle of its work holds them."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(60)
    try:
        yield
    finally:
        release.set()
        holder.join()


def forked_exit_code(target: Callable[..., object], args: tuple[Any, ...], timeout: float = 30) -> int | None:
    """`target(*args)` in a forked child: its exit code; the test fails if the child hangs (a lock held)."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(timeout)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the child deadlocked on a lock held by a parent thread"
    return child.exitcode
