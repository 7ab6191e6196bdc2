"""Backend discovery: entry points, pluggy hooks, load failures, duplicates, missing drivers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.plugin_dists import fake_site, install_fake_distribution

from mnemostore.core.errors import BackendNotInstalled, DuplicateBackend, PluginLoadError, UnknownBackend
from mnemostore.core.registry import Registry, ensure_driver

GOOD_BACKEND = """
    from mnemostore.backends.memory import MemoryBackend

    class EchoBackend(MemoryBackend):
        name = "echo"
        schemes = ("echo", "echo+mem")
"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    with fake_site(tmp_path, "echo_plugin", "broken_plugin", "hook_plugin", "dup_plugin") as root:
        yield root


def test_builtin_backends_are_found_through_entry_points() -> None:
    registry = Registry()
    names = {entry.name for entry in registry.entries()}
    assert {"memory", "sqlite", "file"} <= names
    memory = next(e for e in registry.entries() if e.name == "memory")
    assert memory.distribution == "mnemostore"
    assert memory.status == "ok"


def test_unknown_scheme_lists_installed_schemes() -> None:
    with pytest.raises(UnknownBackend, match=r"'nosuch'.*memory"):
        Registry().for_scheme("nosuch")


def test_plugin_backend_is_found_by_scheme_alias(site: Path) -> None:
    install_fake_distribution(site, "echo-plugin", {"mnemostore.backends": {"echo": "echo_plugin:EchoBackend"}},
                              {"echo_plugin": GOOD_BACKEND})
    registry = Registry()
    assert registry.for_scheme("echo+mem").name == "echo"
    entry = next(e for e in registry.entries() if e.name == "echo")
    assert (entry.distribution, entry.version) == ("echo-plugin", "1.0")


def test_broken_plugin_is_reported_by_name_and_hides_nothing(site: Path) -> None:
    install_fake_distribution(
        site, "broken-plugin", {"mnemostore.backends": {"broken": "broken_plugin:Nope"}},
        {"broken_plugin": "raise RuntimeError('boom at import')\n"})
    registry = Registry()
    assert registry.for_scheme("memory").name == "memory"  # the others still work
    entries = {e.name: e for e in registry.entries()}
    assert "boom at import" in entries["broken"].status
    with pytest.raises(PluginLoadError, match=r"'broken'.*broken-plugin.*boom at import") as info:
        registry.get("broken")
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(UnknownBackend, match="failed to load"):
        registry.for_scheme("unknown-scheme")


def test_two_plugins_claiming_one_name_fail_only_for_that_name(site: Path) -> None:
    install_fake_distribution(site, "dup-plugin", {"mnemostore.backends": {"sqlite": "dup_plugin:X"}},
                              {"dup_plugin": "X = 1\n"})
    registry = Registry()
    with pytest.raises(DuplicateBackend, match=r"'sqlite'") as caught:
        registry.for_scheme("sqlite")
    assert "distribution mnemostore" in str(caught.value) and "distribution dup-plugin" in str(caught.value)
    with pytest.raises(DuplicateBackend, match=r"'sqlite'"):
        registry.get("sqlite")
    assert registry.for_scheme("file").name == "file" and registry.for_scheme("memory").name == "memory"
    listed = [(e.name, e.distribution, e.status) for e in registry.entries() if e.name == "sqlite"]
    assert sorted(listed) == [("sqlite", "dup-plugin", "duplicate name: dup-plugin, mnemostore"),
                              ("sqlite", "mnemostore", "duplicate name: dup-plugin, mnemostore")]
    assert any(e.name == "memory" and e.status == "ok" for e in registry.entries())


def test_the_backends_command_lists_both_claimants_and_every_other_backend(site: Path) -> None:
    install_fake_distribution(site, "dup-plugin", {"mnemostore.backends": {"sqlite": "dup_plugin:X"}},
                              {"dup_plugin": "X = 1\n"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    listing = subprocess.run([sys.executable, "-m", "mnemostore", "backends"], capture_output=True, text=True,
                             env=env, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.count("duplicate name") >= 2 and "dup-plugin" in listing.stdout
    assert "file" in listing.stdout and "memory" in listing.stdout
    opened = subprocess.run([sys.executable, "-m", "mnemostore", "info", "memory://"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert opened.returncode == 0, opened.stderr


def test_pluggy_hook_adds_backends(site: Path) -> None:
    source = GOOD_BACKEND.replace('"echo"', '"hooked"').replace('("echo", "echo+mem")', '("hooked",)') + """
    import mnemostore

    @mnemostore.hookimpl
    def mnemostore_add_backends():
        return [EchoBackend]
"""
    install_fake_distribution(site, "hook-plugin", {"mnemostore.plugins": {"hooked": "hook_plugin"}},
                              {"hook_plugin": source})
    assert Registry().for_scheme("hooked").name == "hooked"


def test_register_in_process_and_reject_unknown_capability() -> None:
    from mnemostore.backends.memory import MemoryBackend

    class Local(MemoryBackend):
        name = "local-test"
        schemes = ("local-test",)

    class Bad(MemoryBackend):
        name = "bad-caps"
        schemes = ("bad-caps",)
        capabilities = frozenset({"teleportation"})  # type: ignore[arg-type]

    registry = Registry()
    registry.register(Local)
    assert registry.for_scheme("local-test") is Local
    with pytest.raises(DuplicateBackend):
        registry.register(Local)
    with pytest.raises(Exception, match="unknown capability 'teleportation'"):
        registry.register(Bad)


def test_missing_driver_names_the_extra() -> None:
    from mnemostore.backends.memory import MemoryBackend

    class NeedsDriver(MemoryBackend):
        name = "needs-driver"
        schemes = ("needs-driver",)
        requires = ("surely_not_an_installed_module_xyz",)
        extra = "xyz"

    with pytest.raises(BackendNotInstalled, match=r"surely_not_an_installed_module_xyz.*mnemostore\[xyz\]"):
        ensure_driver(NeedsDriver)


def test_import_mnemostore_loads_no_driver_or_heavy_dependency() -> None:
    import subprocess

    code = ("import sys, mnemostore; heavy = [m for m in ('psycopg', 'chromadb', 'qdrant_client', 'sqlite_vec', "
            "'numpy', 'pydantic', 'sqlite3') if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
