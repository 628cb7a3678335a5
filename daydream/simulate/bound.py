"""What bounds an iteration: its critical path, every nanosecond of it given to one category.

    bound = bound_by(graph, timeline, start_marker, end_marker)
    bound.shares()           # {"host": 0.62, "gpu": 0.31, ...}, summing to 1
    bound.unexplained_share  # what the trace cannot explain (delays), 0..1

The walk starts at the task that ends the iteration (its end marker) and steps back to the
predecessor that made each task ready, until it passes the iteration's start. Each step
splits the time between two tasks into the later task's own time, its unexplained delay,
and the edge it waited on (a host gap, or a latency), so the parts add up to the window:

- host: own time of host tasks (API calls, CPU ops, what a blocking call did after its wait)
- host gap: the recorded CPU time between host tasks (Python, framework, data loading); it
  scales with the host
- gpu: kernels, copies and memsets
- communication: collectives, their transfer; the wait for the other ranks (matched
  collectives, a what-if's slowest rank)
- latency: launch latency, inter-kernel gap, sync return (the fixed costs on edges); a
  resource's queue
- unexplained: delays the trace cannot explain that scale with the iteration's progress
  (graph.model)
- pinned: delays the trace cannot explain that stay fixed under any what-if
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np

from daydream._jit import jit
from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import Timeline
from daydream.graph.timing import host_edge_mask, in_edges
from daydream.graph.windows import Window, iteration_windows

CATEGORIES = ("host", "host gap", "gpu", "communication", "latency", "unexplained", "pinned")
#: Above this share of the critical path, a prediction says it is bound
#: by what the trace cannot explain.
UNEXPLAINED_WARNING_SHARE = 0.05

_CATEGORY_OF_KIND = {
    TaskKind.HOST_CALL: "host", TaskKind.HOST_OP: "host", TaskKind.COMPLETION: "host",
    TaskKind.MARKER: "host", TaskKind.KERNEL: "gpu", TaskKind.MEMCPY: "gpu", TaskKind.MEMSET: "gpu",
    TaskKind.COLLECTIVE: "communication",
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
        """What holds the largest share of the path: "host" (own work and gaps), "gpu",
        "communication", "latency" or "unexplained" (scaling and fixed delays)."""
        ns = self.by_category_ns
        groups = {"host": ns["host"] + ns["host gap"], "gpu": ns["gpu"],
                  "communication": ns["communication"], "latency": ns["latency"],
                  "unexplained": ns["unexplained"] + ns["pinned"]}
        return max(groups, key=lambda k: groups[k])

    def as_dict(self) -> dict[str, object]:
        return {"bound": self.bound, "shares": {k: round(v, 4) for k, v in self.shares().items()},
                "by_category_ns": dict(self.by_category_ns), "critical_path_tasks": self.tasks}


def bound_by(graph: Graph, timeline: Timeline, first: int, last: int,
             binding: Binding | None = None, window_start: int | None = None) -> Bound:
    """The critical path of the window from task `first`'s start (or
    `window_start`) to task `last`'s end (e.g. an iteration's window:
    its start marker to its end marker or its last GPU work).

    `binding` (binding_edges(graph, timeline)) may be passed when the
    same timeline is walked many times.
    """
    window_start = int(timeline.start_ns[first]) if window_start is None else window_start
    window_end = int(timeline.end_ns[last])
    bound = Bound(window_ns=window_end - window_start)
    b = binding if binding is not None else binding_edges(graph, timeline)
    ns = np.zeros(len(CATEGORIES), dtype=np.int64)
    bound.tasks = int(_walk(last, window_end, window_start, timeline.start_ns, timeline.end_ns,
                            b.edge, b.ready, b.category, b.wait, b.gap, b.host_edge, b.edge_src,
                            b.from_start, b.edge_category, ns))
    for category, value in zip(CATEGORIES, ns.tolist()):
        bound.by_category_ns[category] = value
    return bound


_HOST_GAP, _LATENCY = CATEGORIES.index("host gap"), CATEGORIES.index("latency")


@jit
def _walk(v: int, until: int, window_start: int, start: np.ndarray, end: np.ndarray,
          edge: np.ndarray, ready: np.ndarray, category: np.ndarray, wait: np.ndarray,
          gap: np.ndarray, host_edge: np.ndarray, edge_src: np.ndarray, from_start: np.ndarray,
          edge_category: np.ndarray, ns: np.ndarray) -> int:
    """Walk back from task v (its end at `until`) to the window's start,
    crediting each stretch to its category in `ns`: a task's own time, the wait
    after its dependencies were met, the host gap and latency of the edge it
    waited on (its category: `edge_category`). Returns the tasks on the path."""
    tasks = 0
    with_duration = True
    while until > window_start:
        tasks += 1
        task_start = start[v]
        if with_duration:
            _credit(ns, category[v], task_start, min(end[v], until), window_start)
            until = min(until, task_start)
        e = edge[v]
        if e < 0:
            break  # nothing made it ready: it started where the recording did, before the window
        if ready[v] < until:
            _credit(ns, wait[v], ready[v], until, window_start)
            until = ready[v]
        u = edge_src[e]
        reference = start[u] if from_start[e] else end[u]
        host_gap = gap[v] if host_edge[e] else 0
        _credit(ns, _HOST_GAP, until - host_gap, until, window_start)
        _credit(ns, edge_category[e], reference, until - host_gap, window_start)
        until = min(until, reference)
        v = u
        with_duration = not from_start[e]
    return tasks


@jit
def _credit(ns: np.ndarray, category: int, begin: int, end: int, window_start: int) -> None:
    """Credit [begin, end), clipped to the window, to `category` (an index into CATEGORIES)."""
    begin = max(begin, window_start)
    if end > begin:
        ns[category] += end - begin


#: Task kind -> the category of its own time.
_CATEGORY_INDEX = np.array([CATEGORIES.index(_CATEGORY_OF_KIND.get(kind, "host")) for kind in
                            (TaskKind(k) for k in range(max(TaskKind) + 1))], dtype=np.int64)


@dataclass(slots=True, frozen=True)
class Binding:
    """Per task of one timeline: the in-edge that made it ready (-1: none) and the time it did (host
    gap included), the category of its own time and of a wait after its dependencies were met; per
    edge, what the walk reads."""

    edge: np.ndarray
    ready: np.ndarray
    category: np.ndarray
    wait: np.ndarray
    gap: np.ndarray
    host_edge: np.ndarray
    edge_src: np.ndarray
    from_start: np.ndarray
    edge_category: np.ndarray  # per edge, the category of its latency


def binding_edges(graph: Graph, timeline: Timeline) -> Binding:
    """For every task of `graph` at once: the in-edge that made it ready, the time it did, host gap
    included ((-1, its start) for a task with none). Of edges that made it ready at the same time,
    the first in the destination-sorted order of graph.timing.in_edges binds."""
    tasks, edges = graph.tasks, graph.edges
    best = np.full(graph.task_count, -1, dtype=np.int64)
    ready = timeline.start_ns.astype(np.int64).copy()
    host_edge = host_edge_mask(graph)
    if edges["src"].size:
        _, order = in_edges(graph)
        src, dst = edges["src"][order], edges["dst"][order]
        times = np.where(edges["from_start"][order].astype(bool), timeline.start_ns[src],
                         timeline.end_ns[src])
        times = (times + edges["latency_ns"][order]
                 + np.where(host_edge[order], tasks["gap_ns"][dst], 0))
        # Per destination, the latest time; ties to the first edge: sort by (destination, time,
        # -position), take each destination's last.
        position = np.arange(order.size)
        ranked = np.lexsort((-position, times, dst))
        last = np.flatnonzero(np.r_[dst[ranked][1:] != dst[ranked][:-1], True])
        winners = ranked[last]
        best[dst[winners]] = order[winners]
        ready[dst[winners]] = times[winners]
    # A wait after the dependencies: an unexplained delay (pinned when it does not scale), for a
    # collective matched across ranks (no delay of its own) the other ranks, else a queue.
    delayed = tasks["delay_ns"] > 0
    wait = np.where(tasks["kind"] == TaskKind.COLLECTIVE, CATEGORIES.index("communication"),
                    _LATENCY)
    wait = np.where(delayed, np.where(tasks["delay_span_ns"] <= 0, CATEGORIES.index("pinned"),
                                      CATEGORIES.index("unexplained")), wait)
    edge_category = np.where(edges["kind"] == DepKind.SLOWEST_RANK,
                             CATEGORIES.index("communication"), _LATENCY).astype(np.int64)
    return Binding(best, ready, _CATEGORY_INDEX[tasks["kind"]], wait.astype(np.int64),
                   tasks["gap_ns"].astype(np.int64), host_edge, edges["src"].astype(np.int64),
                   edges["from_start"].astype(bool), edge_category)


def bound_line(bound: dict[str, object], top: int = 6) -> str:
    """"host 62% · gpu 31% · latency 7%": the largest categories of a bound's `as_dict()`."""
    recorded = cast(dict[str, float], bound["shares"])
    shares = sorted(recorded.items(), key=lambda item: -item[1])
    return " · ".join(f"{category} {share:.0%}" for category, share in shares[:top]
                      if share >= 0.005)


def iteration_bounds(graph: Graph, timeline: Timeline,
                     windows: list[Window] | None = None) -> list[Bound]:
    """The bound of every iteration of `graph` (its window:
    simulate.windows, computed unless given), in order."""
    binding = binding_edges(graph, timeline)
    windows = windows if windows is not None else iteration_windows(graph, timeline)
    return [bound_by(graph, timeline, w.first, w.last, binding, w.start_ns) for w in windows]


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
    return [f"{bound.unexplained_share:.0%} of the critical path is waiting the trace cannot "
            f"explain ({shares['unexplained']:.0%} scaling with the iteration's progress, "
            f"{shares['pinned']:.0%} fixed): a single rank's wait for its peers or a wait on work "
            "outside the trace. The prediction moves that part only in proportion to the work "
            "before it; trace every rank (daydream replay DIR) to derive it"]
