"""Records handed to a backend as their fields, without a record object: an optional backend method
(`FieldPuts.put_fields`) and the fallback every other backend gets (`put_fields`).

A caller that built a batch's records from parts it checked (an integration's hot write) has each
record's fields, not a record: the fields the batch's records share (`common`: its time, its empty
fields) and each record's own (`each`: id, value, ...). A backend that can write rows straight from
those implements `put_fields` (the sqlite backend does: no record object, no document copy, the columns
`common` leaves NULL written into the statement once); any other backend, a plugin's included, gets the
records `trusted_record` would build and its `put`, `put_missing` or `put_keeping_created`, so no plugin
has to implement anything. Either way the stored records are those `records_of` builds.

A hot path that writes one record at a time with the same `common` (the LangGraph saver) asks for a
writer once (`Collection._field_writer`): a backend that implements `FieldWrites.field_writer` settles its
plan then (the sqlite backend: the columns, the row template and the INSERT), so a call only makes the row.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import cache
from operator import itemgetter, methodcaller
from typing import Any, Protocol, runtime_checkable

from .codec import trusted_records
from .errors import ValidationError
from .protocol import Backend
from .records import Record

_keys = methodcaller("keys")
_id = itemgetter("id")


class _Unset:
    """The value of a field no mapping gave (`UNSET`): no JSON, so a document holding it fails to dump."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""A placeholder for a record's own field until its fields fill it (a backend's `put_fields` may use it)."""

WRITE_CALLS = ("put", "put_missing", "put_keeping_created")
"""The backend writes `put_fields` stands for: insert or replace, insert or ignore, replace keeping `created_at`."""


@runtime_checkable
class FieldPuts(Protocol):
    """A backend that writes records given as their fields (the sqlite backend)."""

    def put_fields(self, kind: str, call: str, common: dict[str, Any], each: Sequence[dict[str, Any]]) -> None:
        """`call` (one of `WRITE_CALLS`) of the records `records_of(kind's class, common, each)` holds,
        stored exactly as that call stores those records. `common` holds every field the records share
        (always `tenant_id` and `embedding`, None: a record with a vector takes the record path), each
        mapping of `each` the rest, the same names in each; together they are every field of the kind,
        each value what validation gives (aware datetimes, JSON values), each id once."""


FieldWriter = Callable[[dict[str, Any]], None]
"""Stores one record given as its own fields, the common ones bound when it was made (`FieldWrites`)."""


@runtime_checkable
class FieldWrites(Protocol):
    """A backend that prepares a write of records given as their fields, for many calls (the sqlite backend)."""

    def field_writer(self, kind: str, call: str, common: dict[str, Any], own: Sequence[str]) -> FieldWriter | None:
        """A function storing one record given as its own fields (named `own`, each call's), `common` the
        rest, exactly as `put_fields(kind, call, common, [fields])` would, its plan made once: a hot path's
        write (the LangGraph saver's). None for a call it does not prepare (then `put_fields`)."""


@cache
def _blank(cls: type[Record]) -> dict[str, Any]:
    """Every field of the model, in its order (a record's field dict's order), each None."""
    return dict.fromkeys(cls.model_fields)


def records_of(cls: type[Record], common: dict[str, Any], each: Sequence[dict[str, Any]]) -> list[Record]:
    """The records `common` and `each` stand for, their field dicts in the model's field order (as
    validation orders them), without validation: what `put_fields` stores. Each record gets its own copy of
    a list or dict `common` gives (a pending write's empty metadata), as validation would give it."""
    if each:
        own = each[0].keys()
        if not all(map(own.__eq__, map(_keys, each))):
            raise unfit_fields(each, list(own))
    shared = _blank(cls) | common
    make = trusted_records(cls)
    containers = [name for name, value in common.items() if isinstance(value, (dict, list))]
    if not containers:
        return [make(shared | fields) for fields in each]
    return [make(shared | fields | {name: copy.deepcopy(common[name]) for name in containers}) for fields in each]


def unfit_fields(each: Sequence[dict[str, Any]], names: Sequence[str]) -> ValidationError:
    """The error for fields of `each` that do not name `names` (the first's), naming the first such record."""
    expected = set(names)
    index = next((i for i, fields in enumerate(each) if fields.keys() != expected), 0)
    got = sorted(each[index]) if index < len(each) else []
    return ValidationError.one(f"records[{index}]", f"its own fields are {got}, not those of records[0]: "
                                                     f"{sorted(expected)}")


@cache
def _names_fit(cls: type[Record], common: tuple[str, ...], own: tuple[str, ...]) -> bool:
    """Whether these names are every field of `cls`, each once (`complete`), asked once per pattern."""
    names = [*common, *own]
    return len(names) == len(set(names)) and set(names) == _blank(cls).keys()


def complete(cls: type[Record], common: dict[str, Any], each: Sequence[dict[str, Any]]) -> bool:
    """Whether `common` and the first of `each` name every field of `cls` between them, each once, and no
    other, with no vector, each id once. That the others name the same fields is checked where they are
    read: `records_of`, a backend's `put_fields` (`unfit_fields`)."""
    if not each or not fields_fit(cls, common, tuple(each[0])):
        return False
    if "id" in common:
        return len(each) == 1
    return len(set(map(_id, each))) == len(each)  # in C: no Python step a record


def fields_fit(cls: type[Record], common: dict[str, Any], own: Sequence[str]) -> bool:
    """Whether `common` and `own` name every field of `cls` between them, each once, with no vector in
    `common` (`complete` for a record whose own fields are named `own`)."""
    return common.get("embedding", 0) is None and "tenant_id" in common and _names_fit(cls, tuple(common), tuple(own))


@cache
def has_field_writers(backend_type: type[Backend]) -> bool:
    """Whether a backend class prepares field writes (`FieldWrites`), asked once per class."""
    return callable(getattr(backend_type, "field_writer", None))


@cache
def has_field_puts(backend_type: type[Backend]) -> bool:
    """Whether a backend class writes fields itself (`FieldPuts`), asked once per class (a protocol's
    isinstance check costs ~10 us)."""
    return callable(getattr(backend_type, "put_fields", None))


def put_fields(backend: Backend, kind: str, call: str, common: dict[str, Any],
               each: Sequence[dict[str, Any]]) -> None:
    """`backend.put_fields` where the backend has it, else `call` of `records_of`'s records."""
    if has_field_puts(type(backend)):
        backend.put_fields(kind, call, common, each)  # type: ignore[attr-defined]
        return
    from .kinds import record_type

    getattr(backend, call)(kind, records_of(record_type(kind), common, each))
