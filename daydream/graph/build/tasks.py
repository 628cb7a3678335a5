"""The tasks: host calls (or top-level CPU ops) and GPU work, attributed to layers and phases;
a marker at every iteration boundary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.graph.model import (
    EDGE_COLUMNS,
    TASK_COLUMNS,
    Calibration,
    Graph,
    Resource,
    ResourceKind,
    TaskKind,
    empty_columns,
)
from daydream.mapping import Iteration, Links, attribute, find_iterations
from daydream.mapping.collectives import collectives_of
from daydream.mapping.linking import nearest_earlier_at_least
from daydream.trace import API_KINDS, GPU_ACTIVITY_KINDS, EventKind, Trace, TrackKind

_GPU_TASK_KIND = {
    EventKind.KERNEL: TaskKind.KERNEL,
    EventKind.MEMCPY: TaskKind.MEMCPY,
    EventKind.MEMSET: TaskKind.MEMSET,
    EventKind.COMMUNICATION: TaskKind.COLLECTIVE,
    # gloo's work on its own CPU thread, placed like GPU work
    EventKind.HOST_COMMUNICATION: TaskKind.COLLECTIVE,
}
#: `_GPU_TASK_KIND` as a lookup table by the event kind's value.
_GPU_TASK_KIND_OF = np.full(max(int(k) for k in EventKind) + 1, -1, dtype=np.int8)
_GPU_TASK_KIND_OF[[int(k) for k in _GPU_TASK_KIND]] = [int(v) for v in _GPU_TASK_KIND.values()]


@dataclass(frozen=True)
class Tasks:
    """The graph with its tasks and no edges yet, and where its tasks came from."""

    graph: Graph
    #: Host tasks (the iteration markers first), by task id.
    host_tasks: np.ndarray
    #: GPU tasks, by task id.
    gpu_tasks: np.ndarray
    #: Per trace row, its task (-1: none).
    task_of_event: np.ndarray
    iterations: list[Iteration]
    #: The host thread holding the iteration annotations (None: no host task).
    main_resource: int | None


def make_tasks(trace: Trace, links: Links) -> Tasks:
    """The tasks of `trace`, attributed; the iteration markers on the main thread."""
    host_rows = _host_rows(trace)
    gpu_rows = trace.indices(*GPU_ACTIVITY_KINDS, EventKind.HOST_COMMUNICATION)
    rows = np.concatenate([host_rows, gpu_rows])
    resources, resource_of_track = _resources(trace, rows)
    tasks = empty_columns(TASK_COLUMNS, rows.size)
    tasks["event"] = rows
    tasks["resource"] = resource_of_track[trace.track[rows]]
    tasks["name"] = trace.name[rows]
    tasks["measured_start_ns"] = trace.ts_ns[rows]
    tasks["measured_end_ns"] = trace.end_ns[rows]
    tasks["duration_ns"] = trace.dur_ns[rows]
    tasks["bytes"] = np.maximum(trace.bytes[rows], 0)
    tasks["iteration"][:] = -1
    attribution = attribute(trace, links)
    tasks["layer"] = attribution.layer[rows]
    tasks["phase"] = attribution.phase[rows]
    host_kind = np.where(np.isin(trace.kind[host_rows], [int(k) for k in API_KINDS]),
                         TaskKind.HOST_CALL, TaskKind.HOST_OP)
    gpu_kind = _GPU_TASK_KIND_OF[trace.kind[gpu_rows]]
    tasks["kind"] = np.concatenate([host_kind.astype(np.int8), gpu_kind])
    # The calibration and the notes are the graph's: what the rules measure and count, and what
    # they could not derive.
    graph = Graph(tasks=tasks, edges=empty_columns(EDGE_COLUMNS), resources=resources,
                  strings=list(trace.strings), layers=list(attribution.layers),
                  calibration=Calibration(), notes=[])
    task_of_event = np.full(len(trace), -1, dtype=np.int64)
    task_of_event[rows] = np.arange(rows.size)
    _collective_sizes(trace, graph, task_of_event)
    host_tasks = np.arange(host_rows.size)
    iterations = find_iterations(trace)
    main = _annotation_resource(trace, graph, host_tasks, iterations)
    markers = _iteration_markers(graph, iterations, main)
    return Tasks(graph, np.concatenate([markers, host_tasks]), np.arange(host_rows.size, rows.size),
                 task_of_event, iterations, main)


def _host_rows(trace: Trace) -> np.ndarray:
    """API calls on threads that make them; top-level CPU ops on threads that make none."""
    api_rows = trace.indices(*API_KINDS)
    threads_with_calls = np.unique(trace.track[api_rows])
    op_rows = trace.indices(EventKind.CPU_OP)
    op_rows = op_rows[~np.isin(trace.track[op_rows], threads_with_calls)]
    if op_rows.size:
        order = np.lexsort((-trace.dur_ns[op_rows], trace.ts_ns[op_rows], trace.track[op_rows]))
        op_rows = op_rows[order]
        enclosing = nearest_earlier_at_least(trace.end_ns[op_rows],
                                             np.ones(op_rows.size, dtype=bool))
        tracks = trace.track[op_rows]
        top = (enclosing < 0) | (tracks[np.maximum(enclosing, 0)] != tracks)
        op_rows = op_rows[top]
    rows = np.concatenate([api_rows, op_rows])
    return rows[np.lexsort((trace.ts_ns[rows], trace.track[rows]))]


def _iteration_markers(graph: Graph, iterations: list[Iteration],
                       resource: int | None) -> np.ndarray:
    """A zero-duration host task at every iteration boundary, on the thread that annotated it;
    their ids.

    The host time before a boundary becomes the marker's gap, so a what-if that
    changes host time moves the boundary with it. The markers come first among the host tasks,
    so that a marker sorts before a task starting at the same instant.
    """
    if not iterations or resource is None:
        return np.zeros(0, dtype=np.int64)
    times = sorted({t for it in iterations for t in (it.start_ns, it.end_ns)})
    graph.strings.append("iteration boundary")
    ids = graph.add_tasks(
        kind=TaskKind.MARKER, resource=resource, name=len(graph.strings) - 1, duration_ns=0,
        measured_start_ns=np.array(times, dtype=np.int64),
        measured_end_ns=np.array(times, dtype=np.int64),
    )
    marker_at = dict(zip(times, ids.tolist()))
    graph.iteration_markers = [(marker_at[it.start_ns], marker_at[it.end_ns])
                               for it in iterations]
    return ids


def _annotation_resource(trace: Trace, graph: Graph, host_tasks: np.ndarray,
                         iterations: list[Iteration]) -> int | None:
    """The host thread holding the iteration annotations (the main
    thread), else the busiest host thread."""
    if iterations and iterations[0].source != "whole_trace":
        rows = trace.indices(EventKind.ANNOTATION, EventKind.CPU_OP)
        tracks = set(trace.track[rows[trace.ts_ns[rows] == iterations[0].start_ns]].tolist())
        for index, resource in enumerate(graph.resources):
            if resource.track in tracks and resource.kind is ResourceKind.HOST_THREAD:
                return index
    host = graph.tasks["resource"][host_tasks]
    return int(np.bincount(host).argmax()) if host.size else None


def _resources(trace: Trace, rows: np.ndarray) -> tuple[list[Resource], np.ndarray]:
    """One resource per track the tasks run on; each track's resource (-1: none)."""
    used = np.unique(trace.track[rows])
    resource_of_track = np.full(len(trace.tracks), -1, dtype=np.int32)
    resources = []
    for track_id in used.tolist():
        track = trace.tracks[track_id]
        if track.kind is TrackKind.GPU:
            resources.append(Resource(ResourceKind.GPU_STREAM, track.label, track.device,
                                      track.stream, track_id))
        else:
            resources.append(Resource(ResourceKind.HOST_THREAD, track.label, track=track_id))
        resource_of_track[track_id] = len(resources) - 1
    return resources, resource_of_track


def _collective_sizes(trace: Trace, graph: Graph, task_of_event: np.ndarray) -> None:
    """A collective's payload from its metadata (elements x dtype),
    where the trace records it."""
    info = collectives_of(trace)
    sized = info.message_bytes >= 0
    graph.tasks["bytes"][task_of_event[info.rows[sized]]] = info.message_bytes[sized]
