"""Rule 4: a blocking call (a synchronize, a blocking copy, a call whose pageable copy blocks)
becomes the call and a completion that waits for the GPU work it awaited."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from daydream.graph import calibrate
from daydream.graph.build.index import LaunchIndex
from daydream.graph.build.launches import UNSET, Launches
from daydream.graph.build.tasks import Tasks
from daydream.graph.model import DepKind, Graph, TaskKind
from daydream.trace import Trace
from daydream.trace.runtime_api import CallRole

#: A blocking call that returned this long before the work it would wait for finished did not wait
#: for it (host and GPU clocks of one trace agree far better than this).
RETURNED_EARLY_NS = 1_000
#: The roles of calls that wait for GPU work whatever they launched.
_WAITING_ROLES = (CallRole.DEVICE_SYNC, CallRole.STREAM_SYNC, CallRole.EVENT_SYNC,
                  CallRole.BLOCKING_COPY)
#: Calls that do nothing but wait: their time after the awaited work ends is the return latency.
PURE_WAITS = (CallRole.STREAM_SYNC, CallRole.EVENT_SYNC)
# A copy into pageable host memory returns only once the data is there; one from pageable
# memory returns once the data is staged, before the transfer itself finishes.
PAGEABLE_COPY = re.compile(r"-> Pageable|DtoH \(Pageable", re.IGNORECASE)

#: A blocking call, the GPU tasks it awaited, and whether the trace says which they are.
Awaited = tuple[int, list[int], bool]


@dataclass(frozen=True)
class Completions:
    """Per task, its completion task (-1: none); the completions whose wait the trace cannot
    explain (an event sync whose event is not named)."""

    completion: np.ndarray
    unexplained: np.ndarray


def blocking_calls(trace: Trace, graph: Graph, tasks: Tasks, launches: Launches,
                   index: LaunchIndex) -> Completions:
    """Split every blocking call into call + completion."""
    columns, names = graph.tasks, trace.strings
    host = tasks.host_tasks
    host = host[columns["kind"][host] == TaskKind.HOST_CALL]
    # Only calls that block are looked at one by one: a sync or blocking copy by name, or a call
    # that launched only pageable copies (such a copy blocks whatever the call's name).
    waits = np.array([launches.roles[name] in _WAITING_ROLES for name in names], dtype=bool)
    host = host[waits[columns["name"][host]] | _launched_only_pageable_copies(graph, tasks,
                                                                              launches)[host]]
    awaited: list[Awaited] = []
    ends = columns["measured_end_ns"]
    for call in host.tolist():
        targets = _awaited(graph, index, call, names[int(columns["name"][call])])
        gpu_targets, _ = targets
        if gpu_targets and int(ends[gpu_targets].max()) > int(ends[call]) + RETURNED_EARLY_NS:
            # It returned while that work was still running, so it did
            # not wait for it: e.g. ROCm's hipFree of a block the
            # allocator reuses, which does not synchronize the device.
            graph.calibration.blocking_calls_not_waiting += 1
            continue
        awaited.append((call, *targets))
    completion = np.full(graph.task_count, -1, dtype=np.int64)
    if not awaited:
        return Completions(completion, np.zeros(0, dtype=np.int64))
    graph.calibration.blocking_calls = len(awaited)
    return _add_completions(graph, awaited, completion, index)


def _launched_only_pageable_copies(graph: Graph, tasks: Tasks, launches: Launches) -> np.ndarray:
    """Per task: a call whose launched GPU work is all copies from or to pageable memory (such a
    call blocks whatever its name, waiting for its own copies)."""
    columns = graph.tasks
    launched = launches.launch_task >= 0
    pageable = np.array([bool(PAGEABLE_COPY.search(text)) for text in graph.strings], dtype=bool)
    gpu = tasks.gpu_tasks
    blocks = (columns["kind"][gpu] == TaskKind.MEMCPY) & pageable[columns["name"][gpu]]
    found = np.zeros(graph.task_count, dtype=bool)
    found[launches.launch_task[launched & blocks]] = True
    found[launches.launch_task[launched & ~blocks]] = False
    return found


def _awaited(graph: Graph, index: LaunchIndex, call: int, name: str) -> tuple[list[int], bool]:
    """The GPU tasks a blocking call waits for (and whether that is
    derivable)."""
    tasks = graph.tasks
    start = int(tasks["measured_start_ns"][call])
    resource = int(tasks["resource"][call])
    role = index.roles[name]
    if role is CallRole.DEVICE_SYNC:
        return index.last_launched_per_stream(start, None), True
    if role is CallRole.STREAM_SYNC:
        stream = index.sync_stream(call)
        if stream is None:
            stream = index.recent_stream(index.thread_launches.get(resource), start)
        return ((index.last_launched_per_stream(start, stream), True) if stream is not None
                else ([], True))
    if role is CallRole.EVENT_SYNC:
        targets = index.event_sync_targets(call)
        # Without a cuda_sync record the event's stream is unknown (a
        # record call names no stream): the wait becomes an unexplained
        # delay rather than a guess from the thread's current stream.
        return (targets, True) if targets is not None else ([], False)
    # a blocking copy by name, or a call `blocking_calls` chose because all it launched are
    # pageable copies (`_launched_only_pageable_copies`): it waits for its own copies
    return index.launched_by(call), True


def _add_completions(graph: Graph, awaited: list[Awaited], completion: np.ndarray,
                     index: LaunchIndex) -> Completions:
    """A completion task after each blocking call, waiting (SYNC edges) for the GPU work it
    awaited; the call keeps its own time."""
    tasks = graph.tasks
    calls = np.array([a[0] for a in awaited], dtype=np.int64)
    call_end = tasks["measured_end_ns"][calls]
    awaited_end = np.array(
        [max((int(tasks["measured_end_ns"][t]) for t in targets), default=UNSET)
         for _, targets, _ in awaited], dtype=np.int64
    )
    waited = awaited_end > tasks["measured_start_ns"][calls]
    tail = np.where(waited, call_end - awaited_end, 0)
    ret, own = _sync_constants(graph, index, calls, waited, tail)
    # A call that waited keeps only its own time; the wait is re-derived by the completion.
    # One that had nothing to wait for spent all of its recorded time on its own work.
    waited_calls = calls[waited]
    tasks["duration_ns"][waited_calls] = np.minimum(tasks["duration_ns"][waited_calls], own)
    # What a call did after its work finished, beyond the usual return latency, is its own work
    # (ROCm's hipFree unmaps memory for milliseconds once the device is idle): the completion's
    # duration.
    return_ns = np.where(waited, np.clip(tail, 0, ret), ret)
    after_ns = np.where(waited, np.maximum(tail - return_ns, 0), 0)
    ids = graph.add_tasks(
        kind=TaskKind.COMPLETION, resource=tasks["resource"][calls], name=tasks["name"][calls],
        duration_ns=after_ns, measured_start_ns=call_end - after_ns, measured_end_ns=call_end,
        layer=tasks["layer"][calls], phase=tasks["phase"][calls])
    completion = np.concatenate([completion, np.full(ids.size, -1, dtype=np.int64)])
    completion[calls] = ids
    graph.add_edges(calls, ids, DepKind.SYNC)
    sources, targets, latencies = [], [], []
    unknown: dict[str, int] = {}
    unexplained: list[int] = []
    for (call, gpu_targets, derivable), done, latency in zip(awaited, ids.tolist(),
                                                             return_ns.tolist()):
        if not derivable:
            # Its own time stays on the call; the rest of its
            # recorded time is an unexplained delay.
            tasks["duration_ns"][call] = min(int(tasks["duration_ns"][call]), own)
            unexplained.append(done)
            name = graph.strings[int(tasks["name"][call])]
            unknown[name] = unknown.get(name, 0) + 1
        sources.extend(gpu_targets)
        targets.extend([done] * len(gpu_targets))
        latencies.extend([latency] * len(gpu_targets))
    for name, count in unknown.items():
        graph.notes.append(f"{count} {name} calls wait on something the trace does not name: "
                           "their waits are unexplained delays that scale with the iteration's "
                           "progress")
    graph.calibration.blocking_calls_pinned = sum(unknown.values())
    graph.add_edges(sources, targets, DepKind.SYNC, latency_ns=np.array(latencies, dtype=np.int64))
    return Completions(completion, np.array(unexplained, dtype=np.int64))


def _sync_constants(graph: Graph, index: LaunchIndex, calls: np.ndarray, waited: np.ndarray,
                    tail: np.ndarray) -> tuple[int, int]:
    """(the usual return latency, the usual own time) of the blocking `calls`, ns: the first from
    the calls that only wait (synchronize calls; frees and blocking copies may keep working after
    the wait, as ROCm's hipFree unmaps memory for milliseconds), the second from the calls that
    had nothing to wait for. The graph's calibration keeps both."""
    tasks = graph.tasks
    pure = np.array([index.roles[graph.strings[int(n)]] in PURE_WAITS
                     for n in tasks["name"][calls]], dtype=bool)
    ret = calibrate.median_or(tail[waited & pure], calibrate.DEFAULT_SYNC_RETURN_NS)
    own_time = tasks["measured_end_ns"][calls] - tasks["measured_start_ns"][calls]
    own = calibrate.median_or(own_time[~waited], calibrate.DEFAULT_SYNC_OWN_NS)
    graph.calibration.sync_return_ns, graph.calibration.sync_own_ns = int(ret), int(own)
    return ret, own
