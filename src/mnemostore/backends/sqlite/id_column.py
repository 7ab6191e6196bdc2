"""The ids of a cached matrix's rows: packed UTF-8 (mapped from a cache file) plus a list appended since.

Nothing is decoded up front (100,000 ids would cost ~20 ms on the first search): ranking reads a
few ids to break ties, and a merge finds rows by id through each row's CRC-32 (`id_hash`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def encode_id(id_: str) -> bytes:
    return id_.encode("utf-8", "surrogatepass")


def id_hash(id_: str) -> int:
    """The hash a matrix keeps per row to find rows by id without decoding every id."""
    return zlib.crc32(encode_id(id_))


class LazyIds(Sequence[str]):
    """A sequence of ids each made on access by `_at` (slices too, for `Sequence`'s sake)."""

    def _at(self, index: int) -> str:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._at(index)


class IdColumn(LazyIds):
    """Row i's id: decoded from `packed` for i < `base`, else `tail[i - base]`.

    Like the matrix arrays, it only grows past what a reader may see: `extended` keeps
    rows [0, n) and replaces what lies beyond.
    """

    def __init__(self, packed: npt.NDArray[np.uint8] | None = None, offsets: npt.NDArray[np.int64] | None = None,
                 base: int = 0, tail: list[str] | None = None) -> None:
        self._packed = packed
        self._offsets = offsets
        self.base = base
        self._tail = [] if tail is None else tail

    def __len__(self) -> int:
        return self.base + len(self._tail)

    def _at(self, index: int) -> str:
        if index >= self.base:
            return self._tail[index - self.base]
        assert self._packed is not None and self._offsets is not None
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        return self._packed[start:end].tobytes().decode("utf-8", "surrogatepass")

    def extended(self, n: int, ids: list[str]) -> IdColumn:
        """This column with rows [0, n) kept and `ids` as rows n, n + 1, ... (in place)."""
        del self._tail[n - self.base:]
        self._tail.extend(ids)
        return self

    def packed(self, start: int, stop: int, first_offset: int) -> tuple[bytes, npt.NDArray[np.int64]]:
        """Rows [start, stop) as UTF-8 bytes and each id's end offset, counting from `first_offset`."""
        import numpy as np

        parts: list[bytes] = []
        if start < self.base:
            assert self._packed is not None and self._offsets is not None
            low, high = int(self._offsets[start]), int(self._offsets[min(stop, self.base)])
            parts.append(self._packed[low:high].tobytes())
            lengths = np.diff(self._offsets[start: min(stop, self.base) + 1])
        else:
            lengths = np.zeros(0, dtype=np.int64)
        encoded = [encode_id(id_) for id_ in self._tail[max(start, self.base) - self.base: stop - self.base]]
        parts.extend(encoded)
        ends = np.concatenate([lengths, np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))])
        return b"".join(parts), first_offset + np.cumsum(ends, dtype=np.int64)
