"""The tenants of a Chroma store, registered in its meta collection: `tenants()` is one read.

A shared Chroma server may hold thousands of unrelated collections, so `tenants()` does not
list them. Instead every write registers its (kind, tenant) once per open store: an
idempotent upsert of row `tenant:<collection name>` in the store's meta collection, labelled
with the kind and the tenant. `tenants()` reads the kind's rows with one `get`. Rows are
never removed (a tenant emptied since is left out by the backend's counts), so concurrent
writers cannot lose a registration.

Stores written before the registry carry no marker row (`tenant_registry`): their first
`tenants()` lists the collections once, as before, registers what it finds and writes the
marker. A store gets the marker when it is first opened (it holds nothing yet). Writers of
a version without the registry would not register their tenants: every writer of a store
must run a version with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from ...core.protocol import PARAMS_KEY
from .rows import placeholders

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

MARKER_KEY = "tenant_registry"
"""Meta row present once the registry is complete (a value: {"format": 1})."""
ROW_PREFIX = "tenant:"
LABEL = "tenant"
"""The `registry` label of a registration row."""


class TenantRegistry:
    """The registration rows of one store's meta collection; see the module docstring."""

    def __init__(self, meta: Collection, write_meta: Callable[[str, Any], None]) -> None:
        self.meta = meta
        self._write_meta = write_meta
        self._registered: set[str] = set()
        self._complete = False

    def mark_if_new(self) -> None:
        """Write the marker when the store is new (no parameters and no marker: it holds nothing)."""
        found = self.meta.get(ids=[PARAMS_KEY, MARKER_KEY], include=[])["ids"]
        if not found:
            self._mark()
        self._complete = MARKER_KEY in found or not found

    def complete(self) -> bool:
        """Whether every tenant holding records is registered (the marker is there; once seen, it stays)."""
        if not self._complete:
            self._complete = bool(self.meta.get(ids=[MARKER_KEY], include=[])["ids"])
        return self._complete

    def register(self, entries: Iterable[tuple[str, str | None, str]]) -> None:
        """Register (kind, tenant, collection name) entries this open store has not registered yet."""
        self.register_fresh(self.fresh(entries))

    def fresh(self, entries: Iterable[tuple[str, str | None, str]]) -> dict[str, tuple[str, str | None]]:
        """The entries this open store has not registered yet, as `register_fresh` takes them (no I/O)."""
        return {ROW_PREFIX + name: (kind, tenant) for kind, tenant, name in entries
                if ROW_PREFIX + name not in self._registered}

    def register_fresh(self, fresh: dict[str, tuple[str, str | None]]) -> None:
        """Write the registration rows of `fresh` (from `fresh`)."""
        if not fresh:
            return
        ids = list(fresh)
        self.meta.upsert(ids=ids, embeddings=placeholders(len(ids)),
                         metadatas=[{"registry": LABEL, "kind": kind, "tenant": tenant or ""}
                                    for kind, tenant in fresh.values()])
        self._registered.update(ids)

    def adopt(self, entries: Iterable[tuple[str, str | None, str]]) -> None:
        """Register what a listing of the collections found, then mark the registry complete."""
        self.register(entries)
        self._mark()

    def tenants(self, kind: str) -> list[str | None]:
        """The registered tenants of `kind` (None: the default tenant), in one read."""
        return sorted({tenant for _, tenant in self._rows({"$and": [{"registry": LABEL}, {"kind": kind}]})},
                      key=lambda tenant: (tenant is not None, tenant or ""))

    def entries(self) -> list[tuple[str, str | None]]:
        """Every registered (kind, tenant), whatever the kind (one this process has not registered too)."""
        return self._rows({"registry": LABEL})

    def _rows(self, where: dict[str, Any]) -> list[tuple[str, str | None]]:
        found = self.meta.get(where=cast(Any, where), include=cast(Any, ["metadatas"]))
        return [(str(labels.get("kind", "")), str(labels.get("tenant", "")) or None)
                for labels in (found["metadatas"] or []) if labels]

    def _mark(self) -> None:
        self._write_meta(MARKER_KEY, {"format": 1})
        self._complete = True
