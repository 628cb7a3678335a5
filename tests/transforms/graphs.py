"""Tiny graphs built by hand for transform tests: every field explicit, every time computable."""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import EDGE_COLUMNS, TASK_COLUMNS, empty_columns
from daydream.mapping import PHASES

HOST, STREAM = 0, 1


def graph(tasks: list[dict[str, Any]], edges: list[tuple[int, int, DepKind, int, bool]], layers: list[str] = ()) -> Graph:
    """tasks: dicts with kind, duration and optional resource, gap, name, phase, layer, iteration."""
    names = sorted({t.get("name", "task") for t in tasks})
    built = Graph(tasks=empty_columns(TASK_COLUMNS), edges=empty_columns(EDGE_COLUMNS),
                  resources=[Resource(ResourceKind.HOST_THREAD, "main"), Resource(ResourceKind.GPU_STREAM, "s7", 0, 7)],
                  strings=names, layers=list(layers))
    host_kinds = (TaskKind.HOST_CALL, TaskKind.HOST_OP, TaskKind.COMPLETION, TaskKind.MARKER)
    built.add_tasks(
        kind=[int(t["kind"]) for t in tasks],
        resource=[t.get("resource", HOST if t["kind"] in host_kinds else STREAM) for t in tasks],
        duration_ns=[t["duration"] for t in tasks],
        gap_ns=[t.get("gap", 0) for t in tasks],
        name=[names.index(t.get("name", "task")) for t in tasks],
        phase=[PHASES.index(t["phase"]) if "phase" in t else -1 for t in tasks],
        layer=[list(layers).index(t["layer"]) if "layer" in t else -1 for t in tasks],
        iteration=[t.get("iteration", 0) for t in tasks],
        measured_start_ns=np.arange(len(tasks)) * 10,
    )
    for src, dst, kind, latency, from_start in edges:
        built.add_edges([src], [dst], kind, latency_ns=latency, from_start=from_start)
    return built


def call(name: str = "cudaLaunchKernel", duration: int = 5, gap: int = 0, **fields: Any) -> dict[str, Any]:
    return {"kind": TaskKind.HOST_CALL, "name": name, "duration": duration, "gap": gap, **fields}


def kernel(name: str, duration: int, **fields: Any) -> dict[str, Any]:
    return {"kind": TaskKind.KERNEL, "name": name, "duration": duration, **fields}


def op(name: str, duration: int, gap: int = 0, **fields: Any) -> dict[str, Any]:
    return {"kind": TaskKind.HOST_OP, "name": name, "duration": duration, "gap": gap, **fields}


def launch_chain(calls: list[dict[str, Any]], kernels: list[dict[str, Any]], latency: int = 4, kernel_gap: int = 1,
                 ) -> tuple[list[dict[str, Any]], list[tuple[int, int, DepKind, int, bool]]]:
    """Host calls in program order, each launching one kernel; kernels in stream order."""
    tasks = [*calls, *kernels]
    n = len(calls)
    edges = [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(n - 1)]
    edges += [(i, n + i, DepKind.LAUNCH, latency, True) for i in range(n)]
    edges += [(n + i, n + i + 1, DepKind.STREAM_ORDER, kernel_gap, False) for i in range(n - 1)]
    return tasks, edges


#: No end: an allocation that outlives the window.
NEVER = np.iinfo(np.int64).max


def two_block_allocations(sizes: list[float], starts: list[int], ends: list[int]) -> Any:
    """Allocations of a two-block model, in this order: its weights and optimizer state (no layer; from before the
    window), blocks.0's and blocks.1's activations (forward), blocks.1's and blocks.0's gradients (backward), all of
    iteration 0 but the first two; `sizes` bytes, `starts` and `ends` ns (NEVER: not freed)."""
    from daydream.memory.timeline import CATEGORIES
    from daydream.memory.whatif import Allocations

    act, grad, weights, state = (CATEGORIES.index(c) for c in ("activations", "gradients", "weights", "optimizer state"))
    return Allocations(size=np.array(sizes, dtype=np.float64), start=np.array(starts), end=np.array(ends),
                       category=np.array([weights, state, act, act, grad, grad], dtype=np.int8),
                       layer=np.array([-1, -1, 0, 1, 1, 0]), phase=np.array([-1, -1, 0, 0, 1, 1]),
                       iteration=np.array([-1, -1, 0, 0, 0, 0]), baseline_times=np.zeros(1, dtype=np.int64),
                       baseline_bytes=np.zeros(1))
