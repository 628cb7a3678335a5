"""The five primitives every optimization is written with: select,
insert, remove, scale, reschedule.

Each is a plain function over a `Graph`. They change the graph in place and return
it, so that steps chain; take `graph.copy()` first to keep the original.

    gemms = select(graph, kind=KERNELS, name=r"gemm|conv")
    scale(graph, gemms, factor=1 / 3)           # three times faster
    remove(graph, select(graph, name="cudaLaunchKernel", phase="optimizer"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from daydream._regex import Pattern, user_regex
from daydream.graph import DepKind, Graph, ResourceKind, TaskKind
from daydream.graph.model import EDGE_COLUMNS, GPU_WORK, HOST_WORK, KERNELS
from daydream.graph.order import topological_order
from daydream.graph.timing import host_edge_mask
from daydream.mapping import PHASES

__all__ = ["GPU_WORK", "HOST_WORK", "KERNELS", "PRIMITIVES", "insert", "remove", "reschedule",
           "scale", "select", "unpin"]


def select(
    graph: Graph,
    kind: TaskKind | Iterable[TaskKind] | None = None,
    name: str | None = None,
    layer: str | None = None,
    phase: str | Iterable[str] | None = None,
    iteration: int | Iterable[int] | None = None,
    resource: int | Iterable[int] | None = None,
    predicate: Callable[[Graph, np.ndarray], np.ndarray] | None = None,
    within: np.ndarray | None = None,
) -> np.ndarray:
    """Task ids matching every criterion given.

    `name` and `layer` are regular expressions searched in the task's name and layer
    path; `phase` is one of forward, backward, optimizer, other; `predicate(graph, ids)`
    returns a boolean mask over `ids`; `within` restricts the search to those ids.
    """
    tasks = graph.tasks
    ids = np.arange(graph.task_count) if within is None else np.asarray(within, dtype=np.int64)
    keep = np.ones(ids.size, dtype=bool)
    if kind is not None:
        kinds = [int(kind)] if isinstance(kind, TaskKind) else [int(k) for k in kind]
        keep &= np.isin(tasks["kind"][ids], kinds)
    if name is not None:
        pattern = _compile(name, "name")
        matches = np.array([bool(pattern.search(s)) for s in graph.strings], dtype=bool)
        keep &= matches[tasks["name"][ids]]
    if layer is not None:
        pattern = _compile(layer, "layer")
        matches = np.array([bool(pattern.search(s)) for s in graph.layers] + [False], dtype=bool)
        keep &= matches[tasks["layer"][ids]]  # -1 indexes the trailing False
    if phase is not None:
        wanted = [phase] if isinstance(phase, str) else list(phase)
        unknown = [p for p in wanted if p not in PHASES]
        if unknown:
            raise ValueError(f"unknown phase {unknown[0]!r} (choose from {', '.join(PHASES)})")
        keep &= np.isin(tasks["phase"][ids], [PHASES.index(p) for p in wanted])
    if iteration is not None:
        keep &= np.isin(tasks["iteration"][ids], [iteration] if isinstance(iteration, int)
                        else list(iteration))
    if resource is not None:
        keep &= np.isin(tasks["resource"][ids], [resource] if isinstance(resource, int)
                        else list(resource))
    if predicate is not None:
        keep &= np.asarray(predicate(graph, ids), dtype=bool)
    return ids[keep]


def _compile(pattern: str, what: str) -> Pattern:
    return user_regex(str(pattern), f"select {what}", example="'gemm|cutlass'")


def scale(graph: Graph, selection: np.ndarray, factor: float | None = None,
          function: Callable[[Graph, np.ndarray], np.ndarray] | None = None,
          gaps: bool = False) -> Graph:
    """Multiply the durations (and, with `gaps`, the host gaps) of the selected tasks.

    Either a constant `factor` or `function(graph, ids) -> factors`. Unexplained delays are
    not scaled here: they follow the iteration's progress by themselves (graph.model).
    """
    if (factor is None) == (function is None):
        raise ValueError("scale needs exactly one of factor= or function=")
    selection = np.asarray(selection, dtype=np.int64)
    # not None: one of the two, checked above
    factors = np.full(selection.size, factor,
                      dtype=np.float64) if factor is not None else np.asarray(
                          function(graph, selection))  # type: ignore[misc]
    if not np.all(np.isfinite(factors)) or np.any(factors < 0) or np.any(np.signbit(factors)):
        raise ValueError("scale factors must be finite numbers of 0 or more (not NaN, infinite, "
                         "negative or -0.0)")
    tasks = graph.tasks
    tasks["duration_ns"][selection] = np.rint(tasks["duration_ns"][selection] * factors).astype(
        np.int64)
    if gaps:
        tasks["gap_ns"][selection] = np.rint(tasks["gap_ns"][selection] * factors).astype(np.int64)
    return graph


def insert(graph: Graph, tasks: dict[str, Any],
           edges: Iterable[tuple[Any, Any, DepKind, int, bool]] = ()) -> np.ndarray:
    """Add tasks (columns as for `Graph.add_tasks`) and edges; returns the new task ids.

    Edge endpoints may be existing task ids, or ("new", k) for the k-th inserted task.
    """
    ids = graph.add_tasks(**tasks)

    def resolve(endpoint: Any) -> int:
        if isinstance(endpoint, tuple) and endpoint[0] == "new":
            return int(ids[endpoint[1]])
        return int(endpoint)

    for src, dst, kind, latency, from_start in edges:
        graph.add_edges([resolve(src)], [resolve(dst)], kind, latency_ns=latency,
                        from_start=from_start)
    return ids


#: Out-edges that follow GPU work on its stream: a task spliced in after it takes them over (on a
#: host thread: the host edges, graph.timing.host_edge_mask).
_FOLLOWS_GPU = (int(DepKind.STREAM_ORDER), int(DepKind.SYNC))


def splice(graph: Graph, anchors: Any, durations_ns: Any, name: str | Sequence[str],
           after: bool) -> np.ndarray:
    """New tasks of `durations_ns`, each on its anchor's resource right
    after it (`after`) or right before it, in its
    program order: what followed the anchor on its thread or stream (host order and
    cross-thread signals on a thread; stream order and the syncs that wait for it on
    a stream) follows the new task instead, or what the anchor waited for in program
    order, the new task waits for. Each is a host op on a thread, a kernel on a
    stream, of its anchor's iteration, layer and phase, named `name` (or each its
    own, given one name per anchor); returns their ids, in the order of `anchors`.

    One pass over the edges for all anchors. Anchors given more than once get their tasks one after
    another as if spliced one at a time in the order given: after an anchor the last given is
    nearest to it, before it the first.
    """
    anchors = np.asarray(anchors, dtype=np.int64).reshape(-1)
    durations = np.broadcast_to(np.asarray(durations_ns, dtype=np.int64), anchors.shape)
    if anchors.size == 0:
        return np.zeros(0, dtype=np.int64)
    tasks = graph.tasks
    resource = tasks["resource"][anchors]
    host_resources = np.array([r.kind == ResourceKind.HOST_THREAD for r in graph.resources],
                              dtype=bool)
    on_host = host_resources[resource]
    at = tasks["measured_end_ns"][anchors] if after else tasks["measured_start_ns"][anchors]
    names = graph.string_id(name) if isinstance(name, str) else [graph.string_id(n) for n in name]
    new = graph.add_tasks(kind=np.where(on_host, int(TaskKind.HOST_OP), int(TaskKind.KERNEL)),
                          resource=resource, duration_ns=durations, name=names,
                          iteration=tasks["iteration"][anchors], layer=tasks["layer"][anchors],
                          phase=tasks["phase"][anchors], measured_start_ns=at, measured_end_ns=at)
    # Each anchor's chain, as one-at-a-time splicing leaves it: after
    # it, the last given first; before it, in order.
    order = np.lexsort((np.arange(anchors.size) * (-1 if after else 1), anchors))
    chained, links = anchors[order], new[order]
    first = np.r_[True, chained[1:] != chained[:-1]]
    last = np.r_[chained[1:] != chained[:-1], True]
    unique = chained[first]
    edges = graph.edges
    if after:
        end = links[last]  # the task the anchor's followers now follow
        source_host = host_resources[tasks["resource"][edges["src"]]]
        follows = np.where(source_host, host_edge_mask(graph), np.isin(edges["kind"], _FOLLOWS_GPU))
        position = np.minimum(np.searchsorted(unique, edges["src"]), unique.size - 1)
        moved = follows & (unique[position] == edges["src"])
        edges["src"][moved] = end[position[moved]]
        sources = np.where(first, chained, np.r_[-1, links[:-1]])
        _add_program_order(graph, sources, links, on_host[order])
    else:
        start = links[first]  # the task that now waits for what the anchor waited for
        wanted = np.where(host_resources[tasks["resource"][edges["dst"]]], int(DepKind.HOST_ORDER),
                          int(DepKind.STREAM_ORDER))
        position = np.minimum(np.searchsorted(unique, edges["dst"]), unique.size - 1)
        moved = (edges["kind"] == wanted) & (unique[position] == edges["dst"])
        edges["dst"][moved] = start[position[moved]]
        targets = np.where(last, chained, np.r_[links[1:], -1])
        _add_program_order(graph, links, targets, on_host[order])
    return new


def splice_chain(graph: Graph, chain: np.ndarray, anchor: int, kind: DepKind, after: bool,
                 latency_ns: int = 0) -> None:
    """Put tasks already in the graph, `chain` in order, in `kind`'s order (a thread's program
    order, a stream's queue) right after task `anchor` (anchor -> chain... -> what followed it) or
    right before it (what preceded it -> chain... -> anchor); each new edge `latency_ns`."""
    edges = graph.edges
    near, far = ("src", "dst") if after else ("dst", "src")
    touching = np.flatnonzero((edges[near] == anchor) & (edges["kind"] == kind))
    others = edges[far][touching].tolist()
    keep = np.ones(graph.edge_count, dtype=bool)
    keep[touching] = False
    graph.edges = {column: values[keep] for column, values in edges.items()}
    first, last = int(chain[0]), int(chain[-1])
    if after:
        graph.add_edges([anchor], [first], kind, latency_ns=latency_ns)
    else:
        graph.add_edges(others, [first] * len(others), kind, latency_ns=latency_ns)
    graph.add_edges(chain[:-1], chain[1:], kind, latency_ns=latency_ns)
    if after:
        graph.add_edges([last] * len(others), others, kind, latency_ns=latency_ns)
    else:
        graph.add_edges([last], [anchor], kind, latency_ns=latency_ns)


def _add_program_order(graph: Graph, src: np.ndarray, dst: np.ndarray, on_host: np.ndarray) -> None:
    for host, kind in ((True, DepKind.HOST_ORDER), (False, DepKind.STREAM_ORDER)):
        chosen = on_host == host
        if chosen.any():
            graph.add_edges(src[chosen], dst[chosen], kind)


#: Dependencies that pass through a removed task to its successors. A launch, a sync wait or a
#: launch-queue slot belongs to the removed task itself and goes with it.
_TRANSFERABLE = {int(DepKind.HOST_ORDER), int(DepKind.CROSS_THREAD), int(DepKind.STREAM_ORDER),
                 int(DepKind.EVENT_WAIT), int(DepKind.COMMUNICATION)}


def remove(graph: Graph, selection: np.ndarray, keep_gaps: bool = False) -> Graph:
    """Remove tasks, connecting each one's predecessors to its successors.

    Program order (host and stream), cross-thread, event and communication dependencies
    pass through a removed task; launches, syncs and launch-queue slots go with it. The
    reconnected edge keeps the kind and latency of the edge that left the removed task,
    counted from the predecessor's end. With `keep_gaps`, a removed host task's
    gap (the CPU work before it) moves to its host successor; by default that CPU work
    disappears with it.
    """
    selection = np.unique(np.asarray(selection, dtype=np.int64))
    if selection.size == 0:
        return graph
    removed = np.zeros(graph.task_count, dtype=bool)
    removed[selection] = True
    edges = graph.edges
    touching = removed[edges["src"]] | removed[edges["dst"]]
    incoming, outgoing = _edges_at_removed(edges, touching, removed)
    new_edges = _bridges(graph, removed, incoming, outgoing, keep_gaps)
    graph.edges = {c: edges[c][~touching] for c in EDGE_COLUMNS}
    if new_edges:
        table = np.array(sorted(new_edges), dtype=np.int64)
        for edge_kind in np.unique(table[:, 2]).tolist():
            mine = table[table[:, 2] == edge_kind]
            graph.add_edges(mine[:, 0], mine[:, 1], DepKind(edge_kind), latency_ns=mine[:, 3])
    _drop_tasks(graph, removed)
    return graph


def _edges_at_removed(edges: dict[str, np.ndarray], touching: np.ndarray, removed: np.ndarray
                      ) -> tuple[dict[int, set[int]], dict[int, list[tuple[int, int, int]]]]:
    """(per removed task, its kept predecessors over transferable edges; per removed task, its
    out-edges as (successor, kind, latency))."""
    incoming: dict[int, set[int]] = {}
    outgoing: dict[int, list[tuple[int, int, int]]] = {}
    for s, d, k, lat in zip(*(edges[c][touching].tolist()
                              for c in ("src", "dst", "kind", "latency_ns"))):
        if removed[d] and not removed[s] and k in _TRANSFERABLE:
            incoming.setdefault(d, set()).add(s)
        if removed[s]:
            outgoing.setdefault(s, []).append((d, k, lat))
    return incoming, outgoing


def _bridges(graph: Graph, removed: np.ndarray, incoming: dict[int, set[int]],
             outgoing: dict[int, list[tuple[int, int, int]]],
             keep_gaps: bool) -> set[tuple[int, int, int, int]]:
    """The edges (src, dst, kind, latency) from each removed task's
    predecessors to its successors, handed on through chains of removed tasks
    in topological order; with `keep_gaps`, host gaps handed on too."""
    gap = graph.tasks["gap_ns"]
    new_edges: set[tuple[int, int, int, int]] = set()
    order = topological_order(graph.task_count, graph.edges["src"], graph.edges["dst"])
    latest = _LatestPerResource(graph, order)
    for v in order[removed[order]].tolist():
        predecessors = latest.of(incoming.pop(v, set()))
        for w, kind, latency in outgoing.get(v, []):
            if keep_gaps and DepKind(kind).is_host:
                gap[w] += gap[v]
            if not removed[w]:
                new_edges.update((u, w, kind, latency) for u in predecessors)
            elif kind in _TRANSFERABLE:
                incoming.setdefault(w, set()).update(predecessors)
    return new_edges


class _LatestPerResource:
    """Prunes the predecessors a removed task hands on: of those on one program-ordered resource (a
    host thread or a stream, not a queue whose order the simulator picks), only the last in program
    order can bind — it starts after the others end — so the rest add nothing. Keeps a chain of
    removed tasks (a stream of collectives) from handing on every predecessor of every earlier link:
    quadratic in the chain's length otherwise."""

    def __init__(self, graph: Graph, order: np.ndarray) -> None:
        self.position = np.empty(order.size, dtype=np.int64)
        self.position[order] = np.arange(order.size)
        self.resource = graph.tasks["resource"]
        self.unordered = set(graph.queue_policies)

    def of(self, predecessors: set[int]) -> set[int]:
        if len(predecessors) < 2:
            return predecessors
        kept: set[int] = set()
        last: dict[int, int] = {}
        for task in predecessors:
            resource = int(self.resource[task])
            if resource in self.unordered:
                kept.add(task)
            elif resource not in last or self.position[task] > self.position[last[resource]]:
                last[resource] = task
        return kept | set(last.values())


def _drop_tasks(graph: Graph, removed: np.ndarray) -> None:
    """Delete tasks and renumber the rest (edges, markers)."""
    keep = ~removed
    new_id = np.cumsum(keep) - 1
    graph.tasks = {c: v[keep] for c, v in graph.tasks.items()}
    graph.edges["src"] = new_id[graph.edges["src"]]
    graph.edges["dst"] = new_id[graph.edges["dst"]]
    graph.iteration_markers = [(int(new_id[a]), int(new_id[b])) for a, b in graph.iteration_markers
                               if keep[a] and keep[b]]


def reschedule(graph: Graph, selection: np.ndarray, resource: int | None = None,
               priority: np.ndarray | int | None = None) -> Graph:
    """Move tasks to another resource and/or give them queue priorities (lower runs first).

    Moving tasks does not add program-order edges on the new resource: replay the
    result with `simulate_event_driven`, whose per-resource queue orders them.
    """
    selection = np.asarray(selection, dtype=np.int64)
    if resource is not None:
        if not 0 <= resource < len(graph.resources):
            raise ValueError(f"resource {resource} does not exist (the graph has "
                             f"{len(graph.resources)})")
        graph.tasks["resource"][selection] = resource
    if priority is not None:
        graph.tasks["priority"][selection] = priority
    return graph


def unpin(graph: Graph, selection: np.ndarray) -> Graph:
    """Let the selected tasks start as their dependencies allow (a
    what-if changes what they waited for)."""
    selection = np.asarray(selection, dtype=np.int64)
    graph.tasks["unexplained"][selection] = False
    graph.tasks["delay_ns"][selection] = 0
    return graph


PRIMITIVES: dict[str, Callable[..., Any]] = {
    "select": select,
    "insert": insert,
    "remove": remove,
    "scale": scale,
    "reschedule": reschedule,
}


Spans = dict[int, tuple[int, int, int]]  # trace row -> (start ns, end ns, track)


def task_of_event(graph: Graph) -> dict[int, int]:
    """Per trace row a task was read from, that task."""
    events = graph.tasks["event"]
    chosen = np.flatnonzero(events >= 0)
    return dict(zip(events[chosen].tolist(), chosen.tolist()))


class HostSpans:
    """The host tasks of each thread read from the trace, by recorded start: to find the one whose
    span holds a nested op, and the first one inside an op's span."""

    def __init__(self, graph: Graph) -> None:
        tasks = graph.tasks
        track_of_resource = np.array([r.track for r in graph.resources], dtype=np.int64)
        # Only tasks read from the trace: spliced-in ones (casts,
        # dispatch) have no recorded span to hold anything.
        host = np.flatnonzero(np.isin(tasks["kind"],
                                      [int(k) for k in HOST_WORK]) & (tasks["event"] >= 0))
        self.by_track: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        tracks = track_of_resource[tasks["resource"][host]]
        for track in np.unique(tracks).tolist():
            mine = host[tracks == track]
            mine = mine[np.argsort(tasks["measured_start_ns"][mine], kind="stable")]
            self.by_track[track] = (mine, tasks["measured_start_ns"][mine],
                                    tasks["measured_end_ns"][mine])

    def first_within(self, spans: Spans) -> dict[int, int]:
        """Per op (trace row -> its recorded span and thread), the
        first task that starts within that span on its
        thread: the op itself on a CPU graph, its first API call on a GPU one."""
        found: dict[int, int] = {}
        for row, (start, end, track) in spans.items():
            if track in self.by_track:
                tasks, starts, _ = self.by_track[track]
                at = int(np.searchsorted(starts, start))
                if at < tasks.size and starts[at] < end:
                    found[row] = int(tasks[at])
        return found

    def within(self, span: tuple[int, int, int] | None) -> np.ndarray:
        """The tasks that start within an op's recorded span (start,
        end, track) on its thread, in order."""
        if span is None or span[2] not in self.by_track:
            return np.zeros(0, dtype=np.int64)
        tasks, starts, _ = self.by_track[span[2]]
        return tasks[int(np.searchsorted(starts, span[0])):int(np.searchsorted(starts, span[1]))]

    def holding(self, start: int, track: int) -> int:
        """The task on `track` whose recorded span holds `start`, or -1."""
        if track not in self.by_track:
            return -1
        tasks, starts, ends = self.by_track[track]
        at = int(np.searchsorted(starts, start, side="right")) - 1
        return int(tasks[at]) if at >= 0 and ends[at] > start else -1


def launcher_of(graph: Graph) -> dict[int, int]:
    """Per GPU task a host task launched, that host task."""
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    return dict(zip(graph.edges["dst"][launch].tolist(), graph.edges["src"][launch].tolist()))


def launched_by(graph: Graph) -> dict[int, list[int]]:
    """Per host task that launched GPU work, that work by recorded start."""
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    sources, work = graph.edges["src"][launch], graph.edges["dst"][launch]
    order = np.lexsort((graph.tasks["measured_start_ns"][work], sources))
    found: dict[int, list[int]] = {}
    for src, dst in zip(sources[order].tolist(), work[order].tolist()):
        found.setdefault(src, []).append(dst)
    return found
