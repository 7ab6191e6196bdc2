"""Record kinds an application declares: registration rules, entry points, lookup by name or class."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import AwareDatetime, Field
from tests.plugin_dists import fake_site, install_fake_distribution

import mnemostore
from mnemostore import ConfigError, DuplicateKind, PluginLoadError, Record, ValidationError, register_kind
from mnemostore.core.kinds import Kinds, kind_names, kinds


class Note(Record):
    """A note an application keeps: the kind these tests register (the suite's own is `Specimen`)."""

    topic: str
    stars: int = 0
    weight: float | None = None
    due: AwareDatetime | None = None
    tags: list[str] = Field(default_factory=list)

    kind: ClassVar[str] = "note"
    filterable: ClassVar[dict[str, type]] = {"topic": str, "stars": int, "weight": float, "due": datetime}
    incrementable: ClassVar[frozenset[str]] = frozenset({"stars"})
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("topic", "stars"),)


@pytest.fixture
def note() -> Iterator[type[Note]]:
    register_kind(Note)
    yield Note
    kinds.unregister("note")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    with fake_site(tmp_path, "kind_plugin", "other_plugin") as root:
        yield root


def _kind(name: str, **fields: Any) -> type[Record]:
    """A Record subclass named `name` with these annotations (no defaults)."""
    namespace: dict[str, Any] = {"__annotations__": {"kind": ClassVar[str], **fields}, "kind": name}
    return type(f"K_{name}", (Record,), namespace)


def test_the_built_in_kinds_come_first_and_registered_kinds_follow_by_name(note: type[Note]) -> None:
    class Alpha(Record):
        kind: ClassVar[str] = "alpha"

    register_kind(Alpha)
    try:
        names = kind_names()  # and whatever kinds other tests of this process registered (the store's items)
        assert names[:5] == ("outcome", "heuristic", "anti_pattern", "checkpoint", "embedding")
        assert list(names[5:]) == sorted(names[5:]) and {"alpha", "note"} <= set(names[5:])
    finally:
        kinds.unregister("alpha")
    assert mnemostore.KINDS == ("outcome", "heuristic", "anti_pattern", "checkpoint", "embedding")


def test_registration_completes_the_declaration_with_the_shared_fields(note: type[Note]) -> None:
    assert note.filterable["created_at"] is datetime and note.filterable["topic"] is str
    assert register_kind(note) is note  # again: nothing changes


@pytest.mark.parametrize(("name", "fields", "rule"), [
    ("Note", {}, "lowercase letters"),
    ("a__b", {}, "single underscores"),
    ("x" * 33, {}, "at most 32"),
    ("outcome", {}, "already claimed by mnemostore.core.records:Outcome"),
    ("meta", {}, "reserved for a store's own tables"),
    ("notes_hnsw", {}, "reserved for a store's own tables and indexes"),
    ("checkpoint_notes", {}, "beginning with a built-in kind's name"),
    ("ok", {"agent": str}, "redeclares a field every kind shares"),
    ("ok", {"doc": str}, "a name backends reserve"),
    ("ok", {"at_utcoffset_us": int}, "a name backends reserve"),
    ("ok", {"when": datetime}, "type it AwareDatetime"),
    ("ok", {"things": set[str]}, "is not a JSON type"),
])
def test_a_declaration_no_backend_could_store_is_refused_naming_the_rule(
        name: str, fields: dict[str, Any], rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        register_kind(_kind(name, **fields))
    assert kind_names().count(name) == (name == "outcome")


@pytest.mark.parametrize(("declared", "rule"), [
    ({"filterable": {"missing": str}}, "is not a field of the model"),
    ({"filterable": {"n": str}}, "declared str but annotated"),
    ({"filterable": {"n": list}}, "is not one of str, int, float, bool, datetime"),
    ({"incrementable": frozenset({"label"})}, "must be a filterable int or float"),
    ({"incrementable": frozenset({"n"})}, "must be a filterable int or float"),  # not declared filterable
    ({"indexes": (("nope",),)}, "distinct filterable field names"),
])
def test_filterable_incrementable_and_indexes_must_name_typed_fields(declared: dict[str, Any], rule: str) -> None:
    cls = _kind("bad_decl", n=int, label=str)
    for attribute, value in declared.items():
        setattr(cls, attribute, value)
    with pytest.raises(ConfigError, match=rule):
        register_kind(cls)


def test_a_second_class_cannot_take_a_registered_name(note: type[Note]) -> None:
    other = _kind("note", topic=str)
    with pytest.raises(DuplicateKind, match=r"'note'.*already claimed by .*test_kinds:Note"):
        register_kind(other)
    assert kinds.get("note") is note


def test_running_a_definition_again_replaces_it_as_a_notebook_cell_does(note: type[Note]) -> None:
    again = type("Note", (Record,), {"__annotations__": {"kind": ClassVar[str], "topic": str}, "kind": "note",
                                     "__module__": note.__module__, "__qualname__": note.__qualname__})
    with mnemostore.open("memory://") as store:
        store.collection(note)
        assert register_kind(again) is again and kinds.get("note") is again
        assert store.collection("note").record_cls is again


def test_a_kind_is_named_by_its_name_or_its_registered_class(note: type[Note]) -> None:
    assert kinds.get("note") is note and kinds.get(note) is note
    with pytest.raises(ValidationError, match=r"unknown kind 'nope'; kinds are outcome, .*note"):
        kinds.get("nope")
    with pytest.raises(ValidationError, match=r"not a registered kind; register it first with "
                                              r"mnemostore.register_kind\(K_unseen\)"):
        kinds.get(_kind("unseen"))
    with pytest.raises(ValidationError, match="not int"):
        kinds.get(3)  # type: ignore[arg-type]


def test_values_of_an_application_kind_are_checked_like_built_in_ones(note: type[Note]) -> None:
    with pytest.raises(ValidationError, match="topic: string contains a NUL"):
        note(topic="a\x00")
    with pytest.raises(ValidationError, match="stars: integer does not fit in 64 bits"):
        note(topic="a", stars=2**63)
    with pytest.raises(ValidationError, match="weight: nan is not a finite number"):
        note(topic="a", weight=float("nan"))
    with pytest.raises(ValidationError, match=r"tags.*NUL"):
        note(topic="a", tags=["\x00"])
    with pytest.raises(ValidationError, match="due"):
        note(topic="a", due=datetime(2025, 1, 1))  # naive


def test_the_facade_serves_an_application_kind_by_name_or_class(note: type[Note]) -> None:
    with mnemostore.open("memory://") as store:
        notes = store.collection(note)
        assert store.collection("note") is notes
        notes.put([note(topic="a", stars=1, embedding=[1.0, 0.0]),
                   {"topic": "b", "stars": 5, "due": datetime(2025, 1, 1, tzinfo=UTC), "embedding": [0.0, 1.0]}])
        assert [n.topic for n in notes.query(order_by="-stars")] == ["b", "a"]
        assert notes.count({"due": {"$gt": datetime(2024, 1, 1, tzinfo=UTC)}}) == 1
        first = notes.first({"topic": "a"})
        assert first is not None and notes.update(first.id, inc={"stars": 2}).stars == 3
        with pytest.raises(ValidationError, match=r"inc.weight: is not an incrementable counter"):
            notes.update(first.id, inc={"weight": 1})
        with pytest.raises(ValidationError, match=r"set.topic.*NUL"):
            notes.update(first.id, set={"topic": "\x00"})
        with pytest.raises(ValidationError, match="cannot order by 'tags'"):
            notes.query(order_by="tags")
        hits = store.search(note, [1.0, 0.0], 2, where={"topic": "b"})
        assert [hit.record.topic for hit in hits] == ["b"]


def _install(site: Path, dist: str, points: dict[str, str], source: str) -> None:
    install_fake_distribution(site, dist, {"mnemostore.kinds": points}, {"kind_plugin": source})


PLUGIN_KIND = """
    from typing import ClassVar
    from mnemostore import Record

    class Recipe(Record):
        kind: ClassVar[str] = "recipe"
        filterable: ClassVar[dict[str, type]] = {"dish": str}
        dish: str
"""


def test_a_package_registers_a_kind_through_an_entry_point_loaded_on_first_use(site: Path) -> None:
    _install(site, "kind-plugin", {"recipe": "kind_plugin:Recipe"}, PLUGIN_KIND)
    found = Kinds()
    assert "kind_plugin" not in sys.modules
    assert found.get("recipe").kind == "recipe"
    assert found.names()[-1] == "recipe"


def test_a_broken_kind_plugin_is_reported_by_name(site: Path) -> None:
    _install(site, "kind-plugin", {"broken": "kind_plugin:Nope"}, "raise RuntimeError('boom')\n")
    found = Kinds()
    with pytest.raises(PluginLoadError, match=r"kind plugin 'broken' \(kind_plugin:Nope, from distribution "
                                              r"kind-plugin\) failed to load: RuntimeError: boom"):
        found.get("broken")
    assert found.get("outcome").kind == "outcome"  # the others still work
    with pytest.raises(PluginLoadError, match="'broken'"):
        found.names()  # a listing that would skip it raises instead


def test_an_entry_point_whose_class_declares_another_name_or_a_bad_kind_is_refused(site: Path) -> None:
    _install(site, "kind-plugin", {"dinner": "kind_plugin:Recipe", "meal": "kind_plugin:Bad"},
             PLUGIN_KIND + "\n    class Bad(Record):\n        kind: ClassVar[str] = 'meal'\n        doc: str\n")
    found = Kinds()
    with pytest.raises(PluginLoadError, match="declares the kind 'recipe', not 'dinner'"):
        found.get("dinner")
    with pytest.raises(PluginLoadError, match=r"'meal'.*is not usable.*'doc' is a name backends reserve"):
        found.get("meal")


def test_two_claimants_of_one_kind_name_are_refused_never_picked(site: Path) -> None:
    _install(site, "kind-plugin", {"recipe": "kind_plugin:Recipe", "outcome": "kind_plugin:Mine"},
             PLUGIN_KIND + "\n    class Mine(Record):\n        kind: ClassVar[str] = 'outcome'\n")
    install_fake_distribution(site, "other-plugin", {"mnemostore.kinds": {"recipe": "other_plugin:Recipe"}},
                              {"other_plugin": "Recipe = None\n"})
    found = Kinds()
    with pytest.raises(DuplicateKind, match=r"2 packages register the kind 'recipe'.*kind-plugin.*other-plugin"):
        found.get("recipe")
    with pytest.raises(DuplicateKind, match=r"'outcome' of kind_plugin:Mine is already claimed by mnemostore"):
        found.names()  # a listing reports it (a lookup of a built-in kind is not slowed down to)
    clash = _kind("recipe", dish=str)
    with pytest.raises(DuplicateKind, match="entry point kind_plugin:Recipe"):
        found.register(clash)


def _tables(path: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_sqlite_creates_an_application_kinds_table_at_its_first_write_not_at_a_read(
        note: type[Note], tmp_path: Path) -> None:
    path = tmp_path / "kinds.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        notes = store.collection(note)
        assert notes.count() == 0 and notes.all() == [] and notes.get("x") is None
        assert notes.delete(where={}) == 0 and store.search(note, [1.0, 0.0], 3) == []
        assert "mnemo_note" not in _tables(path)  # reading (info, copy, export) writes nothing
        notes.add(topic="a", stars=2, embedding=[1.0, 0.0])
        assert "mnemo_note" in _tables(path)
    with mnemostore.open(f"sqlite:///{path}") as store:  # another open finds it
        assert [n.stars for n in store.collection("note").all()] == [2]


def test_a_store_refuses_code_whose_kind_gained_a_filterable_field_until_it_is_migrated(
        note: type[Note], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kinds.db'}"
    with mnemostore.open(url) as store:
        store.collection(note).add(topic="a")
    kinds.unregister("note")
    grown = type("Note", (Note,), {"__annotations__": {"mood": str}, "mood": "", "__module__": "app",
                                   "__qualname__": "Note", "filterable": {**Note.filterable, "mood": str}})
    register_kind(grown)
    with pytest.raises(mnemostore.KindChanged, match=r": filterable field 'mood' \(str\) added\. See .*migrate up "
                                                     r".*--import app"):
        mnemostore.open(url)
    with mnemostore.open(url, migrate="auto") as store:
        assert store.collection("note").count({"mood": ""}) == 1
