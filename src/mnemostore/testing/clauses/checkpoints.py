"""Checkpoint lineage: chains, branches, latest, history, prune, merge and restore."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel

from ...core.capabilities import Capability
from ...core.checkpoints import LATEST
from ...core.errors import MergeConflict, NotFound, ValidationError
from ...core.protocol import LATEST_CHECKPOINT_ORDER
from ...core.records import Checkpoint
from ...core.store import Store
from ..factories import offset_time
from ..requirements import requires, since
from ..subprocesses import run_together

SAVERS = 6
SAVES = 10
PROCESSES = 3


class Message(BaseModel):
    role: str
    content: str


class AgentState(BaseModel):
    """A typical agent-graph state: nested models, a datetime with an offset, optionals."""

    step: int
    messages: list[Message] = []
    scores: dict[str, float] = {}
    started: datetime
    note: str | None = None


def assert_one_chain(checkpoints: list[Checkpoint]) -> None:
    """Sequences 0..n-1, each checkpoint the child of the one before it."""
    ordered = sorted(checkpoints, key=lambda c: c.sequence)
    assert [c.sequence for c in ordered] == list(range(len(ordered))), "two saves took the same parent"
    assert [c.parent_ids for c in ordered] == [[], *[[c.id] for c in ordered[:-1]]]


LOOKUPS = ("query_values", "query", "get")
"""The backend reads a save with the default parent may look its parent up with."""

PAIR_WAIT = 1.0
"""Seconds a lookup waits for a second one to meet it: paid once per clause by a backend that locks."""


@contextmanager
def lookups_meet_in_pairs(store: Store, wait: float = PAIR_WAIT) -> Iterator[None]:
    """Make the backend's lookups (`LOOKUPS`) rendezvous two by two before they return, for as long
    as pairs keep meeting: two saves that look the parent up outside any lock both read it before
    either writes, so a backend that does not serialise appends forks on every run, however loaded
    the machine. A backend that locks around its lookup never lets a second one in: the wait times
    out once (a timeout, never a deadlock) and its saves then run unhindered."""
    backend = store.backend
    pair = threading.Barrier(2, timeout=wait)

    def meeting(read: Callable[..., Any]) -> Callable[..., Any]:
        def looked_up(*args: Any, **kwargs: Any) -> Any:
            result = read(*args, **kwargs)
            if not pair.broken:
                with suppress(threading.BrokenBarrierError):
                    pair.wait()
            return result
        return looked_up

    wrapped = []
    for name in LOOKUPS:
        try:
            setattr(backend, name, meeting(getattr(backend, name)))
        except AttributeError:  # slots or a read-only attribute: that lookup races unforced
            continue
        wrapped.append(name)
    try:
        yield
    finally:
        for name in wrapped:
            delattr(backend, name)


def save_concurrently(store: Store, run_of: Callable[[int], str], savers: int = SAVERS,
                      saves: int = SAVES) -> list[Checkpoint]:
    """`savers` threads, started together, each saving `saves` checkpoints with the default parent:
    their parent lookups forced to interleave (`lookups_meet_in_pairs`), and threads switched
    often so a race inside a backend's own code shows too."""
    saved: list[Checkpoint] = []
    barrier = threading.Barrier(savers)

    def saver(worker: int) -> None:
        barrier.wait()
        for step in range(saves):
            saved.append(store.checkpoints.save(run_of(worker), {"worker": worker, "step": step}))

    threads = [threading.Thread(target=saver, args=(worker,)) for worker in range(savers)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with lookups_meet_in_pairs(store):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    return saved


class CheckpointClauses:
    @since("1.2")
    @requires(Capability.CHECKPOINT_CHAIN)
    def test_threads_saving_with_the_default_parent_form_one_chain_per_run(self, store: Store) -> None:
        saved = save_concurrently(store, lambda worker: "shared" if worker < SAVERS - 2 else "other")
        assert len(saved) == SAVERS * SAVES
        for run in ("shared", "other"):
            mine = [c for c in saved if c.run_id == run]
            assert_one_chain(mine)
            assert store.checkpoints.history(run) == sorted(mine, key=lambda c: c.sequence)  # returned as written

    @since("1.2")
    def test_the_default_parent_is_the_latest_of_the_same_run_branch_and_tenant(
            self, store: Store, open_store: Callable[..., Store]) -> None:
        acme = open_store(tenant="acme")
        root = store.checkpoints.save("run", {"n": 0})
        other = acme.checkpoints.save("run", {"n": 0})
        side = store.checkpoints.save("run", {"n": 1}, branch="side")
        child = store.checkpoints.save("run", {"n": 2})
        theirs = acme.checkpoints.save("run", {"n": 1})
        assert (other.parent_ids, other.sequence) == ([], 0)
        assert (side.parent_ids, side.sequence) == ([], 0)
        assert (child.parent_ids, child.sequence) == ([root.id], 1)
        assert (theirs.parent_ids, theirs.sequence, theirs.tenant_id) == ([other.id], 1, "acme")

    @since("1.11")
    def test_latest_is_the_first_in_the_latest_order_through_ties_deletes_and_tenants(
            self, store: Store, open_store: Callable[..., Store]) -> None:
        """`latest` of a run (and of a branch) is its first checkpoint in `LATEST_CHECKPOINT_ORDER`:
        highest sequence, then newest, then lowest id; another tenant's checkpoints never count, and
        after the latest is deleted the next in that order is. A default-parent save links to it."""
        acme = open_store(tenant="acme")
        cps = store.checkpoints
        old, new = offset_time(1), offset_time(0)  # 12:30 at UTC-11 is an hour before 12:30 at UTC-12: instants order

        def put(id: str, sequence: int, at: datetime, branch: str = "main") -> None:
            cps.put([Checkpoint(id=id, run_id="run", sequence=sequence, branch_id=branch, created_at=at,
                                updated_at=at, state={"id": id})])

        def latest_ids() -> tuple[str | None, ...]:
            found = (cps.latest("run"), cps.latest("run", "main"), cps.latest("run", "side"),
                     cps.first({"run_id": "run"}, order_by=LATEST_CHECKPOINT_ORDER))
            return tuple(None if c is None else c.id for c in found)

        put("z", 0, new)
        put("c", 1, old)
        put("b", 1, new)  # ties "c" on sequence: the newer wins
        put("a", 1, new, branch="side")  # ties "b" on sequence and time: the lower id wins
        acme.checkpoints.add(id="x", run_id="run", sequence=9, state={})
        assert latest_ids() == ("a", "b", "a", "a")
        assert acme.checkpoints.latest("run").id == "x"  # type: ignore[union-attr]
        cps.delete("a")
        assert latest_ids() == ("b", "b", None, "b")
        put("c", 1, new)  # put again, now tied with "b" on sequence and time
        assert latest_ids() == ("b", "b", None, "b")
        cps.delete("b")
        assert latest_ids() == ("c", "c", None, "c")
        child = cps.save("run", {"n": 1})
        assert (child.parent_ids, child.sequence) == (["c"], 2)
        assert latest_ids() == (child.id, child.id, None, child.id)

    @since("1.2")
    def test_a_default_parent_at_the_largest_sequence_is_refused_and_nothing_written(self, store: Store) -> None:
        last = store.checkpoints.add(run_id="run", state={}, sequence=2**63 - 1)
        with pytest.raises(ValidationError, match="sequence"):
            store.checkpoints.save("run", {})
        assert store.checkpoints.latest("run") == last
        assert store.checkpoints.count() == 1

    @since("1.2")
    @requires(Capability.CHECKPOINT_CHAIN, Capability.MULTI_PROCESS)
    def test_processes_saving_with_the_default_parent_form_one_chain(
            self, store: Store, store_url: str, store_options: dict[str, Any]) -> None:
        run_together("appends", store_url, store_options,
                     [{"worker": w, "times": SAVES} for w in range(PROCESSES)])
        history = store.checkpoints.history("shared")
        assert len(history) == PROCESSES * SAVES
        assert_one_chain(history)

    def test_saves_chain_parents_and_sequences(self, store: Store) -> None:
        cps = store.checkpoints
        first = cps.save("run", {"step": 1}, node_id="plan")
        second = cps.save("run", {"step": 2}, node_id="act")
        third = cps.save("run", {"step": 3}, node_id="check")
        assert (first.parent_ids, first.sequence, first.branch_id) == ([], 0, "main")
        assert (second.parent_ids, second.sequence) == ([first.id], 1)
        assert (third.parent_ids, third.sequence) == ([second.id], 2)
        assert cps.latest("run") == third
        assert [c.id for c in cps.history("run")] == [first.id, second.id, third.id]
        assert [c.id for c in cps.lineage(third.id)] == [third.id, second.id, first.id]
        assert cps.get(second.id) == second

    def test_runs_are_independent(self, store: Store) -> None:
        cps = store.checkpoints
        a1 = cps.save("run-a", {"x": 1})
        b1 = cps.save("run-b", {"x": 1})
        a2 = cps.save("run-a", {"x": 2})
        assert b1.parent_ids == [] and a2.parent_ids == [a1.id]
        assert cps.latest("run-b") == b1
        assert cps.latest("no-such-run") is None
        assert cps.history("no-such-run") == []

    def test_explicit_parents_and_roots(self, store: Store) -> None:
        cps = store.checkpoints
        root = cps.save("run", {"n": 0})
        cps.save("run", {"n": 1})
        retry = cps.save("run", {"n": 2}, parent=root.id)
        fresh = cps.save("run", {"n": 3}, parent=None)
        assert (retry.parent_ids, retry.sequence) == ([root.id], 1)
        assert (fresh.parent_ids, fresh.sequence) == ([], 0)
        with pytest.raises(ValidationError):
            cps.save("run", {"n": 4}, parent="no-such-checkpoint")
        with pytest.raises(NotFound):
            cps.lineage("no-such-checkpoint")

    def test_branches_have_their_own_lineage(self, store: Store) -> None:
        cps = store.checkpoints
        m0 = cps.save("run", {"n": 0})
        m1 = cps.save("run", {"n": 1})
        b2 = cps.save("run", {"n": 2}, branch="explore", parent=m1.id)
        b3 = cps.save("run", {"n": 3}, branch="explore")
        m2 = cps.save("run", {"n": 10})
        assert (b2.parent_ids, b2.sequence, b2.branch_id) == ([m1.id], 2, "explore")
        assert (b3.parent_ids, b3.sequence) == ([b2.id], 3)
        assert (m2.parent_ids, m2.sequence) == ([m1.id], 2)
        assert cps.latest("run", branch="main") == m2
        assert cps.latest("run", branch="explore") == b3
        assert cps.latest("run") == b3  # the highest sequence over all branches
        assert [c.id for c in cps.history("run", branch="explore")] == [b2.id, b3.id]
        assert [c.id for c in cps.history("run", branch="main")] == [m0.id, m1.id, m2.id]
        assert [c.sequence for c in cps.history("run")] == [0, 1, 2, 2, 3]
        assert [c.id for c in cps.lineage(b3.id)] == [b3.id, b2.id, m1.id, m0.id]
        orphan = cps.save("run", {"n": 0}, branch="other")
        assert (orphan.parent_ids, orphan.sequence) == ([], 0)

    def test_prune_keeps_the_newest_per_branch(self, store: Store) -> None:
        cps = store.checkpoints
        main = [cps.save("run", {"n": n}) for n in range(5)]
        side = [cps.save("run", {"n": n}, branch="side", parent=main[1].id if n == 0 else LATEST)
                for n in range(3)]
        other_run = [cps.save("other", {"n": n}) for n in range(3)]
        assert cps.prune("run", keep=2) == 3 + 1
        assert [c.id for c in cps.history("run", branch="main")] == [c.id for c in main[-2:]]
        assert [c.id for c in cps.history("run", branch="side")] == [c.id for c in side[-2:]]
        assert cps.prune("run", keep=1, branch="side") == 1
        assert [c.id for c in cps.history("run", branch="side")] == [side[-1].id]
        assert len(cps.history("run", branch="main")) == 2
        assert cps.prune("run", keep=5) == 0
        assert [c.id for c in cps.history("other")] == [c.id for c in other_run]
        assert cps.prune("run", keep=0) == 3
        assert cps.history("run") == [] and cps.latest("run") is None
        with pytest.raises(ValidationError):
            cps.prune("other", keep=-1)

    def test_merge_with_every_reducer_and_several_parents(self, store: Store) -> None:
        cps = store.checkpoints
        inherited: dict[str, Any] = {"log": ["r"], "cfg": {"x": 0}, "total": 10, "hi": 5, "lo": 5, "tags": ["t0"],
                                     "plain": 0}
        root = cps.save("run", inherited)
        changes: list[dict[str, Any]] = [
            {"log": ["r", "a"], "cfg": {"x": 1, "y": 1}, "last": "first", "total": 11, "hi": 3, "lo": 3,
             "tags": ["t0", "t1", "t2"]},
            {"log": ["r", "b", "c"], "cfg": {"x": 0, "y": 2}, "last": "second", "total": 12.5, "hi": 7, "lo": -1,
             "tags": ["t2", "t3"], "plain": 2},
            {"cfg": {"x": 0, "z": None}, "last": None, "hi": None, "lo": 0, "tags": ["t0", "t1", "t4"],
             "only_here": "yes"},
        ]
        parents = [cps.save("run", {**inherited, **change}, branch=f"b{i}", parent=root.id)
                   for i, change in enumerate(changes)]
        reducers = {"log": "append", "cfg": "merge", "last": "last", "total": "sum", "hi": "max", "lo": "min",
                    "tags": "union"}
        merged = cps.merge("run", [p.id for p in parents], reducers=reducers)
        assert merged.state == {  # what the root had counts once; each branch adds what it changed
            "log": ["r", "a", "b", "c"], "cfg": {"x": 1, "y": 2, "z": None}, "last": None, "total": 13.5, "hi": 7,
            "lo": -1, "tags": ["t0", "t1", "t2", "t3", "t4"], "plain": 2, "only_here": "yes",
        }
        assert merged.parent_ids == [p.id for p in parents]
        assert (merged.sequence, merged.branch_id, merged.node_id) == (2, "main", "merge")
        assert cps.get(merged.id) == merged
        assert cps.latest("run", branch="main") == merged
        assert [c.id for c in cps.lineage(merged.id)] == [merged.id, parents[0].id, root.id]
        with pytest.raises(MergeConflict) as conflict:
            cps.merge("run", [parents[1].id, parents[0].id], reducers={"log": "append"}, branch="joined")
        assert list(conflict.value.conflicts) == ["cfg", "hi", "last", "lo", "tags", "total"]
        two = cps.merge("run", [parents[1].id, parents[0].id], reducers={"log": "append"}, default="last",
                        branch="joined")
        assert two.state["log"] == ["r", "b", "c", "a"] and two.state["cfg"] == {"x": 1, "y": 1}
        assert two.parent_ids == [parents[1].id, parents[0].id]
        assert cps.count() == 6  # the conflict wrote nothing

    def test_merge_rejects_unknown_reducers_and_parents(self, store: Store) -> None:
        cps = store.checkpoints
        a = cps.save("run", {"n": 1})
        b = cps.save("run", {"n": 2}, branch="b", parent=None)
        with pytest.raises(ValidationError):
            cps.merge("run", [a.id, b.id], reducers={"n": "average"})
        with pytest.raises(ValidationError):
            cps.merge("run", [a.id, "no-such-checkpoint"])
        assert cps.count() == 2

    def test_state_may_be_a_pydantic_model_and_restores_into_one(self, store: Store) -> None:
        cps = store.checkpoints
        state = AgentState(step=3, messages=[Message(role="user", content="مرحبا 🧠")], scores={"a": 0.1},
                           started=offset_time(5))
        saved = cps.save("typed", state)
        assert saved.state == state.model_dump(mode="json")
        restored = cps.restore("typed", AgentState)
        assert restored == state
        assert restored is not None and restored.started.utcoffset() == state.started.utcoffset()
        newer = state.model_copy(update={"step": 4, "note": "done"})
        cps.save("typed", newer)
        assert cps.restore("typed", AgentState) == newer
        assert cps.restore("no-such-run", AgentState) is None

    def test_restore_by_branch(self, store: Store) -> None:
        cps = store.checkpoints
        started = offset_time(1)
        main = cps.save("run", AgentState(step=1, started=started))
        cps.save("run", AgentState(step=5, started=started), branch="side", parent=main.id)
        assert cps.restore("run", AgentState, branch="main") == AgentState(step=1, started=started)
        assert cps.restore("run", AgentState, branch="side") == AgentState(step=5, started=started)

    def test_equal_states_hash_equally_whatever_their_key_order(self, store: Store) -> None:
        cps = store.checkpoints
        one = cps.save("run", {"a": 1, "b": [1, 2], "c": {"x": 1, "y": 2}})
        two = cps.save("run", {"c": {"y": 2, "x": 1}, "b": [1, 2], "a": 1})
        three = cps.save("run", {"a": 1, "b": [2, 1], "c": {"x": 1, "y": 2}})
        assert one.state_hash == two.state_hash != three.state_hash
        assert cps.get(two.id).state_hash == one.state_hash  # type: ignore[union-attr]
        assert cps.count({"state_hash": one.state_hash}) == 2
        nested = cps.save("run", {"only": {"x": 1, "y": [{"p": 1, "q": 2}]}})
        reordered = cps.save("run", {"only": {"y": [{"q": 2, "p": 1}], "x": 1}})
        assert nested.state_hash == reordered.state_hash


    @since("1.3")
    def test_a_checkpoint_is_accepted_wherever_its_id_is(self, store: Store) -> None:
        cps = store.checkpoints
        a = cps.save("run", {"n": 1})
        b = cps.save("run", {"n": 2}, parent=a)
        c = cps.save("run", {"n": 3}, parent=[a, b.id], branch="side")
        merged = cps.merge("run", [b, c])
        assert (b.parent_ids, c.parent_ids, merged.parent_ids) == ([a.id], [a.id, b.id], [b.id, c.id])
        assert [x.id for x in cps.lineage(merged)] == [merged.id, b.id, a.id]
        for bad in (42, b"an-id", {"id": a.id}, [a.id, 3], 2.5):
            with pytest.raises(ValidationError, match=r"checkpoint id(, | or )a Checkpoint"):
                cps.save("run", {}, parent=bad)
        with pytest.raises(ValidationError, match="checkpoint id or a Checkpoint"):
            cps.lineage(42)  # type: ignore[arg-type]
        assert cps.count() == 4

    @since("1.3")
    def test_restoring_a_state_that_does_not_fit_the_model_names_the_field_and_checkpoint(
            self, store: Store) -> None:
        saved = store.checkpoints.save("run", {"step": "not a number", "messages": [], "started": "x"})
        with pytest.raises(ValidationError) as caught:
            store.checkpoints.restore("run", AgentState)
        fields = [field for field, _ in caught.value.errors]
        assert "state.step" in fields and "state.started" in fields
        assert saved.id in str(caught.value) and "AgentState" in str(caught.value)
