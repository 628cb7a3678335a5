"""The timing rule of a graph, in one compiled pass (see daydream.graph.model for the rule).

`forward_times(graph, order)` gives every task's start, end and readiness (ns) along a
topological order. The simulator (daydream.simulate) replays graphs with it; the graph
builder uses it once with `pins` to turn what a trace cannot explain into relative delays.
"""

from __future__ import annotations

import numpy as np

from daydream._jit import jit
from daydream.graph.model import DepKind, Graph

UNSET = np.iinfo(np.int64).min


def host_edge_mask(graph: Graph) -> np.ndarray:
    kinds = graph.edges["kind"]
    return (kinds == DepKind.HOST_ORDER) | (kinds == DepKind.CROSS_THREAD)


def in_edges(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, edge ids sorted by destination): the edges into task v are
    order[offsets[v]:offsets[v + 1]]."""
    dst = graph.edges["dst"]
    order = np.argsort(dst, kind="stable").astype(np.int64)
    offsets = np.zeros(graph.task_count + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=graph.task_count), out=offsets[1:])
    return offsets, order


def forward_times(graph: Graph, order: np.ndarray,
                  pins: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, ready) of every task (ns), in one pass over the topological `order`.

    `ready` is when the task's dependencies allowed it to start, before its delay. `pins`
    (recorded start per task, UNSET for none) holds tasks at those times: only the graph
    builder uses it, to measure the delays that replace them.
    """
    offsets, edges_in = in_edges(graph)
    tasks, edges = graph.tasks, graph.edges
    return _forward_pass(
        np.ascontiguousarray(order, dtype=np.int64),
        offsets,
        edges_in,
        np.ascontiguousarray(edges["src"], dtype=np.int64),
        host_edge_mask(graph),
        np.ascontiguousarray(edges["latency_ns"], dtype=np.int64),
        np.ascontiguousarray(edges["from_start"], dtype=np.bool_),
        np.ascontiguousarray(tasks["gap_ns"], dtype=np.int64),
        np.ascontiguousarray(tasks["duration_ns"], dtype=np.int64),
        np.ascontiguousarray(edges["kind"] == DepKind.DELAY_ANCHOR, dtype=np.bool_),
        np.ascontiguousarray(tasks["delay_ns"], dtype=np.int64),
        np.ascontiguousarray(tasks["delay_span_ns"], dtype=np.int64),
        np.ascontiguousarray(tasks["measured_start_ns"], dtype=np.int64),
        np.full(graph.task_count, UNSET, dtype=np.int64) if pins is None
        else np.ascontiguousarray(pins, dtype=np.int64),
    )


@jit
# (the compiled hot loop, kept whole beside its plain-Python reference)
def _forward_pass(  # noqa: C901
    order: np.ndarray,
    offsets: np.ndarray,
    in_edges: np.ndarray,
    src: np.ndarray,
    host_edge: np.ndarray,
    latency: np.ndarray,
    from_start: np.ndarray,
    gap: np.ndarray,
    duration: np.ndarray,
    anchor_edge: np.ndarray,
    delay: np.ndarray,
    delay_span: np.ndarray,
    measured_start: np.ndarray,
    pins: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = gap.shape[0]
    unset = np.iinfo(np.int64).min
    start = np.full(n, unset, dtype=np.int64)
    end = np.full(n, unset, dtype=np.int64)
    ready_at = np.full(n, unset, dtype=np.int64)
    for position in range(order.shape[0]):
        v = order[position]
        host_ready = unset
        other_ready = unset
        anchor = unset
        for k in range(offsets[v], offsets[v + 1]):
            e = in_edges[k]
            u = src[e]
            ready = (start[u] if from_start[e] else end[u]) + latency[e]
            if anchor_edge[e]:
                anchor = end[u]
            if host_edge[e]:
                if ready > host_ready:
                    host_ready = ready
            elif ready > other_ready:
                other_ready = ready
        begin = unset
        if host_ready != unset:
            begin = host_ready + gap[v]
        if other_ready > begin:
            begin = other_ready
        if begin == unset:
            begin = measured_start[v]
        ready_at[v] = begin
        if delay[v] > 0:
            begin += _scaled_delay(delay[v], delay_span[v], begin, anchor, unset)
        if pins[v] > begin:
            begin = pins[v]
        start[v] = begin
        end[v] = begin + duration[v]
    return start, end, ready_at


@jit
def _scaled_delay(delay: int, span: int, ready: int, anchor: int, unset: int) -> int:
    """An unexplained delay: fixed, or scaled by the progress since its
    anchor (ready - anchor) over `span`, never above the recorded delay
    (a what-if does not lengthen what the trace cannot explain)."""
    if span <= 0 or anchor == unset:
        return delay
    progress = ready - anchor
    if progress <= 0:
        return 0
    if progress >= span:
        return delay
    return int(delay * (progress / span))


def delay_plain(delay: int, span: int, ready: int, anchor: int | None) -> int:
    """`_scaled_delay` in plain Python (the same float arithmetic, so
    the engines agree to the ns)."""
    if span <= 0 or anchor is None:
        return delay
    progress = ready - anchor
    if progress <= 0:
        return 0
    return delay if progress >= span else int(delay * (progress / span))


