"""The host side: program order on each thread (rule 1), the autograd thread's bursts (rule 6),
each task's iteration, and the CPU time between host tasks (their gaps)."""

from __future__ import annotations

import re

import numpy as np

from daydream.graph.build.launches import UNSET, Launches, previous_on_resource
from daydream.graph.build.tasks import Tasks
from daydream.graph.model import HOST_TASKS, DepKind, Graph, ResourceKind
from daydream.mapping.attribution import AUTOGRAD_ENGINE_PREFIX
from daydream.trace import EventKind, Trace

#: An autograd backward function, as 2021-format traces name the autograd thread's ops
#: (AddmmBackward, ReluBackward1).
BACKWARD_FUNCTION = re.compile(r"^[A-Z]\w*Backward\d*$")


def host_order(graph: Graph, host: np.ndarray, completion: np.ndarray) -> None:
    """Each host task after the one before it on its thread (after that one's completion)."""
    previous = previous_on_resource(graph, host)
    has = previous >= 0
    source = previous[has]
    source = np.where(completion[source] >= 0, completion[source], source)
    graph.add_edges(source, host[has], DepKind.HOST_ORDER)


def _autograd_threads(trace: Trace, graph: Graph) -> list[int]:
    """Host resources running PyTorch's autograd engine: its ops are
    autograd::engine::evaluate_function: ..., or, in 2021-format traces, the backward functions
    themselves (AddmmBackward, NllLossBackward, ...)."""
    engine = np.array([s.startswith(AUTOGRAD_ENGINE_PREFIX) or bool(BACKWARD_FUNCTION.search(s))
                       for s in trace.strings], dtype=bool)
    rows = trace.indices(EventKind.CPU_OP)
    tracks = set(np.unique(trace.track[rows[engine[trace.name[rows]]]]).tolist())
    return [i for i, r in enumerate(graph.resources)
            if r.kind is ResourceKind.HOST_THREAD and r.track in tracks]


def cross_thread(trace: Trace, graph: Graph, tasks: Tasks, completion: np.ndarray) -> None:
    """The autograd thread's bursts run while the main thread is blocked in backward().

    A burst (the autograd thread's tasks between two consecutive main-thread
    tasks) starts after the main thread's task before it, and the main thread
    resumes after the burst. Other threads get no cross-thread edges: nothing
    in the trace says what they wait for.
    """
    columns, main, host = graph.tasks, tasks.main_resource, tasks.host_tasks
    if main is None:
        return
    resources = columns["resource"][host]
    main_tasks = host[resources == main]
    if main_tasks.size == 0:
        return
    main_start = columns["measured_start_ns"][main_tasks]
    main_end_ref = np.where(completion[main_tasks] >= 0, completion[main_tasks], main_tasks)
    sources, targets = [], []
    for resource in _autograd_threads(trace, graph):
        if resource == main:
            continue
        other = host[resources == resource]
        other = other[np.argsort(columns["measured_start_ns"][other], kind="stable")]
        # Index of the first main-thread task starting after each task of the other thread.
        after = np.searchsorted(main_start, columns["measured_start_ns"][other], side="right")
        burst_starts = np.flatnonzero(np.r_[True, after[1:] != after[:-1]])
        burst_ends = np.r_[burst_starts[1:], other.size] - 1
        for first, last in zip(burst_starts.tolist(), burst_ends.tolist()):
            k = int(after[first])
            if k == 0 or k >= main_tasks.size:
                continue
            before_task, after_task = int(main_end_ref[k - 1]), int(main_tasks[k])
            last_end = int(columns["measured_end_ns"][other[last]])
            if last_end > int(columns["measured_start_ns"][after_task]):
                continue  # the main thread did not wait for this burst
            sources += [before_task, int(other[last]) if completion[other[last]] < 0
                        else int(completion[other[last]])]
            targets += [int(other[first]), after_task]
            graph.calibration.cross_thread_bursts += 1
    graph.add_edges(sources, targets, DepKind.CROSS_THREAD)


def assign_iterations(graph: Graph, tasks: Tasks, launches: Launches) -> None:
    """Host tasks belong to the iteration whose span holds their
    start; GPU work to its launcher's."""
    columns, iterations = graph.tasks, tasks.iterations
    if not iterations:
        return
    bounds = np.array([it.start_ns for it in iterations] + [iterations[-1].end_ns],
                      dtype=np.int64)
    host = np.flatnonzero(np.isin(columns["kind"], [int(k) for k in HOST_TASKS]))
    index = np.searchsorted(bounds, columns["measured_start_ns"][host], side="right") - 1
    inside = (index >= 0) & (index < len(iterations))
    columns["iteration"][host[inside]] = index[inside]
    gpu = tasks.gpu_tasks
    launched = launches.launch_task >= 0
    columns["iteration"][gpu[launched]] = columns["iteration"][launches.launch_task[launched]]
    unlaunched = gpu[~launched]
    index = np.searchsorted(bounds, columns["measured_start_ns"][unlaunched], side="right") - 1
    inside = (index >= 0) & (index < len(iterations))
    columns["iteration"][unlaunched[inside]] = index[inside]


def host_gaps(graph: Graph) -> None:
    """gap = recorded start - latest recorded finish of the host
    tasks it waited for (never negative)."""
    tasks, edges = graph.tasks, graph.edges
    host_edges = np.flatnonzero(
        (edges["kind"] == DepKind.HOST_ORDER) | (edges["kind"] == DepKind.CROSS_THREAD))
    src, dst = edges["src"][host_edges], edges["dst"][host_edges]
    latest = np.full(graph.task_count, UNSET, dtype=np.int64)
    np.maximum.at(latest, dst, tasks["measured_end_ns"][src])
    has = latest != UNSET
    gap = np.zeros(graph.task_count, dtype=np.int64)
    gap[has] = np.maximum(tasks["measured_start_ns"][has] - latest[has], 0)
    tasks["gap_ns"] = gap
