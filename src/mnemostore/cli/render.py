"""Plain-text tables and JSON for the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def clip(text: str, width: int | None) -> str:
    """`text` cut to `width` characters, marking the cut with an ellipsis."""
    if width is None or len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], widths: Sequence[int | None] | None = None,
          indent: str = "") -> str:
    """Rows under a header, columns padded to fit; `widths` caps a column (None: no cap)."""
    caps = list(widths) if widths is not None else [None] * len(headers)
    cells = [[clip("" if value is None else str(value), caps[i]) for i, value in enumerate(row)] for row in rows]
    sizes = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = [headers, ["-" * size for size in sizes], *cells]
    return "\n".join(indent + "  ".join(cell.ljust(sizes[i]) for i, cell in enumerate(line)).rstrip()
                     for line in lines)


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)
