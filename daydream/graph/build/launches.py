"""GPU work and the calls that launched it: which call launched each piece (rule 3), the order of
each stream (rule 2), the launch latency and kernel gap, and the launch queue (rule 7)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.graph import calibrate
from daydream.graph.build.tasks import Tasks
from daydream.graph.model import DepKind, Graph
from daydream.mapping import Links
from daydream.trace import Trace
from daydream.trace.runtime_api import CallRole, role_of

UNSET = np.iinfo(np.int64).min
#: A graph's node that began this long past its stream's previous work (beyond the kernel gap)
#: waited for the graph launch to submit it.
PACED_NS = 1_000


@dataclass(frozen=True)
class Launches:
    """Per GPU task (in the order of `Tasks.gpu_tasks`): its launching call's task (-1: none),
    the task before it on its stream (-1: none), whether a graph launch submitted it; and the
    role of every name of the trace (decided once per name)."""

    launch_task: np.ndarray
    stream_previous: np.ndarray
    graph_launched: np.ndarray
    roles: dict[str, CallRole]


@dataclass(frozen=True)
class GpuConstants:
    """What the trace says a launch and a kernel cost: the latency from a launch call's start to
    its work's, and the gap between two kernels of a stream, ns."""

    launch_latency: int
    kernel_gap: int


def link_gpu_work(trace: Trace, links: Links, tasks: Tasks) -> Launches:
    """Each GPU task's launching call task and its predecessor on its stream."""
    columns = tasks.graph.tasks
    rows = columns["event"][tasks.gpu_tasks]
    launch_rows = links.launch[rows]
    launch_task = np.where(launch_rows >= 0, tasks.task_of_event[np.maximum(launch_rows, 0)], -1)
    roles = {name: role_of(name) for name in set(trace.strings)}
    graph_launches = [i for i, name in enumerate(trace.strings)
                      if roles[name] is CallRole.GRAPH_LAUNCH]
    graph_launched = (launch_task >= 0) & np.isin(columns["name"][np.maximum(launch_task, 0)],
                                                  graph_launches)
    return Launches(launch_task, previous_on_resource(tasks.graph, tasks.gpu_tasks),
                    graph_launched, roles)


def previous_on_resource(graph: Graph, task_ids: np.ndarray) -> np.ndarray:
    """For each task, the previous task (by recorded start) on its resource, or -1."""
    tasks = graph.tasks
    order = np.lexsort((tasks["measured_start_ns"][task_ids], tasks["resource"][task_ids]))
    ordered = task_ids[order]
    previous = np.full(task_ids.size, -1, dtype=np.int64)
    same = tasks["resource"][ordered[1:]] == tasks["resource"][ordered[:-1]]
    previous_sorted = np.full(ordered.size, -1, dtype=np.int64)
    previous_sorted[1:][same] = ordered[:-1][same]
    previous[order] = previous_sorted
    return previous


def early_starts(graph: Graph, gpu: np.ndarray) -> np.ndarray:
    """GPU work that began before the work before it on its stream had ended (a kernel launched
    early, as programmatic dependent launch lets it, or a graph's nodes that the trace puts on one
    stream) did its own work after that: its duration is trimmed to the time past the stream's
    latest end so far, and the stream stays serial, so that its busy time is the union of what it
    ran, as recorded; launched already, it follows that work without the stream's gap between
    kernels. Per task, whether it started early."""
    tasks = graph.tasks
    order = gpu[np.lexsort((tasks["measured_start_ns"][gpu], tasks["resource"][gpu]))]
    ends = tasks["measured_end_ns"][order]
    resource = tasks["resource"][order]
    trimmed = 0
    started_early = np.zeros(graph.task_count, dtype=bool)
    for stream in np.unique(resource).tolist():
        mine = np.flatnonzero(resource == stream)
        if mine.size < 2:
            continue
        # the stream's latest end before each task
        before = np.maximum.accumulate(ends[mine])[:-1]
        tasks_after = order[mine[1:]]
        early = tasks["measured_start_ns"][tasks_after] < before
        if early.any():
            chosen = tasks_after[early]
            tasks["duration_ns"][chosen] = np.maximum(
                tasks["measured_end_ns"][chosen] - before[early], 0)
            started_early[chosen] = True
            trimmed += int(early.sum())
    graph.calibration.early_starts = trimmed
    return started_early


def calibrate_gpu(graph: Graph, gpu: np.ndarray, launches: Launches,
                  unexplained: np.ndarray) -> GpuConstants:
    """Launch latency and inter-kernel gap, from GPU work nothing
    else held back (no event wait, no pin); the event waits' edges get the gap."""
    tasks = graph.tasks
    previous = launches.stream_previous
    previous_end = np.where(previous >= 0, tasks["measured_end_ns"][np.maximum(previous, 0)],
                            UNSET)
    waited = np.zeros(graph.task_count, dtype=bool)
    waited[graph.edges["dst"][graph.edges_of_kind(DepKind.EVENT_WAIT)]] = True
    held = np.zeros(graph.task_count, dtype=bool)
    held[unexplained] = True
    usable = (launches.launch_task >= 0) & ~waited[gpu] & ~held[gpu]
    call_start = tasks["measured_start_ns"][launches.launch_task[usable]]
    latency, gap = calibrate.launch_latency_and_gap(
        call_start, tasks["measured_start_ns"][gpu[usable]], previous_end[usable]
    )
    graph.calibration.launch_latency_ns, graph.calibration.kernel_gap_ns = int(latency), int(gap)
    graph.edges["latency_ns"][graph.edges_of_kind(DepKind.EVENT_WAIT)] = gap
    return GpuConstants(latency, gap)


def stream_order(graph: Graph, gpu: np.ndarray, launches: Launches, started_early: np.ndarray,
                 constants: GpuConstants) -> None:
    """Each stream's work in its recorded order, a kernel gap apart (none after early work)."""
    has = launches.stream_previous >= 0
    gap = np.where(started_early[gpu[has]], 0, constants.kernel_gap)
    graph.add_edges(launches.stream_previous[has], gpu[has], DepKind.STREAM_ORDER, latency_ns=gap)


def launch_edges(graph: Graph, gpu: np.ndarray, launches: Launches,
                 constants: GpuConstants) -> None:
    """Each piece of GPU work a launch latency after its call begins; a graph launch's work as
    it started relative to the call (`_graph_launches`)."""
    launched = (launches.launch_task >= 0) & ~launches.graph_launched
    graph.add_edges(
        launches.launch_task[launched], gpu[launched], DepKind.LAUNCH,
        latency_ns=constants.launch_latency, from_start=True
    )
    if launches.graph_launched.any():
        _graph_launches(graph, gpu, launches, constants)


def _graph_launches(graph: Graph, gpu: np.ndarray, launches: Launches,
                    constants: GpuConstants) -> None:
    """A graph launch (cudaGraphLaunch, hipGraphLaunch) submits its nodes while
    the call runs. Work that began after the call returned follows the call's end
    (by as long as its first piece did, at most a launch latency: the call's time
    is the launch's host work); work that began during the call, after the GPU had
    sat idle for it, began when the call had submitted it: that long after the
    call began; other work of the call no earlier than its first piece did."""
    tasks = graph.tasks
    chosen = np.flatnonzero(launches.graph_launched)
    calls, work = launches.launch_task[chosen], gpu[chosen]
    start = tasks["measured_start_ns"][work]
    call_start, call_end = tasks["measured_start_ns"][calls], tasks["measured_end_ns"][calls]
    previous = launches.stream_previous[chosen]
    idle = start - np.where(previous >= 0, tasks["measured_end_ns"][np.maximum(previous, 0)],
                            UNSET // 2)
    after = start >= call_end
    # Per call, the first start of its work during the call and after it.
    _, call_index = np.unique(calls, return_inverse=True)
    first = np.full((2, call_index.max() + 1), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, (after.astype(np.int64), call_index), start)
    during, following = first[0][call_index], first[1][call_index]
    paced = ~after & (idle > constants.kernel_gap + PACED_NS)
    # Past the call's end, at most a launch latency: later than
    # that, the stream or an event held it, not the call.
    latency = np.where(after, np.minimum(following - call_end, constants.launch_latency),
                       np.where(paced, start, during) - call_start)
    for from_start, mine in ((False, after), (True, ~after)):
        if mine.any():
            graph.add_edges(calls[mine], work[mine], DepKind.LAUNCH,
                            latency_ns=np.maximum(latency[mine], 0), from_start=from_start)


def launch_queue(graph: Graph, gpu_tasks: np.ndarray, launches: Launches) -> None:
    """A launch waits until the work `depth + 1` launches back (on its device) has finished.

    The queue holds launches, not kernels: a graph launch
    (cudaGraphLaunch) that runs hundreds of kernels is one entry, and
    what it waits for is the last work of the launch `depth + 1` back."""
    tasks = graph.tasks
    launched = np.flatnonzero(launches.launch_task >= 0)
    if launched.size == 0:
        return
    gpu = gpu_tasks[launched]
    calls = launches.launch_task[launched]
    order = np.lexsort((tasks["measured_start_ns"][gpu], tasks["measured_start_ns"][calls]))
    gpu, calls = gpu[order], calls[order]
    first_of_call = np.ones(calls.size, dtype=bool)
    first_of_call[1:] = calls[1:] != calls[:-1]
    starts = np.flatnonzero(first_of_call)  # per launch: its first entry
    lasts = np.r_[starts[1:], calls.size] - 1  # and its last
    calls = calls[starts]
    names = tasks["name"][calls]
    quick = per_name(graph, calls, names, lambda d: int(np.percentile(d, 10)))
    work_end = np.maximum.reduceat(tasks["measured_end_ns"][gpu], starts)
    depth, blocked = calibrate.queue_depth(
        tasks["measured_start_ns"][calls], tasks["measured_end_ns"][calls], quick, work_end
    )
    graph.calibration.queue_depth = int(depth)
    graph.calibration.blocked_launches = blocked
    back = depth + 1
    if calls.size <= back:
        return
    index = np.arange(back, calls.size)
    awaited = gpu[lasts[index - back]]
    graph.add_edges(awaited, calls[index], DepKind.LAUNCH_QUEUE)
    # A launch the queue held back keeps only the usual own time of launches that were not held.
    held = np.zeros(calls.size, dtype=bool)
    held[index] = tasks["measured_end_ns"][awaited] > tasks["measured_start_ns"][calls[index]]
    usual = per_name(graph, calls, names, lambda d: int(np.median(d)), among=~held,
                     fallback=quick)
    held_calls = calls[held]
    tasks["duration_ns"][held_calls] = np.minimum(tasks["duration_ns"][held_calls], usual[held])


def per_name(graph: Graph, calls: np.ndarray, names: np.ndarray,
             statistic: Callable[[np.ndarray], Any], among: np.ndarray | None = None,
             fallback: np.ndarray | None = None) -> np.ndarray:
    """`statistic` of the recorded durations of calls with the same
    name (optionally only `among` them)."""
    durations = graph.tasks["duration_ns"][calls]
    result = np.zeros(calls.size, dtype=np.int64) if fallback is None else fallback.copy()
    for name in np.unique(names).tolist():
        mine = names == name
        chosen = mine if among is None else mine & among
        if chosen.any():
            result[mine] = statistic(durations[chosen])
    return result
