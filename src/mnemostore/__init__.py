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
    "Store": "mnemostore.core.store",
    "Collection": "mnemostore.core.collection",
    "Page": "mnemostore.core.collection",
    "Record": "mnemostore.core.records",
    "Outcome": "mnemostore.core.records",
    "Heuristic": "mnemostore.core.records",
    "AntiPattern": "mnemostore.core.records",
    "Checkpoint": "mnemostore.core.records",
    "Embedding": "mnemostore.core.records",
    "KINDS": "mnemostore.core.records",
    "F": "mnemostore.core.filters",
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
    "ValidationError": "mnemostore.core.errors",
    "UnsupportedFilter": "mnemostore.core.errors",
    "UnsupportedCapability": "mnemostore.core.errors",
    "NotFound": "mnemostore.core.errors",
    "StoreClosed": "mnemostore.core.errors",
    "SchemaMismatch": "mnemostore.core.errors",
    "BackendError": "mnemostore.core.errors",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from .core.capabilities import Capability
    from .core.collection import Collection, Page
    from .core.errors import (
        BackendError,
        BackendNotInstalled,
        ConfigError,
        DuplicateBackend,
        MnemostoreError,
        NotFound,
        PluginLoadError,
        SchemaMismatch,
        StoreClosed,
        UnknownBackend,
        UnsupportedCapability,
        UnsupportedFilter,
        ValidationError,
    )
    from .core.filters import F
    from .core.hookspecs import hookimpl
    from .core.protocol import Backend, Hit, OrderKey, StoreParams
    from .core.records import KINDS, AntiPattern, Checkpoint, Embedding, Heuristic, Outcome, Record
    from .core.registry import registry
    from .core.store import Store, open
