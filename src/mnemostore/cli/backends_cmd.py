"""`mnemostore backends`: every registered backend, its capabilities and whether it loads."""

from __future__ import annotations

import argparse
from typing import Any

from .render import table, to_json


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "backends", help="list installed backends, their capabilities and load status",
        description="List every backend registered under the mnemostore.backends entry point (built-in or "
                    "plugin): its distribution, URL schemes, declared capabilities and load status. A plugin "
                    "that fails to load is listed with its error; the others are still shown.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(run=run)


def collect() -> dict[str, Any]:
    """What the registry knows, as plain data."""
    from ..core.registry import registry

    backends = []
    for entry in registry.entries():
        cls = entry.cls
        backends.append({
            "name": entry.name,
            "distribution": entry.distribution,
            "version": entry.version,
            "source": entry.source,
            "schemes": list(cls.schemes) if cls else [],
            "extra": cls.extra if cls else None,
            "capabilities": sorted(c.value for c in cls.capabilities) if cls else [],
            "status": entry.status,
            "error": str(entry.error) if entry.error else None,
        })
    return {"backends": backends, "plugin_errors": [str(e) for e in registry.plugin_errors]}


def run(args: argparse.Namespace) -> int:
    data = collect()
    if args.json:
        print(to_json(data))
        return 0
    backends = data["backends"]
    rows = [(b["name"], b["distribution"] or "-", b["version"] or "-", ", ".join(b["schemes"]) or "?",
             "failed to load (see below)" if b["error"] and b["status"].startswith("error") else b["status"])
            for b in backends]
    print(table(("BACKEND", "DISTRIBUTION", "VERSION", "SCHEMES", "STATUS"), rows))
    loaded = [b for b in backends if b["error"] is None]
    if loaded:
        print()
        print(_capability_matrix(loaded))
    problems = list(dict.fromkeys([b["error"] for b in backends if b["error"]] + data["plugin_errors"]))
    if problems:
        print("\nProblems:")
        for problem in problems:
            print(f"  {problem}")
    return 0


def _capability_matrix(backends: list[dict[str, Any]]) -> str:
    from ..core.capabilities import Capability

    rows = [(capability.value, *("yes" if capability.value in b["capabilities"] else "-" for b in backends))
            for capability in Capability]
    return table(("CAPABILITY", *(b["name"] for b in backends)), rows)
