"""`mnemostore copy SRC DST`, `export SRC FILE`, `import FILE DST` and `reembed SRC STAGING`.

Moving a whole store between backends, directly or through a portable archive; each run ends
with a verification (counts and checksums per kind) and prints what was moved and how fast.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .objects import add_import_option, import_modules
from .render import table, to_json

if TYPE_CHECKING:
    from ..migrations.copying import CopyReport

_DESTINATION_RULES = (
    "The destination takes the source's parameters (dimension, metric, embedding model; a store with others is "
    "refused before anything is written) and must hold no records of the copied kinds, unless it holds an "
    "unfinished copy of the same source, which is resumed, or --overwrite deletes them first.")


def add_parser(commands: Any) -> None:
    copy = commands.add_parser(
        "copy", help="copy every record of a store into another store (any two backends), verified",
        description="Copy every record of every kind and tenant from SRC to DST, keeping ids, timestamps, "
                    "metadata, embeddings and checkpoint lineage, then verify counts and checksums per kind. "
                    f"{_DESTINATION_RULES} An interrupted copy continues where it stopped when run again.")
    copy.add_argument("source", metavar="SRC", help="source store URL")
    copy.add_argument("destination", metavar="DST", help="destination store URL")
    _destination_options(copy)
    _common(copy)
    copy.set_defaults(run=run_copy)

    export = commands.add_parser(
        "export", help="write a store to a portable archive file (JSON lines; .gz compresses)",
        description="Write every record of SRC to FILE: a header (format, parameters, masked source URL, time), "
                    "one JSON line per record (embeddings as base64 float32), and a footer with each kind's count "
                    "and checksum. FILE ending in .gz is gzip-compressed. The file appears only once complete.")
    export.add_argument("source", metavar="SRC", help="source store URL")
    export.add_argument("file", metavar="FILE", help="archive to write, e.g. memory.jsonl.gz")
    export.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")
    _common(export)
    export.set_defaults(run=run_export)

    load = commands.add_parser(
        "import", help="load an archive written by export into a store, verified",
        description="Check the whole archive (every record valid, counts and checksums equal to its footer; a "
                    "truncated or edited archive is refused before anything is written), then load it into DST "
                    f"and verify it. {_DESTINATION_RULES}")
    load.add_argument("file", metavar="FILE", help="archive written by `mnemostore export`")
    load.add_argument("destination", metavar="DST", help="destination store URL")
    _destination_options(load)
    _common(load, kinds=False)
    load.set_defaults(run=run_import)

    again = commands.add_parser(
        "reembed", help="write a store re-embedded with a new model into a staging store, verified",
        description="Copy every record of SRC into STAGING with each embedding recomputed by --embedder (a "
                    "function list[str] -> vectors) under the new --model and --dimension; every other field is "
                    "kept and verified. SRC is never changed: switch over by pointing your configuration at "
                    "STAGING once this has finished. An interrupted run continues where it stopped.")
    again.add_argument("source", metavar="SRC", help="the store to re-embed (left unchanged)")
    again.add_argument("destination", metavar="STAGING", help="a new store for the re-embedded records")
    again.add_argument("--embedder", required=True, metavar="MODULE:NAME",
                       help="the embedding function: texts (list of str) -> one vector per text")
    again.add_argument("--model", required=True, help="the new embedding model's name (stored and checked on open)")
    again.add_argument("--dimension", required=True, type=int, help="the new model's vector dimension")
    again.add_argument("--text", metavar="MODULE:NAME",
                       help="record -> text to embed (default: an embedding's text, an outcome's task, a "
                            "heuristic's condition and strategy, an anti-pattern's pattern)")
    _destination_options(again)
    _common(again)
    again.set_defaults(run=run_reembed, batch_size=256)


def _common(parser: argparse.ArgumentParser, kinds: bool = True) -> None:
    add_import_option(parser)
    if kinds:
        parser.add_argument("--kinds", metavar="KIND,...", help="only these record kinds (default: all)")
    parser.add_argument("--batch-size", type=int, default=1000, metavar="N", help="records per batch (default 1000)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no report (errors still shown)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _destination_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="delete the destination's records of the copied kinds first")
    parser.add_argument("--no-resume", dest="resume", action="store_false",
                        help="do not continue an unfinished copy (combine with --overwrite to start over)")
    parser.add_argument("--lock-wait", metavar="SECONDS", type=float, default=60.0,
                        help="how long to wait for the destination's migration lock (default 60)")


def _kinds(args: argparse.Namespace) -> list[str] | None:
    value = getattr(args, "kinds", None)
    return None if not value else [kind.strip() for kind in value.split(",") if kind.strip()]


def run_copy(args: argparse.Namespace) -> int:
    from ..migrations.copying import copy
    from .progress import progress_bar

    import_modules(args.imports)
    with progress_bar(args.quiet) as bar:
        report = copy(args.source, args.destination, kinds=_kinds(args), batch_size=args.batch_size, progress=bar,
                      resume=args.resume, overwrite=args.overwrite, lock_wait=args.lock_wait)
    return _show(args, report, "copied")


def run_export(args: argparse.Namespace) -> int:
    from ..migrations.archive import export_archive
    from .progress import progress_bar

    import_modules(args.imports)
    with progress_bar(args.quiet) as bar:
        report = export_archive(args.source, args.file, kinds=_kinds(args), batch_size=args.batch_size,
                                progress=bar, overwrite=args.overwrite)
    return _show(args, report, "exported")


def run_import(args: argparse.Namespace) -> int:
    from ..migrations.archive import import_archive
    from .progress import progress_bar

    import_modules(args.imports)
    with progress_bar(args.quiet) as bar:
        report = import_archive(args.file, args.destination, batch_size=args.batch_size, progress=bar,
                                resume=args.resume, overwrite=args.overwrite, lock_wait=args.lock_wait)
    return _show(args, report, "imported")


def run_reembed(args: argparse.Namespace) -> int:
    from ..migrations.reembedding import default_text, reembed
    from .objects import import_object
    from .progress import progress_bar

    import_modules(args.imports)
    embed = import_object(args.embedder, "--embedder", "myapp.embeddings:embed")
    text = import_object(args.text, "--text", "myapp.embeddings:text_of") if args.text else default_text
    with progress_bar(args.quiet) as bar:
        report = reembed(args.source, args.destination, embed, model=args.model, dimension=args.dimension,
                         text=text, kinds=_kinds(args), batch_size=args.batch_size, progress=bar,
                         resume=args.resume, overwrite=args.overwrite, lock_wait=args.lock_wait)
    return _show(args, report, "re-embedded")


def _show(args: argparse.Namespace, report: CopyReport, verb: str) -> int:
    if args.json:
        print(to_json(report.to_json()))
    elif not args.quiet:
        print(render(report, verb))
    return 0


def render(report: CopyReport, verb: str) -> str:
    """The report as a table and a summary line."""
    rows = [(k.kind, k.copied, k.count, f"{k.seconds:.2f}", f"{k.records_per_second:,.0f}", k.checksum[:16])
            for k in report.kinds.values()]
    resumed = " (continued an unfinished run)" if report.resumed else ""
    check = "verified: counts and checksums match" if verb != "exported" else "footer written with counts and checksums"
    return "\n".join([
        table(("KIND", verb.upper(), "TOTAL", "SECONDS", "RECORDS/S", "CHECKSUM"), rows),
        "",
        f"{verb} {report.copied:,} records from {report.source} to {report.destination} in {report.seconds:.2f} s"
        f"{resumed}; {check}",
    ])
