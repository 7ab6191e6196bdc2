"""What a store knows of the application kinds it holds: each kind's declaration, recorded at its first write.

A store keeps, under the meta key `kinds`, the declaration of every application kind written to it
(its filterable fields with their types, counters, indexes and bytes fields, and the class that
declared it), so a process whose code declares a kind differently is refused before it reads or
writes a record under the wrong layout; the migration runner plans the difference (`KindChange`).
The built-in kinds are left out: their layout is each backend's layout history.
"""

from __future__ import annotations

import hashlib
import importlib
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Optional

import orjson
from pydantic import create_model

from .errors import KindChanged, MigrationError
from .kinds import DEFAULT_ORDER_INDEX, kinds
from .records import COMMON_FILTERABLE, RECORD_TYPES, Record

if TYPE_CHECKING:
    from .protocol import Backend

KINDS_KEY = "kinds"
"""The meta key holding the declarations: {"format": 1, "kinds": {name: declaration}}."""
FORMAT = 1
LOCK_WAIT = 60.0
"""Seconds a first write waits for the store's migration lock to record its kind's declaration."""
_TYPE_NAMES: dict[type, str] = {str: "str", int: "int", float: "float", bool: "bool", datetime: "datetime"}
_NAMED_TYPES: dict[str, type] = {name: t for t, name in _TYPE_NAMES.items()}


@dataclass(frozen=True)
class Declaration:
    """A kind's layout-relevant declaration, as a store records it (comparable, JSON round-trip)."""

    kind: str
    filterable: dict[str, str]
    """The kind's own filterable fields (the shared ones are every kind's) -> type name."""
    incrementable: tuple[str, ...] = ()
    indexes: tuple[tuple[str, ...], ...] = ()
    binary: tuple[str, ...] = ()
    """Bytes fields: SQL backends keep each in a column of its own."""
    source: str = ""
    """`module:qualname` of the class that declared it (for messages; not compared)."""
    default_order_index: bool = True
    """Whether backends build the default order's index (recorded only when off, so declarations
    recorded before it existed read back unchanged)."""

    @classmethod
    def of(cls, record_cls: type[Record]) -> Declaration:
        from .codec import binary_fields

        own = {name: _TYPE_NAMES[t] for name, t in record_cls.filterable.items() if name not in COMMON_FILTERABLE}
        return cls(record_cls.kind, own, tuple(sorted(record_cls.incrementable)),
                   tuple(tuple(index) for index in record_cls.indexes), binary_fields(record_cls),
                   f"{record_cls.__module__}:{record_cls.__qualname__}", record_cls.default_order_index)

    @classmethod
    def from_json(cls, value: Any) -> Declaration:
        try:
            return cls(value["kind"], dict(value["filterable"]), tuple(value.get("incrementable", ())),
                       tuple(tuple(index) for index in value.get("indexes", ())), tuple(value.get("binary", ())),
                       str(value.get("source", "")), value.get("default_order_index", True) is not False)
        except (KeyError, TypeError) as exc:
            raise MigrationError(f"this store's declaration of a kind is malformed ({exc}): {value!r:.200}") from None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "filterable": dict(self.filterable), "incrementable": list(self.incrementable),
                "indexes": [list(index) for index in self.indexes], "binary": list(self.binary),
                "source": self.source, **({} if self.default_order_index else {"default_order_index": False})}

    @property
    def built_indexes(self) -> tuple[tuple[str, ...], ...]:
        """Every index a backend builds for the kind (`kinds.secondary_indexes`)."""
        return ((DEFAULT_ORDER_INDEX,) if self.default_order_index else ()) + self.indexes

    @property
    def module(self) -> str:
        return self.source.partition(":")[0]


@dataclass(frozen=True)
class KindChange:
    """How the code's declaration of a kind differs from the one its store recorded."""

    stored: Declaration
    declared: Declaration
    added: dict[str, str] = field(default_factory=dict)
    """New filterable fields -> type name: columns (or payload keys) backfilled from the stored documents."""
    added_indexes: tuple[tuple[str, ...], ...] = ()
    dropped_indexes: tuple[tuple[str, ...], ...] = ()
    added_binary: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    """Filterable or bytes fields no longer declared: not a layout change (`migrate accept` records it)."""
    retyped: tuple[str, ...] = ()
    """Filterable fields whose type changed: not a layout change (a record migration, under a new name)."""

    @classmethod
    def between(cls, stored: Declaration, declared: Declaration) -> KindChange:
        old, new = stored.filterable, declared.filterable
        removed = [f"filterable field {name!r} ({old[name]}) is no longer declared" for name in old if name not in new]
        removed += [f"bytes field {name!r} is no longer declared" for name in stored.binary
                    if name not in declared.binary]
        retyped = [f"filterable field {name!r} changed type from {old[name]} to {new[name]}"
                   for name in old if name in new and new[name] != old[name]]
        return cls(stored, declared, {name: kind for name, kind in new.items() if name not in old},
                   tuple(index for index in declared.built_indexes if index not in stored.built_indexes),
                   tuple(index for index in stored.built_indexes if index not in declared.built_indexes),
                   tuple(name for name in declared.binary if name not in stored.binary), tuple(removed), tuple(retyped))

    @property
    def refused(self) -> tuple[str, ...]:
        """Differences that are not layout changes: `migrate up` does not apply them."""
        return (*self.removed, *self.retyped)

    @property
    def grows(self) -> bool:
        """Whether the change adds what existing records must be brought to (fields, indexes, bytes columns)."""
        return bool(self.added or self.added_indexes or self.added_binary)

    @property
    def kind(self) -> str:
        return self.declared.kind

    @property
    def empty(self) -> bool:
        return self.stored.to_json() | {"source": ""} == self.declared.to_json() | {"source": ""}

    @property
    def id(self) -> str:
        """The step's migration id: the kind and a digest of both declarations (one id per change)."""
        digest = hashlib.sha256(orjson.dumps([self.stored.to_json() | {"source": ""},
                                              self.declared.to_json() | {"source": ""}])).hexdigest()
        return f"kind.{self.kind}.{digest[:12]}"

    def describe(self) -> str:
        """The change in words, for plans and errors."""
        parts = [f"filterable field {name!r} ({kind}) added" for name, kind in self.added.items()]
        parts += [f"index {index!r} added" for index in self.added_indexes]
        parts += [f"index {index!r} dropped" for index in self.dropped_indexes]
        parts += [f"bytes field {name!r} added" for name in self.added_binary]
        if self.stored.incrementable != self.declared.incrementable:
            parts.append(f"counters {list(self.stored.incrementable)} -> {list(self.declared.incrementable)}")
        return "; ".join([*self.refused, *parts])


def stored_declarations(backend: Backend) -> dict[str, Declaration]:
    """The declarations a store recorded, by kind name (empty for a store that recorded none)."""
    value = backend.read_meta(KINDS_KEY)
    if value is None:
        return {}
    if not isinstance(value, dict) or value.get("format") != FORMAT or not isinstance(value.get("kinds"), dict):
        raise MigrationError(f"this store's record of its kinds is unreadable (format "
                             f"{value.get('format') if isinstance(value, dict) else None!r}, expected {FORMAT}); "
                             "it was written by a newer mnemostore, or damaged")
    return {name: Declaration.from_json(entry) for name, entry in value["kinds"].items()}


def write_declarations(backend: Backend, declarations: Mapping[str, Declaration]) -> None:
    """Persist the declarations (the caller holds the store's migration lock and read them under it)."""
    entries = {name: {**declaration.to_json(), "recorded_at": datetime.now(UTC).isoformat()}
               for name, declaration in sorted(declarations.items())}
    backend.write_meta(KINDS_KEY, {"format": FORMAT, "kinds": entries})


def is_application_kind(record_cls: type[Record]) -> bool:
    return record_cls not in RECORD_TYPES.values()


def check_declared(stored: Declaration, record_cls: type[Record], url: str) -> None:
    """KindChanged, naming the difference and the command to run, unless `record_cls` declares what
    the store recorded."""
    change = KindChange.between(stored, Declaration.of(record_cls))
    if not change.empty:
        raise kind_changed([change], url)


def kind_changed(changes: list[KindChange], url: str) -> KindChanged:
    """The error for declarations that differ from a store's: what differs, and what to do."""
    lines = [f"kind {c.kind!r} (declared by {c.declared.source}) differs from this store's record of it"
             + (f" (declared by {c.stored.source})" if c.stored.source != c.declared.source else "")
             + f": {c.describe()}" for c in changes]
    url = shlex.quote(url)
    modules = sorted({c.declared.module for c in changes if not _from_entry_point(c.kind)})
    imports = "".join(f" --import {module}" for module in modules if module != "__main__")
    if any(c.retyped for c in changes):
        advice = ("changing a stored field's type is not a layout change: it is a record migration the application "
                  "writes (declare the field under a new name, fill it from the old one with a RecordMigration, and "
                  "keep the old one declared until then)")
    elif any(c.removed for c in changes):
        commands = " and ".join(f"`mnemostore migrate accept {url} kind.{c.kind}{imports}`"
                                for c in changes if c.removed)
        advice = ("removing a stored field is not a layout change: once the application no longer needs its values "
                  "(a RecordMigration moves them first if need be), record the kind's new declaration with "
                  f"{commands}; its column or payload key is left as it is")
    else:
        advice = (f"see the change with `mnemostore migrate plan {url}{imports}` and apply it with `mnemostore "
                  f"migrate up {url}{imports}` (or open the store once with migrate='auto')")
    if "__main__" in modules and not any(c.retyped for c in changes):
        advice += "; the command needs the module that registers the kind: add --import MODULE"
    return KindChanged("; ".join(lines) + f". {advice[0].upper()}{advice[1:]}")


def accept_declaration(backend: Backend, name: str) -> KindChange:
    """Record the code's declaration of kind `name` in place of the store's, where the difference moves
    no data (fields no longer declared, counters); the caller holds the migration lock."""
    declarations = stored_declarations(backend)
    record_cls, stored = kinds.find(name), declarations.get(name)
    if record_cls is None or stored is None:
        missing = "this process does not know the kind (--import its module)" if record_cls is None else \
            "this store has recorded no declaration of it"
        raise MigrationError(f"cannot accept kind.{name}: {missing}")
    change = KindChange.between(stored, Declaration.of(record_cls))
    if change.empty:
        raise MigrationError(f"kind.{name}: the store's declaration of {name!r} is the code's; nothing to accept")
    if change.retyped or change.grows:
        raise MigrationError(f"kind.{name} cannot be accepted ({change.describe()}): a new field, index or bytes field "
                             "is applied by `mnemostore migrate up`, and a changed type is a record migration")
    declarations[name] = change.declared
    write_declarations(backend, declarations)
    return change


def _from_entry_point(name: str) -> bool:
    return kinds.from_entry_point(name)


def ensure_declared(backend: Backend, record_cls: type[Record], record: bool) -> bool:
    """Check a kind against its store's recorded declaration (KindChanged if they differ); with
    `record` (a first write), record it if the store has none, under the store's migration lock
    so two writers of two new kinds keep both. Whether the store now holds the declaration."""
    from ..migrations.locking import holding

    url = backend.url.masked
    stored = stored_declarations(backend).get(record_cls.kind)
    if stored is None and record:
        with holding(backend.migration_lock(), LOCK_WAIT):
            return record_declaration(backend, record_cls)
    if stored is not None:
        check_declared(stored, record_cls, url)
    return stored is not None


def record_declaration(backend: Backend, record_cls: type[Record]) -> bool:
    """Record a kind's declaration if the store has none (the caller holds the migration lock), or
    check it against the one the store has. Always True: the store holds it after."""
    declarations = stored_declarations(backend)
    stored = declarations.get(record_cls.kind)
    if stored is not None:
        check_declared(stored, record_cls, backend.url.masked)
        return True
    declarations[record_cls.kind] = Declaration.of(record_cls)
    write_declarations(backend, declarations)
    return True


def pending_changes(backend: Backend, loaded_only: bool = False) -> list[KindChange]:
    """How the code's declarations of the kinds a store holds differ from the recorded ones. With
    `loaded_only` (opening a store), only kinds this process has loaded: entry points stay unloaded."""
    changes: list[KindChange] = []
    if loaded_only and not kinds.applications():
        return changes  # nothing to compare: opening a store reads nothing more
    for name, stored in stored_declarations(backend).items():
        record_cls = kinds.loaded(name) if loaded_only else kinds.find(name)
        if record_cls is not None:
            change = KindChange.between(stored, Declaration.of(record_cls))
            if not change.empty:
                changes.append(change)
    return changes


SHIPPED_KINDS = "mnemostore.kinds."
"""Modules of the kinds mnemostore ships (`mnemostore.kinds.workflow`, ...): a store's record naming one
imports it, as it runs no code but mnemostore's; any other module is imported only when asked (`--import`)."""


def import_shipped_kinds() -> None:
    """Import every module of kinds mnemostore ships, for names a store or an archive holds that this
    process does not know yet (`SHIPPED_KINDS`)."""
    import pkgutil

    from .. import kinds as shipped

    for module in pkgutil.iter_modules(shipped.__path__, shipped.__name__ + "."):
        importlib.import_module(module.name)


def unregistered_kinds(backend: Backend) -> list[Declaration]:
    """The kinds a store recorded that no class of this process declares (entry points loaded, and
    shipped kinds imported)."""
    missing = [declaration for name, declaration in stored_declarations(backend).items() if kinds.find(name) is None]
    shipped = {declaration.module for declaration in missing if declaration.module.startswith(SHIPPED_KINDS)}
    for module in sorted(shipped):
        with suppress(ImportError):  # a kind a later mnemostore ships: refused below, naming its module
            importlib.import_module(module)
    return [declaration for declaration in missing if kinds.find(declaration.kind) is None] if shipped else missing


def refuse_unregistered(backend: Backend, action: str) -> None:
    """MigrationError if the store holds kinds this process does not know: a copy of "every kind"
    would leave them behind. (The recorded declaration has the typed filterable fields, not the
    document's other fields, so a kind rebuilt from it would lose their types: it is not rebuilt.)"""
    missing = unregistered_kinds(backend)
    if missing:
        named = ", ".join(f"{d.kind!r} (declared by {d.source})" for d in missing)
        modules = " ".join(sorted({f"--import {d.module}" for d in missing if d.module not in ("", "__main__")}))
        raise MigrationError(
            f"{backend.url.masked} holds kinds this process does not know: {named}; {action} would leave them "
            f"behind. Import the module that declares each ({modules or '--import MODULE'} on the command line, "
            "`import` it in Python), or name the kinds to carry (--kinds, kinds=[...])")


@contextmanager
def standing_in(declaration: Declaration) -> Iterator[str]:
    """For the block, a kind this process does not know registered as a stand-in built from its
    recorded declaration (typed filterable and bytes fields, all optional): enough to count its
    records (`mnemostore info`), not to carry them (the document's other fields are unknown)."""
    types = {name: _NAMED_TYPES[type_name] for name, type_name in declaration.filterable.items()}
    fields: dict[str, Any] = {name: (Optional[t], None) for name, t in types.items()}  # noqa: UP045
    fields.update({name: (Optional[bytes], None) for name in declaration.binary})  # noqa: UP045
    cls = create_model(f"Unregistered_{declaration.kind}", __base__=Record, **fields)
    cls.kind, cls.filterable = declaration.kind, types
    cls.incrementable, cls.indexes = frozenset(declaration.incrementable), declaration.indexes
    cls.default_order_index = declaration.default_order_index
    kinds.register(cls)
    try:
        yield declaration.kind
    finally:
        kinds.unregister(declaration.kind)


def backfill_value(record_cls: type[Record], name: str, document: Mapping[str, Any], id: str) -> Any:
    """The value of a newly filterable field for a record written before: its document's (it was a
    document field), else the field's default; MigrationError if it has neither."""
    if name in document:
        return document[name]
    info = record_cls.model_fields[name]
    if info.is_required():
        raise MigrationError(
            f"{record_cls.kind} {id!r} was written before the field {name!r} existed and the field has no default: "
            "give it a default, or declare it Optional; the store keeps its recorded declaration of the kind until "
            "`mnemostore migrate up` completes")
    return info.get_default(call_default_factory=True)
