"""Splitting a write into requests an engine accepts: bounded in count and in bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def chunks(items: Iterable[T], max_count: int, max_bytes: int, size: Callable[[T], int]) -> Iterator[list[T]]:
    """Consecutive runs of `items`, each at most `max_count` long and `max_bytes` by `size`.

    An item larger than `max_bytes` still goes out, alone: the engine decides whether it fits.
    """
    chunk: list[T] = []
    total = 0
    for item in items:
        weight = size(item)
        if chunk and (len(chunk) >= max_count or total + weight > max_bytes):
            yield chunk
            chunk, total = [], 0
        chunk.append(item)
        total += weight
    if chunk:
        yield chunk
