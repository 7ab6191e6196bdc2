"""A sqlite store's default-parent save tries the checkpoint it last appended as the parent first
(`KindSQL.append_after`); the database decides whether that is still the latest."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemostore

_STEPS = st.lists(st.tuples(st.sampled_from(["save", "save", "save", "delete", "explicit", "put"]),
                            st.integers(0, 1), st.sampled_from(["main", "b"])), min_size=1, max_size=25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_a_default_parent_save_links_the_latest_whoever_wrote_or_removed_it(tmp_path_factory: object,
                                                                            steps: list[tuple[str, int, str]]) -> None:
    """Two stores on one file save, delete, put and save with explicit parents on one run's two
    branches: every default-parent save names the checkpoint `latest` read just before, one sequence
    past it, and is stored as returned; nothing else is written."""
    path = Path(tmp_path_factory.mktemp("tips")) / "store.db"  # type: ignore[attr-defined]
    with mnemostore.open(f"sqlite:///{path}") as one, mnemostore.open(f"sqlite:///{path}") as two:
        stores = (one, two)
        written = 0
        for index, (step, who, branch) in enumerate(steps):
            cps = stores[who].checkpoints
            before = cps.latest("run", branch)
            if step == "save":
                saved = cps.save("run", {"step": index}, branch=branch)
                assert saved.parent_ids == ([] if before is None else [before.id])
                assert saved.sequence == (0 if before is None else before.sequence + 1)
                assert stores[1 - who].checkpoints.get(saved.id) == saved
                written += 1
            elif step == "delete" and before is not None:
                assert cps.delete(before.id) == 1
                written -= 1
            elif step == "explicit":  # the latest changes without an append
                cps.save("run", {"step": index}, branch=branch, parent=before)
                written += 1
            elif step == "put" and before is not None:  # the latest's sequence changes under its id
                cps.put([before.model_copy(update={"sequence": before.sequence + 3})])
        assert one.checkpoints.count({"run_id": "run"}) == written
