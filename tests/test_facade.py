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
