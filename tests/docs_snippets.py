"""The fenced code blocks of README.md and docs/**/*.md, with the markers that say how to run
them (the rules are in tests/test_docs_snippets.py), and the program that runs a page's
python blocks in one process."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<language>[\w+-]*)")
COMMENT = re.compile(r"^\s*<!--(?P<body>.*?)-->\s*$")
MARKER = re.compile(r"^\s*(?P<key>not-run|snippet)\b\s*:?\s*(?P<value>.*?)\s*$", re.DOTALL)
DIRECTIVES = ("standalone", "pytest", "in-checkout", "before:", "postgres ")


@dataclass
class Block:
    """One fenced block: `line` is its opening fence's line (1-based), `code` what is inside."""

    page: Path
    line: int
    language: str
    code: str
    not_run: str | None = None
    directives: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in PYTHON | SHELL and self.not_run is None

    def has(self, directive: str) -> bool:
        return directive in self.directives

    def arguments(self, directive: str) -> list[str]:
        """The rest of each directive starting with `directive` (`before: CMD` -> `CMD`)."""
        return [d[len(directive):].strip() for d in self.directives if d.startswith(directive)]

    def commands(self) -> str:
        """A shell block as a script: every line of bash/sh/shell; of console, the `$ ` lines
        (and the `> ` continuation lines after one); the rest is output."""
        if self.language != "console":
            return self.code
        script, prompted = [], False
        for line in self.code.splitlines():
            if line.startswith("$ "):
                script.append(line[2:])
                prompted = True
            elif prompted and line.startswith("> "):
                script.append(line[2:])
            else:
                prompted = False
        return "\n".join(script) + "\n"

    def script(self) -> str:
        """The commands, each one checked: a failure anywhere in a line (`a && b` too, which
        `bash -e` lets pass) stops the script with its status."""
        checked, command = [], ""
        for line in self.commands().splitlines():
            command += line + "\n"
            if command.rstrip().endswith("\\") or not complete(command):
                continue
            if shlex.split(command, comments=True):
                checked.append(f"{{ {command}}} || exit $?")
            command = ""
        assert not command.strip(), f"{self.name}: an unterminated command: {command}"
        return "\n".join(checked) + "\n"


def complete(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:  # a quote still open: the command goes on on the next line
        return False
    return True


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse(page: Path) -> tuple[list[Block], list[str]]:
    """The page's blocks and its marker errors (a marker not directly above a fence, a
    not-run without a reason, a directive this test does not know, a console block without
    a prompt)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    errors: list[str] = []
    pending: list[tuple[int, str, str]] = []  # markers in the comment lines just above
    number = 0
    while number < len(lines):
        text = lines[number]
        comment = COMMENT.match(text)
        opening = FENCE.match(text)
        if comment:
            marker = MARKER.match(comment["body"])
            if marker:
                pending.append((number + 1, marker["key"], marker["value"]))
            number += 1
            continue
        for line, key, _ in pending if not opening else ():
            errors.append(f"{page.relative_to(ROOT)}:{line}: <!-- {key}: ... --> is not directly above a code block")
        if not opening:
            pending = []
            number += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = number + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        code = "\n".join(line[indent:] for line in lines[number + 1:end]) + "\n"
        block = Block(page, number + 1, opening["language"].lower(), code)
        for line, key, value in pending:
            where = f"{page.relative_to(ROOT)}:{line}"
            if key == "not-run":
                if not value:
                    errors.append(f"{where}: <!-- not-run: REASON --> needs its reason")
                block.not_run = value or "(no reason)"
            elif not value.startswith(DIRECTIVES) and value not in DIRECTIVES:
                errors.append(f"{where}: unknown <!-- snippet: {value} -->; known: {', '.join(DIRECTIVES)}")
            else:
                block.directives.append(value)
        if pending and block.language not in PYTHON | SHELL:
            errors.append(f"{block.name}: a marker on a {block.language or 'plain'} block, which never runs")
        if block.language == "console" and not block.commands().strip():
            errors.append(f"{block.name}: a console block without a `$ ` command (output alone is `text`)")
        blocks.append(block)
        pending = []
        number = end + 1
    return blocks, errors


RUNNER = r"""
import json, subprocess, sys, traceback

steps, results = json.loads(sys.argv[1]), sys.argv[2]
namespace = {"__name__": "__main__"}
for step in steps:
    try:
        for command in step["before"]:
            subprocess.run(command, shell=True, check=True)
        # Padded so that a traceback names the markdown file and its line, with the source.
        exec(compile("\n" * step["line"] + step["code"], step["page"], "exec"), namespace)
        error = None
    except BaseException:
        error = traceback.format_exc()
    with open(results, "a", encoding="utf-8") as out:
        out.write(json.dumps({"line": step["line"], "error": error}) + "\n")
    if error:
        break
"""
"""`python -c RUNNER STEPS RESULTS`: the blocks of one program in one namespace, in order,
each one's outcome a JSON line in RESULTS; it stops at the first failure."""
