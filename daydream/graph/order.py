"""Topological order of a task graph given as edge arrays, and cycle finding."""

from __future__ import annotations

import numpy as np

from daydream._jit import jit


def csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Out-edges grouped by source: (offsets of length n+1, edge ids sorted by source)."""
    order = np.argsort(src, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=offsets[1:])
    return offsets, order.astype(np.int64)


@jit
def _before(key_a: int, id_a: int, key_b: int, id_b: int) -> bool:
    return key_a < key_b or (key_a == key_b and id_a < id_b)


@jit
def _heap_push(heap_key: np.ndarray, heap_id: np.ndarray, size: int, key: int, item: int) -> int:
    """Push (key, item) on the binary min-heap of `size` entries; returns the new size."""
    i = size
    heap_key[i] = key
    heap_id[i] = item
    while i > 0:
        parent = (i - 1) // 2
        if _before(heap_key[parent], heap_id[parent], heap_key[i], heap_id[i]):
            break
        heap_key[parent], heap_key[i] = heap_key[i], heap_key[parent]
        heap_id[parent], heap_id[i] = heap_id[i], heap_id[parent]
        i = parent
    return size + 1


@jit
def _heap_pop(heap_key: np.ndarray, heap_id: np.ndarray, size: int) -> int:
    """Remove the smallest entry (read it from index 0 first); returns the new size."""
    size -= 1
    heap_key[0] = heap_key[size]
    heap_id[0] = heap_id[size]
    i = 0
    while True:
        left = 2 * i + 1
        right = left + 1
        smallest = i
        if (left < size
            and _before(heap_key[left], heap_id[left], heap_key[smallest], heap_id[smallest])):
            smallest = left
        if (right < size
            and _before(heap_key[right], heap_id[right], heap_key[smallest], heap_id[smallest])):
            smallest = right
        if smallest == i:
            return size
        heap_key[smallest], heap_key[i] = heap_key[i], heap_key[smallest]
        heap_id[smallest], heap_id[i] = heap_id[i], heap_id[smallest]
        i = smallest


@jit
def _kahn(n: int, dst: np.ndarray, offsets: np.ndarray, by_source: np.ndarray,
          priority: np.ndarray) -> np.ndarray:
    """Kahn's algorithm; among ready tasks the lowest `priority` (then id) goes first.

    Returns the order; shorter than n when the graph has a cycle.
    """
    indegree = np.zeros(n, dtype=np.int64)
    for e in range(dst.shape[0]):
        indegree[dst[e]] += 1
    # A binary heap of (priority, id) keeps the order deterministic and close to trace order.
    heap_key = np.empty(n, dtype=np.int64)
    heap_id = np.empty(n, dtype=np.int64)
    size = 0
    for v in range(n):
        if indegree[v] == 0:
            size = _heap_push(heap_key, heap_id, size, priority[v], v)
    order = np.empty(n, dtype=np.int64)
    count = 0
    while size > 0:
        v = heap_id[0]
        size = _heap_pop(heap_key, heap_id, size)
        order[count] = v
        count += 1
        for k in range(offsets[v], offsets[v + 1]):
            w = dst[by_source[k]]
            indegree[w] -= 1
            if indegree[w] == 0:
                size = _heap_push(heap_key, heap_id, size, priority[w], w)
    return order[:count]


def topological_or_partial(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A topological order of the tasks not on or behind a cycle (all n when there is none)."""
    return _topological_or_partial(n, src, dst, None)


def topological_order(n: int, src: np.ndarray, dst: np.ndarray,
                      priority: np.ndarray | None = None) -> np.ndarray:
    """Task ids in an order where every edge goes forward; ties broken by `priority`, then id.

    Raises ValueError if the graph has a cycle.
    """
    order = _topological_or_partial(n, src, dst, priority)
    if order.size < n:
        raise ValueError(f"the graph has a dependency cycle ({n - order.size} tasks on or behind "
                         "it)")
    return order


def _topological_or_partial(n: int, src: np.ndarray, dst: np.ndarray,
                            priority: np.ndarray | None) -> np.ndarray:
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    keys = (np.zeros(n, dtype=np.int64) if priority is None
            else np.ascontiguousarray(priority, dtype=np.int64))
    offsets, by_source = csr(n, src, dst)
    return _kahn(n, dst, offsets, by_source, keys)


def find_cycle(n: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """One dependency cycle as a list of task ids, or [] when the graph is acyclic."""
    order = _topological_or_partial(n, src, dst, None)
    if order.size == n:
        return []
    import networkx as nx

    remaining = np.ones(n, dtype=bool)
    remaining[order] = False
    keep = remaining[src] & remaining[dst]
    view = nx.DiGraph()
    view.add_edges_from(zip(src[keep].tolist(), dst[keep].tolist()))
    return [int(u) for u, _ in nx.find_cycle(view)]
