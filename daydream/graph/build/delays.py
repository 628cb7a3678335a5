"""What the trace cannot explain: GPU work no call in the window launched and a single rank's
collectives; each such task's start becomes a delay after its readiness, anchored to its
iteration's progress (graph.model). Also the check that the rules made no cycle."""

from __future__ import annotations

import numpy as np

from daydream.errors import TraceFormatError
from daydream.graph.build.launches import UNSET, Launches, previous_on_resource
from daydream.graph.build.tasks import Tasks
from daydream.graph.model import DepKind, Graph, TaskKind
from daydream.graph.order import topological_or_partial, topological_order
from daydream.graph.timing import forward_times
from daydream.mapping import Links
from daydream.trace import Trace


def pinned_collectives_note(count: int) -> str:
    """The note a graph carries while `count` of its collectives are a
    single rank's (see graph.job for matched ones)."""
    return (f"{count} collectives of a single rank: each lasts its transfer (shortest instance), "
            "and its wait for the other ranks is a delay that scales with the work since the ranks "
            "last met (replay with every rank to derive it)")


def unlinked_gpu_work(graph: Graph, links: Links, tasks: Tasks, launches: Launches) -> np.ndarray:
    """The GPU work whose start the trace cannot explain: launched
    before the window, launched by no call in the trace, or a single
    rank's collective (its time includes waiting for the others)."""
    columns, calibration = graph.tasks, graph.calibration
    gpu = tasks.gpu_tasks
    orphan = links.orphan[columns["event"][gpu]]
    unlinked = (launches.launch_task < 0) & ~orphan
    collective = columns["kind"][gpu] == TaskKind.COLLECTIVE
    calibration.pinned_orphans = int(orphan.sum())
    calibration.pinned_unlinked = int(unlinked.sum())
    calibration.pinned_collectives = int(collective.sum())
    if collective.any():
        graph.notes.append(pinned_collectives_note(int(collective.sum())))
    return gpu[orphan | unlinked | collective]


def refuse_cycles(trace: Trace, graph: Graph) -> None:
    """Edges derived from a sound trace go forward in time; a cycle
    means ids the trace reuses or damaged."""
    behind = graph.task_count - topological_or_partial(graph.task_count, graph.edges["src"],
                                                       graph.edges["dst"]).size
    if behind:
        raise TraceFormatError(trace.meta.source, "its dependencies form a cycle "
                               f"({behind} tasks on or behind it)",
                               "correlation, flow or event ids are inconsistent; the trace is "
                               "damaged")


def relative_delays(trace: Trace, graph: Graph, chosen: np.ndarray) -> None:
    """What the trace cannot explain becomes a delay after the task is ready, never a timestamp.

    One pass of the timing rule with every unexplained task held at its recorded start
    measures, for each, how long after its dependencies allowed it the recording started
    it: that is its delay, so the untouched graph replays exactly as the recording
    positions them. A collective of a single rank keeps only its transfer (the shortest
    recorded instance of the same name and size) as duration; the rest of its recorded
    time, the wait for the other ranks, joins its delay. Inside an iteration a delay
    scales with the iteration's progress (graph.model): a DELAY_ANCHOR edge from the
    iteration's start marker, `delay_span_ns` = progress at readiness.
    """
    tasks = graph.tasks
    if chosen.size == 0:
        return
    tasks["unexplained"][chosen] = True
    anchors = _anchor_edges(graph, chosen)
    refuse_cycles(trace, graph)  # an anchor behind its task: ids or times the trace damaged
    pins = np.full(graph.task_count, UNSET, dtype=np.int64)
    pins[chosen] = tasks["measured_start_ns"][chosen]
    order = topological_order(graph.task_count, graph.edges["src"], graph.edges["dst"],
                              tasks["measured_start_ns"])
    start, end, ready = forward_times(graph, order, pins)
    waits = _collective_transfers(graph, chosen)
    tasks["delay_ns"][chosen] = start[chosen] - ready[chosen] + waits
    anchored = anchors >= 0
    span = ready[chosen[anchored]] - end[anchors[anchored]]
    tasks["delay_span_ns"][chosen[anchored]] = np.maximum(span, 0)


def _anchor_edges(graph: Graph, chosen: np.ndarray) -> np.ndarray:
    """The point each chosen task's delay is measured from, joined to it by a
    DELAY_ANCHOR edge: for a collective, the end of the previous collective on
    its stream (the last time the ranks met), else the start marker of its
    iteration. Returns each chosen task's anchor (-1: none, a fixed delay)."""
    tasks = graph.tasks
    anchors = np.full(chosen.size, -1, dtype=np.int64)
    markers = graph.iteration_markers
    if markers:
        iteration = tasks["iteration"][chosen]
        inside = (iteration >= 0) & (iteration < len(markers))
        starts = np.array([a for a, _ in markers], dtype=np.int64)
        anchors[inside] = starts[iteration[inside]]
    is_collective = np.flatnonzero(tasks["kind"][chosen] == TaskKind.COLLECTIVE)
    collectives = chosen[is_collective]
    previous = previous_on_resource(graph, collectives)
    anchors[is_collective[previous >= 0]] = previous[previous >= 0]
    has = anchors >= 0
    graph.add_edges(anchors[has], chosen[has], DepKind.DELAY_ANCHOR)
    return anchors


def _collective_transfers(graph: Graph, chosen: np.ndarray) -> np.ndarray:
    """A single rank's collectives last their transfer; returns, per chosen task, the rest of
    its recorded time (the wait for the other ranks; 0 for tasks that are not collectives)."""
    tasks = graph.tasks
    wait = np.zeros(chosen.size, dtype=np.int64)
    is_collective = tasks["kind"][chosen] == TaskKind.COLLECTIVE
    collectives = chosen[is_collective]
    if collectives.size == 0:
        return wait
    keys = np.stack([tasks["name"][collectives].astype(np.int64), tasks["bytes"][collectives]],
                    axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    shortest = np.full(int(group.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(shortest, group, tasks["duration_ns"][collectives])
    transfer = shortest[group]
    wait[is_collective] = tasks["duration_ns"][collectives] - transfer
    tasks["duration_ns"][collectives] = transfer
    return wait
