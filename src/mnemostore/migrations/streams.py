"""Streaming every record of a kind, tenant by tenant in id order, and checksumming the stream.

Copies, archives and their verification read stores the same way: keyset pages
(`id > last`) per tenant, default tenant first, so a stream can resume after a position and
two stores holding the same records yield the same bytes to the checksum.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import orjson

from ..core.codec import binary_fields, dumps_fields
from ..core.declarations import import_shipped_kinds, refuse_unregistered
from ..core.errors import MigrationError, UnsupportedCapability
from ..core.filters import F
from ..core.kinds import is_kind, kind_names
from ..core.protocol import ID_ORDER
from ..core.records import KINDS, Record

if TYPE_CHECKING:
    from ..core.protocol import Backend


_LITTLE_ENDIAN = sys.byteorder == "little"
"""Embeddings are native float32; checksums take their little-endian bytes."""


def tenant_key(tenant: str | None) -> tuple[bool, str]:
    """The order tenants are streamed in: the default tenant (None) first, then by code point."""
    return (tenant is not None, tenant or "")


def kind_key(kind: str) -> tuple[int, str]:
    """The canonical order of kinds: the built-in ones in `KINDS` order, then the others by name."""
    return (KINDS.index(kind), "") if kind in KINDS else (len(KINDS), kind)


def chosen_kinds(kinds: Sequence[str] | None) -> tuple[str, ...]:
    """`kinds` in the canonical order (every known kind for None); unknown names refused."""
    if kinds is None:
        return kind_names()
    unknown = [kind for kind in kinds if not is_kind(kind)]
    if unknown:
        import_shipped_kinds()  # an archive of the demo's store names mnemostore's own workflow kinds
        unknown = [kind for kind in unknown if not is_kind(kind)]
    if unknown:
        raise MigrationError(f"unknown record kind(s): {', '.join(unknown)}; choose from {', '.join(kind_names())} "
                             "(an application's kind is known once its module is imported: --import MODULE)")
    return tuple(sorted(set(kinds), key=kind_key))


def every_kind_of(backend: Backend, action: str) -> tuple[str, ...]:
    """Every kind to carry out of `backend` (for `kinds=None`): refused if it holds a kind this process
    does not know, after importing the ones mnemostore ships (`declarations.refuse_unregistered`)."""
    refuse_unregistered(backend, action)
    return kind_names()


@dataclass(frozen=True)
class Position:
    """The last record written: streams resume after it (kinds in `kind_key` order)."""

    kind: str
    tenant: str | None
    after: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "tenant": self.tenant, "after": self.after}

    @classmethod
    def from_json(cls, value: Any) -> Position | None:
        if (not isinstance(value, dict) or not isinstance(value.get("kind"), str) or not is_kind(value["kind"])
                or not isinstance(value.get("after"), str)):
            return None
        tenant = value.get("tenant")
        return cls(value["kind"], tenant if isinstance(tenant, str) else None, value["after"])

    def passed(self, kind: str, tenant: str | None, id: str) -> bool:
        """Whether the record (kind, tenant, id) comes at or before this position."""
        mine = (kind_key(self.kind), tenant_key(self.tenant), self.after)
        return (kind_key(kind), tenant_key(tenant), id) <= mine

    def finished(self, kind: str) -> bool:
        """Whether every record of `kind` comes before this position (the kind was done)."""
        return kind_key(kind) < kind_key(self.kind)


def all_tenants(backend: Backend, kind: str) -> list[str | None]:
    """Every tenant with records of `kind`, in `tenant_key` order (the default tenant first)."""
    try:
        found = backend.tenants(kind)
    except UnsupportedCapability as exc:
        raise MigrationError(f"{exc}; record migrations and copies need Backend.tenants()") from None
    return sorted(set(found), key=tenant_key)


def kind_count(backend: Backend, kind: str) -> int:
    """How many records of `kind` the store holds, over every tenant."""
    return sum(backend.count(kind, tenant, None) for tenant in all_tenants(backend, kind))


def batches(backend: Backend, kind: str, batch_size: int,
            start: Position | None = None) -> Iterator[tuple[str | None, list[Record]]]:
    """(tenant, records) pages of every record of `kind`, tenants in `tenant_key` order and ids
    ascending, skipping what `start` says was already done.

    Each page is checked to follow the previous one in code-point order: a backend whose id order
    disagreed with its `id > last` filter would otherwise make a keyset scan skip records silently.
    """
    for tenant in all_tenants(backend, kind):
        last: str | None = None
        if start is not None and start.kind == kind:
            if tenant_key(tenant) < tenant_key(start.tenant):
                continue
            if tenant == start.tenant:
                last = start.after
        while True:
            page = backend.query(kind, tenant, None if last is None else F.id > last, (ID_ORDER,), batch_size)
            if not page:
                break
            ids = [record.id for record in page]
            if (last is not None and ids[0] <= last) or any(a >= b for a, b in pairwise(ids)):
                raise MigrationError(
                    f"the {backend.name} backend returned {kind} ids of tenant {tenant!r} out of code-point order "
                    f"(after {last!r}: {ids[:3]}...); copies need ids ordered like Python strings")
            yield tenant, page
            last = ids[-1]
            if len(page) < batch_size:
                break


def record_bytes(record: Record, vectors: bool = True) -> bytes:
    """A record's canonical encoding: its fields as JSON with sorted keys (datetimes in RFC 3339
    with their offset, bytes as base64, as the codec writes them; a bytes field that is None is
    left out, so a record from before that field existed sums as it did), then its embedding as
    float32 little-endian (with `vectors=False` only whether it has one: a re-embedding changes
    every vector)."""
    fields = record.__dict__.copy()
    embedding = fields.pop("embedding")
    for name in binary_fields(type(record)):
        if fields[name] is None:
            del fields[name]
    document = dumps_fields(fields, option=orjson.OPT_SORT_KEYS)
    if embedding is None:
        return b"%d:%s-" % (len(document), document)
    if not vectors:
        return b"%d:%sv" % (len(document), document)
    vector = embedding.tobytes() if _LITTLE_ENDIAN else embedding.astype("<f4").tobytes()
    return b"%d:%sv%d:%s" % (len(document), document, len(vector), vector)


class Digest:
    """Count and SHA-256 of a stream of records, in stream order."""

    def __init__(self, vectors: bool = True) -> None:
        self.count = 0
        self.vectors = vectors
        self._hash = hashlib.sha256()

    def update(self, records: Sequence[Record]) -> None:
        self.count += len(records)
        update, vectors = self._hash.update, self.vectors
        for record in records:
            update(record_bytes(record, vectors))

    @property
    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    @property
    def totals(self) -> tuple[int, str]:
        """(count, hex checksum): what verification compares."""
        return self.count, self._hash.hexdigest()


def digest_kind(backend: Backend, kind: str, batch_size: int,
                advance: Callable[[int], None] | None = None, vectors: bool = True) -> Digest:
    """The digest of every record of `kind` in `backend`, streamed in `batches` order."""
    digest = Digest(vectors)
    for _, page in batches(backend, kind, batch_size):
        digest.update(page)
        if advance is not None:
            advance(len(page))
    return digest
