"""`mnemostore migrate status|plan|up|down|stamp|accept|break-lock [URL]`: run the migration runner.

The store is opened without migrating it (`open_backend`); every change happens under the
store's migration lock. An application's record migrations are named with `--migrations
module:attribute` (a migration or a list of them), so status and up see them too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .objects import add_import_option, import_modules, import_object
from .render import table, to_json

if TYPE_CHECKING:
    from ..migrations.model import Direction, Migration
    from ..migrations.runner import Runner, Step

_DESCRIPTION = (
    "Inspect and change a store's migrations. Each store keeps a ledger of the migrations applied to it "
    "(with checksums) in its own metadata; the runner applies, reverts or records them under the store's "
    "migration lock, so two runners never migrate one store at once.")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("migrate", help="show, plan, apply or revert a store's migrations",
                                 description=_DESCRIPTION)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str, description: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help, description=description)
        sub.add_argument("url", metavar="URL", nargs="?",
                         help="store URL, e.g. sqlite:///memory.db (default: as for every command, "
                              "$MNEMOSTORE_URL, then the config file, then the embedded default store)")
        sub.add_argument("--migrations", metavar="MODULE:NAME", action="append", default=[],
                         help="also know the migration(s) at MODULE:NAME (an application's record migrations); "
                              "repeatable")
        add_import_option(sub)
        sub.set_defaults(run=run)
        return sub

    def lock_wait(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--lock-wait", metavar="SECONDS", type=float, default=60.0,
                         help="how long to wait for another runner's migration lock (default 60)")

    status = action("status", "show applied, pending, changed and unknown migrations, params and the lock",
                    "Show the ledger's entries, the migrations pending, applied ones whose content changed, "
                    "applied ones this mnemostore does not know, the store's parameters and the lock holder.")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.add_argument("--check", action="store_true", help="exit 1 unless the store is current")

    plan = action("plan", "show what up (or down) would do, without doing it",
                  "List the steps `up` (or with --down, `down`) would run, in order; --sql adds their statements.")
    plan.add_argument("target", nargs="?", metavar="TARGET", help="stop at this migration id")
    plan.add_argument("--down", action="store_true", help="plan reverting instead of applying")
    plan.add_argument("--sql", action="store_true", help="print each step's SQL statements")

    up = action("up", "apply pending migrations (through TARGET)",
                "Apply pending migrations in order, through TARGET if given. A layout step and its ledger entry "
                "commit together where the engine allows; record migrations resume after an interruption.")
    up.add_argument("target", nargs="?", metavar="TARGET", help="the last migration id to apply")
    down = action("down", "revert migrations, newest first",
                  "Revert the newest applied migration, or every one applied after TARGET ('base': all).")
    down.add_argument("target", nargs="?", metavar="TARGET",
                      help="the migration to keep as the newest ('base' reverts everything)")
    for sub in (up, down):
        sub.add_argument("--dry-run", action="store_true", help="only show the plan (like `migrate plan`)")
        sub.add_argument("--sql", action="store_true", help="with --dry-run: print the SQL statements")
        sub.add_argument("--quiet", action="store_true", help="no progress bar")
        lock_wait(sub)

    stamp = action("stamp", "record pending migrations as applied without running them",
                   "Record pending migrations (through TARGET) as applied without running them, for a store "
                   "whose layout was brought up to date by other means.")
    stamp.add_argument("target", nargs="?", metavar="TARGET", help="the last migration id to record")
    lock_wait(stamp)
    accept = action("accept", "record the new checksum of an applied migration that was edited",
                    "Record the current checksum of an applied migration whose content changed, when the change "
                    "is intended and already reflected in the store; with ID kind.NAME, record the code's "
                    "declaration of an application kind whose stored fields it no longer declares.")
    accept.add_argument("id", metavar="ID", help="the migration id, or kind.NAME")
    lock_wait(accept)
    action("break-lock", "free the store's migration lock (after its holder died)",
           "Free the migration lock whoever holds it and show who held it. A lock file held by a live process "
           "cannot be broken: stop that process instead.")


def load_migrations(specs: Sequence[str]) -> list[Migration]:
    """The migrations named `module:attribute` (a migration or an iterable of them)."""
    from ..core.errors import ConfigError
    from ..migrations.model import Migration

    found: list[Migration] = []
    for spec in specs:
        value = import_object(spec, "--migrations", "myapp.migrations:MIGRATIONS")
        items = [value] if isinstance(value, Migration) else list(value)
        bad = [item for item in items if not isinstance(item, Migration)]
        if bad:
            raise ConfigError(f"--migrations {spec!r}: not a migration: {bad[0]!r}")
        found.extend(items)
    return found


@contextmanager
def _runner(args: argparse.Namespace, progress: Any = None) -> Iterator[Runner]:
    from ..core.config import naming_source, resolve
    from ..core.store import open_backend
    from ..migrations.runner import Runner

    import_modules(args.imports)
    migrations = load_migrations(args.migrations)
    creates = args.action in ("up", "stamp") and not getattr(args, "dry_run", False)
    config = resolve(args.url)
    with naming_source(config):  # reading a store that is not there is an error
        backend = open_backend(config.url, config.options, create=creates)
    try:
        yield Runner(backend, migrations, lock_wait=getattr(args, "lock_wait", 60.0), progress=progress)
    finally:
        backend.close()


def _settle_url(args: argparse.Namespace) -> None:
    """`migrate up TARGET`: a lone word that is not a URL (no `://`) is the target, not the store."""
    if args.url is not None and "://" not in args.url and getattr(args, "target", "") is None:
        args.target, args.url = args.url, None


def run(args: argparse.Namespace) -> int:
    _settle_url(args)
    action = args.action
    if action == "accept" and args.url is None and "://" in args.id:
        print("mnemostore migrate accept: error: the migration ID is missing (migrate accept [URL] ID)",
              file=sys.stderr)
        return 2
    if action == "status":
        return _status(args)
    if action == "plan" or (action in ("up", "down") and args.dry_run):
        direction: Direction = "down" if action == "down" or getattr(args, "down", False) else "up"
        with _runner(args) as runner:
            print(render_plan(runner.plan(args.target, direction), direction, args.sql))
        return 0
    if action in ("up", "down"):
        from .progress import progress_bar

        with progress_bar(args.quiet) as bar, _runner(args, bar) as runner:
            done = runner.up(args.target) if action == "up" else runner.down(args.target)
        verb = "applied" if action == "up" else "reverted"
        print(f"{verb} {len(done)} migration(s): {', '.join(done)}" if done else
              "nothing to apply: the store is current" if action == "up" else "nothing to revert")
        return 0
    with _runner(args) as runner:
        if action == "stamp":
            stamped = runner.stamp(args.target)
            print(f"recorded {len(stamped)} migration(s) as applied without running them: {', '.join(stamped)}"
                  if stamped else "nothing to record: no migration is pending")
        elif action == "accept" and args.id.startswith("kind."):
            change = runner.accept_kind(args.id.removeprefix("kind."))
            print(f"recorded the declaration of {change.kind} by {change.declared.source}: {change.describe()}")
        elif action == "accept":
            entry = runner.accept(args.id)
            print(f"accepted the changed content of {entry.id}: checksum now {entry.checksum[:12]}")
        else:
            holder = runner.break_lock()
            print(f"freed the migration lock held by {holder.describe()}" if holder else
                  "the migration lock was not held")
    return 0


def render_plan(steps: Sequence[Step], direction: str, sql: bool) -> str:
    if not steps:
        return "nothing to apply: the store is current" if direction == "up" else "nothing to revert"
    lines = []
    for number, step in enumerate(steps, 1):
        lines.append(f"{number}. {step.describe()}")
        if step.migration.description:
            lines.append(f"   {step.migration.description}")
        if sql:
            statements = step.sql
            lines += [f"   {statement.strip()};" for statement in statements] if statements else \
                ["   (no SQL: a function or record step)"]
    return "\n".join(lines)


def collect_status(runner: Runner) -> dict[str, Any]:
    """The store's migration state as plain data (for text and --json)."""
    from ..core.errors import KindChanged
    from ..core.protocol import PARAMS_KEY

    status = runner.status()
    try:
        kind_steps, kind_problem = runner.kind_steps(), None
    except KindChanged as exc:
        kind_steps, kind_problem = [], str(exc)
    backend = runner.backend
    holder = runner.lock_holder()
    return {
        "url": backend.url.masked,
        "backend": backend.name,
        "params": backend.read_meta(PARAMS_KEY),
        "ledger": status.ledger_exists,
        "legacy_layout": None if status.ledger_exists else backend.legacy_layout(),
        "current": status.current and not kind_steps and kind_problem is None,
        "applied": [{"id": e.id, "layer": e.layer, "how": e.how, "applied_at": e.applied_at,
                     "applied_by": e.applied_by, "runner_version": e.runner_version,
                     "transactional": e.transactional, "checksum": e.checksum} for e in status.applied],
        "pending": [{"id": m.id, "layer": m.layer, "description": m.description}
                    for m in [*status.pending, *kind_steps]],
        "kinds": kind_problem,
        "changed": [{"id": m.id, "recorded": e.checksum, "now": m.checksum} for m, e in status.changed],
        "unknown": [{"id": e.id, "layer": e.layer} for e in status.unknown],
        "too_new": [e.id for e in status.too_new],
        "lock": None if holder is None else {"holder": holder.holder, "acquired_at": holder.acquired_at,
                                             "expires_at": holder.expires_at, "describe": holder.describe()},
    }


def _status(args: argparse.Namespace) -> int:
    with _runner(args) as runner:
        data = collect_status(runner)
    if args.json:
        print(to_json(data))
    else:
        print(render_status(data))
    return 0 if data["current"] or not args.check else 1


def render_status(data: dict[str, Any]) -> str:
    params = data["params"]
    if params:
        shown = ", ".join(f"{key} {value}" for key, value in params.items() if value is not None)
    else:
        shown = "(none stored yet)"
    if data["ledger"]:
        ledger = f"{len(data['applied'])} applied, {len(data['pending'])} pending"
    elif data["legacy_layout"]:
        ledger = f"none: a store from before the ledger, at {data['legacy_layout']} (adopted by `migrate up`)"
    else:
        ledger = "none: a new store (initialised by `migrate up` or on open)"
    state = "current" if data["current"] else "needs attention" if data["changed"] or data["too_new"] \
        or data["kinds"] else "migrations pending"
    facts = [("store", f"{data['url']} ({data['backend']})"), ("params", shown), ("ledger", ledger),
             ("state", state), ("lock", data["lock"]["describe"] if data["lock"] else "free")]
    lines = [f"{name:<7} {value}" for name, value in facts]
    if data["applied"]:
        lines += ["", "Applied:", table(("ID", "LAYER", "HOW", "APPLIED AT", "BY"),
                                        [(e["id"], e["layer"], e["how"], e["applied_at"][:19], e["applied_by"])
                                         for e in data["applied"]], indent="  ")]
    if data["pending"]:
        lines += ["", "Pending (in run order):", table(("ID", "LAYER", "DESCRIPTION"),
                                                       [(m["id"], m["layer"], m["description"])
                                                        for m in data["pending"]], indent="  ")]
    if data["changed"]:
        lines += ["", "Changed since applied (restore them, or `mnemostore migrate accept URL ID`):",
                  table(("ID", "RECORDED", "NOW"), [(c["id"], c["recorded"][:12], c["now"][:12])
                                                    for c in data["changed"]], indent="  ")]
    if data["kinds"]:
        lines += ["", f"Kinds: {data['kinds']}"]
    if data["unknown"]:
        lines += ["", "Applied but unknown to this mnemostore (a newer version, or an application's migrations: "
                      "name them with --migrations):",
                  table(("ID", "LAYER"), [(u["id"], u["layer"]) for u in data["unknown"]], indent="  ")]
    return "\n".join(lines)
