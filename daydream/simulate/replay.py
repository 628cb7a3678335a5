"""Replay: simulate the untouched graph of a trace and compare it with what was measured.

Iteration boundaries are the graph's marker tasks (zero-duration host tasks on
the annotating thread, whose gap is the host time before the boundary); an iteration
lasts until its GPU work has finished too (simulate.windows). For a
graph without markers, a boundary at recorded time T is carried into the
simulated timeline by the host task on the same thread that follows it (T keeps
its offset before that task's start), or, after the last task, by the one before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from daydream.graph import Graph, TaskKind, build_graph
from daydream.graph.job import build_job_graphs
from daydream.graph.model import HOST_TASKS, Timeline
from daydream.graph.windows import iteration_windows, measured_windows
from daydream.mapping import Iteration, find_iterations
from daydream.simulate.job import simulate_job
from daydream.trace import Trace


@dataclass(slots=True)
class IterationReplay:
    """One iteration, recorded and replayed; times in ns."""

    name: str
    measured_start_ns: int
    measured_end_ns: int
    simulated_start_ns: int
    simulated_end_ns: int
    pinned_fraction: float  # share of the iteration's tasks replayed at their recorded start
    tasks: int

    @property
    def measured_ns(self) -> int:
        return self.measured_end_ns - self.measured_start_ns

    @property
    def simulated_ns(self) -> int:
        return self.simulated_end_ns - self.simulated_start_ns

    @property
    def error(self) -> float:
        return (abs(self.simulated_ns - self.measured_ns) / self.measured_ns if self.measured_ns
                else 0.0)


@dataclass(slots=True)
class Replay:
    """The replay of one rank."""

    trace: Trace
    graph: Graph
    timeline: Timeline
    iterations: list[IterationReplay] = field(default_factory=list)


def replay_trace(trace: Trace, graph: Graph | None = None) -> Replay:
    """Build (unless given) and simulate one rank's graph on its own;
    compare with the measurement."""
    graph = graph if graph is not None else build_graph(trace)
    return measure_replay(trace, graph, simulate_job([graph])[0])


def replay_traces(traces: list[Trace], graphs: list[Graph] | None = None) -> list[Replay]:
    """Replay a job's ranks together: collectives matched across ranks finish together (see
    simulate.job). `graphs`: the ranks' graphs, already built (daydream.ranks)."""
    graphs, _ = build_job_graphs(traces, graphs)
    return [measure_replay(t, g, tl) for t, g, tl in zip(traces, graphs, simulate_job(graphs))]


def measure_replay(trace: Trace, graph: Graph, timeline: Timeline) -> Replay:
    """Measured vs simulated per iteration, given the simulated `timeline` of `graph`."""
    iterations = find_iterations(trace)
    if len(graph.iteration_markers) == len(iterations):
        # Both to each iteration's completion (its host past its end
        # and its GPU work done): see simulate.windows.
        measured = [(w.start_ns, w.end_ns) for w in measured_windows(graph)]
        bounds = [(w.start_ns, w.end_ns) for w in iteration_windows(graph, timeline)]
    else:
        mapper = _BoundaryMapper(graph, timeline, _anchor_resource(trace, graph, iterations))
        measured = [(it.start_ns, it.end_ns) for it in iterations]
        bounds = [(mapper.simulated(it.start_ns), mapper.simulated(it.end_ns)) for it in iterations]
    # Tasks and pinned tasks per iteration, counted in one pass (not a
    # full-length mask per iteration).
    real = (graph.tasks["kind"] != TaskKind.MARKER) & (graph.tasks["iteration"] >= 0)
    owner = graph.tasks["iteration"][real]
    counts = np.bincount(owner, minlength=len(iterations))
    pinned_counts = np.bincount(owner, weights=graph.pinned()[real].astype(np.float64),
                                minlength=len(iterations))
    results = []
    for index, (iteration, (simulated_start, simulated_end)) in enumerate(zip(iterations, bounds)):
        count = int(counts[index]) if index < counts.size else 0
        results.append(
            IterationReplay(
                name=iteration.name,
                measured_start_ns=measured[index][0],
                measured_end_ns=measured[index][1],
                simulated_start_ns=simulated_start,
                simulated_end_ns=simulated_end,
                pinned_fraction=float(pinned_counts[index]) / count if count else 0.0,
                tasks=count,
            )
        )
    return Replay(trace=trace, graph=graph, timeline=timeline, iterations=results)


def _anchor_resource(trace: Trace, graph: Graph, iterations: list[Iteration]) -> int:
    """The host thread whose tasks carry the iteration boundaries: the
    one holding the annotations."""
    host = np.isin(graph.tasks["kind"], [int(k) for k in HOST_TASKS])
    resources = graph.tasks["resource"][host]
    if iterations and iterations[0].source != "whole_trace":
        rows = np.flatnonzero(trace.ts_ns == iterations[0].start_ns)
        tracks = {int(trace.track[r]) for r in rows}
        for index, resource in enumerate(graph.resources):
            if resource.track in tracks and np.any(resources == index):
                return index
    return int(np.bincount(resources).argmax()) if resources.size else 0


class _BoundaryMapper:
    def __init__(self, graph: Graph, timeline: Timeline, resource: int) -> None:
        tasks = graph.tasks
        on_thread = np.flatnonzero(
            (tasks["resource"] == resource) & np.isin(tasks["kind"], [int(k) for k in HOST_TASKS])
        )
        order = np.lexsort((tasks["measured_end_ns"][on_thread],
                            tasks["measured_start_ns"][on_thread]))
        self.tasks = on_thread[order]
        self.measured_start = tasks["measured_start_ns"][self.tasks]
        self.measured_end = tasks["measured_end_ns"][self.tasks]
        self.simulated_start = timeline.start_ns[self.tasks]
        self.simulated_end = timeline.end_ns[self.tasks]

    def simulated(self, time_ns: int) -> int:
        k = int(np.searchsorted(self.measured_start, time_ns, side="left"))
        if k < self.tasks.size:
            return int(self.simulated_start[k] - (self.measured_start[k] - time_ns))
        if self.tasks.size == 0:
            return time_ns
        return int(self.simulated_end[-1] + (time_ns - self.measured_end[-1]))
