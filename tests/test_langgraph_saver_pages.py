"""`MnemostoreSaver.list` by a thread's pages gives what LangGraph's contract says, against a model of the
puts: the thread's checkpoints (of the namespace, if the config names one), newest first, those below
`before` only, at most `limit` of them; on the sqlite store (flat reads) and the in-memory reference."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.seed_kinds import forget_the_writes_kind

import mnemostore

pytest.importorskip("langgraph.checkpoint.base", reason="needs the langgraph extra")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from mnemostore.integrations.langgraph import MnemostoreSaver
from mnemostore.integrations.langgraph.mapping import checkpoint_record_id
from mnemostore.kinds.langgraph_ids import checkpoint_writes_prefix, checkpoints_writes_range, prefix_range


@pytest.fixture(autouse=True)
def _writes_kind_forgotten() -> Iterator[None]:
    """`MnemostoreSaver` registers its write kind; forgotten after each test (see `forget_the_writes_kind`)."""
    yield
    forget_the_writes_kind()

_puts = st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.sampled_from(["", "p", "q"])), min_size=1, max_size=30)
_reads = st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.sampled_from([None, "", "p"]),
                            st.one_of(st.none(), st.integers(0, 29)), st.one_of(st.none(), st.integers(1, 12))),
                  min_size=1, max_size=6)


@settings(max_examples=30, deadline=None)
@given(puts=_puts, reads=_reads, url=st.sampled_from(["sqlite", "memory"]))
def test_list_is_the_model_of_the_puts(puts: list[tuple[str, str]],
                                       reads: list[tuple[str, str | None, int | None, int | None]], url: str) -> None:
    """Pages longer and shorter than a limit, `before` a checkpoint of this namespace, of another or of
    another thread, a config with no namespace (every namespace of the thread, in record id order)."""
    with tempfile.TemporaryDirectory() as directory, \
            mnemostore.open(f"sqlite:///{directory}/s.db" if url == "sqlite" else "memory://") as store:
        saver = MnemostoreSaver(store)
        saved: list[tuple[str, str, str]] = []  # (thread, namespace, checkpoint id) of each put
        for i, (thread, ns) in enumerate(puts):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=i))
            checkpoint["channel_values"] = {"n": i}
            checkpoint["channel_versions"] = {"n": f"{i + 1:032}"}
            saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ns}}, checkpoint,
                      {"source": "loop", "step": i, "parents": {}}, {"n": f"{i + 1:032}"})
            saved.append((thread, ns, checkpoint["id"]))
        for thread, ns, before_at, limit in reads:
            conf: dict[str, Any] = {"thread_id": thread} if ns is None else {"thread_id": thread, "checkpoint_ns": ns}
            before = saved[before_at % len(saved)] if before_at is not None else None
            before_config = None if before is None else {"configurable": {
                "thread_id": before[0], "checkpoint_ns": before[1], "checkpoint_id": before[2]}}
            expected = sorted((s for s in saved if s[0] == thread and (ns is None or s[1] == ns)
                               and (before is None or s[2] < before[2])),
                              key=lambda s: checkpoint_record_id(*s), reverse=True)[:limit]
            listed = [(t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"],
                       t.config["configurable"]["checkpoint_id"])
                      for t in saver.list({"configurable": conf}, before=before_config, limit=limit)]
            assert listed == expected
            assert all(t.checkpoint["channel_values"] == {"n": saved.index(key)} for t, key in zip(
                saver.list({"configurable": conf}, before=before_config, limit=limit), listed, strict=True))


@given(ids=st.lists(st.text("ab./-0", min_size=0, max_size=4), min_size=1, max_size=6),
       write=st.text("ab./-0", max_size=6), ns=st.sampled_from(["", "p"]))
def test_checkpoints_writes_range_spans_each_checkpoints_writes(ids: list[str], write: str, ns: str) -> None:
    """`checkpoints_writes_range` is the span of each checkpoint's own range (`prefix_range` of its
    `checkpoint_writes_prefix`): a write id in any of them is in it."""
    low, high = checkpoints_writes_range("t", ns, ids)
    assert low == min(prefix_range(checkpoint_writes_prefix("t", ns, i))[0] for i in ids)
    assert high == max(prefix_range(checkpoint_writes_prefix("t", ns, i))[1] for i in ids)
    for checkpoint_id in ids:
        assert low <= checkpoint_writes_prefix("t", ns, checkpoint_id) + write < high
