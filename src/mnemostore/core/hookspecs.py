"""pluggy hook specifications: how a plugin package adds backends and migrations.

A plugin module registered under the entry-point group `mnemostore.plugins` may
implement any of these hooks with `@mnemostore.hookimpl`.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "mnemostore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mnemostore_add_backends() -> list[type[Any]]:  # type: ignore[empty-body]
    """Return Backend subclasses to register."""


@hookspec
def mnemostore_add_migrations() -> list[Any]:  # type: ignore[empty-body]
    """Return migrations to register with the runner."""
