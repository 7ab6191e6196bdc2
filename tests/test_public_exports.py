"""Every lazily exported name is also re-exported for type checkers (`from m import X as X`), so
`from mnemostore import open` passes `mypy --strict` in users' code, and resolves at runtime."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest


@pytest.mark.parametrize("package", ["mnemostore", "mnemostore.migrations", "mnemostore.testing",
                                     "mnemostore.integrations.langgraph"])
def test_lazy_exports_resolve_and_are_explicit_for_type_checkers(package: str) -> None:
    module = importlib.import_module(package)
    exports: dict[str, str] = module._EXPORTS
    source = inspect.getsource(module)
    literal_all = re.search(r"^__all__ = \[([^*\]]*)\]", source, re.MULTILINE)  # mypy reads only a literal list
    declared = set(re.findall(r"import (\w+) as \1\b", source))
    declared |= set(re.findall(r'"(\w+)"', literal_all.group(1))) if literal_all else set()
    assert set(exports) <= declared, sorted(set(exports) - declared)
    for name in exports:
        assert getattr(module, name) is not None


def test_the_backend_guide_names_every_method_of_the_protocol() -> None:
    """docs/writing-a-backend.md lists what the suite and the tools can call: nothing may be missing."""
    from pathlib import Path

    from mnemostore import Backend

    guide = (Path(__file__).resolve().parents[1] / "docs" / "writing-a-backend.md").read_text(encoding="utf-8")
    public = [name for name, value in vars(Backend).items()
              if not name.startswith("_") and (callable(value) or isinstance(value, classmethod | property))]
    public += [name for name in Backend.__annotations__ if not name.startswith("_")]
    forms = ("`{}", "def {}(", "{}: ClassVar", "self.{}")
    missing = sorted(name for name in set(public) if not any(form.format(name) in guide for form in forms))
    assert not missing, f"docs/writing-a-backend.md does not name: {missing}"
