"""The kinds mnemostore ships (`mnemostore.kinds.workflow`, `.alma`, `.langgraph_items`, `.langgraph_writes`),
registered for a test and forgotten after it, so other tests' copies and listings see only the kinds they
wrote; whether the item kind's storage exists on a backend; and the LMDB example as a backend of this process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mnemostore
from mnemostore.core.calls import run_sync
from mnemostore.core.kinds import kinds
from mnemostore.kinds import alma, langgraph_items, langgraph_writes, workflow

EXAMPLE_SRC = Path(__file__).parent.parent / "examples" / "mnemostore-lmdb" / "src"
SEEDS = (*workflow.KINDS, *alma.KINDS, *langgraph_items.KINDS, *langgraph_writes.KINDS)

for _cls in SEEDS:  # imported (so registered) above: forgotten until a test asks for them
    kinds.unregister(_cls.kind)


@contextmanager
def seed_kinds() -> Iterator[None]:
    """Every shipped kind registered for the block, forgotten after it (importing a module again
    would not register it again)."""
    for cls in SEEDS:
        mnemostore.register_kind(cls)
    try:
        yield
    finally:
        for cls in SEEDS:
            kinds.unregister(cls.kind)


def forget_the_items_kind() -> None:
    """Forget LangGraph's store item kind, which `MnemostoreStore` registers (again) when built: modules that
    build them call this after each test, so other modules' copies and listings do not see it."""
    kinds.unregister(langgraph_items.LangGraphItem.kind)


def forget_the_writes_kind() -> None:
    """Forget LangGraph's pending-write kind, which `MnemostoreSaver` registers (again) when built: modules that
    build savers call this after each test, as `forget_the_items_kind`."""
    kinds.unregister(langgraph_writes.LangGraphWrite.kind)


def items_storage_made(backend: Any, tenant: str | None, kind: str = langgraph_items.LangGraphItem.kind) -> bool | None:
    """Whether the item kind's (or `kind`'s) storage (table, collections) exists, asked of the backend; None on a
    backend that makes none (memory, file). A backend that never wrote it asks the engine, not its own cache."""
    name = backend.name
    if name == "sqlite":
        return backend._kind(kind) is not None
    if name == "postgres":
        return backend._readable(kind) is not None
    if name == "chroma":
        return run_sync(backend.operations.pair(kind, tenant, False)) is not None
    if name == "qdrant":
        return bool(run_sync(backend.operations._exists(kind)))
    return None


@contextmanager
def lmdb_backend() -> Iterator[str]:
    """The LMDB example registered as a backend of this process; yields its scheme."""
    import pytest

    pytest.importorskip("lmdb")
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        from mnemostore_lmdb import LMDBBackend

        mnemostore.registry.register(LMDBBackend, replace=True)
        try:
            yield LMDBBackend.name
        finally:
            mnemostore.registry.unregister(LMDBBackend.name)
    finally:
        sys.path.remove(str(EXAMPLE_SRC))
