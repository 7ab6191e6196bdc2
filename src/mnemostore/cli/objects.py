"""Python objects named on the command line as `MODULE:NAME` (migrations, embedding functions)."""

from __future__ import annotations

import importlib
from typing import Any


def import_object(spec: str, option: str, example: str) -> Any:
    """The object `spec` names; a ConfigError naming `option` if it cannot be found."""
    from ..core.errors import ConfigError

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{option} {spec!r}: expected MODULE:NAME, e.g. {example}")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{option} {spec!r}: {exc}") from None
