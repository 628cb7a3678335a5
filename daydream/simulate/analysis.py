"""Where the time of an iteration went, and which tasks bound it (the critical path).

Both work on any timeline of a graph: the recorded one (`recorded_timeline`)
or a simulated one, so that they can be shown side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import GPU_WORK, Timeline
from daydream.intervals import Coverage
from daydream.simulate.bound import binding_edges


def recorded_timeline(graph: Graph) -> Timeline:
    """The timeline as the trace recorded it (blocking calls with their waiting included)."""
    return Timeline(graph.tasks["measured_start_ns"].copy(), graph.tasks["measured_end_ns"].copy())


@dataclass(slots=True)
class Breakdown:
    """Time of one iteration window, ns."""

    window_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int  # the GPU had nothing to run: waiting on the host
    host_waiting_on_gpu_ns: int  # blocking calls waiting for GPU work
    communication_ns: int  # collectives running

    def as_dict(self) -> dict[str, int]:
        return {
            "window_ns": self.window_ns,
            "gpu_busy_ns": self.gpu_busy_ns,
            "gpu_idle_ns": self.gpu_idle_ns,
            "host_waiting_on_gpu_ns": self.host_waiting_on_gpu_ns,
            "communication_ns": self.communication_ns,
        }


class Breakdowns:
    """Where the time of any window of one timeline went: GPU busy, host waiting, communication.

    The intervals are merged once (`Coverage`), so each window costs O(log n), not a pass over
    every task: a summary of thousands of iterations stays linear in the trace.
    `recorded` says whether `timeline` is the trace's own.
    """

    def __init__(self, graph: Graph, timeline: Timeline, recorded: bool) -> None:
        kinds = graph.tasks["kind"]
        gpu = np.isin(kinds, [int(k) for k in GPU_WORK])
        collective = kinds == TaskKind.COLLECTIVE
        self.busy = Coverage(timeline.start_ns[gpu], timeline.end_ns[gpu])
        self.communication = Coverage(timeline.start_ns[collective], timeline.end_ns[collective])
        self.waiting = Coverage(*_host_waits(graph, timeline, recorded))

    def window(self, window_start: int, window_end: int) -> Breakdown:
        busy = self.busy.within(window_start, window_end)
        return Breakdown(
            window_ns=window_end - window_start,
            gpu_busy_ns=busy,
            gpu_idle_ns=(window_end - window_start) - busy,
            host_waiting_on_gpu_ns=self.waiting.within(window_start, window_end),
            communication_ns=self.communication.within(window_start, window_end),
        )


def breakdown(graph: Graph, timeline: Timeline, window_start: int, window_end: int,
              recorded: bool) -> Breakdown:
    """Where the window's time went (one window; `Breakdowns` for many)."""
    return Breakdowns(graph, timeline, recorded).window(window_start, window_end)


def _host_waits(graph: Graph, timeline: Timeline, recorded: bool) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every blocking call's wait for the GPU."""
    sync = graph.edges_of_kind(DepKind.SYNC)
    kinds = graph.tasks["kind"]
    src, dst = graph.edges["src"][sync], graph.edges["dst"][sync]
    mine = (kinds[src] == TaskKind.HOST_CALL) & (kinds[dst] == TaskKind.COMPLETION)
    calls, completions = src[mine], dst[mine]
    if recorded:
        # The recorded call spans its own time and its wait; the completion is its end.
        wait_start = timeline.start_ns[calls] + graph.tasks["duration_ns"][calls]
    else:
        wait_start = timeline.end_ns[calls]
    wait_end = timeline.start_ns[completions]
    return wait_start, np.maximum(wait_end, wait_start)


@dataclass(slots=True)
class CriticalPath:
    """The chain of tasks that bound an iteration, newest first, and its time by kind."""

    tasks: list[int]
    by_kind_ns: dict[str, int]
    host_gap_ns: int  # CPU work between host tasks on the path
    top_tasks: list[tuple[str, str, int]]  # (kind, name, ns on the path), largest first


def critical_path(graph: Graph, timeline: Timeline, window_start: int, window_end: int,
                  top: int = 10) -> CriticalPath:
    """Walk back from the last task to finish inside the window along binding dependencies."""
    tasks = graph.tasks
    inside = np.flatnonzero((timeline.end_ns <= window_end) & (timeline.end_ns > window_start))
    if inside.size == 0:
        return CriticalPath([], {}, 0, [])
    current = int(inside[np.argmax(timeline.end_ns[inside])])
    binding = binding_edges(graph, timeline)
    path: list[int] = []
    by_kind: dict[str, int] = {}
    per_task: dict[tuple[str, str], int] = {}
    gap_total = 0
    while current >= 0 and timeline.end_ns[current] > window_start:
        path.append(current)
        kind = TaskKind(int(tasks["kind"][current])).name.lower()
        own = int(min(timeline.end_ns[current],
                      window_end) - max(timeline.start_ns[current], window_start))
        by_kind[kind] = by_kind.get(kind, 0) + max(own, 0)
        key = (kind, graph.task_name(current))
        per_task[key] = per_task.get(key, 0) + max(own, 0)
        edge = int(binding.edge[current])
        if edge < 0:
            break
        if binding.host_edge[edge]:
            gap_total += int(graph.tasks["gap_ns"][current])
        current = int(graph.edges["src"][edge])
    if gap_total:
        by_kind["host gap (cpu work)"] = gap_total
    ranked = sorted(((k, n, t) for (k, n), t in per_task.items()), key=lambda item: -item[2])[:top]
    return CriticalPath(path, by_kind, gap_total, ranked)

