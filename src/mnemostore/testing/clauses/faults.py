"""Faults injected mid-batch: a backend that declares `transactions` writes a batch whole or not at all.

The suite cannot break an engine from outside, but it can break the batch: `put` receives a
sequence that fails while being read, after some records. A backend that writes as it reads
leaves those records behind; one with transactions rolls back (or never started writing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import pytest

from ...core.capabilities import Capability
from ...core.records import Record
from ...core.store import Store
from ..factories import batch
from ..oracle import assert_same_records
from ..requirements import requires, since
from . import each_kind


class InjectedFault(Exception):
    """The failure a `FailingBatch` raises; the clause expects to see it (or a wrapper of it)."""


class FailingBatch(Sequence[Record]):
    """A batch whose reading fails at record `fail_at`, however the backend walks it."""

    def __init__(self, records: Sequence[Record], fail_at: int) -> None:
        self._records = list(records)
        self._fail_at = fail_at

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return FailingBatch(self._records[index], self._fail_at - (index.start or 0))
        if index == self._fail_at or index - len(self._records) == self._fail_at:
            raise InjectedFault(f"injected fault while reading record {self._fail_at} of the batch")
        return self._records[index]

    def __iter__(self) -> Iterator[Record]:
        for i, record in enumerate(self._records):
            if i == self._fail_at:
                raise InjectedFault(f"injected fault while reading record {i} of the batch")
            yield record


class FaultClauses:
    @since("1.1")
    @requires(Capability.TRANSACTIONS)
    @each_kind
    def test_a_batch_failing_half_way_leaves_the_store_as_it_was(self, store: Store, kind: str) -> None:
        _failing_batch_leaves_the_store_as_it_was(store, kind, store.backend.put)

    @since("1.7")
    @requires(Capability.TRANSACTIONS)
    @each_kind
    def test_a_failed_batch_keeping_created_leaves_the_store_as_it_was(self, store: Store, kind: str) -> None:
        _failing_batch_leaves_the_store_as_it_was(store, kind, store.backend.put_keeping_created)


def _failing_batch_leaves_the_store_as_it_was(store: Store, kind: str,
                                              write: Callable[[str, Sequence[Record]], None]) -> None:
    """`write` of a batch (replacing two stored records) whose sixth record cannot be read changes nothing."""
    collection = store.collection(kind)
    before = batch(kind, 4)
    collection.put(before)
    replacement = [r.model_copy(update={"metadata": {"replaced": True}}) for r in before[:2]]
    doomed = [*replacement, *batch(kind, 6, start=100)]
    with pytest.raises(Exception) as raised:  # whatever the backend wraps it in
        write(kind, FailingBatch(doomed, fail_at=5))
    assert _caused_by_fault(raised.value), f"the put failed for another reason: {raised.value!r}"
    assert_same_records(collection.all(order_by="id"), sorted(before, key=lambda r: r.id))


def _caused_by_fault(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, InjectedFault):
            return True
        error = error.__cause__ or error.__context__
    return False
