"""What bounds an iteration: its critical path, every nanosecond of it given to one category.

    bound = bound_by(graph, timeline, start_marker, end_marker)
    bound.shares()           # {"host": 0.62, "gpu": 0.31, ...}, summing to 1
    bound.unexplained_share  # what the trace cannot explain (delays), 0..1

The walk starts at the task that ends the iteration (its end marker) and steps back to the
predecessor that made each task ready, until it passes the iteration's start. Each step
splits the time between two tasks into the later task's own time, its unexplained delay,
and the edge it waited on (a host gap, or a latency), so the parts add up to the window:

| category | what |
|---|---|
| host | own time of host tasks (API calls, CPU ops, what a blocking call did after its wait) |
| host gap | the recorded CPU time between host tasks (Python, framework, data loading): scales with the host |
| gpu | kernels, copies and memsets |
| communication | collectives: their transfer, and for collectives matched across ranks the wait for the others |
| latency | launch latency, inter-kernel gap, sync return: the fixed costs on edges; a resource's queue |
| unexplained | delays the trace cannot explain that scale with the iteration's progress (graph.model) |
| pinned | delays the trace cannot explain that stay fixed under any what-if |
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.timing import in_edges
from daydream.simulate.engine import Timeline
from daydream.simulate.windows import Window, iteration_windows

CATEGORIES = ("host", "host gap", "gpu", "communication", "latency", "unexplained", "pinned")
#: Above this share of the critical path, a prediction says it is bound by what the trace cannot explain.
UNEXPLAINED_WARNING_SHARE = 0.05

_CATEGORY_OF_KIND = {
    TaskKind.HOST_CALL: "host", TaskKind.HOST_OP: "host", TaskKind.COMPLETION: "host", TaskKind.MARKER: "host",
    TaskKind.KERNEL: "gpu", TaskKind.MEMCPY: "gpu", TaskKind.MEMSET: "gpu", TaskKind.COLLECTIVE: "communication",
}


@dataclass(slots=True)
class Bound:
    """The critical path of one iteration window, ns per category (see the module docstring)."""

    window_ns: int
    by_category_ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    tasks: int = 0  # tasks on the path

    def shares(self) -> dict[str, float]:
        total = sum(self.by_category_ns.values())
        return {k: (v / total if total else 0.0) for k, v in self.by_category_ns.items()}

    @property
    def unexplained_share(self) -> float:
        """Share of the path the trace cannot explain (scaling and fixed delays together)."""
        shares = self.shares()
        return shares["unexplained"] + shares["pinned"]

    @property
    def pinned_share(self) -> float:
        return self.shares()["pinned"]

    @property
    def bound(self) -> str:
        """What holds the largest share of the path: "host" (own work and gaps), "gpu", "communication",
        "latency" or "unexplained" (scaling and fixed delays)."""
        ns = self.by_category_ns
        groups = {"host": ns["host"] + ns["host gap"], "gpu": ns["gpu"], "communication": ns["communication"],
                  "latency": ns["latency"], "unexplained": ns["unexplained"] + ns["pinned"]}
        return max(groups, key=lambda k: groups[k])

    def as_dict(self) -> dict[str, object]:
        return {"bound": self.bound, "shares": {k: round(v, 4) for k, v in self.shares().items()},
                "by_category_ns": dict(self.by_category_ns), "critical_path_tasks": self.tasks}


def bound_by(graph: Graph, timeline: Timeline, first: int, last: int, edges_in: tuple[np.ndarray, np.ndarray] | None = None,
             window_start: int | None = None) -> Bound:
    """The critical path of the window from task `first`'s start (or `window_start`) to task `last`'s end (e.g. an
    iteration's window: its start marker to its end marker or its last GPU work).

    `edges_in` (from graph.timing.in_edges) may be passed when the same graph is walked many times.
    """
    window_start = int(timeline.start_ns[first]) if window_start is None else window_start
    window_end = int(timeline.end_ns[last])
    bound = Bound(window_ns=window_end - window_start)
    offsets, order = edges_in if edges_in is not None else in_edges(graph)
    walker = _Walker(graph, timeline, offsets, order, window_start, bound)
    walker.walk(last, window_end, with_duration=True)
    return bound


class _Walker:
    def __init__(self, graph: Graph, timeline: Timeline, offsets: np.ndarray, order: np.ndarray, window_start: int,
                 bound: Bound) -> None:
        self.graph, self.timeline = graph, timeline
        self.offsets, self.order = offsets, order
        self.window_start = window_start
        self.bound = bound
        self.kind = graph.tasks["kind"]
        self.gap = graph.tasks["gap_ns"]
        self.fixed = graph.tasks["delay_span_ns"] <= 0
        self.delay = graph.tasks["delay_ns"]
        self.edge_src, self.edge_kind = graph.edges["src"], graph.edges["kind"]
        self.from_start = graph.edges["from_start"]

    def add(self, category: str, begin: int, end: int) -> None:
        """Credit [begin, end) to `category`, clipped to the window."""
        begin = max(begin, self.window_start)
        if end > begin:
            self.bound.by_category_ns[category] += end - begin

    def walk(self, v: int, until: int, with_duration: bool) -> None:
        start, end = self.timeline.start_ns, self.timeline.end_ns
        while until > self.window_start:
            self.bound.tasks += 1
            task_start = int(start[v])
            if with_duration:
                self.add(_CATEGORY_OF_KIND[TaskKind(int(self.kind[v]))], task_start, min(int(end[v]), until))
                until = min(until, task_start)
            edge, ready = binding_edge(self.graph, self.timeline, v, (self.offsets, self.order))
            if edge < 0:
                return  # nothing made it ready: it started where the recording did, before the window
            if ready < until:
                self.add(self.wait_category(v), ready, until)
                until = ready
            u = int(self.edge_src[edge])
            reference = int(start[u]) if self.from_start[edge] else int(end[u])
            host_gap = int(self.gap[v]) if DepKind(int(self.edge_kind[edge])).is_host else 0
            self.add("host gap", until - host_gap, until)
            self.add("latency", reference, until - host_gap)
            until = min(until, reference)
            v, with_duration = u, not bool(self.from_start[edge])

    def wait_category(self, v: int) -> str:
        """What held v after its own dependencies were met: its unexplained delay, or, for a collective matched
        across ranks (no delay of its own), the other ranks, derived by the job's replay; else a queue."""
        if self.delay[v] > 0:
            return "pinned" if self.fixed[v] else "unexplained"
        return "communication" if self.kind[v] == TaskKind.COLLECTIVE else "latency"


def binding_edge(graph: Graph, timeline: Timeline, v: int, edges_in: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
    """(the in-edge that made task v ready, the time it did, host gap included); (-1, v's start) for a task
    with none. `edges_in` is graph.timing.in_edges(graph)."""
    offsets, order = edges_in
    edges, gap = graph.edges, int(graph.tasks["gap_ns"][v])
    start, end = timeline.start_ns, timeline.end_ns
    best, found = -1, np.iinfo(np.int64).min
    for k in range(int(offsets[v]), int(offsets[v + 1])):
        e = int(order[k])
        u = int(edges["src"][e])
        ready = (int(start[u]) if edges["from_start"][e] else int(end[u])) + int(edges["latency_ns"][e])
        if DepKind(int(edges["kind"][e])).is_host:
            ready += gap
        if ready > found:
            best, found = e, ready
    return (best, found) if best >= 0 else (-1, int(start[v]))


def bound_line(bound: dict[str, object], top: int = 6) -> str:
    """"host 62% · gpu 31% · latency 7%": the largest categories of a bound's `as_dict()`."""
    shares = sorted(bound["shares"].items(), key=lambda item: -item[1])  # type: ignore[attr-defined]
    return " · ".join(f"{category} {share:.0%}" for category, share in shares[:top] if share >= 0.005)


def iteration_bounds(graph: Graph, timeline: Timeline, windows: list[Window] | None = None) -> list[Bound]:
    """The bound of every iteration of `graph` (its window: simulate.windows, computed unless given), in order."""
    edges_in = in_edges(graph)
    windows = windows if windows is not None else iteration_windows(graph, timeline.start_ns, timeline.end_ns)
    return [bound_by(graph, timeline, w.first, w.last, edges_in, w.start_ns) for w in windows]


def merge(bounds: list[Bound]) -> Bound:
    """Several iterations' bounds as one (their ns added): the mean iteration's shares."""
    merged = Bound(window_ns=sum(b.window_ns for b in bounds), tasks=sum(b.tasks for b in bounds))
    for bound in bounds:
        for category, ns in bound.by_category_ns.items():
            merged.by_category_ns[category] += ns
    return merged


def warnings_for(bound: Bound) -> list[str]:
    """What a prediction with this (merged) bound must say about itself."""
    if bound.unexplained_share <= UNEXPLAINED_WARNING_SHARE:
        return []
    shares = bound.shares()
    return [f"{bound.unexplained_share:.0%} of the critical path is waiting the trace cannot explain "
            f"({shares['unexplained']:.0%} scaling with the iteration's progress, {shares['pinned']:.0%} fixed): "
            "a single rank's wait for its peers or a wait on work outside the trace. The prediction moves that part "
            "only in proportion to the work before it; trace every rank (daydream replay DIR) to derive it"]
