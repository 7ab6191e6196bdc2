"""The fixed taxonomy of capabilities a backend may declare."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from .errors import ConfigError


class Capability(StrEnum):
    """One thing a backend promises; the conformance suite tests exactly what is declared."""

    PERSISTENT = "persistent"
    """Records survive closing and reopening the store."""
    TRANSACTIONS = "transactions"
    """A `put` or `delete` batch is all-or-nothing, even if the engine fails half-way."""
    ATOMIC_UPDATE = "atomic_update"
    """`update` increments lose nothing when several store instances update one record."""
    MULTI_PROCESS = "multi_process"
    """Several processes may open and write the same store at once."""
    CRASH_SAFE = "crash_safe"
    """A writer killed mid-batch leaves the store readable with the batch all-or-nothing."""
    FILTER_RANGE = "filter.range"
    """`<`, `<=`, `>`, `>=` on numeric, string and datetime fields."""
    FILTER_METADATA = "filter.metadata"
    """Filters on top-level `metadata` keys."""
    VECTOR_COSINE = "vector.cosine"
    VECTOR_DOT = "vector.dot"
    VECTOR_L2 = "vector.l2"
    VECTOR_FILTERED = "vector.filtered"
    """Filters are applied inside vector search: k results come back whenever k match."""
    LARGE_STATE = "large_state"
    """Checkpoint states of 5 MB and more are stored and read back."""
    CHECKPOINT_CHAIN = "checkpoint.chain"
    """Checkpoints saved at once with the default parent on one run and branch form one chain:
    each links the one saved before it (`Backend.append_checkpoint` serialises them)."""


VECTOR_METRICS: dict[str, Capability] = {
    "cosine": Capability.VECTOR_COSINE,
    "dot": Capability.VECTOR_DOT,
    "l2": Capability.VECTOR_L2,
}


def parse_capabilities(values: Iterable[str | Capability]) -> frozenset[Capability]:
    """Validate declared capabilities; an unknown name is a configuration error."""
    result: set[Capability] = set()
    for value in values:
        try:
            result.add(Capability(value))
        except ValueError:
            known = ", ".join(c.value for c in Capability)
            raise ConfigError(f"unknown capability {value!r}; known capabilities: {known}") from None
    return frozenset(result)
