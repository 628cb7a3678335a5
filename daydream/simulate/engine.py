"""Discrete-event replay of a task graph.

Two engines, one semantics (see `daydream.graph.model` for the timing rule):

* `simulate(graph)`: the fast pass. Where program-order edges fix the order of
  every resource, a task's start depends only on its predecessors, so one pass
  in topological order over arrays computes every start and end (compiled with
  numba when available, well over a million tasks per second).
* `simulate_event_driven(graph, policies)`: an event loop with a heap, where a
  resource runs one task at a time and a queue policy (FIFO, priority,
  earliest-ready) picks the next ready task. It needs no program-order edges on
  the resources it schedules; where they are present it must agree with the
  fast pass exactly (tested).

Ties are broken by task id, never by dict order or wall-clock: runs are
deterministic. A task with no predecessors starts at its recorded start.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from daydream.graph.model import DepKind, Graph, ResourceKind, Timeline
from daydream.graph.order import topological_order
from daydream.graph.timing import delay_plain, forward_times, host_edge_mask

UNSET = np.iinfo(np.int64).min


def simulation_order(graph: Graph) -> np.ndarray:
    """A topological order close to the recorded one (ties by recorded start)."""
    return topological_order(graph.task_count, graph.edges["src"], graph.edges["dst"],
                             graph.tasks["measured_start_ns"])


def simulate(graph: Graph, order: np.ndarray | None = None) -> Timeline:
    """Replay `graph` in one pass over a topological order."""
    start, end, _ = forward_times(graph, simulation_order(graph) if order is None else order)
    return Timeline(start, end)


def simulate_reference(graph: Graph) -> Timeline:
    """The fast pass written plainly over Python lists, for tests and for reading."""
    order = simulation_order(graph).tolist()
    preds: list[list[int]] = [[] for _ in range(graph.task_count)]
    for e, dst in enumerate(graph.edges["dst"].tolist()):
        preds[dst].append(e)
    src = graph.edges["src"].tolist()
    is_host = host_edge_mask(graph).tolist()
    latency = graph.edges["latency_ns"].tolist()
    from_start = graph.edges["from_start"].tolist()
    gap = graph.tasks["gap_ns"].tolist()
    duration = graph.tasks["duration_ns"].tolist()
    delay = graph.tasks["delay_ns"].tolist()
    span = graph.tasks["delay_span_ns"].tolist()
    is_anchor = (graph.edges["kind"] == DepKind.DELAY_ANCHOR).tolist()
    measured = graph.tasks["measured_start_ns"].tolist()
    start: list[int] = [0] * graph.task_count
    end: list[int] = [0] * graph.task_count
    for v in order:
        host = [(start[src[e]] if from_start[e] else end[src[e]]) + latency[e] for e in preds[v]
                if is_host[e]]
        other = [(start[src[e]] if from_start[e] else end[src[e]]) + latency[e] for e in preds[v]
                 if not is_host[e]]
        anchors = [end[src[e]] for e in preds[v] if is_anchor[e]]
        candidates = ([max(host) + gap[v]] if host else []) + other
        start[v] = max(candidates) if candidates else measured[v]
        if delay[v] > 0:
            start[v] += delay_plain(delay[v], span[v], start[v], anchors[-1] if anchors else None)
        end[v] = start[v] + duration[v]
    return Timeline(np.array(start, dtype=np.int64), np.array(end, dtype=np.int64))


# --------------------------------------------------------------------------- event-driven engine

FIFO = "fifo"  # the task that became ready first (then the lowest id)
PRIORITY = "priority"  # the lowest priority value (then ready time, id)
EARLIEST_READY = "earliest-ready"  # the earliest possible start (then id)
POLICIES = (FIFO, PRIORITY, EARLIEST_READY)


def simulate_event_driven(
    graph: Graph,
    policies: dict[int, str] | None = None,
    priority: np.ndarray | None = None,
    exclusive_kinds: tuple[ResourceKind, ...] = (ResourceKind.GPU_STREAM, ResourceKind.COMM_CHANNEL,
                                                 ResourceKind.HOST_THREAD),
) -> Timeline:
    """Replay with per-resource queues: a resource runs one task at a
    time, its policy picks the next.

    `policies` maps a resource id to one of POLICIES (default FIFO); `priority`
    gives each task's priority for the PRIORITY policy (lower runs first).
    """
    policies = policies or {}
    for resource, policy in policies.items():
        if policy not in POLICIES:
            raise ValueError(f"resource {resource}: unknown queue policy {policy!r} (choose from "
                             f"{', '.join(POLICIES)})")
    n = graph.task_count
    priorities = (np.zeros(n, dtype=np.int64) if priority is None
                  else np.asarray(priority, dtype=np.int64))
    state = _EventState(graph, policies, priorities, exclusive_kinds)
    return state.run(n)


class _EventState:
    """Event loop state: per-task readiness, per-resource queues and clocks."""

    def __init__(self, graph: Graph, policies: dict[int, str], priority: np.ndarray,
                 exclusive: tuple[ResourceKind, ...]) -> None:
        self.graph = graph
        self.policies = policies
        self.priority = priority.tolist()
        n = graph.task_count
        self.src = graph.edges["src"].tolist()
        self.dst = graph.edges["dst"].tolist()
        self.latency = graph.edges["latency_ns"].tolist()
        self.from_start = graph.edges["from_start"].tolist()
        self.is_host = host_edge_mask(graph).tolist()
        self.gap = graph.tasks["gap_ns"].tolist()
        self.duration = graph.tasks["duration_ns"].tolist()
        self.delay = graph.tasks["delay_ns"].tolist()
        self.delay_span = graph.tasks["delay_span_ns"].tolist()
        self.is_anchor = (graph.edges["kind"] == DepKind.DELAY_ANCHOR).tolist()
        self.anchor: list[int | None] = [None] * n
        self.measured = graph.tasks["measured_start_ns"].tolist()
        self.resource = graph.tasks["resource"].tolist()
        self.exclusive = [r.kind in exclusive for r in graph.resources]
        self.out: list[list[int]] = [[] for _ in range(n)]
        self.waiting = [0] * n
        for e, (s, d) in enumerate(zip(self.src, self.dst)):
            self.out[s].append(e)
            self.waiting[d] += 1
        # A task's start needs its predecessors' starts (from_start edges) or ends; both are
        # known once every predecessor has *finished*, which is when it becomes ready.
        self.host_ready: list[int | None] = [None] * n
        self.other_ready: list[int | None] = [None] * n
        self.start = [0] * n
        self.end = [0] * n
        self.queues: dict[int, list[tuple[Any, ...]]] = {}
        self.busy_until: dict[int, int] = {}
        self.running: dict[int, bool] = {}
        self.events: list[tuple[int, int, int, int]] = []  # (time, order, kind, payload)
        self.sequence = 0

    def earliest_start(self, v: int) -> int:
        candidates = []
        if self.host_ready[v] is not None:
            candidates.append(self.host_ready[v] + self.gap[v])
        if self.other_ready[v] is not None:
            candidates.append(self.other_ready[v])
        ready = max(candidates) if candidates else self.measured[v]
        if self.delay[v] > 0:
            ready += delay_plain(self.delay[v], self.delay_span[v], ready, self.anchor[v])
        return ready

    def push_event(self, time: int, kind: int, payload: int) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, kind, self.sequence, payload))

    def run(self, n: int) -> Timeline:
        for v in range(n):
            if self.waiting[v] == 0:
                self.push_event(self.earliest_start(v), 1, v)
        done = 0
        while self.events:
            time, kind, _, payload = heapq.heappop(self.events)
            if kind == 0:  # a task finished: free its resource, release its successors
                done += 1
                self.finish(payload, time)
            else:  # a task is ready at `time`: queue it on its resource
                self.enqueue(payload, time)
            # Everything that happens at this instant is queued before a policy chooses.
            if not self.events or self.events[0][0] > time:
                self.dispatch_all(time)
        if done < n:
            raise ValueError(f"event-driven replay stopped with {n - done} tasks never ready (a "
                             "dependency cycle?)")
        return Timeline(np.array(self.start, dtype=np.int64), np.array(self.end, dtype=np.int64))

    def finish(self, v: int, time: int) -> None:
        resource = self.resource[v]
        if self.exclusive[resource]:
            self.running[resource] = False
        for e in self.out[v]:
            w = self.dst[e]
            ready = (self.start[v] if self.from_start[e] else self.end[v]) + self.latency[e]
            if self.is_anchor[e]:
                self.anchor[w] = self.end[v]
            if self.is_host[e]:
                self.host_ready[w] = (ready if self.host_ready[w] is None
                                      else max(self.host_ready[w], ready))
            else:
                self.other_ready[w] = (ready if self.other_ready[w] is None
                                       else max(self.other_ready[w], ready))
            self.waiting[w] -= 1
            if self.waiting[w] == 0:
                self.push_event(max(time, self.earliest_start(w)), 1, w)

    def enqueue(self, v: int, time: int) -> None:
        resource = self.resource[v]
        if not self.exclusive[resource]:
            self.begin(v, self.earliest_start(v))
            return
        policy = self.policies.get(resource, FIFO)
        earliest = self.earliest_start(v)
        key: tuple[Any, ...]
        if policy == PRIORITY:
            key = (self.priority[v], time, v)
        elif policy == EARLIEST_READY:
            key = (earliest, v)
        else:
            key = (time, v)
        heapq.heappush(self.queues.setdefault(resource, []), (*key, v))

    def dispatch_all(self, time: int) -> None:
        for resource, queue in self.queues.items():
            if queue and not self.running.get(resource, False):
                v = heapq.heappop(queue)[-1]
                begin = max(self.earliest_start(v), self.busy_until.get(resource, UNSET))
                self.running[resource] = True
                self.begin(v, begin)

    def begin(self, v: int, begin: int) -> None:
        self.start[v] = begin
        self.end[v] = begin + self.duration[v]
        resource = self.resource[v]
        if self.exclusive[resource]:
            self.busy_until[resource] = self.end[v]
        self.push_event(self.end[v], 0, v)
