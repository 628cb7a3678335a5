"""Building the dependency graph of one rank from its linked trace.

The rules, with the reasons behind them, are in docs/replay-model.md. `build_graph` applies
them in this order, each a method with explicit inputs and outputs:

- `_tasks`: host calls (or top-level CPU ops), GPU work, iteration markers (the linked trace →
  tasks)
- `_link_gpu_work`: 3. launch, each GPU task's launching call (tasks → `launch_task`)
- `_early_starts`: 2. work that began before its stream's earlier work ended runs after it
  (tasks → trimmed durations)
- `_blocking_calls`: 4. a blocking call = call + completion, waiting for its GPU work
  (launches → completions, unexplained completions)
- `_host_order`: 1. program order on host threads, after completions (completions → edges)
- `_event_waits`: 5. cross-stream event waits (launches → edges, unexplained held-back work)
- `_unlinked_gpu_work`: work launched before the window, unlinked work, a single rank's
  collectives (launches → unexplained GPU work)
- `_calibrate_gpu`: launch latency and kernel gap from work nothing else held back (all
  unexplained so far → constants)
- `_stream_order`, `_launches`: 2. stream order, 3. launch edges (constants → edges)
- `_launch_queue`: 7. the launch queue (launches → edges, trimmed held launches)
- `_cross_thread`: 6. the autograd thread's bursts (completions → edges)
- `_iterations`, `_host_gaps`: iteration of each task; CPU time between host tasks (host edges
  → gaps)
- `_relative_delays`: what the trace cannot explain becomes a relative delay (every
  unexplained task → delays, anchors)

The last step is the only place a recorded start time enters the graph, and it enters as a
delay after the task's readiness, never as a timestamp (graph.model).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from daydream.errors import TraceFormatError
from daydream.graph import calibrate
from daydream.graph.model import (
    EDGE_COLUMNS,
    HOST_TASKS,
    TASK_COLUMNS,
    Calibration,
    DepKind,
    Graph,
    Resource,
    ResourceKind,
    TaskKind,
    empty_columns,
)
from daydream.graph.order import topological_or_partial, topological_order
from daydream.graph.timing import forward_times
from daydream.mapping import Links, attribute, find_iterations, link
from daydream.mapping.attribution import AUTOGRAD_ENGINE_PREFIX
from daydream.mapping.collectives import collectives_of
from daydream.mapping.linking import nearest_earlier_at_least
from daydream.trace import API_KINDS, GPU_ACTIVITY_KINDS, NO_VALUE, EventKind, Trace, TrackKind
from daydream.trace.runtime_api import CallRole, role_of

UNSET = np.iinfo(np.int64).min
#: A blocking call that returned this long before the work it would wait for finished did not wait
#: for it (host and GPU clocks of one trace agree far better than this).
RETURNED_EARLY_NS = 1_000
#: A graph's node that began this long past its stream's previous work (beyond the kernel gap)
#: waited for the graph launch to submit it.
PACED_NS = 1_000
#: The roles of calls that wait for GPU work whatever they launched.
_WAITING_ROLES = (CallRole.DEVICE_SYNC, CallRole.STREAM_SYNC, CallRole.EVENT_SYNC,
                  CallRole.BLOCKING_COPY)
#: An autograd backward function, as 2021-format traces name the autograd thread's ops
#: (AddmmBackward, ReluBackward1).
BACKWARD_FUNCTION = re.compile(r"^[A-Z]\w*Backward\d*$")
#: Calls that do nothing but wait: their time after the awaited work ends is the return latency.
PURE_WAITS = (CallRole.STREAM_SYNC, CallRole.EVENT_SYNC)

# A copy into pageable host memory returns only once the data is there; one from pageable
# memory returns once the data is staged, before the transfer itself finishes.
PAGEABLE_COPY = re.compile(r"-> Pageable|DtoH \(Pageable", re.IGNORECASE)

_GPU_TASK_KIND = {
    EventKind.KERNEL: TaskKind.KERNEL,
    EventKind.MEMCPY: TaskKind.MEMCPY,
    EventKind.MEMSET: TaskKind.MEMSET,
    EventKind.COMMUNICATION: TaskKind.COLLECTIVE,
    # gloo's work on its own CPU thread, placed like GPU work
    EventKind.HOST_COMMUNICATION: TaskKind.COLLECTIVE,
}


def pinned_collectives_note(count: int) -> str:
    """The note a graph carries while `count` of its collectives are a
    single rank's (see graph.job for matched ones)."""
    return (f"{count} collectives of a single rank: each lasts its transfer (shortest instance), "
            "and its wait for the other ranks is a delay that scales with the work since the ranks "
            "last met (replay with every rank to derive it)")


def build_graph(trace: Trace, links: Links | None = None) -> Graph:
    """The dependency graph of one rank. See the module docstring for the rules."""
    return _Builder(trace, links if links is not None else link(trace)).build()


class _Builder:
    def __init__(self, trace: Trace, links: Links) -> None:
        self.trace = trace
        self.links = links
        self.calibration = Calibration()  # the graph's: what the builder measures and counts
        self.notes: list[str] = []  # the graph's: what the builder could not derive
        self.names = trace.strings
        self.is_gpu_track = trace.track_is_gpu()

    def _refuse_cycles(self) -> None:
        """Edges derived from a sound trace go forward in time; a cycle
        means ids the trace reuses or damaged."""
        graph = self.graph
        behind = graph.task_count - topological_or_partial(graph.task_count, graph.edges["src"],
                                                           graph.edges["dst"]).size
        if behind:
            raise TraceFormatError(self.trace.meta.source, "its dependencies form a cycle "
                                                           f"({behind} tasks on or behind it)",
                                   "correlation, flow or event ids are inconsistent; the trace is "
                                   "damaged")

    # ------------------------------------------------------------------ tasks

    def build(self) -> Graph:
        self._tasks()
        if self.graph.task_count == 0:
            categories = list(self.trace.meta.categories.items())[:5]
            found = ", ".join(f"{cat} {n}" for cat, n in categories) or "nothing"
            raise TraceFormatError(self.trace.meta.source, "nothing to simulate: no CPU op, "
                                   f"runtime call or GPU work (found: {found})",
                                   "record with torch.profiler's CPU and CUDA activities")
        self._link_gpu_work()
        self._early_starts()
        completion, unknown_syncs = self._blocking_calls()
        self._host_order(completion)
        held_back = self._event_waits()
        unexplained = np.unique(np.concatenate([unknown_syncs, held_back,
                                                self._unlinked_gpu_work()]))
        self._calibrate_gpu(unexplained)
        self._stream_order()
        self._launches()
        self._launch_queue()
        self._cross_thread(completion)
        self._iterations()
        self._host_gaps()
        self._refuse_cycles()
        self._relative_delays(unexplained)
        return self.graph

    def _tasks(self) -> None:
        """The tasks: host calls (or top-level CPU ops) and GPU work,
        attributed; iteration markers."""
        trace = self.trace
        host_rows = self._host_rows()
        gpu_rows = trace.indices(*GPU_ACTIVITY_KINDS, EventKind.HOST_COMMUNICATION)
        rows = np.concatenate([host_rows, gpu_rows])
        self.resources, resource_of_track = self._resources(rows)
        tasks = empty_columns(TASK_COLUMNS, rows.size)
        tasks["event"] = rows
        tasks["resource"] = resource_of_track[trace.track[rows]]
        tasks["name"] = trace.name[rows]
        tasks["measured_start_ns"] = trace.ts_ns[rows]
        tasks["measured_end_ns"] = trace.end_ns[rows]
        tasks["duration_ns"] = trace.dur_ns[rows]
        tasks["bytes"] = np.maximum(trace.bytes[rows], 0)
        tasks["iteration"][:] = -1
        attribution = attribute(trace, self.links)
        tasks["layer"] = attribution.layer[rows]
        tasks["phase"] = attribution.phase[rows]
        host_kind = np.where(np.isin(trace.kind[host_rows], [int(k) for k in API_KINDS]),
                             TaskKind.HOST_CALL, TaskKind.HOST_OP)
        gpu_kind = np.array([_GPU_TASK_KIND[EventKind(int(k))] for k in trace.kind[gpu_rows]],
                            dtype=np.int8)
        tasks["kind"] = np.concatenate([host_kind.astype(np.int8), gpu_kind])
        self.graph = Graph(tasks=tasks, edges=empty_columns(EDGE_COLUMNS), resources=self.resources,
                           strings=list(self.names), layers=list(attribution.layers),
                           calibration=self.calibration, notes=self.notes)
        self.task_of_event = np.full(len(trace), -1, dtype=np.int64)
        self.task_of_event[rows] = np.arange(rows.size)
        self._collective_sizes()
        self.host_tasks = np.arange(host_rows.size)
        self.gpu_tasks = np.arange(host_rows.size, rows.size)
        self.iterations = find_iterations(trace)
        self.main_resource = self._annotation_resource()
        self._iteration_markers()

    def _host_rows(self) -> np.ndarray:
        """API calls on threads that make them; top-level CPU ops on threads that make none."""
        trace = self.trace
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

    def _iteration_markers(self) -> None:
        """A zero-duration host task at every iteration boundary, on the thread that annotated it.

        The host time before a boundary becomes the marker's gap, so a what-if that
        changes host time moves the boundary with it.
        """
        graph, iterations, resource = self.graph, self.iterations, self.main_resource
        if not iterations or resource is None:
            return
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
        # Markers first, so that a marker sorts before a task starting at the same instant.
        self.host_tasks = np.concatenate([ids, self.host_tasks])

    def _annotation_resource(self) -> int | None:
        """The host thread holding the iteration annotations (the main
        thread), else the busiest host thread."""
        trace, iterations = self.trace, self.iterations
        if iterations and iterations[0].source != "whole_trace":
            rows = trace.indices(EventKind.ANNOTATION, EventKind.CPU_OP)
            tracks = set(trace.track[rows[trace.ts_ns[rows] == iterations[0].start_ns]].tolist())
            for index, resource in enumerate(self.resources):
                if resource.track in tracks and resource.kind is ResourceKind.HOST_THREAD:
                    return index
        host = self.graph.tasks["resource"][self.host_tasks]
        return int(np.bincount(host).argmax()) if host.size else None

    def _resources(self, rows: np.ndarray) -> tuple[list[Resource], np.ndarray]:
        trace = self.trace
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

    # ------------------------------------------------------------------ calibration

    def _link_gpu_work(self) -> None:
        """Each GPU task's launching call task and its predecessor on its stream."""
        tasks = self.graph.tasks
        rows = tasks["event"][self.gpu_tasks]
        launch_rows = self.links.launch[rows]
        self.launch_task = np.where(launch_rows >= 0,
                                    self.task_of_event[np.maximum(launch_rows, 0)], -1)
        self.stream_previous = self._previous_on_resource(self.gpu_tasks)
        graph_launches = [i for i, name in enumerate(self.names)
                          if self._roles[name] is CallRole.GRAPH_LAUNCH]
        self.graph_launched = (self.launch_task >= 0) & np.isin(
            tasks["name"][np.maximum(self.launch_task, 0)], graph_launches)

    def _early_starts(self) -> None:
        """GPU work that began before the work before it on its stream had ended (a kernel launched
        early, as programmatic dependent launch lets it, or a graph's nodes that the trace puts on
        one stream) did its own work
        after that: its duration is trimmed to the time past the stream's latest end so far, and the
        stream stays serial, so that its busy time is the union of what it ran, as recorded;
        launched already, it follows that work without the stream's gap between kernels."""
        tasks = self.graph.tasks
        gpu = self.gpu_tasks
        order = gpu[np.lexsort((tasks["measured_start_ns"][gpu], tasks["resource"][gpu]))]
        ends = tasks["measured_end_ns"][order]
        resource = tasks["resource"][order]
        trimmed = 0
        self.early = np.zeros(self.graph.task_count, dtype=bool)
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
                self.early[chosen] = True
                trimmed += int(early.sum())
        self.calibration.early_starts = trimmed

    def _calibrate_gpu(self, unexplained: np.ndarray) -> None:
        """Launch latency and inter-kernel gap, from GPU work nothing
        else held back (no event wait, no pin)."""
        tasks = self.graph.tasks
        gpu = self.gpu_tasks
        previous_end = np.where(self.stream_previous >= 0,
                                tasks["measured_end_ns"][np.maximum(self.stream_previous, 0)],
                                UNSET)
        waited = np.zeros(self.graph.task_count, dtype=bool)
        waited[self.graph.edges["dst"][self.graph.edges_of_kind(DepKind.EVENT_WAIT)]] = True
        held = np.zeros(self.graph.task_count, dtype=bool)
        held[unexplained] = True
        usable = (self.launch_task >= 0) & ~waited[gpu] & ~held[gpu]
        call_start = tasks["measured_start_ns"][self.launch_task[usable]]
        latency, gap = calibrate.launch_latency_and_gap(
            call_start, tasks["measured_start_ns"][gpu[usable]], previous_end[usable]
        )
        self.calibration.launch_latency_ns, self.calibration.kernel_gap_ns = int(latency), int(gap)
        self.launch_latency, self.kernel_gap = latency, gap
        self.graph.edges["latency_ns"][self.graph.edges_of_kind(DepKind.EVENT_WAIT)] = gap

    def _previous_on_resource(self, task_ids: np.ndarray) -> np.ndarray:
        """For each task, the previous task (by recorded start) on its resource, or -1."""
        tasks = self.graph.tasks
        order = np.lexsort((tasks["measured_start_ns"][task_ids], tasks["resource"][task_ids]))
        ordered = task_ids[order]
        previous = np.full(task_ids.size, -1, dtype=np.int64)
        same = tasks["resource"][ordered[1:]] == tasks["resource"][ordered[:-1]]
        previous_sorted = np.full(ordered.size, -1, dtype=np.int64)
        previous_sorted[1:][same] = ordered[:-1][same]
        previous[order] = previous_sorted
        return previous

    # ------------------------------------------------------------------ blocking calls

    def _blocking_calls(self) -> tuple[np.ndarray, np.ndarray]:
        """Split every blocking call into call + completion.

        Returns the completion task of each task (-1 for none), and the completions whose wait the
        trace cannot explain (an event sync whose event is not named).
        """
        _trace, tasks = self.trace, self.graph.tasks
        host = self.host_tasks
        host = host[tasks["kind"][host] == TaskKind.HOST_CALL]
        # Only calls that may block are looked at one by one: a sync or blocking copy by name, or a
        # call that launched a copy (a pageable copy blocks whatever the call's name).
        waits = np.array([self._roles[name] in _WAITING_ROLES for name in self.names], dtype=bool)
        copies = (tasks["kind"][self.gpu_tasks] == TaskKind.MEMCPY) & (self.launch_task >= 0)
        launched_copy = np.zeros(self.graph.task_count, dtype=bool)
        launched_copy[self.launch_task[copies]] = True
        host = host[waits[tasks["name"][host]] | launched_copy[host]]
        names = [self.names[int(i)] for i in tasks["name"][host]]
        awaited: list[tuple[int, list[int], bool]] = []  # (call task, awaited gpu tasks, derivable)
        launches_by_thread = self._launch_history
        sync_records = self._sync_records()
        ends = tasks["measured_end_ns"]
        for call, name in zip(host.tolist(), names):
            targets = self._awaited(call, name, launches_by_thread, sync_records)
            if targets is None:
                continue
            gpu_targets, _ = targets
            if gpu_targets and int(ends[gpu_targets].max()) > int(ends[call]) + RETURNED_EARLY_NS:
                # It returned while that work was still running, so it did
                # not wait for it: e.g. ROCm's hipFree of a block the
                # allocator reuses, which does not synchronize the device.
                self.calibration.blocking_calls_not_waiting += 1
                continue
            awaited.append((call, *targets))
        completion = np.full(self.graph.task_count, -1, dtype=np.int64)
        if not awaited:
            return completion, np.zeros(0, dtype=np.int64)
        self.calibration.blocking_calls = len(awaited)
        return self._add_completions(awaited, completion)

    @cached_property
    def _launch_history(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per host resource: (call start times, GPU task) of its launches, in call order."""
        tasks = self.graph.tasks
        launched = np.flatnonzero(self.launch_task >= 0)
        gpu = self.gpu_tasks[launched]
        calls = self.launch_task[launched]
        history = {}
        call_resource = tasks["resource"][calls]
        for resource in np.unique(call_resource).tolist():
            mine = call_resource == resource
            order = np.lexsort((tasks["measured_start_ns"][gpu[mine]],
                                tasks["measured_start_ns"][calls[mine]]))
            history[resource] = (tasks["measured_start_ns"][calls[mine]][order], gpu[mine][order])
        return history

    def _sync_records(self) -> dict[int, int]:
        """cuda_sync records by their correlation id -> row in the sync table."""
        table = self.trace.tables.get("sync", {})
        if not table or table["event"].size == 0:
            return {}
        correlations = self.trace.correlation[table["event"]]
        return {int(c): i for i, c in enumerate(correlations.tolist()) if c != NO_VALUE}

    def _awaited(
        self, call: int, name: str, history: dict[int, tuple[np.ndarray, np.ndarray]],
        sync_records: dict[int, int]
    ) -> tuple[list[int], bool] | None:
        """The GPU tasks a blocking call waits for (and whether that is
        derivable), or None if it does not block."""
        tasks = self.graph.tasks
        start = int(tasks["measured_start_ns"][call])
        resource = int(tasks["resource"][call])
        role = self._roles[name]
        if role is CallRole.DEVICE_SYNC:
            return self._last_launched_per_stream(start, None), True
        if role is CallRole.STREAM_SYNC:
            stream = self._sync_stream(call, sync_records)
            if stream is None:
                stream = self._recent_stream(history.get(resource), start)
            return ((self._last_launched_per_stream(start, stream), True) if stream is not None
                    else ([], True))
        if role is CallRole.EVENT_SYNC:
            targets = self._event_sync_targets(call, sync_records)
            # Without a cuda_sync record the event's stream is unknown (a
            # record call names no stream): the wait becomes an unexplained
            # delay rather than a guess from the thread's current stream.
            return (targets, True) if targets is not None else ([], False)
        own_copies = self._launched_by(call)
        if role is CallRole.BLOCKING_COPY:
            return own_copies, True
        if own_copies and all(
            tasks["kind"][t] == TaskKind.MEMCPY
            and PAGEABLE_COPY.search(self.names[int(tasks["name"][t])]) for t in own_copies
        ):
            return own_copies, True
        return None

    @cached_property
    def _roles(self) -> dict[str, CallRole]:
        """The role of every API call name of the trace (CUDA and HIP
        alike), decided once per name."""
        return {name: role_of(name) for name in set(self.names)}

    @cached_property
    def _gpu_work_by_call(self) -> tuple[np.ndarray, np.ndarray]:
        """(launching calls, sorted; their GPU tasks in the same
        order), GPU tasks of one call in task order."""
        launched = self.launch_task >= 0
        order = np.argsort(self.launch_task[launched], kind="stable")
        return self.launch_task[launched][order], self.gpu_tasks[launched][order]

    def _launched_by(self, call: int) -> list[int]:
        calls, work = self._gpu_work_by_call
        return work[np.searchsorted(calls, call,
                                    "left"):np.searchsorted(calls, call, "right")].tolist()

    def _sync_stream(self, call: int, sync_records: dict[int, int]) -> int | None:
        record = sync_records.get(int(self.trace.correlation[self.graph.tasks["event"][call]]))
        if record is None:
            return None
        stream = int(self.trace.tables["sync"]["wait_on_stream"][record])
        if stream == NO_VALUE:
            row = int(self.trace.tables["sync"]["event"][record])
            stream = self.trace.tracks[int(self.trace.track[row])].stream
        return stream if stream != NO_VALUE else None

    def _recent_stream(self, history: tuple[np.ndarray, np.ndarray] | None,
                       time: int) -> int | None:
        """The stream of the thread's most recent launch before `time` (its current stream)."""
        if history is None:
            return None
        starts, gpu = history
        k = int(np.searchsorted(starts, time, side="left")) - 1
        if k < 0:
            return None
        return self.resources[int(self.graph.tasks["resource"][gpu[k]])].stream

    @cached_property
    def _stream_launches(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per GPU stream: (launch call start times, GPU task) of the
        work launched on it, in launch order."""
        tasks = self.graph.tasks
        launched = np.flatnonzero(self.launch_task >= 0)
        gpu = self.gpu_tasks[launched]
        call_start = tasks["measured_start_ns"][self.launch_task[launched]]
        per_stream = {}
        resources = tasks["resource"][gpu]
        for resource in np.unique(resources).tolist():
            mine = resources == resource
            order = np.lexsort((tasks["measured_start_ns"][gpu[mine]], call_start[mine]))
            per_stream[resource] = (call_start[mine][order], gpu[mine][order])
        return per_stream

    def _last_launched_per_stream(self, time: int, stream: int | None) -> list[int]:
        """The last GPU task launched (by any thread) before `time` on
        each stream (or on `stream`)."""
        targets = []
        for resource, (starts, gpu) in self._stream_launches.items():
            if stream is not None and self.resources[resource].stream != stream:
                continue
            k = int(np.searchsorted(starts, time, side="left")) - 1
            if k >= 0:
                targets.append(int(gpu[k]))
        return targets

    def _event_sync_targets(self, call: int, sync_records: dict[int, int]) -> list[int] | None:
        record = sync_records.get(int(self.trace.correlation[self.graph.tasks["event"][call]]))
        if record is None:
            return None
        table = self.trace.tables["sync"]
        record_correlation = int(table["wait_on_event_record_correlation"][record])
        stream = int(table["wait_on_stream"][record])
        record_call = self._api_call_by_correlation(record_correlation)
        if record_call is None or stream == NO_VALUE:
            return None
        return self._last_launched_per_stream(
            int(self.graph.tasks["measured_start_ns"][record_call]) + 1, stream)

    @cached_property
    def _host_calls(self) -> np.ndarray:
        return self.host_tasks[self.graph.tasks["kind"][self.host_tasks] == TaskKind.HOST_CALL]

    @cached_property
    def _event_records(self) -> np.ndarray:
        record_name = np.array([self._roles[s] is CallRole.EVENT_RECORD for s in self.names],
                               dtype=bool)
        return self._host_calls[record_name[self.graph.tasks["name"][self._host_calls]]]

    def _latest_record_before(self, call: int) -> int | None:
        tasks = self.graph.tasks
        records = self._event_records
        mine = records[(tasks["resource"][records] == tasks["resource"][call])
                       & (tasks["measured_start_ns"][records] < tasks["measured_start_ns"][call])]
        return int(mine[np.argmax(tasks["measured_start_ns"][mine])]) if mine.size else None

    @cached_property
    def _call_by_correlation(self) -> dict[int, int]:
        rows = self.graph.tasks["event"][self._host_calls]
        return dict(zip(self.trace.correlation[rows].tolist(), self._host_calls.tolist()))

    def _api_call_by_correlation(self, correlation: int) -> int | None:
        return self._call_by_correlation.get(correlation)

    def _add_completions(self, awaited: list[tuple[int, list[int], bool]],
                         completion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tasks = self.graph.tasks
        calls = np.array([a[0] for a in awaited], dtype=np.int64)
        call_start = tasks["measured_start_ns"][calls]
        call_end = tasks["measured_end_ns"][calls]
        awaited_end = np.array(
            [max((int(tasks["measured_end_ns"][t]) for t in targets), default=UNSET)
             for _, targets, _ in awaited], dtype=np.int64
        )
        waited = awaited_end > call_start
        # The usual return latency, from the calls that only wait
        # (synchronize calls): frees and blocking copies may keep working
        # after the wait (ROCm's hipFree unmaps memory for milliseconds).
        tail = np.where(waited, call_end - awaited_end, 0)
        pure = np.array([self._roles[self.names[int(n)]] in PURE_WAITS
                         for n in tasks["name"][calls]], dtype=bool)
        ret = calibrate.median_or(tail[waited & pure], calibrate.DEFAULT_SYNC_RETURN_NS)
        own = calibrate.median_or(call_end[~waited] - call_start[~waited],
                                  calibrate.DEFAULT_SYNC_OWN_NS)
        self.calibration.sync_return_ns, self.calibration.sync_own_ns = int(ret), int(own)
        # A call that waited keeps only its own time; the wait is re-derived by the completion.
        # One that had nothing to wait for spent all of its recorded time on its own work.
        waited_calls = calls[waited]
        tasks["duration_ns"][waited_calls] = np.minimum(tasks["duration_ns"][waited_calls], own)
        # What a call did after its work finished, beyond the usual return
        # latency, is its own work (ROCm's hipFree unmaps memory for
        # milliseconds once the device is idle): the completion's duration.
        return_ns = np.where(waited, np.clip(tail, 0, ret), ret)
        after_ns = np.where(waited, np.maximum(tail - return_ns, 0), 0)
        ids = self.graph.add_tasks(
            kind=TaskKind.COMPLETION, resource=tasks["resource"][calls], name=tasks["name"][calls],
            duration_ns=after_ns, measured_start_ns=call_end - after_ns, measured_end_ns=call_end,
            layer=tasks["layer"][calls], phase=tasks["phase"][calls])
        completion = np.concatenate([completion, np.full(ids.size, -1, dtype=np.int64)])
        completion[calls] = ids
        self.graph.add_edges(calls, ids, DepKind.SYNC)
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
                name = self.names[int(tasks["name"][call])]
                unknown[name] = unknown.get(name, 0) + 1
            sources.extend(gpu_targets)
            targets.extend([done] * len(gpu_targets))
            latencies.extend([latency] * len(gpu_targets))
        for name, count in unknown.items():
            self.notes.append(f"{count} {name} calls wait on something the trace does not name: "
                              "their waits are unexplained delays that scale with the iteration's "
                              "progress")
        self.calibration.blocking_calls_pinned = sum(unknown.values())
        self.graph.add_edges(sources, targets, DepKind.SYNC,
                             latency_ns=np.array(latencies, dtype=np.int64))
        return completion, np.array(unexplained, dtype=np.int64)

    # ------------------------------------------------------------------ order edges

    def _host_order(self, completion: np.ndarray) -> None:
        host = self.host_tasks
        previous = self._previous_on_resource(host)
        has = previous >= 0
        source = previous[has]
        source = np.where(completion[source] >= 0, completion[source], source)
        self.graph.add_edges(source, host[has], DepKind.HOST_ORDER)

    def _stream_order(self) -> None:
        has = self.stream_previous >= 0
        gap = np.where(self.early[self.gpu_tasks[has]], 0, self.kernel_gap)
        self.graph.add_edges(self.stream_previous[has], self.gpu_tasks[has], DepKind.STREAM_ORDER,
                             latency_ns=gap)

    def _launches(self) -> None:
        """Each piece of GPU work a launch latency after its call begins; a graph launch's work as
        it started relative to the call (`_graph_launches`)."""
        launched = (self.launch_task >= 0) & ~self.graph_launched
        self.graph.add_edges(
            self.launch_task[launched], self.gpu_tasks[launched], DepKind.LAUNCH,
            latency_ns=self.launch_latency, from_start=True
        )
        if self.graph_launched.any():
            self._graph_launches()

    def _graph_launches(self) -> None:
        """A graph launch (cudaGraphLaunch, hipGraphLaunch) submits its nodes while
        the call runs. Work that began after the call returned follows the call's end
        (by as long as its first piece did, at most a launch latency: the call's time
        is the launch's host work); work that began during the call, after the GPU had
        sat idle for it, began when the call had submitted it: that long after the
        call began; other work of the call no earlier than its first piece did."""
        tasks = self.graph.tasks
        chosen = np.flatnonzero(self.graph_launched)
        calls, work = self.launch_task[chosen], self.gpu_tasks[chosen]
        start = tasks["measured_start_ns"][work]
        call_start, call_end = tasks["measured_start_ns"][calls], tasks["measured_end_ns"][calls]
        previous = self.stream_previous[chosen]
        idle = start - np.where(previous >= 0, tasks["measured_end_ns"][np.maximum(previous, 0)],
                                UNSET // 2)
        after = start >= call_end
        # Per call, the first start of its work during the call and after it.
        _, call_index = np.unique(calls, return_inverse=True)
        first = np.full((2, call_index.max() + 1), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, (after.astype(np.int64), call_index), start)
        during, following = first[0][call_index], first[1][call_index]
        paced = ~after & (idle > self.kernel_gap + PACED_NS)
        # Past the call's end, at most a launch latency: later than
        # that, the stream or an event held it, not the call.
        latency = np.where(after, np.minimum(following - call_end, self.launch_latency),
                           np.where(paced, start, during) - call_start)
        for from_start, mine in ((False, after), (True, ~after)):
            if mine.any():
                self.graph.add_edges(calls[mine], work[mine], DepKind.LAUNCH,
                                     latency_ns=np.maximum(latency[mine], 0), from_start=from_start)

    def _launch_queue(self) -> None:
        """A launch waits until the work `depth + 1` launches back (on its device) has finished.

        The queue holds launches, not kernels: a graph launch
        (cudaGraphLaunch) that runs hundreds of kernels is one entry, and
        what it waits for is the last work of the launch `depth + 1` back."""
        tasks = self.graph.tasks
        launched = np.flatnonzero(self.launch_task >= 0)
        if launched.size == 0:
            return
        gpu = self.gpu_tasks[launched]
        calls = self.launch_task[launched]
        order = np.lexsort((tasks["measured_start_ns"][gpu], tasks["measured_start_ns"][calls]))
        gpu, calls = gpu[order], calls[order]
        first_of_call = np.ones(calls.size, dtype=bool)
        first_of_call[1:] = calls[1:] != calls[:-1]
        starts = np.flatnonzero(first_of_call)  # per launch: its first entry
        lasts = np.r_[starts[1:], calls.size] - 1  # and its last
        launches = calls[starts]
        names = tasks["name"][launches]
        quick = self._per_name(launches, names, lambda d: int(np.percentile(d, 10)))
        work_end = np.maximum.reduceat(tasks["measured_end_ns"][gpu], starts)
        depth, blocked = calibrate.queue_depth(
            tasks["measured_start_ns"][launches], tasks["measured_end_ns"][launches], quick,
            work_end
        )
        self.calibration.queue_depth = int(depth)
        self.calibration.blocked_launches = blocked
        back = depth + 1
        if launches.size <= back:
            return
        index = np.arange(back, launches.size)
        awaited = gpu[lasts[index - back]]
        self.graph.add_edges(awaited, launches[index], DepKind.LAUNCH_QUEUE)
        # A launch the queue held back keeps only the usual own time of launches that were not held.
        held = np.zeros(launches.size, dtype=bool)
        held[index] = (
            tasks["measured_end_ns"][awaited] > tasks["measured_start_ns"][launches[index]])
        usual = self._per_name(launches, names, lambda d: int(np.median(d)), among=~held,
                               fallback=quick)
        held_calls = launches[held]
        tasks["duration_ns"][held_calls] = np.minimum(tasks["duration_ns"][held_calls], usual[held])

    def _per_name(self, calls: np.ndarray, names: np.ndarray,
                  statistic: Callable[[np.ndarray], Any], among: np.ndarray | None = None,
                  fallback: np.ndarray | None = None) -> np.ndarray:
        """`statistic` of the recorded durations of calls with the same
        name (optionally only `among` them)."""
        durations = self.graph.tasks["duration_ns"][calls]
        result = np.zeros(calls.size, dtype=np.int64) if fallback is None else fallback.copy()
        for name in np.unique(names).tolist():
            mine = names == name
            chosen = mine if among is None else mine & among
            if chosen.any():
                result[mine] = statistic(durations[chosen])
        return result

    # ------------------------------------------------------------------ cross-stream waits

    def _event_waits(self) -> np.ndarray:
        """GPU -> GPU edges for stream waits; returns the held-back
        work whose wait the trace does not name."""
        waits = self._stream_wait_calls()
        if waits.size == 0:
            return np.zeros(0, dtype=np.int64)
        tasks = self.graph.tasks
        single_stream = self._single_stream_devices()
        history = self._launch_history
        sync_records = self._sync_records()
        sources, targets, unexplained = [], [], []
        for wait in waits.tolist():
            resource = int(tasks["resource"][wait])
            start = int(tasks["measured_start_ns"][wait])
            held_back = self._held_back(history.get(resource), start)
            if held_back is None:
                continue
            source = (-2 if single_stream
                      else self._recorded_side(wait, resource, history, sync_records))
            if source == -2:
                self.calibration.event_waits_trivial += 1
                continue
            if source is None:
                # The recorded side is unknown: keep the order of the
                # other streams' preceding work, not its time.
                unexplained.append(held_back)
                self.calibration.event_waits_pinned += 1
                source = self._last_finished_elsewhere(held_back, start)
            else:
                self.calibration.event_waits_derived += 1
            if source is not None:
                sources.append(source)
                targets.append(held_back)
        # latency set once the gap is calibrated
        self.graph.add_edges(sources, targets, DepKind.EVENT_WAIT)
        if self.calibration.event_waits_pinned:
            self.notes.append(
                f"{self.calibration.event_waits_pinned} stream waits have no known recorded side "
                "(no event record or cuda_sync names it): the GPU work they held back keeps the "
                "order of the other streams' preceding work, and the rest of its recorded wait is "
                "an unexplained delay"
            )
        return np.array(unexplained, dtype=np.int64)

    def _stream_wait_calls(self) -> np.ndarray:
        """The host calls that make a stream wait for an event
        (cudaStreamWaitEvent, hipStreamWaitEvent)."""
        tasks = self.graph.tasks
        host = self.host_tasks[tasks["kind"][self.host_tasks] == TaskKind.HOST_CALL]
        wait_name = np.array([self._roles[s] is CallRole.STREAM_WAIT for s in self.names],
                             dtype=bool)
        return host[wait_name[tasks["name"][host]]]

    def _single_stream_devices(self) -> bool:
        """Whether every device ran its work on one stream (a stream wait then orders nothing)."""
        streams_per_device: dict[int, set[int]] = {}
        for stream_resource in self.resources:
            if stream_resource.kind is ResourceKind.GPU_STREAM:
                streams_per_device.setdefault(stream_resource.device,
                                              set()).add(stream_resource.stream)
        return all(len(s) <= 1 for s in streams_per_device.values())

    def _last_finished_elsewhere(self, held_back: int, wait_start: int) -> int | None:
        """The GPU work launched on another stream of the device before
        the wait that finished last before `held_back` started (in the
        recording): the order an unnamed event most likely kept."""
        tasks = self.graph.tasks
        own = self.resources[int(tasks["resource"][held_back])]
        limit = int(tasks["measured_start_ns"][held_back])
        best, best_end = None, UNSET
        for resource, (starts, gpu) in self._stream_launches.items():
            other = self.resources[resource]
            if resource == int(tasks["resource"][held_back]) or other.device != own.device:
                continue
            k = int(np.searchsorted(starts, wait_start, side="left"))
            launched = gpu[:k]
            ends = tasks["measured_end_ns"][launched]
            done = np.flatnonzero(ends <= limit)
            if done.size and int(ends[done[-1]]) > best_end:
                best, best_end = int(launched[done[-1]]), int(ends[done[-1]])
        return best

    def _held_back(self, history: tuple[np.ndarray, np.ndarray] | None, time: int) -> int | None:
        """The GPU work a wait holds back: the first work launched after it, by any thread, on the
        stream of this thread's next launch (the stream it waits on)."""
        following = self._next_launch(history, time)
        if following is None:
            return None
        stream = int(self.graph.tasks["resource"][following])
        first = self._next_launch(self._stream_launches.get(stream), time)
        return first if first is not None else following

    def _next_launch(self, history: tuple[np.ndarray, np.ndarray] | None, time: int) -> int | None:
        if history is None:
            return None
        starts, gpu = history
        k = int(np.searchsorted(starts, time, side="right"))
        return int(gpu[k]) if k < starts.size else None

    def _recorded_side(
        self, wait: int, resource: int, history: dict[int, tuple[np.ndarray, np.ndarray]],
        sync_records: dict[int, int],
    ) -> int | None:
        """The GPU task the wait must follow; -2 when the wait is on
        the same stream (no edge); None if unknown."""
        tasks = self.graph.tasks
        start = int(tasks["measured_start_ns"][wait])
        waiting = self._next_launch(history.get(resource), start)
        waiting_stream = (self.resources[int(tasks["resource"][waiting])].stream
                          if waiting is not None else None)
        record = sync_records.get(int(self.trace.correlation[tasks["event"][wait]]))
        if record is not None:
            table = self.trace.tables["sync"]
            record_call = self._api_call_by_correlation(
                int(table["wait_on_event_record_correlation"][record]))
            stream = int(table["wait_on_stream"][record])
            if record_call is None or stream == NO_VALUE:
                return None
            if stream == waiting_stream:
                return -2
            found = self._last_launched_per_stream(int(tasks["measured_start_ns"][record_call]) + 1,
                                                   stream)
            return found[0] if found else -2
        latest = self._latest_record_before(wait)
        if latest is None:
            return None
        record_call = latest
        record_time = int(tasks["measured_start_ns"][record_call])
        recorded_stream = self._recent_stream(history.get(resource), record_time)
        if recorded_stream is None or recorded_stream == waiting_stream:
            return -2
        found = self._last_launched_per_stream(record_time, recorded_stream)
        return found[0] if found else -2

    # ------------------------------------------------------------------ threads

    def _autograd_threads(self) -> list[int]:
        """Host resources running PyTorch's autograd engine: its ops are
        autograd::engine::evaluate_function: ..., or, in 2021-format traces, the backward functions
        themselves (AddmmBackward, NllLossBackward, ...)."""
        trace = self.trace
        engine = np.array([s.startswith(AUTOGRAD_ENGINE_PREFIX) or bool(BACKWARD_FUNCTION.search(s))
                           for s in trace.strings],
                          dtype=bool)
        rows = trace.indices(EventKind.CPU_OP)
        tracks = set(np.unique(trace.track[rows[engine[trace.name[rows]]]]).tolist())
        return ([i for i, r in enumerate(self.resources) if r.kind is ResourceKind.HOST_THREAD
                 and r.track in tracks])

    def _cross_thread(self, completion: np.ndarray) -> None:
        """The autograd thread's bursts run while the main thread is blocked in backward().

        A burst (the autograd thread's tasks between two consecutive main-thread
        tasks) starts after the main thread's task before it, and the main thread
        resumes after the burst. Other threads get no cross-thread edges: nothing
        in the trace says what they wait for.
        """
        tasks = self.graph.tasks
        main = self.main_resource
        if main is None:
            return
        host = self.host_tasks
        resources = tasks["resource"][host]
        main_tasks = host[resources == main]
        if main_tasks.size == 0:
            return
        main_start = tasks["measured_start_ns"][main_tasks]
        main_end_ref = np.where(completion[main_tasks] >= 0, completion[main_tasks], main_tasks)
        sources, targets = [], []
        for resource in self._autograd_threads():
            if resource == main:
                continue
            other = host[resources == resource]
            other = other[np.argsort(tasks["measured_start_ns"][other], kind="stable")]
            # Index of the first main-thread task starting after each task of the other thread.
            after = np.searchsorted(main_start, tasks["measured_start_ns"][other], side="right")
            burst_starts = np.flatnonzero(np.r_[True, after[1:] != after[:-1]])
            burst_ends = np.r_[burst_starts[1:], other.size] - 1
            for first, last in zip(burst_starts.tolist(), burst_ends.tolist()):
                k = int(after[first])
                if k == 0 or k >= main_tasks.size:
                    continue
                before_task, after_task = int(main_end_ref[k - 1]), int(main_tasks[k])
                last_end = int(tasks["measured_end_ns"][other[last]])
                if last_end > int(tasks["measured_start_ns"][after_task]):
                    continue  # the main thread did not wait for this burst
                sources += [before_task, int(other[last]) if completion[other[last]] < 0
                            else int(completion[other[last]])]
                targets += [int(other[first]), after_task]
                self.calibration.cross_thread_bursts += 1
        self.graph.add_edges(sources, targets, DepKind.CROSS_THREAD)

    # ------------------------------------------------------------------ pins, iterations, gaps

    def _unlinked_gpu_work(self) -> np.ndarray:
        """The GPU work whose start the trace cannot explain: launched
        before the window, launched by no call in the trace, or a single
        rank's collective (its time includes waiting for the others)."""
        tasks = self.graph.tasks
        gpu = self.gpu_tasks
        rows = tasks["event"][gpu]
        orphan = self.links.orphan[rows]
        unlinked = (self.launch_task < 0) & ~orphan
        collective = tasks["kind"][gpu] == TaskKind.COLLECTIVE
        self.calibration.pinned_orphans = int(orphan.sum())
        self.calibration.pinned_unlinked = int(unlinked.sum())
        self.calibration.pinned_collectives = int(collective.sum())
        if collective.any():
            self.notes.append(pinned_collectives_note(int(collective.sum())))
        return gpu[orphan | unlinked | collective]

    def _relative_delays(self, chosen: np.ndarray) -> None:
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
        tasks = self.graph.tasks
        if chosen.size == 0:
            return
        tasks["unexplained"][chosen] = True
        anchors = self._anchor_edges(chosen)
        self._refuse_cycles()  # an anchor behind its task: ids or times the trace damaged
        pins = np.full(self.graph.task_count, UNSET, dtype=np.int64)
        pins[chosen] = tasks["measured_start_ns"][chosen]
        order = topological_order(self.graph.task_count, self.graph.edges["src"],
                                  self.graph.edges["dst"], tasks["measured_start_ns"])
        start, end, ready = forward_times(self.graph, order, pins)
        tasks["delay_ns"][chosen] = start[chosen] - ready[chosen] + self._collective_transfers(
            chosen)
        anchored = anchors >= 0
        span = ready[chosen[anchored]] - end[anchors[anchored]]
        tasks["delay_span_ns"][chosen[anchored]] = np.maximum(span, 0)

    def _anchor_edges(self, chosen: np.ndarray) -> np.ndarray:
        """The point each chosen task's delay is measured from, joined to it by a
        DELAY_ANCHOR edge: for a collective, the end of the previous collective on
        its stream (the last time the ranks met), else the start marker of its
        iteration. Returns each chosen task's anchor (-1: none, a fixed delay)."""
        tasks = self.graph.tasks
        anchors = np.full(chosen.size, -1, dtype=np.int64)
        markers = self.graph.iteration_markers
        if markers:
            iteration = tasks["iteration"][chosen]
            inside = (iteration >= 0) & (iteration < len(markers))
            starts = np.array([a for a, _ in markers], dtype=np.int64)
            anchors[inside] = starts[iteration[inside]]
        is_collective = np.flatnonzero(tasks["kind"][chosen] == TaskKind.COLLECTIVE)
        collectives = chosen[is_collective]
        previous = self._previous_on_resource(collectives)
        anchors[is_collective[previous >= 0]] = previous[previous >= 0]
        has = anchors >= 0
        self.graph.add_edges(anchors[has], chosen[has], DepKind.DELAY_ANCHOR)
        return anchors

    def _collective_transfers(self, chosen: np.ndarray) -> np.ndarray:
        """A single rank's collectives last their transfer; returns, per chosen task, the rest of
        its recorded time (the wait for the other ranks; 0 for tasks that are not collectives)."""
        tasks = self.graph.tasks
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

    def _collective_sizes(self) -> None:
        """A collective's payload from its metadata (elements x dtype),
        where the trace records it."""
        info = collectives_of(self.trace)
        sized = info.message_bytes >= 0
        self.graph.tasks["bytes"][self.task_of_event[info.rows[sized]]] = info.message_bytes[sized]

    def _iterations(self) -> None:
        """Host tasks belong to the iteration whose span holds their
        start; GPU work to its launcher's."""
        tasks, iterations = self.graph.tasks, self.iterations
        if not iterations:
            return
        bounds = np.array([it.start_ns for it in iterations] + [iterations[-1].end_ns],
                          dtype=np.int64)
        host = np.flatnonzero(np.isin(tasks["kind"], [int(k) for k in HOST_TASKS]))
        index = np.searchsorted(bounds, tasks["measured_start_ns"][host], side="right") - 1
        inside = (index >= 0) & (index < len(iterations))
        tasks["iteration"][host[inside]] = index[inside]
        gpu = self.gpu_tasks
        launched = self.launch_task >= 0
        tasks["iteration"][gpu[launched]] = tasks["iteration"][self.launch_task[launched]]
        unlaunched = gpu[~launched]
        index = np.searchsorted(bounds, tasks["measured_start_ns"][unlaunched], side="right") - 1
        inside = (index >= 0) & (index < len(iterations))
        tasks["iteration"][unlaunched[inside]] = index[inside]

    def _host_gaps(self) -> None:
        """gap = recorded start - latest recorded finish of the host
        tasks it waited for (never negative)."""
        tasks, edges = self.graph.tasks, self.graph.edges
        host_edges = np.flatnonzero(
            (edges["kind"] == DepKind.HOST_ORDER) | (edges["kind"] == DepKind.CROSS_THREAD))
        src, dst = edges["src"][host_edges], edges["dst"][host_edges]
        latest = np.full(self.graph.task_count, UNSET, dtype=np.int64)
        np.maximum.at(latest, dst, tasks["measured_end_ns"][src])
        has = latest != UNSET
        gap = np.zeros(self.graph.task_count, dtype=np.int64)
        gap[has] = np.maximum(tasks["measured_start_ns"][has] - latest[has], 0)
        tasks["gap_ns"] = gap
