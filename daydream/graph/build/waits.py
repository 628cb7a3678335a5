"""Rule 5: a stream that waits for an event (cudaStreamWaitEvent) holds its next work back until
the work recorded on the other stream has finished: GPU -> GPU edges."""

from __future__ import annotations

import numpy as np

from daydream.graph.build.index import History, LaunchIndex, next_launch
from daydream.graph.build.launches import UNSET
from daydream.graph.build.tasks import Tasks
from daydream.graph.model import DepKind, Graph, ResourceKind
from daydream.trace import NO_VALUE
from daydream.trace.runtime_api import CallRole

#: `_recorded_side`'s answer for a wait on the stream it holds back: no edge.
SAME_STREAM = -2


def event_waits(graph: Graph, tasks: Tasks, index: LaunchIndex) -> np.ndarray:
    """GPU -> GPU edges for stream waits (their latency set once the kernel gap is known);
    returns the held-back work whose wait the trace does not name."""
    waits = index.calls_of_role(CallRole.STREAM_WAIT)
    if waits.size == 0:
        return np.zeros(0, dtype=np.int64)
    columns, calibration = graph.tasks, graph.calibration
    single_stream = _single_stream_devices(graph)
    sources, targets, unexplained = [], [], []
    for wait in waits.tolist():
        resource = int(columns["resource"][wait])
        start = int(columns["measured_start_ns"][wait])
        held_back = _held_back(graph, index, index.thread_launches.get(resource), start)
        if held_back is None:
            continue
        source = SAME_STREAM if single_stream else _recorded_side(graph, index, wait, resource)
        if source == SAME_STREAM:
            calibration.event_waits_trivial += 1
            continue
        if source is None:
            # The recorded side is unknown: keep the order of the
            # other streams' preceding work, not its time.
            unexplained.append(held_back)
            calibration.event_waits_pinned += 1
            source = _last_finished_elsewhere(graph, index, held_back, start)
        else:
            calibration.event_waits_derived += 1
        if source is not None:
            sources.append(source)
            targets.append(held_back)
    graph.add_edges(sources, targets, DepKind.EVENT_WAIT)
    if calibration.event_waits_pinned:
        graph.notes.append(
            f"{calibration.event_waits_pinned} stream waits have no known recorded side "
            "(no event record or cuda_sync names it): the GPU work they held back keeps the "
            "order of the other streams' preceding work, and the rest of its recorded wait is "
            "an unexplained delay"
        )
    return np.array(unexplained, dtype=np.int64)


def _single_stream_devices(graph: Graph) -> bool:
    """Whether every device ran its work on one stream (a stream wait then orders nothing)."""
    streams_per_device: dict[int, set[int]] = {}
    for stream_resource in graph.resources:
        if stream_resource.kind is ResourceKind.GPU_STREAM:
            streams_per_device.setdefault(stream_resource.device,
                                          set()).add(stream_resource.stream)
    return all(len(s) <= 1 for s in streams_per_device.values())


def _last_finished_elsewhere(graph: Graph, index: LaunchIndex, held_back: int,
                             wait_start: int) -> int | None:
    """The GPU work launched on another stream of the device before
    the wait that finished last before `held_back` started (in the
    recording): the order an unnamed event most likely kept."""
    tasks = graph.tasks
    own = graph.resources[int(tasks["resource"][held_back])]
    limit = int(tasks["measured_start_ns"][held_back])
    best, best_end = None, UNSET
    for resource, (starts, gpu) in index.stream_launches.items():
        other = graph.resources[resource]
        if resource == int(tasks["resource"][held_back]) or other.device != own.device:
            continue
        k = int(np.searchsorted(starts, wait_start, side="left"))
        launched = gpu[:k]
        ends = tasks["measured_end_ns"][launched]
        done = np.flatnonzero(ends <= limit)
        if done.size and int(ends[done[-1]]) > best_end:
            best, best_end = int(launched[done[-1]]), int(ends[done[-1]])
    return best


def _held_back(graph: Graph, index: LaunchIndex, history: History | None,
               time: int) -> int | None:
    """The GPU work a wait holds back: the first work launched after it, by any thread, on the
    stream of this thread's next launch (the stream it waits on)."""
    following = next_launch(history, time)
    if following is None:
        return None
    stream = int(graph.tasks["resource"][following])
    first = next_launch(index.stream_launches.get(stream), time)
    return first if first is not None else following


def _recorded_side(graph: Graph, index: LaunchIndex, wait: int, resource: int) -> int | None:
    """The GPU task the wait must follow; SAME_STREAM when the wait is on
    the same stream (no edge); None if unknown."""
    tasks = graph.tasks
    history = index.thread_launches.get(resource)
    start = int(tasks["measured_start_ns"][wait])
    waiting = next_launch(history, start)
    waiting_stream = (graph.resources[int(tasks["resource"][waiting])].stream
                      if waiting is not None else None)
    record = index.sync_record(wait)
    if record is not None:
        table = index.trace.tables["sync"]
        record_call = index.call_by_correlation.get(
            int(table["wait_on_event_record_correlation"][record]))
        stream = int(table["wait_on_stream"][record])
        if record_call is None or stream == NO_VALUE:
            return None
        if stream == waiting_stream:
            return SAME_STREAM
        record_time = int(tasks["measured_start_ns"][record_call]) + 1
    else:
        latest = index.latest_record_before(wait)
        if latest is None:
            return None
        record_time = int(tasks["measured_start_ns"][latest])
        recorded_stream = index.recent_stream(history, record_time)
        if recorded_stream is None or recorded_stream == waiting_stream:
            return SAME_STREAM
        stream = recorded_stream
    found = index.last_launched_per_stream(record_time, stream)
    return found[0] if found else SAME_STREAM
