"""Argument parsing, dispatch and exit codes: 0 ok, 1 failure, 2 usage."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import backends_cmd, conformance_cmd, demo_cmd, info_cmd, migrate_cmd, transfer_cmd

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="mnemostore",
        description="One storage protocol for AI agents' long-term memory, on the backend you choose.",
        epilog="Store URLs: memory://, sqlite:///relative.db, sqlite:////absolute.db, file:///absolute/dir. "
               "Without a URL: $MNEMOSTORE_URL, then mnemostore.toml or [tool.mnemostore] in pyproject.toml, "
               "then the embedded SQLite store in the per-user data directory.",
    )
    parser.add_argument("--version", action="version", version=f"mnemostore {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (demo_cmd, backends_cmd, info_cmd, conformance_cmd, migrate_cmd, transfer_cmd):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 after --help/--version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from ..core.errors import MnemostoreError

    try:
        code: int = args.run(args)
    except MnemostoreError as exc:
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"mnemostore: error: {message}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("mnemostore: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`mnemostore backends | head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except OSError as exc:  # a file the user named: missing directory, no permission, disk full
        print(f"mnemostore: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    return code


def describe_os_error(exc: OSError) -> str:
    """One line for a file error: what failed, on which path (without a `.partial` suffix of ours)."""
    reason = exc.strerror or type(exc).__name__
    if exc.filename is None:
        return f"{reason} ({exc})" if exc.strerror and str(exc) != reason else reason
    path = str(exc.filename).removesuffix(".partial")
    return f"{reason}: {path}"
