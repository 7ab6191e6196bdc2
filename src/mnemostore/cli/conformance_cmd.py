"""`mnemostore conformance URL`: run the conformance suite and print a per-capability report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .render import clip, table, to_json

if TYPE_CHECKING:
    from ..testing.report import Report

MESSAGE_WIDTH = 160


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "conformance", help="run the conformance suite against a store URL and report per capability",
        description="Run mnemostore's conformance suite in-process against fresh empty stores derived from "
                    "URL (a sub-directory of a path URL, a fresh memory:// name, a unique prefix option, or "
                    "{test} in the URL replaced per test) and print, per capability, what passed, failed "
                    "(with the assertion) and was skipped (with the reason). Exits 1 if anything failed.")
    parser.add_argument("url", metavar="URL", help="store URL, e.g. memory://, sqlite:///tmp/conf, "
                                                   "mystore://host/db_{test}")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE ('-': stdout only)")
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE")
    parser.add_argument("-k", metavar="EXPR", dest="keyword",
                        help="run only the clauses matching this pytest -k expression (never a 'full' level)")
    parser.set_defaults(run=run)


def render(report: Report) -> str:
    """The report as text: a header, the capability table, failures, skip reasons and the level."""
    lines = [f"mnemostore conformance suite {report.suite_version}: {report.url} (backend {report.backend})", ""]
    rows = [(r.capability, "yes" if r.declared else "no", r.passed, r.failed, r.skipped,
             *((r.xfailed,) if report.count("xfailed") else ()))
            for r in report.capability_rows()]
    headers = ("CAPABILITY", "DECLARED", "PASSED", "FAILED", "SKIPPED",
               *(("XFAILED",) if report.count("xfailed") else ()))
    lines.append(table(headers, rows))
    if report.errors:
        lines += ["", "Errors:", *(f"  {clip(e, MESSAGE_WIDTH)}" for e in report.errors)]
    failures = report.failures()
    if failures:
        lines += ["", "Failed:"]
        lines += [f"  {r.area}: {r.name}\n      {clip(r.message, MESSAGE_WIDTH)}" for r in failures]
    reasons: dict[str, int] = {}
    for result in report.results:
        if result.outcome in ("skipped", "xfailed"):
            key = f"{'xfail: ' if result.outcome == 'xfailed' else ''}{result.message}"
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        lines += ["", "Skipped:", *(f"  {n:>4} x {clip(reason, MESSAGE_WIDTH)}" for reason, n in reasons.items())]
    totals = ", ".join(f"{report.count(o)} {o}" for o in ("passed", "failed", "skipped", "xfailed")
                       if o != "xfailed" or report.count(o))
    gaps = f" ({'; '.join(report.gaps())})" if report.level == "partial" else ""
    lines += ["", totals, f"conformance level: {report.level}{gaps}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..testing.validate import validate

    report = validate(args.url, keyword=args.keyword, junit_xml=args.junit)
    if args.json == "-":
        print(to_json(report.to_dict()))
    else:
        print(render(report))
        if args.json:
            Path(args.json).write_text(to_json(report.to_dict()) + "\n", encoding="utf-8")
    return 0 if report.ok else 1
