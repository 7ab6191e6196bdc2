"""The optional native async side of a backend: what `open_async` awaits instead of the executor.

A backend whose driver has an async client names a subclass in `Backend.async_backend`. The side
implements any of the protocol's calls (`DRIVER_CALLS`), and of the optional document reads
(`DOCUMENT_READS`), as `async def`, with the sync method's arguments and results; core awaits those
and runs the rest of the sync ones in the store's executor (but `query_shape` on a side with a native
`query` only: that `query`, as `Backend.query_shape`'s default).
It is made after the sync backend opened (and migrated), opened on the store's event loop, and
closed before the sync backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .protocol import DOCUMENT_READS, DRIVER_CALLS

if TYPE_CHECKING:
    from .protocol import Backend


class AsyncBackend:
    """Base class of a backend's native async side (see the module docstring)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def open(self) -> None:
        """Make what the async calls use (an async connection pool), on the store's event loop."""

    async def close(self) -> None:
        """Release what `open` made; idempotent. The sync backend is closed after it."""

    @classmethod
    def native_calls(cls) -> frozenset[str]:
        """The protocol calls (and document reads) this side implements: the others run in the store's executor."""
        return frozenset(name for name in (*DRIVER_CALLS, *DOCUMENT_READS)
                         if name != "close" and callable(getattr(cls, name, None)))
