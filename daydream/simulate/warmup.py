"""A warm-up iteration before the first: the earlier iteration a real training loop always has.

A trace records a few iterations out of a running loop, so the first recorded one began while the
previous (unrecorded) iteration's device work and communication were still in flight: its host
launched behind them. Simulated alone, the first iteration has nothing to launch behind, and where
device work or communication outlasts the host (a slow all-reduce, a loop that runs ahead of its
GPU) it comes out longer than the steady iterations after it, and the mean with it.

So every rank is simulated with a copy of its first iteration in front (`extend`): the
copy's tasks are appended to the graph with their recorded times one iteration earlier,
every edge inside the first iteration is copied between the copies, and every edge from the
first iteration into the second is copied from the copy into the first iteration, to the
task that holds the same place on its resource (the k-th task of the second iteration on a
thread or stream stands for the k-th of the first). A resource whose first task gets no
such edge is chained in program order. The copy is dropped from the timeline (`truncate`);
the end of its window (simulate.windows) is kept, because the first iteration's window
starts no earlier than it, as every later one starts no earlier than its predecessor's end.

    extended, warmup = extend(graph)  # warmup: the copy's task ids (graph.task_count onwards)
    timeline = truncate(simulate(extended), graph, extended)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from daydream.graph.model import EDGE_COLUMNS, GPU_WORK, DepKind, Graph, ResourceKind, Timeline
from daydream.graph.timing import host_edge_mask

#: Priority the copy's tasks are ahead of the first iteration's on a
#: priority queue (lower runs first).
_EARLIER = 2**40


def extend(graph: Graph, collective_offset: int = 0) -> tuple[Graph, np.ndarray]:
    """`graph` with a copy of its first iteration in front (a new graph; `graph` is not changed),
    and the copy's task ids. Matched collectives in the copy get their id + `collective_offset` (the
    job's largest id, so the copies match one another across ranks and nothing else). A graph of
    fewer than two iterations comes back as it is: what happens between two iterations is only known
    from a trace that has two."""
    if len(graph.iteration_markers) < 2:
        return graph, np.zeros(0, dtype=np.int64)
    iteration = graph.tasks["iteration"]
    first = np.flatnonzero(iteration == 0)
    if first.size == 0:
        return graph, np.zeros(0, dtype=np.int64)
    n = graph.task_count
    copy_of = np.full(n, -1, dtype=np.int64)
    copy_of[first] = n + np.arange(first.size)
    # The graph's task columns with the copy appended (new arrays) and its
    # own edge table (arrays replaced, never written in place, as edges
    # are appended); its lists are shared, read only by the simulation.
    extended = replace(graph,
                       tasks=_with_copied_tasks(graph, first, _period_ns(graph), collective_offset),
                       edges=dict(graph.edges))
    ranked = {number: _by_resource(graph, np.flatnonzero(iteration == number)) for number in (0, 1)}
    _copy_inner_edges(extended, graph, copy_of)
    reached = _copy_edges_into_first(extended, graph, copy_of,
                                     _same_place(graph, ranked[0], ranked[1]))
    _chain_the_rest(extended, graph, copy_of, reached, ranked[0])
    return extended, copy_of[first]


def truncate(timeline: Timeline, graph: Graph, extended: Graph) -> Timeline:
    """The timeline of `graph`'s own tasks from the simulated `extended`
    graph, with the end of the warm-up's window (simulate.windows: its
    end marker passed and its device work done) as `previous_end_ns`."""
    n = graph.task_count
    start_ns, end_ns = timeline.start_ns[:n].copy(), timeline.end_ns[:n].copy()
    if extended.task_count == n:
        return Timeline(start_ns, end_ns)
    copies = np.arange(n, extended.task_count)
    marker = graph.iteration_markers[0][1]
    if graph.tasks["iteration"][marker] == 0:
        host_end = int(timeline.start_ns[n + int(
            np.searchsorted(np.flatnonzero(graph.tasks["iteration"] == 0), marker))])
    else:
        # an end marker that belongs to no iteration: the copy's host
        # work ends where its last task does
        host_end = int(timeline.end_ns[copies].max())
    device = copies[np.isin(extended.tasks["kind"][copies], [int(k) for k in GPU_WORK])]
    ends = [host_end, *([int(timeline.end_ns[device].max())] if device.size else [])]
    return Timeline(start_ns, end_ns, previous_end_ns=max(ends))


def _period_ns(graph: Graph) -> int:
    """How much earlier the copy's recorded times lie: the recorded spacing of the first two
    iterations' start markers."""
    start = graph.tasks["measured_start_ns"]
    markers = graph.iteration_markers
    return max(int(start[markers[1][0]] - start[markers[0][0]]), 1)


def _with_copied_tasks(graph: Graph, first: np.ndarray, period_ns: int,
                       collective_offset: int) -> dict[str, np.ndarray]:
    """The graph's task columns with the first iteration's tasks appended: one iteration earlier, of
    no iteration, ahead on priority queues, their matched collectives renumbered."""
    columns = {name: values[first] for name, values in graph.tasks.items()}
    columns["measured_start_ns"] = columns["measured_start_ns"] - period_ns
    columns["measured_end_ns"] = columns["measured_end_ns"] - period_ns
    columns["iteration"] = np.full(first.size, -1, dtype=np.int32)
    columns["priority"] = columns["priority"] - _EARLIER
    matched = columns["collective"] > 0
    columns["collective"] = np.where(matched, columns["collective"] + collective_offset, 0)
    return {name: np.concatenate([graph.tasks[name], columns[name]]) for name in graph.tasks}


def _append_edges(extended: Graph, graph: Graph, chosen: np.ndarray, src: np.ndarray,
                  dst: np.ndarray) -> None:
    for name in EDGE_COLUMNS:
        values = src if name == "src" else dst if name == "dst" else graph.edges[name][chosen]
        extended.edges[name] = np.concatenate([extended.edges[name], values])


def _copy_inner_edges(extended: Graph, graph: Graph, copy_of: np.ndarray) -> None:
    src, dst = graph.edges["src"], graph.edges["dst"]
    inner = np.flatnonzero((copy_of[src] >= 0) & (copy_of[dst] >= 0))
    _append_edges(extended, graph, inner, copy_of[src[inner]], copy_of[dst[inner]])


def _by_resource(graph: Graph, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`members` in program order on each resource (by resource, then recorded start, then id),
    their resources, and each one's place on its resource (0 for the first)."""
    tasks = graph.tasks
    order = members[np.lexsort((members, tasks["measured_start_ns"][members],
                                tasks["resource"][members]))]
    resource = tasks["resource"][order].astype(np.int64)
    run_start = np.r_[0, np.flatnonzero(resource[1:] != resource[:-1]) + 1]
    place = np.arange(order.size) - np.repeat(run_start, np.diff(np.r_[run_start, order.size]))
    return order, resource, place


def _same_place(graph: Graph, first: tuple[np.ndarray, ...],
                second: tuple[np.ndarray, ...]) -> np.ndarray:
    """Per task of the second iteration, the task of the first that holds the same place on the same
    resource (-1: none, or not of the second iteration); both as `_by_resource` gives them."""
    (order0, resource0, place0), (order1, resource1, place1) = first, second
    key0 = resource0 * (graph.task_count + 1) + place0
    key1 = resource1 * (graph.task_count + 1) + place1
    found = np.searchsorted(key0, key1)
    hit = (found < key0.size) & (key0[np.minimum(found, key0.size - 1)] == key1)
    counterpart = np.full(graph.task_count, -1, dtype=np.int64)
    counterpart[order1[hit]] = order0[found[hit]]
    return counterpart


def _copy_edges_into_first(extended: Graph, graph: Graph, copy_of: np.ndarray,
                           place: np.ndarray) -> np.ndarray:
    """Edges from the first iteration into the second (`place`: each
    second-iteration task's counterpart in the first), copied from the copy
    into the first iteration; the first iteration's tasks that got one. A task
    that had no host edge before takes the gap its counterpart waited with."""
    iteration = graph.tasks["iteration"]
    src, dst = graph.edges["src"], graph.edges["dst"]
    crossing = np.flatnonzero((iteration[src] == 0) & (iteration[dst] == 1) & (place[dst] >= 0))
    targets = place[dst[crossing]]
    host_edges = host_edge_mask(graph)
    had_host = np.zeros(graph.task_count, dtype=bool)
    had_host[dst[host_edges]] = True
    fresh = host_edges[crossing] & ~had_host[targets]
    extended.tasks["gap_ns"][targets[fresh]] = graph.tasks["gap_ns"][dst[crossing][fresh]]
    _append_edges(extended, graph, crossing, copy_of[src[crossing]], targets)
    reached = np.zeros(graph.task_count, dtype=bool)
    reached[targets] = True
    return reached


def _chain_the_rest(extended: Graph, graph: Graph, copy_of: np.ndarray, reached: np.ndarray,
                    first: tuple[np.ndarray, ...]) -> None:
    """A host thread or GPU stream whose first task in the first
    iteration (`first`, as `_by_resource` gives it) got no edge from
    the copy: its last copied task before it, in program order."""
    tasks = graph.tasks
    order, resource, _ = first
    heads = order[np.r_[True, resource[1:] != resource[:-1]]]
    tails = order[np.r_[resource[1:] != resource[:-1], True]]
    for head, tail in zip(heads.tolist(), tails.tolist()):
        kind = graph.resources[int(tasks["resource"][head])].kind
        if reached[head] or kind == ResourceKind.COMM_CHANNEL:
            continue
        order_kind = (DepKind.HOST_ORDER if kind == ResourceKind.HOST_THREAD
                      else DepKind.STREAM_ORDER)
        extended.add_edges([int(copy_of[tail])], [head], order_kind)
