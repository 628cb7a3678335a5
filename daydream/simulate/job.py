"""Simulating the ranks of a job together, so that a slow rank delays the others.

    timelines = simulate_job(graphs)     # one Timeline per rank graph, in the same order

Ranks whose graphs share no matched collective (the `collective` column) are
simulated one by one. Otherwise the graphs are laid side by side in one graph and,
for each matched collective, a zero-duration join task waits for everything each
rank's instance waits for; every instance then starts after the join. So the
collective starts on all ranks when the last one is ready, and all finish together
when their durations (the transfer) agree.
"""

from __future__ import annotations

import numpy as np

from daydream.graph.model import (
    EDGE_COLUMNS,
    DepKind,
    Graph,
    Resource,
    ResourceKind,
    TaskKind,
    Timeline,
)
from daydream.simulate.engine import simulate, simulate_event_driven
from daydream.simulate.warmup import extend, truncate


def simulate_job(graphs: list[Graph], warmup: bool = False) -> list[Timeline]:
    """Simulate every rank graph; ranks tied by matched collectives are simulated as one. `warmup`:
    each rank behind a copy of its first iteration (simulate.warmup), for the steady state a what-if
    predicts; a replay, which compares with the recording, goes without (the recording's first
    iteration started from wherever the profiler found it)."""
    largest = max((int(g.tasks["collective"].max()) for g in graphs if g.task_count), default=0)
    extended = [extend(graph, largest)[0] if warmup else graph for graph in graphs]
    if largest <= 0:
        timelines = [simulate_graph(graph) for graph in extended]
    else:
        combined, offsets = side_by_side(extended)
        _add_joins(combined, extended, offsets)
        problems = combined.validate()
        if problems:
            raise ValueError(
                f"the ranks' collectives cannot be ordered consistently: {problems[0]}")
        timeline = simulate_graph(combined)
        timelines = [Timeline(timeline.start_ns[a:a + g.task_count],
                              timeline.end_ns[a:a + g.task_count])
                     for g, a in zip(extended, offsets)]
    return ([truncate(timeline, graph, bigger)
             for timeline, graph, bigger in zip(timelines, graphs, extended)])


def simulate_graph(graph: Graph) -> Timeline:
    """The fast pass, or the event-driven engine where the graph has queue-scheduled resources."""
    if graph.queue_policies:
        return simulate_event_driven(graph, graph.queue_policies, graph.tasks["priority"])
    return simulate(graph)


def side_by_side(graphs: list[Graph]) -> tuple[Graph, list[int]]:
    """One graph holding every rank's tasks and edges (ids shifted);
    returns it and each rank's first task id."""
    offsets, resources_before, strings_before = [], [], []
    tasks_so_far = resources_so_far = strings_so_far = 0
    for graph in graphs:
        offsets.append(tasks_so_far)
        resources_before.append(resources_so_far)
        strings_before.append(strings_so_far)
        tasks_so_far += graph.task_count
        resources_so_far += len(graph.resources)
        strings_so_far += len(graph.strings)
    tasks = {}
    for column in graphs[0].tasks:
        parts = [g.tasks[column] for g in graphs]
        if column == "resource":
            parts = [p + shift for p, shift in zip(parts, resources_before)]
        elif column == "name":
            parts = [p + shift for p, shift in zip(parts, strings_before)]
        tasks[column] = np.concatenate(parts)
    edges = {}
    for column in EDGE_COLUMNS:
        parts = [g.edges[column] for g in graphs]
        if column in ("src", "dst"):
            parts = [p + shift for p, shift in zip(parts, offsets)]
        edges[column] = np.concatenate(parts)
    policies = {resource + shift: policy for g, shift in zip(graphs, resources_before)
                for resource, policy in g.queue_policies.items()}
    combined = Graph(tasks=tasks, edges=edges, resources=[r for g in graphs for r in g.resources],
                     strings=[s for g in graphs for s in g.strings], queue_policies=policies)
    return combined, offsets


def _add_joins(combined: Graph, graphs: list[Graph], offsets: list[int]) -> None:
    ids = combined.tasks["collective"]
    members = np.flatnonzero(ids > 0)
    unique, join_of = np.unique(ids[members], return_inverse=True)
    channel = len(combined.resources)
    combined.resources.append(Resource(ResourceKind.COMM_CHANNEL, "collective joins"))
    first_start = np.full(unique.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_start, join_of, combined.tasks["measured_start_ns"][members])
    joins = combined.add_tasks(kind=int(TaskKind.MARKER), resource=channel, duration_ns=0,
                               measured_start_ns=first_start, measured_end_ns=first_start)
    join_of_task = np.full(combined.task_count, -1, dtype=np.int64)
    join_of_task[members] = joins[join_of]
    edges = combined.edges
    into_member = join_of_task[edges["dst"]] >= 0
    # What each instance waits for, the join waits for too (same latency, same reference point).
    src, dst = edges["src"][into_member], join_of_task[edges["dst"][into_member]]
    latency, from_start = edges["latency_ns"][into_member], edges["from_start"][into_member]
    for flag in (False, True):
        chosen = from_start == flag
        if chosen.any():
            combined.add_edges(src[chosen], dst[chosen], DepKind.COMMUNICATION,
                               latency_ns=latency[chosen], from_start=flag)
    combined.add_edges(join_of_task[members], members, DepKind.COMMUNICATION)
