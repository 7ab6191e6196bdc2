"""Stores for the copy, archive and CLI tests: URLs of fresh stores per backend, and a dataset
covering every kind, two tenants, embeddings, awkward values and a checkpoint lineage."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import mnemostore
from mnemostore.core.filters import F
from mnemostore.core.protocol import ID_ORDER, Backend
from mnemostore.core.records import KINDS, Record
from mnemostore.core.store import open_backend
from mnemostore.migrations.streams import digest_kind
from mnemostore.testing.factories import make, nested_metadata, offset_time, payload_bytes, vectors

DIMENSION = 8
TENANTS: tuple[str | None, ...] = (None, "acme")
PLAIN_KINDS = ("outcome", "heuristic", "anti_pattern", "embedding")

BACKENDS = ("memory", "sqlite", "file", "qdrant-memory", "qdrant-disk", "chroma-memory", "postgres")
SLOW = {"chroma-memory"}
"""Backends that write a few hundred records a second: they get a smaller dataset."""


def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The URL of a new, empty store of `backend` (skips if the backend is not installed)."""
    name = uuid.uuid4().hex[:12]
    scheme = {"qdrant-memory": "qdrant", "qdrant-disk": "qdrant", "chroma-memory": "chroma"}.get(backend, backend)
    try:
        mnemostore.registry.for_scheme(scheme if scheme != "memory" else "memory")
    except mnemostore.MnemostoreError as exc:
        pytest.skip(f"{backend}: {exc}")
    if backend == "postgres":
        pytest.importorskip("psycopg")
        server = request.getfixturevalue("postgres_server")
        return str(server.url())
    return {
        "memory": f"memory://copy-{name}",
        "sqlite": f"sqlite:///{tmp_path / f'{name}.db'}",
        "file": f"file://{tmp_path / f'file-{name}'}",
        "qdrant-memory": f"qdrant://memory/{name}",
        "qdrant-disk": f"qdrant://{tmp_path / f'qdrant-{name}'}",
        "chroma-memory": f"chroma://memory?prefix=c{name}_",
    }[backend]


def fill(url: str, per_kind: int = 10) -> dict[str, int]:
    """Write the dataset into the store at `url` for both tenants; return the count per kind."""
    vs = vectors(4 * per_kind + 8, DIMENSION)
    counts = dict.fromkeys(KINDS, 0)
    for t, tenant in enumerate(TENANTS):
        with mnemostore.open(url, tenant=tenant, dimension=DIMENSION) as store:
            for kind in PLAIN_KINDS:
                records = [make(kind, i, embedding=vs[i + t] if i % 3 else None, created_at=offset_time(i),
                                metadata={"i": i, "tenant": tenant, "deep": {"list": [i, 1.5, None, True]}})
                           for i in range(per_kind)]
                records.append(make(kind, 99, id="🧠 e\u0301/'quoted'", metadata=nested_metadata(),
                                    agent="e\u0301 🤖", embedding=vs[-1]))
                store.collection(kind).put(records)
                counts[kind] += len(records)
            root = store.checkpoints.save("run-1", {"step": 0, "plan": ["a", "b"]}, node_id="plan", parent=None)
            edit = store.checkpoints.save("run-1", {"step": 1, "files": ["a.py"]}, node_id="edit")
            tests = store.checkpoints.apply("run-1", {"tests": ["t1"], "n": 1}, node_id="test", branch="tests",
                                            parent=edit.id)  # keeps its update: copies must carry it
            docs = store.checkpoints.save("run-1", {"tests": ["t2"], "n": 2}, node_id="docs", branch="docs",
                                          parent=edit.id, embedding=vs[t])
            store.checkpoints.merge("run-1", [tests.id, docs.id], reducers={"tests": "append", "n": "sum"})
            counts["checkpoint"] += 5
            for i in range(per_kind // 2):  # payloads: every byte value, empty bytes, and None
                payload = payload_bytes(i) if i % 3 else None
                store.checkpoints.save(f"run-{i + 2}", {"step": i, "big": "x" * 200}, parent=root.id,
                                       payload=payload)
                counts["checkpoint"] += 1
    return counts


def read_all(backend: Backend, kind: str) -> dict[str | None, list[Record]]:
    """Every record of `kind` per tenant, in id order."""
    return {tenant: backend.query(kind, tenant, None, (ID_ORDER,), None) for tenant in backend.tenants(kind)}


def snapshot(url: str) -> dict[str, dict[str | None, list[Record]]]:
    """Every record of the store at `url`, per kind and tenant."""
    backend = open_backend(url)
    try:
        return {kind: read_all(backend, kind) for kind in KINDS}
    finally:
        backend.close()


def merge_lineage(url: str, tenant: str | None) -> list[str]:
    """The node ids of the merged checkpoint's first-parent lineage, after checking the merge
    counted what its branches inherited once and its `apply`d parent kept its update."""
    with mnemostore.open(url, tenant=tenant) as store:
        merged = store.checkpoints.first(F.node_id == "merge")
        assert merged is not None and len(merged.parent_ids) == 2
        assert merged.state == {"tests": ["t1", "t2"], "n": 3}
        lineage = store.checkpoints.lineage(merged.id)
        assert lineage[1].update == {"tests": ["t1"], "n": 1}
        return [c.node_id for c in lineage]


def params_of(url: str) -> Any:
    with mnemostore.open(url) as store:
        return store.params


class Interrupted(Exception):
    """Raised by `StopAfter`: stands for a crash or Ctrl-C in the middle of a copy."""


class StopAfter:
    """Progress that interrupts the work after `n` batches were reported (like Ctrl-C would)."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.labels: list[str] = []

    def begin(self, label: str, total: int | None) -> None:
        self.labels.append(label)

    def advance(self, count: int) -> None:
        self.left -= 1
        if self.left == 0:
            raise Interrupted

    def end(self) -> None:
        pass


def checksums(url: str) -> dict[str, tuple[int, str]]:
    """(count, checksum) per kind of the store at `url`, as copy verification computes them."""
    backend = open_backend(url)
    try:
        return {kind: digest_kind(backend, kind, 50).totals for kind in KINDS}
    finally:
        backend.close()


def assert_same_stores(source: str, destination: str) -> None:
    """Both stores hold equal records (embeddings and datetime offsets included) per kind and tenant."""
    before, after = snapshot(source), snapshot(destination)
    for kind in KINDS:
        assert set(after[kind]) == set(before[kind]), kind
        for tenant, records in before[kind].items():
            assert after[kind][tenant] == records, (kind, tenant)
            assert [r.created_at.utcoffset() for r in after[kind][tenant]] == \
                [r.created_at.utcoffset() for r in records]
