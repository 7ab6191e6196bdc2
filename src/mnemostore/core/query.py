"""Ordering and cursor pagination, done once in core for every backend.

`sort_records` is the reference ordering every backend must match; backends that sort in
Python (and the suite's oracle) use it. A cursor encodes the sort values of the last row returned. Core turns it into a
keyset filter ("rows after this one") in the filter language, so a backend only ever
sees `where + order + limit` and pagination is stable whatever the engine.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from .errors import ValidationError
from .filters import Cmp, Expr, F, Field, Or, all_of, bind
from .protocol import ID_ORDER, OrderKey
from .records import Checkpoint, Record


def sort_records(records: list[Record], order: Sequence[OrderKey]) -> list[Record]:
    """Sort by `order`, None as the smallest value (first ascending, last descending): the reference order."""
    result = list(records)
    for key in reversed(order):
        field = key.field

        def sort_key(record: Record, field: str = field) -> tuple[bool, Any]:
            value = getattr(record, field)
            return (value is not None, value if value is not None else 0)

        result.sort(key=sort_key, reverse=key.descending)
    return result


def parse_order(order_by: str | Sequence[str | OrderKey] | None, record_cls: type[Record]) -> tuple[OrderKey, ...]:
    """`"-confidence"` or `["agent", "-created_at"]` → OrderKeys ending in the id tie-breaker."""
    if order_by is None:
        items: Sequence[str | OrderKey] = ("created_at",)
    elif isinstance(order_by, str):
        items = (order_by,)
    else:
        items = order_by
    keys: list[OrderKey] = []
    for item in items:
        key = item if isinstance(item, OrderKey) else OrderKey(item.lstrip("-+"), item.startswith("-"))
        if key.field not in record_cls.filterable:
            known = ", ".join(sorted(record_cls.filterable))
            raise ValidationError.one("order_by", f"cannot order by {key.field!r}; orderable fields: {known}")
        if key.field == "id":
            keys.append(key)
            return tuple(keys)
        keys.append(key)
    keys.append(ID_ORDER)
    return tuple(keys)


def _fingerprint(order: Sequence[OrderKey], where: Expr | None) -> str:
    text = repr([tuple(k) for k in order]) + repr(where)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def encode_cursor(record: Record, order: Sequence[OrderKey], where: Expr | None) -> str:
    values = [getattr(record, key.field) for key in order]
    payload = orjson.dumps([_fingerprint(order, where), values])
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def decode_cursor(cursor: str, order: Sequence[OrderKey], where: Expr | None,
                  record_cls: type[Record]) -> list[Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        fingerprint, values = orjson.loads(base64.urlsafe_b64decode(padded))
    except Exception:
        raise ValidationError.one("cursor", "is not a cursor returned by this store") from None
    if fingerprint != _fingerprint(order, where) or len(values) != len(order):
        raise ValidationError.one("cursor", "was issued for a different filter or ordering")
    decoded: list[Any] = []
    for key, value in zip(order, values, strict=True):
        try:  # a forged cursor's values are checked like a filter's operands
            if value is not None and record_cls.filterable[key.field] is datetime:
                value = datetime.fromisoformat(value) if type(value) is str else value
            bound = bind(Cmp((key.field,), "eq", value), record_cls.filterable)
        except (ValidationError, ValueError):
            raise ValidationError.one("cursor", f"holds an invalid {key.field} value; "
                                                "pass back a cursor exactly as this store returned it") from None
        assert isinstance(bound, Cmp)
        decoded.append(bound.value)
    return decoded


def _beyond(field: Field, key: OrderKey, value: Any) -> Expr | None:
    """Rows strictly after `value` in this key's direction (None sorts first)."""
    if not key.descending:
        return field != None if value is None else field > value  # noqa: E711
    if value is None:
        return None
    return Or((field < value, Cmp(field.path, "eq", None)))


def after(order: Sequence[OrderKey], values: Sequence[Any]) -> Expr:
    """The keyset filter for rows that sort after the row with these sort values."""
    branches: list[Expr] = []
    for i, key in enumerate(order):
        beyond = _beyond(getattr(F, key.field), key, values[i])
        if beyond is None:
            continue
        equal = [Cmp((order[j].field,), "eq", values[j]) for j in range(i)]
        found = all_of(*equal, beyond)
        assert found is not None
        branches.append(found)
    return Or(tuple(branches))


def parent_ref(checkpoints: list[Record], order: Sequence[OrderKey]) -> tuple[str, int] | None:
    """(id, sequence) of the first of `checkpoints` in `order`, or None: the parent a backend's
    `append_checkpoint` links when it selects a run's checkpoints itself."""
    found = sort_records(checkpoints, order)
    if not found:
        return None
    first = found[0]
    assert isinstance(first, Checkpoint)
    return first.id, first.sequence
