"""`mnemostore demo`: write a small agent's memory into a store and show what it recalls."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from .render import clip, table

if TYPE_CHECKING:
    from ..demo import DemoReport

_PLURAL = {"outcome": "outcomes", "heuristic": "heuristics", "anti_pattern": "anti-patterns",
           "checkpoint": "checkpoints", "embedding": "embeddings", "workflow_outcome": "workflow outcomes"}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "demo", help="write a small agent's memory into a store and recall it",
        description="Write a coding agent's outcomes, heuristics, anti-patterns, workflow outcomes and checkpoints "
                    "into a store (by default the embedded SQLite store, or $MNEMOSTORE_URL), embed their text with "
                    "a small deterministic embedder, then run filtered semantic searches, reinforce a heuristic and "
                    "walk a checkpoint lineage. The demo's records have stable ids, so re-running it replaces them.")
    parser.add_argument("--url", help="store URL (default: as mnemostore.open() resolves it)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..core.config import resolve
    from ..core.store import open_config
    from ..demo import run as run_demo

    config = resolve(args.url)
    with open_config(config) as store:
        report = run_demo(store)
    source = "command line" if config.source == "argument" else config.source
    print(render(report, source, inspect_url=None if args.url is None else report.url))
    return 0


def render(report: DemoReport, source: str, inspect_url: str | None = None) -> str:
    """The demo's report as text."""
    from ..demo import PROJECT

    written = ", ".join(f"{n} {_PLURAL[kind]}" for kind, n in report.written.items())
    lines = [
        f"mnemostore demo: a coding agent's memory in {report.url}",
        f"  (store from: {source})",
        "",
        f"Wrote {written} and {report.counts['checkpoint']} checkpoints for project {PROJECT!r}.",
        "Ids are stable, so re-running the demo replaces these records instead of adding copies.",
        f"The coder succeeded in {report.coder_successes} of {report.coder_attempts} recorded attempts.",
        "",
        f"Situation: {report.query!r}",
        "",
    ]
    if report.search_skipped:
        lines += [f"Semantic search skipped: {report.search_skipped}.", ""]
    else:
        heuristic_rows: list[tuple[Any, ...]] = []
        for i, (heuristic, score) in enumerate(report.heuristic_hits, 1):
            heuristic_rows += [(i, f"{score:.3f}", heuristic.agent, f"{heuristic.confidence:.2f}", heuristic.condition),
                               ("", "", "", "", f"-> {heuristic.strategy}")]
        anti_rows: list[tuple[Any, ...]] = []
        for i, (anti_pattern, score) in enumerate(report.anti_pattern_hits, 1):
            anti_rows += [(i, f"{score:.3f}", anti_pattern.agent, anti_pattern.pattern),
                          ("", "", "", f"instead: {anti_pattern.better_alternative}")]
        workflow_rows = [(i, f"{score:.3f}", run.result, f"{run.duration_seconds:.0f}s", run.summary)
                         for i, (run, score) in enumerate(report.workflow_hits, 1)]
        lines += [f"Heuristics nearest to it, where {report.heuristic_filter}:",
                  table(("#", "SCORE", "AGENT", "CONF", "CONDITION -> STRATEGY"), heuristic_rows, indent="  "),
                  "",
                  f"Anti-patterns nearest to it, where {report.anti_pattern_filter}:",
                  table(("#", "SCORE", "AGENT", "PATTERN"), anti_rows, indent="  "),
                  "",
                  f"Workflow outcomes (mnemostore.kinds.workflow) nearest to it, where {report.workflow_filter}:",
                  table(("#", "SCORE", "RESULT", "TOOK", "SUMMARY"), workflow_rows, indent="  "),
                  ""]
    reinforced = report.reinforced.heuristic
    lines += [
        f"Reinforced {clip(reinforced.strategy, 50)!r} after a success:",
        f"  confidence {report.reinforced.confidence_before:.2f} -> {reinforced.confidence:.2f} "
        f"({reinforced.success_count} of {reinforced.occurrence_count} uses succeeded)",
        f"Anti-pattern {clip(report.seen.pattern, 50)!r} seen again: {report.seen.occurrence_count} sightings.",
        "",
        "Checkpoints of the run (branches 'tests' and 'docs' merged into 'main'):",
    ]
    nodes = {c.id: c.node_id for c in report.history}
    lines.append(table(("SEQ", "BRANCH", "NODE", "PARENTS", "STATE HASH"),
                       [(c.sequence, c.branch_id, c.node_id, ", ".join(nodes.get(p, p) for p in c.parent_ids) or "-",
                         c.state_hash[:12]) for c in report.history], indent="  "))
    lines += [
        "",
        "Lineage of the merge (first parents): " + " <- ".join(c.node_id for c in report.lineage),
    ]
    if report.restored is not None:
        from ..demo import MERGE_REDUCERS

        state = report.restored
        ancestor = report.ancestor.node_id if report.ancestor is not None else "?"
        last_parent = nodes.get(report.lineage[0].parent_ids[-1], "?")
        lines += [
            f"Restored the latest state as {type(state).__name__}: step={state.step!r}, "
            f"tests_passed={state.tests_passed}, files_changed={state.files_changed}",
            f"  notes, each once though both branches inherited them: {state.notes}",
            f"  (the merge's rule: {merge_rule(MERGE_REDUCERS, ancestor, last_parent)})",
        ]
    lines += ["", f"Inspect the store with: mnemostore info{' ' + shlex.quote(inspect_url) if inspect_url else ''}"]
    return "\n".join(lines)


def merge_rule(reducers: dict[str, str], ancestor: str, last_parent: str) -> str:
    """How a merge combined its parents, in words: from the common ancestor, each reducer, then the
    rule for other fields."""
    last = f" (the last branch to change it: {last_parent})"
    named = "; ".join(f"{field} {reducer}{last if reducer == 'last' else ''}" for field, reducer in reducers.items())
    return (f"each branch's changes since {ancestor} folded once onto its state, branches in order: {named}; "
            "any other field two branches changed differently would be a MergeConflict")
