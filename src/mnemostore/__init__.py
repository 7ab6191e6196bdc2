"""mnemostore: one storage protocol for AI agents' long-term memory, on the backend you choose.

`import mnemostore` loads no database driver (nor pydantic or numpy): names are
resolved on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "open": "mnemostore.core.store",
    "open_async": "mnemostore.core.async_open",
    "copy": "mnemostore.migrations.copying",
    "Store": "mnemostore.core.store",
    "AsyncStore": "mnemostore.core.async_store",
    "Collection": "mnemostore.core.collection",
    "AsyncCollection": "mnemostore.core.async_collection",
    "Page": "mnemostore.core.collection",
    "Record": "mnemostore.core.records",
    "Outcome": "mnemostore.core.records",
    "Heuristic": "mnemostore.core.records",
    "AntiPattern": "mnemostore.core.records",
    "Checkpoint": "mnemostore.core.records",
    "Embedding": "mnemostore.core.records",
    "KINDS": "mnemostore.core.records",
    "register_kind": "mnemostore.core.kinds",
    "F": "mnemostore.core.filters",
    "Param": "mnemostore.core.shapes",
    "QueryShape": "mnemostore.core.shapes",
    "Backend": "mnemostore.core.protocol",
    "Hit": "mnemostore.core.protocol",
    "OrderKey": "mnemostore.core.protocol",
    "StoreParams": "mnemostore.core.protocol",
    "Capability": "mnemostore.core.capabilities",
    "registry": "mnemostore.core.registry",
    "hookimpl": "mnemostore.core.hookspecs",
    "MnemostoreError": "mnemostore.core.errors",
    "ConfigError": "mnemostore.core.errors",
    "UnknownBackend": "mnemostore.core.errors",
    "BackendNotInstalled": "mnemostore.core.errors",
    "PluginLoadError": "mnemostore.core.errors",
    "DuplicateBackend": "mnemostore.core.errors",
    "DuplicateKind": "mnemostore.core.errors",
    "StoreNotFound": "mnemostore.core.errors",
    "ValidationError": "mnemostore.core.errors",
    "ReducerError": "mnemostore.core.errors",
    "MergeConflict": "mnemostore.core.errors",
    "Reducer": "mnemostore.core.reducers",
    "register_reducer": "mnemostore.core.reducers",
    "UnsupportedFilter": "mnemostore.core.errors",
    "UnsupportedCapability": "mnemostore.core.errors",
    "NotFound": "mnemostore.core.errors",
    "StoreClosed": "mnemostore.core.errors",
    "SchemaMismatch": "mnemostore.core.errors",
    "KindChanged": "mnemostore.core.errors",
    "BackendError": "mnemostore.core.errors",
    "MigrationError": "mnemostore.core.errors",
    "PendingMigrations": "mnemostore.core.errors",
    "StoreTooNew": "mnemostore.core.errors",
    "ChecksumMismatch": "mnemostore.core.errors",
    "LockHeld": "mnemostore.core.errors",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # `X as X`: explicit re-exports for type checkers (mypy --strict)
    from .core.async_collection import AsyncCollection as AsyncCollection
    from .core.async_open import open_async as open_async
    from .core.async_store import AsyncStore as AsyncStore
    from .core.capabilities import Capability as Capability
    from .core.collection import Collection as Collection
    from .core.collection import Page as Page
    from .core.errors import BackendError as BackendError
    from .core.errors import BackendNotInstalled as BackendNotInstalled
    from .core.errors import ChecksumMismatch as ChecksumMismatch
    from .core.errors import ConfigError as ConfigError
    from .core.errors import DuplicateBackend as DuplicateBackend
    from .core.errors import DuplicateKind as DuplicateKind
    from .core.errors import KindChanged as KindChanged
    from .core.errors import LockHeld as LockHeld
    from .core.errors import MergeConflict as MergeConflict
    from .core.errors import MigrationError as MigrationError
    from .core.errors import MnemostoreError as MnemostoreError
    from .core.errors import NotFound as NotFound
    from .core.errors import PendingMigrations as PendingMigrations
    from .core.errors import PluginLoadError as PluginLoadError
    from .core.errors import ReducerError as ReducerError
    from .core.errors import SchemaMismatch as SchemaMismatch
    from .core.errors import StoreClosed as StoreClosed
    from .core.errors import StoreNotFound as StoreNotFound
    from .core.errors import StoreTooNew as StoreTooNew
    from .core.errors import UnknownBackend as UnknownBackend
    from .core.errors import UnsupportedCapability as UnsupportedCapability
    from .core.errors import UnsupportedFilter as UnsupportedFilter
    from .core.errors import ValidationError as ValidationError
    from .core.filters import F as F
    from .core.hookspecs import hookimpl as hookimpl
    from .core.kinds import register_kind as register_kind
    from .core.protocol import Backend as Backend
    from .core.protocol import Hit as Hit
    from .core.protocol import OrderKey as OrderKey
    from .core.protocol import StoreParams as StoreParams
    from .core.records import KINDS as KINDS
    from .core.records import AntiPattern as AntiPattern
    from .core.records import Checkpoint as Checkpoint
    from .core.records import Embedding as Embedding
    from .core.records import Heuristic as Heuristic
    from .core.records import Outcome as Outcome
    from .core.records import Record as Record
    from .core.reducers import Reducer as Reducer
    from .core.reducers import register_reducer as register_reducer
    from .core.registry import registry as registry
    from .core.shapes import Param as Param
    from .core.shapes import QueryShape as QueryShape
    from .core.store import Store as Store
    from .core.store import open as open
    from .migrations.copying import copy as copy
