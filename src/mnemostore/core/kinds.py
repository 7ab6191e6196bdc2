"""Record kinds: the five built in and those an application declares, known by name.

A kind is a `Record` subclass that names its `kind` and declares its `filterable` fields (typed
str, int, float, bool or datetime), its `incrementable` counters and its `indexes`.
`register_kind(cls)` makes it known in this process; a package may list it under the entry-point
group `mnemostore.kinds` instead (name = the kind, value = `module:Class`), loaded on first use.
The built-in kinds are registered the same way, so a backend reads every kind's declaration here
and needs no kind-specific code. A declaration some engine could not store is refused, naming the
rule it breaks; two claimants of one name are refused too (`DuplicateKind`), never picked between.
"""

from __future__ import annotations

import re
import threading
import types
from collections.abc import Callable, Sequence
from datetime import datetime
from importlib.metadata import EntryPoint
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AwareDatetime

from .errors import ConfigError, DuplicateKind, PluginLoadError, ValidationError
from .records import COMMON_FILTERABLE, KINDS, RECORD_TYPES, Record

KIND_GROUP = "mnemostore.kinds"
KindRef = str | type[Record]
"""A kind as the facade accepts it: its name, or its registered class."""

_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
MAX_KIND_LENGTH = 32
"""Kind names become table and collection names, with prefixes and suffixes (PostgreSQL allows 63 bytes)."""
MAX_FIELD_LENGTH = 48
RESERVED_KINDS = frozenset({"meta", "vector_epoch"})
"""Names of a store's own tables beside the kinds' (`mnemo_meta`, ...)."""
RESERVED_KIND_SUFFIXES = ("_hnsw", "_stage")
"""Backends name a kind's vector index and staging table `<table>_hnsw`, `<table>_stage`."""
RESERVED_FIELDS = frozenset({"kind", "seq", "tenant", "meta", "doc", "vec", "v"})
"""Column and payload names backends keep beside a kind's fields."""
FILTER_TYPES: tuple[type, ...] = (str, int, float, bool, datetime)
_SHARED_FIELDS = frozenset(Record.model_fields)


def scalar_type(annotation: Any) -> Any:
    """The type a field holds, without `Annotated` constraints and `None` (`AwareDatetime` is datetime)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return scalar_type(members[0])
    return datetime if annotation is AwareDatetime else annotation


def _storable(annotation: Any) -> bool:
    """Whether values of a non-filterable field are plain JSON (or bytes, or aware datetimes)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType, list, tuple, dict, Literal):
        args = get_args(annotation)
        if origin is dict and args and args[0] is not str:
            return False
        return origin is Literal or all(arg is Ellipsis or _storable(arg) for arg in args)
    return annotation in (str, int, float, bool, bytes, type(None), Any, AwareDatetime, list, dict)


def check_declaration(cls: Any) -> list[str]:
    """Every rule the class breaks as a record kind (an empty list if it is a usable kind)."""
    if not (isinstance(cls, type) and issubclass(cls, Record)) or cls is Record:
        return [f"{cls!r} is not a subclass of mnemostore.Record"]
    if not cls.__pydantic_complete__:
        try:
            cls.model_rebuild()
        except Exception as exc:
            return [f"its annotations do not resolve ({exc}); declare it in an importable module"]
    name = getattr(cls, "kind", None)
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_KIND_LENGTH:
        return [f"`kind` must be a name of lowercase letters, digits and single underscores, starting with a "
                f"letter, at most {MAX_KIND_LENGTH} characters (got {name!r})"]
    problems: list[str] = []
    if name in RESERVED_KINDS or name.endswith(RESERVED_KIND_SUFFIXES):
        problems.append(f"{name!r} is reserved for a store's own tables and indexes (meta, vector_epoch, "
                        f"*{', *'.join(RESERVED_KIND_SUFFIXES)})")
    elif cls not in RECORD_TYPES.values() and any(name.startswith(f"{builtin}_") for builtin in KINDS):
        problems.append(f"names beginning with a built-in kind's name and '_' are reserved ({name!r}): "
                        "backends name the built-in kinds' indexes that way")
    problems.extend(_field_problems(cls))
    return problems


def _field_problems(cls: type[Record]) -> list[str]:
    fields = cls.model_fields
    problems: list[str] = []
    for base in cls.__mro__[:cls.__mro__.index(Record)]:
        redeclared = _SHARED_FIELDS & set(getattr(base, "__annotations__", {}))
        problems.extend(f"field {field!r} redeclares a field every kind shares" for field in sorted(redeclared))
    for field in sorted(set(fields) - _SHARED_FIELDS):
        if not _NAME.match(field) or len(field) > MAX_FIELD_LENGTH:
            problems.append(f"field {field!r}: names are lowercase letters, digits and single underscores, "
                            f"starting with a letter, at most {MAX_FIELD_LENGTH} characters")
        elif field in RESERVED_FIELDS or field.endswith("_utcoffset_us"):
            problems.append(f"field {field!r} is a name backends reserve ({', '.join(sorted(RESERVED_FIELDS))}, "
                            "*_utcoffset_us)")
        elif scalar_type(fields[field].annotation) is datetime and fields[field].annotation is datetime:
            problems.append(f"field {field!r}: type it AwareDatetime (a naive datetime is refused)")
        elif not _storable(fields[field].annotation):
            problems.append(f"field {field!r}: {fields[field].annotation!r} is not a JSON type, bytes or AwareDatetime")
    filterable = getattr(cls, "filterable", {})
    if not isinstance(filterable, dict):
        return [*problems, "`filterable` must map field names to their types (str, int, float, bool, datetime)"]
    for field, declared in filterable.items():
        if field not in fields:
            problems.append(f"filterable field {field!r} is not a field of the model")
        elif declared not in FILTER_TYPES:
            problems.append(f"filterable field {field!r}: {declared!r} is not one of str, int, float, bool, datetime")
        elif scalar_type(fields[field].annotation) is not declared:
            problems.append(f"filterable field {field!r} is declared {declared.__name__} but annotated "
                            f"{fields[field].annotation!r}")
    for field in sorted(getattr(cls, "incrementable", ())):
        if {**COMMON_FILTERABLE, **filterable}.get(field) not in (int, float) or field in COMMON_FILTERABLE:
            problems.append(f"incrementable field {field!r} must be a filterable int or float field of the kind")
    if type(getattr(cls, "default_order_index", True)) is not bool:
        problems.append("`default_order_index` must be True or False")
    for index in getattr(cls, "indexes", ()):
        if not isinstance(index, tuple) or not index or len(set(index)) != len(index) or any(
                field not in {**COMMON_FILTERABLE, **filterable} for field in index):
            problems.append(f"index {index!r} must be a tuple of distinct filterable field names")
    return problems


DEFAULT_ORDER_INDEX = ("created_at", "id")
"""The index of the default order, which every kind gets unless it declares `default_order_index = False`."""


def secondary_indexes(cls: type[Record]) -> tuple[tuple[str, ...], ...]:
    """The indexes a backend with secondary indexes builds for a kind (each led by the tenant): the
    default order's unless the kind turns it off, then the declared ones."""
    return ((DEFAULT_ORDER_INDEX,) if cls.default_order_index else ()) + cls.indexes


def _complete(cls: type[Record]) -> None:
    """Fill in what a declaration leaves implicit: the shared filterable fields, normalised sets,
    and the fields `Record._check_values` proves storable."""
    cls.filterable = {**COMMON_FILTERABLE, **getattr(cls, "filterable", {})}
    cls.incrementable = frozenset(cls.incrementable)
    cls.indexes = tuple(tuple(index) for index in cls.indexes)
    if cls not in RECORD_TYPES.values():  # the built-in kinds' annotations carry their own checks
        cls.checked_fields = tuple(
            name for name, info in cls.model_fields.items()
            if name not in _SHARED_FIELDS and scalar_type(info.annotation) not in (datetime, bytes))


def _source(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class Kinds:
    """The kinds known to this process: the built-in ones, those registered, and entry points."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Record]] = {}
        self._points: dict[str, list[EntryPoint]] | None = None
        self._loaded_points: set[str] = set()
        self._errors: dict[str, ConfigError] = {}
        self._lock = threading.RLock()
        self.loaded: Callable[[str], type[Record] | None] = self._classes.get
        """The class of a kind if this process knows it already (no entry point is loaded): a plain
        dict lookup, made on every call of the facade."""
        for cls in RECORD_TYPES.values():  # through the same checks as an application's kind
            self._add(cls, ())

    def _entry_points(self) -> dict[str, list[EntryPoint]]:
        if self._points is None:
            from .registry import group_entry_points

            points: dict[str, list[EntryPoint]] = {}
            for point in group_entry_points(KIND_GROUP):
                points.setdefault(point.name, []).append(point)
            self._points = points
        return self._points

    def register(self, cls: type[Record]) -> type[Record]:
        """Make `cls` known by its `kind`. Registering it again changes nothing; the same definition
        run again (a notebook cell: same module and qualified name) replaces it."""
        with self._lock:
            name = getattr(cls, "kind", None)
            points = self._entry_points().get(name, []) if isinstance(name, str) else []
            return self._add(cls, [point for point in points if point.value != _source(cls)])

    def _add(self, cls: type[Record], rival_points: Sequence[EntryPoint]) -> type[Record]:
        problems = check_declaration(cls)
        if problems:
            raise ConfigError(f"{getattr(cls, '__qualname__', cls)!r} cannot be a record kind: " + "; ".join(problems))
        name = cls.kind
        known = self._classes.get(name)
        if known is cls:
            return cls
        claimants = [_source(known)] if known is not None and _source(known) != _source(cls) else []
        claimants += [f"entry point {point.value} (distribution {_dist(point)})" for point in rival_points]
        if claimants:
            raise DuplicateKind(f"the kind name {name!r} of {_source(cls)} is already claimed by "
                                f"{' and '.join(claimants)}; a kind name belongs to one class")
        _complete(cls)
        self._classes[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Forget an application's kind (for tests); the built-in kinds stay."""
        if name in RECORD_TYPES:
            raise ConfigError(f"{name!r} is a built-in kind and cannot be unregistered")
        with self._lock:
            self._classes.pop(name, None)
            self._errors.pop(name, None)
            self._loaded_points.discard(name)

    def get(self, kind: KindRef) -> type[Record]:
        """The class of a kind given by name or class; a clear error for anything unknown."""
        if type(kind) is str:
            found = self._classes.get(kind)
            return found if found is not None else self._load(kind)
        if isinstance(kind, type) and issubclass(kind, Record):
            name = getattr(kind, "kind", None)
            if isinstance(name, str) and self._classes.get(name) is kind:
                return kind
            raise ValidationError.one("kind", f"{kind.__qualname__} is not a registered kind; register it first "
                                              f"with mnemostore.register_kind({kind.__qualname__})")
        raise ValidationError.one(
            "kind", f"must be a kind name or a registered Record class, not {type(kind).__name__}")

    def _load(self, name: str) -> type[Record]:
        """The kind `name` from its entry point (once), or the registered class if none claims it."""
        with self._lock:
            if name in self._errors:
                raise self._errors[name]
            points = self._entry_points().get(name)
            if not points or name in self._loaded_points:
                if name in self._classes:
                    return self._classes[name]
                known = ", ".join([*KINDS, *sorted(set(self._classes) - set(KINDS) | set(self._entry_points()))])
                raise ValidationError.one("kind", f"unknown kind {name!r}; kinds are {known}")
            try:
                cls = self._load_point(name, points)
            except ConfigError as exc:
                self._errors[name] = exc
                raise
            self._loaded_points.add(name)
            return cls

    def _load_point(self, name: str, points: list[EntryPoint]) -> type[Record]:
        if len(points) > 1:
            raise DuplicateKind(f"{len(points)} packages register the kind {name!r}: "
                                + " and ".join(sorted(f"{p.value} (distribution {_dist(p)})" for p in points))
                                + "; uninstall all but one of them")
        point = points[0]
        where = f"kind plugin {name!r} ({point.value}, from distribution {_dist(point)})"
        try:
            cls = point.load()
        except Exception as exc:
            raise PluginLoadError(f"{where} failed to load: {type(exc).__name__}: {exc}") from exc
        if getattr(cls, "kind", None) != name:
            raise PluginLoadError(f"{where} declares the kind {getattr(cls, 'kind', None)!r}, not {name!r}")
        try:
            return self._add(cls, [])
        except DuplicateKind:
            raise
        except ConfigError as exc:
            raise PluginLoadError(f"{where} is not usable: {exc}") from exc

    def applications(self) -> tuple[str, ...]:
        """The application kinds this process knows already (none loaded from entry points here)."""
        return tuple(name for name in self._classes if name not in RECORD_TYPES)

    def find(self, name: str) -> type[Record] | None:
        """The class of `name`, loading its entry point if need be; None if no class claims it."""
        try:
            return self.get(name)
        except ValidationError:
            return None

    def from_entry_point(self, name: str) -> bool:
        """Whether `name` was loaded from a package's entry point (a CLI finds it without `--import`)."""
        return name in self._loaded_points

    def names(self) -> tuple[str, ...]:
        """Every kind: the built-in ones in `KINDS` order, then the others by name. Entry points are
        loaded first, and a broken or contested one raises (a copy must not skip a kind unseen)."""
        for name in sorted(self._entry_points()):
            self._load(name)
        return (*KINDS, *sorted(set(self._classes) - set(KINDS)))


def _dist(point: EntryPoint) -> str:
    return point.dist.name if point.dist else "unknown"


kinds = Kinds()
"""The process-wide kinds."""


def register_kind(cls: type[Record]) -> type[Record]:
    """Make an application's record kind known to every store of this process (usable as a class
    decorator); a declaration some backend could not store raises ConfigError naming the rule."""
    return kinds.register(cls)


def record_type(kind: KindRef) -> type[Record]:
    """The model class of a kind given by name or class, or a clear error naming the known kinds."""
    return kinds.get(kind)


def is_kind(name: str) -> bool:
    """Whether `name` is a known kind (loading its entry point if need be; a broken one raises)."""
    try:
        kinds.get(name)
    except ValidationError:
        return False
    return True


def kind_names() -> tuple[str, ...]:
    """Every known kind (`Kinds.names`): what copies, exports and `info` go through."""
    return kinds.names()
