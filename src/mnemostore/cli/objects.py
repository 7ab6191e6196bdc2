"""Python objects named on the command line: `MODULE:NAME` (migrations, embedding functions), and
`--import MODULE` (an application's module that registers its record kinds)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
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


def add_import_option(parser: argparse.ArgumentParser) -> None:
    """`--import MODULE` (repeatable): what a command needs to know an application's kinds."""
    parser.add_argument("--import", dest="imports", metavar="MODULE", action="append", default=[],
                        help="import MODULE first: the application's module that registers its record kinds "
                             "(kinds a package lists under the mnemostore.kinds entry point need none); repeatable")


def import_modules(names: Sequence[str]) -> None:
    """Import the modules `--import` names; a ConfigError naming the one that fails."""
    from ..core.errors import ConfigError

    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"--import {name!r}: {exc}") from None
