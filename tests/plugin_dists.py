"""Build real (unzipped) distributions on sys.path so entry-point discovery is exercised for real."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def install_fake_distribution(root: Path, dist: str, entry_points: dict[str, dict[str, str]],
                              modules: dict[str, str]) -> None:
    """Write `modules` and a `<dist>-1.0.dist-info` with `entry_points` under `root`, then put root on sys.path."""
    for name, source in modules.items():
        path = root / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = []
    for group, items in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {target}" for name, target in items.items())
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


@contextmanager
def fake_site(root: Path, *modules: str) -> Iterator[Path]:
    """`root` for fake distributions; after the block sys.path is as it was and the modules named
    (by prefix) are forgotten, so the next test imports them afresh."""
    before = list(sys.path)
    modules_before = set(sys.modules)
    try:
        yield root
    finally:
        sys.path[:] = before
        for name in set(sys.modules) - modules_before:
            if name.startswith(modules):
                del sys.modules[name]
