"""Checkpoint reducers: `reducer(prior, partial) -> new` per state field, built-in and registered.

A node returns only what it changes; `fold` folds that partial update into a state field by
field, and `difference` turns two snapshots back into the update that stands in for one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson
from pydantic import BaseModel

from .errors import ReducerError, ValidationError
from .jsonvalues import dumps_json_document

ReduceFn = Callable[[Any, Any], Any]
"""`(prior, partial) -> new`: never mutates `prior`; `prior` is None where the state has no such field yet."""
DiffFn = Callable[[Any, Any], Any]
"""`(before, after) -> partial`: the partial update that takes a field from `before` to `after`."""

LAST = "last"


class DroppedField:
    """A snapshot removed the field: a change a last-write-wins field takes (the field goes)."""

    def __repr__(self) -> str:
        return "DROPPED"


DROPPED: Any = DroppedField()


class Refused(Exception):
    """A reducer's refusal of a value, turned into a `ReducerError` naming the field and node."""


@dataclass(frozen=True)
class Reducer:
    """Declare a state model field's reducer: `notes: Annotated[list[str], Reducer("append")] = []`."""

    name: str


@dataclass(frozen=True)
class Definition:
    """A named reducer and the difference rule that stands in for an update between two snapshots."""

    name: str
    reduce: ReduceFn
    diff: DiffFn


def canonical(value: Any) -> bytes:
    """A JSON value as canonical bytes: equal bytes iff equal JSON (True is not 1, 1 is not 1.0)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values (Python's == also equates True with 1 and 1 with 1.0)."""
    return a is b or (a == b and canonical(a) == canonical(b))


def _kind(value: Any) -> str:
    return type(value).__name__


def _list(value: Any, reducer: str) -> list[Any]:
    """A list operand (None is empty); strings and dicts are refused, never split into characters or keys."""
    if value is None:
        return []
    if type(value) is not list:
        raise Refused(f"{reducer} takes lists, not {_kind(value)} {_clip(value)}")
    return value


def _number(value: Any, reducer: str) -> int | float:
    if type(value) not in (int, float):
        raise Refused(f"{reducer} takes numbers, not {_kind(value)} {_clip(value)}")
    result: int | float = value
    return result


def _clip(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _last(prior: Any, partial: Any) -> Any:
    return partial


def _first(prior: Any, partial: Any) -> Any:
    return partial if prior is None else prior


def _append(prior: Any, partial: Any) -> Any:
    return [*_list(prior, "append"), *_list(partial, "append")]


def _union(prior: Any, partial: Any) -> Any:
    merged = list(_list(prior, "union"))
    seen = {canonical(item) for item in merged}
    for item in _list(partial, "union"):
        key = canonical(item)
        if key not in seen:
            seen.add(key)
            merged.append(item)
    return merged


def _dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise Refused(f"merge takes objects (dicts), not {_kind(value)} {_clip(value)}")
    return value


def _merge(prior: Any, partial: Any) -> Any:
    return {**_dict(prior), **_dict(partial)}


def _sum(prior: Any, partial: Any) -> Any:
    if partial is None:
        return prior
    if prior is None:
        return _number(partial, "sum")
    return _number(prior, "sum") + _number(partial, "sum")


def _extreme(name: str, pick: Callable[[Any, Any], Any]) -> ReduceFn:
    def reduce(prior: Any, partial: Any) -> Any:
        if prior is None or partial is None:
            return partial if prior is None else prior
        if type(prior) is str and type(partial) is str:
            return pick(prior, partial)
        if type(prior) is not str and type(partial) is not str:
            return pick(_number(prior, name), _number(partial, name))
        raise Refused(f"{name} compares numbers with numbers or strings with strings, "
                      f"not {_kind(prior)} with {_kind(partial)}")
    return reduce


def _message_id(item: Any) -> Any:
    return item.get("id") if type(item) is dict else None


def _messages(prior: Any, partial: Any) -> Any:
    merged = list(_list(prior, "messages"))
    at = {key: index for index, item in enumerate(merged) if (key := _message_id(item)) is not None}
    for item in _list(partial, "messages"):
        key = _message_id(item)
        if key is not None and key in at:
            merged[at[key]] = item
        else:
            if key is not None:
                at[key] = len(merged)
            merged.append(item)
    return merged


def _whole(before: Any, after: Any) -> Any:
    """The new value itself (last, first, max, min and reducers registered without a diff)."""
    return after


def _added(before: Any, after: Any) -> Any:
    """The items of `after` left once `before`'s items are taken away one for one (append)."""
    left = Counter(canonical(item) for item in _list(before, "append"))
    added = []
    for item in _list(after, "append"):
        key = canonical(item)
        if left[key]:
            left[key] -= 1
        else:
            added.append(item)
    return added


def _new_items(before: Any, after: Any) -> Any:
    """The items of `after` that `before` lacks (union)."""
    known = {canonical(item) for item in _list(before, "union")}
    return [item for item in _list(after, "union") if canonical(item) not in known]


def _changed_keys(before: Any, after: Any) -> Any:
    """The keys of `after` that are new or hold another value than in `before` (merge)."""
    old = _dict(before)
    return {key: value for key, value in _dict(after).items() if key not in old or not same(old[key], value)}


def _difference(before: Any, after: Any) -> Any:
    """`after - before` (sum); a missing `before` counts as 0."""
    if before is None:
        return _number(after, "sum")
    return _number(after, "sum") - _number(before, "sum")


def _new_messages(before: Any, after: Any) -> Any:
    """Messages of `after` whose id is new or whose content changed; others without an id as append."""
    old = _list(before, "messages")
    by_id = {key: item for item in old if (key := _message_id(item)) is not None}
    plain = Counter(canonical(item) for item in old if _message_id(item) is None)
    changed = []
    for item in _list(after, "messages"):
        key = _message_id(item)
        if key is not None:
            if key not in by_id or not same(by_id[key], item):
                changed.append(item)
        elif plain[canonical(item)]:
            plain[canonical(item)] -= 1
        else:
            changed.append(item)
    return changed


BUILT_IN: dict[str, Definition] = {d.name: d for d in (
    Definition(LAST, _last, _whole),
    Definition("first", _first, _whole),
    Definition("append", _append, _added),
    Definition("union", _union, _new_items),
    Definition("merge", _merge, _changed_keys),
    Definition("sum", _sum, _difference),
    Definition("max", _extreme("max", max), _whole),
    Definition("min", _extreme("min", min), _whole),
    Definition("messages", _messages, _new_messages),
)}
_registered: dict[str, Definition] = {}


def register_reducer(name: str, reduce: ReduceFn, *, diff: DiffFn | None = None) -> None:
    """Make `name` usable as a reducer in `apply`, `merge` and `Reducer(name)`.

    `reduce(prior, partial)` returns the new value without mutating `prior`; `diff(before, after)`
    gives the partial update between two snapshots (default: `after` itself, as `last` does).
    Registering the same functions again is a no-op; another function under a taken name is refused."""
    if type(name) is not str or not name:
        raise ValidationError.one("name", "a reducer's name is a non-empty string")
    if not callable(reduce) or (diff is not None and not callable(diff)):
        raise ValidationError.one(name, "a reducer is a callable (prior, partial) -> new, its diff (before, after)")
    definition = Definition(name, reduce, diff or _whole)
    taken = BUILT_IN.get(name) or _registered.get(name)
    if taken is not None and taken != definition:
        where = "built in" if name in BUILT_IN else "registered"
        raise ValidationError.one(name, f"reducer {name!r} is already {where}")
    _registered[name] = definition


def definition(name: Any, field: str) -> Definition:
    """The reducer called `name`, or a ValidationError naming `field` and the known reducers."""
    found = BUILT_IN.get(name) or _registered.get(name) if type(name) is str else None
    if found is None:
        known = ", ".join([*BUILT_IN, *_registered])
        raise ValidationError.one(field, f"unknown reducer {name!r}; use one of {known} (or register_reducer)")
    return found


@cache
def declared_reducers(model: type[BaseModel]) -> dict[str, str]:
    """The reducers a state model declares on its fields (`Annotated[..., Reducer(name)]`)."""
    declared: dict[str, str] = {}
    for field, info in model.model_fields.items():
        names = [mark.name for mark in info.metadata if isinstance(mark, Reducer)]
        if len(names) > 1:
            raise ValidationError.one(f"{model.__name__}.{field}",
                                      f"declares {len(names)} reducers ({', '.join(names)}); keep one")
        if names:
            definition(names[0], f"{model.__name__}.{field}")
            declared[field] = names[0]
    return declared


@dataclass(frozen=True)
class Plan:
    """Which reducer folds each field. Without a chosen default, a field no reducer names is
    last-write-wins and `strict`: a merge refuses two branches writing it differently."""

    fields: dict[str, Definition]
    default: Definition
    strict: bool

    def of(self, field: str) -> Definition:
        return self.fields.get(field, self.default)

    def is_strict(self, field: str) -> bool:
        return self.strict and field not in self.fields


def plan(reducers: Mapping[str, str] | None, default: str | None = None,
         model: type[BaseModel] | None = None) -> Plan:
    """A plan from the call's reducers over the model's declared ones, and the default for the rest."""
    if reducers is not None and not isinstance(reducers, Mapping):
        raise ValidationError.one("reducers", f"takes a dict of field name -> reducer name, not {_kind(reducers)}")
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValidationError.one("model", f"takes a pydantic model class, not {_kind(model)}")
    names = {**(declared_reducers(model) if model is not None else {}), **(reducers or {})}
    fields = {field: definition(name, f"reducers.{field}") for field, name in names.items()}
    chosen = definition(default, "default") if default is not None else BUILT_IN[LAST]
    return Plan(fields, chosen, default is None)


def partial_update(update: Any) -> dict[str, Any]:
    """A node's update as a plain dict of JSON values, or a ValidationError naming `update.<field>`."""
    if not isinstance(update, Mapping):
        raise ValidationError.one("update", f"takes a dict of the fields the node changed, not {_kind(update)}")
    changes = dict(update)
    dumps_json_document(changes, "update")
    return changes


def reduce_field(reducer: Definition, field: str, prior: Any, partial: Any, node: str) -> Any:
    """One field through its reducer; any failure becomes a `ReducerError` naming field, reducer and node."""
    try:
        return reducer.reduce(prior, partial)
    except Refused as exc:
        raise ReducerError(field, reducer.name, node, str(exc)) from None
    except ValidationError:
        raise
    except Exception as exc:  # an application's reducer: any failure is named, never bare
        raise ReducerError(field, reducer.name, node, f"{type(exc).__name__}: {exc}") from exc


def fold(state: Mapping[str, Any], update: Mapping[str, Any], plan: Plan, node: str) -> dict[str, Any]:
    """A new state: `update` folded into `state` field by field (`state` is not changed)."""
    result = dict(state)
    for field, partial in update.items():
        if partial is DROPPED:
            result.pop(field, None)
        else:
            result[field] = reduce_field(plan.of(field), field, result.get(field), partial, node)
    return result


def difference(before: Mapping[str, Any], after: Mapping[str, Any], plan: Plan, node: str) -> dict[str, Any]:
    """The update that stands in for a snapshot: per changed field, its reducer's difference rule;
    a field the snapshot dropped is dropped where the reducer is last-write-wins, kept elsewhere."""
    update: dict[str, Any] = {}
    for field, value in after.items():
        if field in before and same(before[field], value):
            continue
        reducer = plan.of(field)
        try:
            update[field] = reducer.diff(before.get(field), value)
        except Refused as exc:
            raise ReducerError(field, reducer.name, node, f"{exc} (in its snapshot)") from None
        except Exception as exc:
            raise ReducerError(field, reducer.name, node, f"{type(exc).__name__}: {exc}") from exc
    for field in before.keys() - after.keys():
        if plan.of(field).name == LAST:
            update[field] = DROPPED
    return update
