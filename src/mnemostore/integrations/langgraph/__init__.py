"""LangGraph on any mnemostore backend: `MnemostoreSaver` is a LangGraph checkpointer over a `Store`.

Needs the `langgraph` extra (`pip install "mnemostore[langgraph]"`); `import mnemostore` never loads it.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ...core.errors import BackendNotInstalled

    raise BackendNotInstalled(
        'mnemostore.integrations.langgraph needs LangGraph; install it with: pip install "mnemostore[langgraph]"'
    ) from exc

from .saver import MnemostoreSaver

__all__ = ["MnemostoreSaver"]
