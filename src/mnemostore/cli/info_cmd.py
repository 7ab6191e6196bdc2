"""`mnemostore info [URL]`: what a store holds and what its backend can do."""

from __future__ import annotations

import argparse
from typing import Any

from .objects import add_import_option, import_modules
from .render import table, to_json

SCHEMA_VERSION_UNKNOWN = "unversioned"
"""Shown for a store whose ledger holds no layout step (a backend without layout migrations)."""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "info", help="show a store's backend, counts per kind, parameters and capabilities",
        description="Open a store and show its backend, URL (password masked), record counts per kind (an "
                    "application's kinds too; one the store holds but this process does not know is marked), "
                    "embedding dimension and metric, schema version and capabilities. Without URL the store "
                    "is found as mnemostore.open() finds it: $MNEMOSTORE_URL, the config file, then the "
                    "embedded default.")
    parser.add_argument("url", nargs="?", metavar="URL", help="store URL (default: as mnemostore.open() resolves it)")
    parser.add_argument("--tenant", help="count the records of this tenant (default: the default tenant)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_import_option(parser)
    parser.set_defaults(run=run)


def collect(url: str | None, tenant: str | None = None) -> dict[str, Any]:
    """Open the store and describe it as plain data."""
    from ..core.config import resolve
    from ..core.declarations import standing_in, unregistered_kinds
    from ..core.kinds import kind_names
    from ..core.store import open_config

    config = resolve(url, **({"tenant": tenant} if tenant is not None else {}))
    with open_config(config, create=False) as store:
        missing = unregistered_kinds(store.backend)  # first: it imports the shipped kinds the store holds
        counts = {kind: store.collection(kind).count() for kind in kind_names()}
        unregistered: dict[str, str] = {}
        for declaration in missing:
            with standing_in(declaration) as kind:
                counts[kind] = store.collection(kind).count()
            unregistered[kind] = declaration.source
        return {
            "backend": store.backend.name,
            "url": store.backend.url.masked,
            "source": "command line" if config.source == "argument" else config.source,
            "tenant": store.tenant,
            "counts": counts,
            "unregistered": unregistered,
            "dimension": store.params.dimension,
            "metric": store.params.metric,
            "schema_version": schema_version(store.backend),
            "capabilities": sorted(c.value for c in store.capabilities),
            "details": store.backend.describe(),
        }


def schema_version(backend: Any) -> str:
    """The backend's newest layout step in the store's migration ledger, with how many migrations it records."""
    from ..migrations.ledger import Ledger
    from ..migrations.plan import library_migrations

    ledger = Ledger.read(backend)
    library = {migration.id for migration in library_migrations()}  # every store's: they say nothing of its layout
    own = [entry for entry in ledger.entries if entry.id not in library]
    layout = [entry.id for entry in own if entry.layer == "layout"]
    if not own:
        return SCHEMA_VERSION_UNKNOWN
    newest = layout[-1] if layout else "no layout steps"
    return f"{newest} ({len(ledger.entries)} migration(s) applied)"


def run(args: argparse.Namespace) -> int:
    import_modules(args.imports)
    data = collect(args.url, args.tenant)
    if args.json:
        print(to_json(data))
        return 0
    facts: list[tuple[str, Any]] = [
        ("backend", data["backend"]),
        ("url", data["url"]),
        ("source", data["source"]),
        ("tenant", data["tenant"] or "(default)"),
        ("dimension", data["dimension"] or "(not set: no embedding written yet)"),
        ("metric", data["metric"]),
        ("schema version", data["schema_version"]),
        ("capabilities", ", ".join(data["capabilities"]) or "(none)"),
        *((str(key), value) for key, value in data["details"].items()),
    ]
    width = max(len(name) for name, _ in facts)
    for name, value in facts:
        print(f"{name.ljust(width)}  {value}")
    print()
    notes = {kind: f"stored, not registered in this process (declared by {source}: --import it)"
             for kind, source in data["unregistered"].items()}
    rows = [(kind, count, notes.get(kind, "")) for kind, count in data["counts"].items()]
    print(table(("KIND", "RECORDS", "NOTE"), rows))
    return 0
