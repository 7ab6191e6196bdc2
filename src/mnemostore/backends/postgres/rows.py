"""Rows of the postgres backend's statements as the protocol's values: records, field values, hits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from operator import itemgetter
from typing import Any

from ...core.protocol import Hit
from ...core.records import Record
from ...core.vectors import Vector
from .layout import KindLayout, decode_datetime

FROM_DISTANCE: dict[str, Callable[[float], float]] = {
    "cosine": lambda distance: 1.0 - distance,  # <=> is 1 - cosine similarity
    "dot": lambda distance: -distance,  # <#> is the negative inner product
    "l2": lambda distance: distance,
}
"""A score (as the reference defines it) from the distance the server ordered by."""


def record(kind_layout: KindLayout, row: tuple[Any, ...], vectors: bool) -> Record:
    """A record from a row of `Statements.select` (its embedding after the data columns if `vectors`)."""
    from .adapters import decode_vector

    vector = row[len(kind_layout.data_columns)] if vectors else None
    return kind_layout.decode(row, None if vector is None else decode_vector(vector))


def field_values(kind_layout: KindLayout, fields: Sequence[str], row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A `query_values` row: a datetime's two columns (instant, offset) become one value."""
    values, i = [], 0
    for name in fields:
        if name != "id" and kind_layout.types[name] is datetime:
            values.append(None if row[i] is None else decode_datetime(row[i], row[i + 1]))
            i += 2
        else:
            values.append(row[i])
            i += 1
    return tuple(values)


def by_tenant(rows: list[tuple[Any, ...]]) -> dict[str | None, list[tuple[Any, ...]]]:
    """Encoded rows (`KindLayout.encode`: id, tenant, …) grouped by tenant, in order."""
    groups: dict[str | None, list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault(row[1] or None, []).append(row)
    return groups


def hits(kind_layout: KindLayout, rows: list[tuple[Any, ...]], vector: Vector, k: int, metric: str,
         vectors: bool) -> list[Hit]:
    """The k best of `Statements.nearest`'s rows. Without embeddings the scores are the server's
    distances (float32 arithmetic, well within float32 precision of the reference's), ties by id;
    with them, the reference's float64 scores."""
    if not rows:
        return []
    if not vectors:
        convert, decode = FROM_DISTANCE[metric], kind_layout.decode
        return [_hit((decode(row), convert(row[-1]))) for row in sorted(rows, key=_DISTANCE_THEN_ID)]
    from .adapters import decode_matrix

    matrix = decode_matrix([row[len(kind_layout.data_columns)] for row in rows])
    records = [kind_layout.decode(row, matrix[i]) for i, row in enumerate(rows)]
    return _rescore(records, matrix, vector, k, metric)


distance = itemgetter(-1)
"""A row of `Statements.nearest`'s distance (its last column)."""
_DISTANCE_THEN_ID = itemgetter(-1, 0)
"""A row's sort key: its distance, then its id (the server orders by distance only)."""
_hit: Callable[[tuple[Record, float]], Hit] = partial(tuple.__new__, Hit)
"""`Hit(record, score)` from a pair, without the named tuple's Python-level `__new__` (ten per search)."""


def _rescore(records: list[Record], matrix: Any, vector: Vector, k: int, metric: str) -> list[Hit]:
    """Scores in float64 as the reference computes them, best first, ties by id."""
    import numpy as np

    from ...core.vectorsearch import scores, top_k

    values = scores(matrix.astype(np.float64), np.asarray(vector, dtype=np.float64), metric)
    best = top_k(values, [r.id for r in records], k, metric)
    return [Hit(records[i], score) for i, score in best]
