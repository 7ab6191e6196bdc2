"""docs/writing-a-backend.md's table of helpers names real functions with their real parameters:
a renamed or re-shaped helper fails here, not in a plugin author's first run."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-backend.md"
CALL = re.compile(r"^(?P<name>[\w.]+)\((?P<params>(?:[^()]|\(\))*)\)")  # `()` may stand as a default


def helper_rows() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    table = text.split("### Helpers core gives a backend", 1)[1].split("\n\n| Helper |", 1)[1].split("\n\n", 1)[0]
    return [line for line in table.splitlines()[2:] if line.startswith("|")]


def resolve(name: str, module: str | None) -> tuple[Any, str]:
    """The object a dotted name in the guide means (a bare name: in the row's last module)."""
    if "." not in name:
        assert module is not None, f"{name}: no module named before it in its row"
        return getattr(importlib.import_module(module), name), module
    path, attribute = name.rsplit(".", 1)
    path = path if path.startswith("mnemostore.") else f"mnemostore.{path}"
    return getattr(importlib.import_module(path), attribute), path


def documented_params(params: str) -> list[tuple[str, str | None]]:
    """`a, b=None` as [("a", None), ("b", "None")]."""
    found = []
    for param in filter(None, (p.strip() for p in params.split(","))):
        name, _, default = param.partition("=")
        found.append((name.strip(), default.strip() or None))
    return found


def test_every_helper_in_the_guide_exists_with_the_documented_parameters() -> None:
    rows = helper_rows()
    assert len(rows) >= 8
    checked = 0
    for row in rows:
        module = None
        for span in re.findall(r"`([^`]+)`", row):
            call = CALL.match(span)
            if call is None or not (call["name"].startswith(("mnemostore.", "core.")) or module):
                continue
            try:
                function, module = resolve(call["name"], module)
            except AttributeError:
                if "." in call["name"]:
                    raise
                continue  # a bare name that is not a helper of this row's module (`OrderKey(...)`)
            actual = [(p.name, None if p.default is inspect.Parameter.empty else repr(p.default))
                      for p in inspect.signature(function).parameters.values()]
            assert documented_params(call["params"]) == actual, f"{span} in the guide; the code has {actual}"
            checked += 1
    assert checked >= 12, checked


def test_the_store_url_row_names_real_attributes() -> None:
    from mnemostore.core.url import StoreURL

    row = next(row for row in helper_rows() if row.startswith("| `mnemostore.core.url.StoreURL`"))
    url = StoreURL.parse("postgresql://user:secret@host:5432/db?token=abc")
    names = [span.lstrip(".").split("(")[0] for span in re.findall(r"`(\.?[a-z_]+(?:\([^)]*\))?)`", row)]
    assert {"scheme", "username", "password", "host", "port", "path", "query", "masked", "scrub"} <= set(names)
    for name in names:
        assert hasattr(url, name), f"StoreURL has no {name!r}"
    assert url.masked == "postgresql://user:***@host:5432/db?token=***"
    assert url.scrub("failed for secret") == "failed for ***"
