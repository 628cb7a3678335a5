"""The lookups the sync and wait rules share: the launches of a host thread and of a GPU stream
in launch order, the GPU work of a call, calls by correlation id, the cuda_sync records."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from daydream.graph.build.launches import Launches
from daydream.graph.build.tasks import Tasks
from daydream.graph.model import Graph, TaskKind
from daydream.trace import NO_VALUE, Trace
from daydream.trace.runtime_api import CallRole

#: (call start times, GPU task) of launches, in launch order.
History = tuple[np.ndarray, np.ndarray]


class LaunchIndex:
    """Lookups over one graph's launches, each built on first use. It reads only what the rules
    do not change: the tasks' recorded times, resources, names and launching calls."""

    def __init__(self, trace: Trace, graph: Graph, tasks: Tasks, launches: Launches) -> None:
        self.trace, self.graph, self.launches = trace, graph, launches
        self.host_tasks, self.gpu_tasks = tasks.host_tasks, tasks.gpu_tasks
        self.roles = launches.roles

    @cached_property
    def thread_launches(self) -> dict[int, History]:
        """Per host resource: (call start times, GPU task) of its launches, in call order."""
        tasks = self.graph.tasks
        launched = np.flatnonzero(self.launches.launch_task >= 0)
        gpu = self.gpu_tasks[launched]
        calls = self.launches.launch_task[launched]
        history = {}
        call_resource = tasks["resource"][calls]
        for resource in np.unique(call_resource).tolist():
            mine = call_resource == resource
            order = np.lexsort((tasks["measured_start_ns"][gpu[mine]],
                                tasks["measured_start_ns"][calls[mine]]))
            history[resource] = (tasks["measured_start_ns"][calls[mine]][order], gpu[mine][order])
        return history

    @cached_property
    def stream_launches(self) -> dict[int, History]:
        """Per GPU stream: (launch call start times, GPU task) of the
        work launched on it, in launch order."""
        tasks = self.graph.tasks
        launched = np.flatnonzero(self.launches.launch_task >= 0)
        gpu = self.gpu_tasks[launched]
        call_start = tasks["measured_start_ns"][self.launches.launch_task[launched]]
        per_stream = {}
        resources = tasks["resource"][gpu]
        for resource in np.unique(resources).tolist():
            mine = resources == resource
            order = np.lexsort((tasks["measured_start_ns"][gpu[mine]], call_start[mine]))
            per_stream[resource] = (call_start[mine][order], gpu[mine][order])
        return per_stream

    @cached_property
    def sync_records(self) -> dict[int, int]:
        """cuda_sync records by their correlation id -> row in the sync table."""
        table = self.trace.tables.get("sync", {})
        if not table or table["event"].size == 0:
            return {}
        correlations = self.trace.correlation[table["event"]]
        return {int(c): i for i, c in enumerate(correlations.tolist()) if c != NO_VALUE}

    def sync_record(self, call: int) -> int | None:
        """The cuda_sync record of host call `call`, if the trace has one."""
        return self.sync_records.get(int(self.trace.correlation[self.graph.tasks["event"][call]]))

    @cached_property
    def _gpu_work_by_call(self) -> tuple[np.ndarray, np.ndarray]:
        """(launching calls, sorted; their GPU tasks in the same
        order), GPU tasks of one call in task order."""
        launch_task = self.launches.launch_task
        launched = launch_task >= 0
        order = np.argsort(launch_task[launched], kind="stable")
        return launch_task[launched][order], self.gpu_tasks[launched][order]

    def launched_by(self, call: int) -> list[int]:
        """The GPU tasks call `call` launched."""
        calls, work = self._gpu_work_by_call
        first, last = np.searchsorted(calls, call, "left"), np.searchsorted(calls, call, "right")
        return work[first:last].tolist()

    def sync_stream(self, call: int) -> int | None:
        """The stream a stream-sync call waits on, from its cuda_sync record."""
        record = self.sync_record(call)
        if record is None:
            return None
        stream = int(self.trace.tables["sync"]["wait_on_stream"][record])
        if stream == NO_VALUE:
            row = int(self.trace.tables["sync"]["event"][record])
            stream = self.trace.tracks[int(self.trace.track[row])].stream
        return stream if stream != NO_VALUE else None

    def recent_stream(self, history: History | None, time: int) -> int | None:
        """The stream of the thread's most recent launch before `time` (its current stream)."""
        if history is None:
            return None
        starts, gpu = history
        k = int(np.searchsorted(starts, time, side="left")) - 1
        if k < 0:
            return None
        return self.graph.resources[int(self.graph.tasks["resource"][gpu[k]])].stream

    def last_launched_per_stream(self, time: int, stream: int | None) -> list[int]:
        """The last GPU task launched (by any thread) before `time` on
        each stream (or on `stream`)."""
        targets = []
        for resource, (starts, gpu) in self.stream_launches.items():
            if stream is not None and self.graph.resources[resource].stream != stream:
                continue
            k = int(np.searchsorted(starts, time, side="left")) - 1
            if k >= 0:
                targets.append(int(gpu[k]))
        return targets

    def event_sync_targets(self, call: int) -> list[int] | None:
        """The GPU work an event-sync call waits for, from its cuda_sync record; None without
        one."""
        record = self.sync_record(call)
        if record is None:
            return None
        table = self.trace.tables["sync"]
        record_correlation = int(table["wait_on_event_record_correlation"][record])
        stream = int(table["wait_on_stream"][record])
        record_call = self.call_by_correlation.get(record_correlation)
        if record_call is None or stream == NO_VALUE:
            return None
        return self.last_launched_per_stream(
            int(self.graph.tasks["measured_start_ns"][record_call]) + 1, stream)

    @cached_property
    def host_calls(self) -> np.ndarray:
        """The host tasks that are API calls."""
        return self.host_tasks[self.graph.tasks["kind"][self.host_tasks] == TaskKind.HOST_CALL]

    def calls_of_role(self, role: CallRole) -> np.ndarray:
        """The host calls whose name has `role`."""
        named = np.array([self.roles[s] is role for s in self.trace.strings], dtype=bool)
        return self.host_calls[named[self.graph.tasks["name"][self.host_calls]]]

    @cached_property
    def _event_records(self) -> np.ndarray:
        return self.calls_of_role(CallRole.EVENT_RECORD)

    def latest_record_before(self, call: int) -> int | None:
        """The last event-record call of `call`'s thread before it."""
        tasks = self.graph.tasks
        records = self._event_records
        mine = records[(tasks["resource"][records] == tasks["resource"][call])
                       & (tasks["measured_start_ns"][records] < tasks["measured_start_ns"][call])]
        return int(mine[np.argmax(tasks["measured_start_ns"][mine])]) if mine.size else None

    @cached_property
    def call_by_correlation(self) -> dict[int, int]:
        """Host calls by their correlation id."""
        rows = self.graph.tasks["event"][self.host_calls]
        return dict(zip(self.trace.correlation[rows].tolist(), self.host_calls.tolist()))


def next_launch(history: History | None, time: int) -> int | None:
    """The first GPU task of `history` launched after `time`."""
    if history is None:
        return None
    starts, gpu = history
    k = int(np.searchsorted(starts, time, side="right"))
    return int(gpu[k]) if k < starts.size else None
