"""LangGraph on any mnemostore backend: `MnemostoreSaver` (checkpointer) and `MnemostoreStore` (long-term memory).

Needs the `langgraph` extra (`pip install "mnemostore[langgraph]"`); `import mnemostore` never loads it,
and each name loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ...core.errors import BackendNotInstalled

    raise BackendNotInstalled(
        'mnemostore.integrations.langgraph needs LangGraph; install it with: pip install "mnemostore[langgraph]"'
    ) from exc

from ..._lazy import lazy_getattr

_EXPORTS: dict[str, str] = {
    "MnemostoreSaver": "mnemostore.integrations.langgraph.saver",
    "MnemostoreStore": "mnemostore.integrations.langgraph.store",
}

__all__ = ["MnemostoreSaver", "MnemostoreStore"]

__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # `X as X`: explicit re-exports for type checkers (mypy --strict)
    from .saver import MnemostoreSaver as MnemostoreSaver
    from .store import MnemostoreStore as MnemostoreStore
