"""Facade behaviour written once in core, checked on the reference backend."""

from __future__ import annotations

import mnemostore


def test_reinforce_caps_confidence_when_successes_exceed_occurrences() -> None:
    with mnemostore.open("memory://") as store:
        rule = store.heuristics.add(condition="c", strategy="s", occurrence_count=4, success_count=10)
        reinforced = store.heuristics.reinforce(rule.id, success=True)
        assert (reinforced.occurrence_count, reinforced.success_count, reinforced.confidence) == (5, 11, 1.0)
        assert reinforced.prior_confidence == 0.5
        assert store.heuristics.get(rule.id) == reinforced


def test_generated_ids_are_distinct_random_uuid4s_in_hex() -> None:
    """`new_id` writes what `uuid.uuid4().hex` did: version 4, the RFC 4122 variant, 32 lowercase hex digits."""
    import uuid

    from mnemostore.core.records import new_id

    ids = [new_id() for _ in range(2000)] + [mnemostore.Outcome(task_type="t", success=True).id]
    assert len(set(ids)) == len(ids)
    for made in ids:
        parsed = uuid.UUID(hex=made)
        assert parsed.hex == made and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert len({made[n] for made in ids for n in (0, 13, 31)}) == 16  # every digit drawn, not a fixed one
