"""A real compiled LangGraph graph run with `MnemostoreSaver` vs LangGraph's own saver on the same engine.

One node appends a message of varied text (`data.varied_messages`, ~430 bytes of JSON each) to a
list channel and counts the step; a conditional edge loops back to it until `steps` steps are done.
Each step LangGraph stores the task's writes and a checkpoint whose message list has grown by one
(up to ~65 KB at 150 steps), with its default durability ("async": the checkpoint is saved while the
next step runs). Both graphs run the same input interleaved, a new thread per run, `MIN_RUNS` runs or more.
"""

from __future__ import annotations

import operator
from functools import partial
from itertools import islice
from typing import Annotated, Any, TypedDict

from data import varied_messages
from harness import MIN_RUNS, Results, Row, at_least, median, timed_clean

Saver = Any


class AgentState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    step: int


def build_graph(steps: int) -> Any:
    """The uncompiled graph: `steps` turns of one node, each appending the next message."""
    from langgraph.graph import END, START, StateGraph

    messages = list(islice(varied_messages(seed=11), steps))

    def agent(state: AgentState) -> dict[str, Any]:
        step = state["step"]
        return {"messages": [messages[step]], "step": step + 1}

    def route(state: AgentState) -> str:
        return END if state["step"] >= steps else "agent"

    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["agent", END])
    return builder


def run_graph(graph: Any, thread_id: str, steps: int) -> dict[str, Any]:
    """One run of the graph on a new thread; its final state."""
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}
    result: dict[str, Any] = graph.invoke({"messages": [], "step": 0}, config)
    return result


def bench_graph(results: Results, engine: str, theirs_name: str, pair: dict[str, Saver], steps: int,
                repeat: int) -> None:
    builder = build_graph(steps)
    graphs = {who: builder.compile(checkpointer=saver) for who, saver in pair.items()}
    expected = list(islice(varied_messages(seed=11), steps))
    for who, graph in graphs.items():  # warm up, and both give the same state back
        final = run_graph(graph, f"graph-warm-up-{who}", steps)
        stored = graph.get_state({"configurable": {"thread_id": f"graph-warm-up-{who}"}}).values
        assert final["messages"] == stored["messages"] == expected and stored["step"] == steps, f"{who}: wrong state"
    t: dict[str, list[float]] = {who: [] for who in graphs}
    sides = list(graphs.items())
    for r in range(max(repeat, MIN_RUNS)):
        for who, graph in sides if r % 2 == 0 else sides[::-1]:
            t[who].append(timed_clean(partial(run_graph, graph, f"graph-{r}", steps)))
    results.add(at_least(Row(f"langgraph {engine}: graph of {steps} steps (varied text), MnemostoreSaver",
                             median(t["ours"]), median(t["theirs"]), baseline_name=theirs_name,
                             note=f"time per graph run; per step {median(t['ours']) / steps * 1000:.2f} ms "
                                  f"vs {median(t['theirs']) / steps * 1000:.2f} ms")))
