"""Gradients, buckets, and inserting communication into one rank's
graph: what every data-parallel what-if shares.

Gradients become ready when the last backward work of their layer ends; they are grouped into
buckets in that order (PyTorch DDP: a first bucket of 1 MiB, then `bucket` bytes). Gradient sizes
come from the layers a `daydream trace` recording lists, else from the collectives `no-comm`
removed, else from `params=BYTES` spread evenly over the backward work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import DEVICE_WORK, GPU_WORK, HOST_WORK
from daydream.mapping import PHASES
from daydream.transforms.distributed.fabric import parse_bytes
from daydream.transforms.registry import Context

BACKWARD, OPTIMIZER, FORWARD = (PHASES.index("backward"), PHASES.index("optimizer"),
                                PHASES.index("forward"))
FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES


def work_kinds(graph: Graph) -> list[int]:
    """GPU work in a GPU graph, host work in a CPU-only one (see Graph.has_device_work)."""
    return [int(k) for k in (GPU_WORK if graph.has_device_work() else HOST_WORK)]


def gradient_events(graph: Graph, iteration: int, context: Context,
                    total_bytes: int | None) -> list[tuple[int, int]]:
    """(task after which a gradient is ready, its bytes), in the order backward produces them."""
    backward = phase_work(graph, iteration, BACKWARD)
    if backward.size == 0:
        return []
    if total_bytes is None and context.gradient_bytes:
        events = ([(task, size)
                   for _, size, task in layer_tasks(graph, backward, context.gradient_bytes,
                                                    last=True)])
        if events:
            return events
    if total_bytes is None:
        return []
    # Gradients spread evenly over backward work: chunk k is ready once
    # that share of the work is done.
    work = np.cumsum(graph.tasks["duration_ns"][backward].astype(np.float64))
    chunks = min(64, backward.size)
    marks = np.searchsorted(work, work[-1] * np.arange(1, chunks + 1) / chunks, side="left")
    sizes = np.diff(np.round(np.linspace(0, total_bytes, chunks + 1))).astype(np.int64)
    return ([(int(backward[min(m, backward.size - 1)]), int(b)) for m, b in zip(marks, sizes)
             if b > 0])


def phase_work(graph: Graph, iteration: int, phase: int) -> np.ndarray:
    """The work tasks of `phase` in `iteration`, in recorded order."""
    tasks = graph.tasks
    work = np.flatnonzero((tasks["iteration"] == iteration) & (tasks["phase"] == phase) & np.isin(
        tasks["kind"], work_kinds(graph)))
    return work[np.lexsort((tasks["measured_end_ns"][work], tasks["measured_start_ns"][work]))]


def layer_tasks(graph: Graph, work: np.ndarray, sizes: dict[str, int],
                last: bool) -> list[tuple[int, int, int]]:
    """(layer, its bytes, its first or last task in `work`) for each
    layer with bytes, in the order of those tasks.

    A layer without work of its own takes its nearest ancestor's (a module whose children ran the
    kernels); one with no such ancestor takes the first or last task of `work`.
    """
    parent = _parents(graph.layers)
    seen: dict[int, int] = {}
    for task in work.tolist():
        layer = int(graph.tasks["layer"][task])
        while layer >= 0:
            if last or layer not in seen:
                seen[layer] = task
            layer = parent[layer]
    found = []
    for index, name in enumerate(graph.layers):
        size = sizes.get(name, 0)
        if size <= 0:
            continue
        owner = index
        while owner >= 0 and owner not in seen:
            owner = parent[owner]
        found.append((index, size, seen[owner] if owner >= 0 else int(work[-1 if last else 0])))
    position = {task: k for k, task in enumerate(work.tolist())}
    return sorted(found, key=lambda item: position[item[2]])


def _parents(layers: list[str]) -> list[int]:
    """Per layer (module path), the index of its parent module's layer, or -1."""
    index = {name: k for k, name in enumerate(layers)}
    return [index.get(name.rsplit(".", 1)[0], -1) if "." in name else -1 for name in layers]


def buckets(events: list[tuple[int, int]], cap_bytes: int,
            first_bytes: int = FIRST_BUCKET_BYTES) -> list[tuple[int, int]]:
    """Group ready gradients into buckets: (task the bucket waits for,
    bytes). The first bucket is `first_bytes`."""
    result, size, limit = [], 0, min(first_bytes, cap_bytes)
    for task, nbytes in events:
        size += nbytes
        if size >= limit:
            result.append((task, size))
            size, limit = 0, cap_bytes
    if size:
        result.append((events[-1][0], size))
    return result


# ------------------------------------------------------------------ inserting communication


def comm_resource(graph: Graph, label: str) -> int:
    graph.resources.append(Resource(ResourceKind.COMM_CHANNEL, label))
    return len(graph.resources) - 1


def insert_collectives(graph: Graph, resource: int, iteration: int,
                       plan: list[tuple[int, int, str, int]], chain: bool = True) -> np.ndarray:
    """Add collectives (waits-for task, bytes, name, duration ns) on
    `resource`, chained in order when `chain`."""
    if not plan:
        return np.empty(0, dtype=np.int64)
    names = [graph.string_id(n) for _, _, n, _ in plan]
    after = np.array([p[0] for p in plan], dtype=np.int64)
    ids = graph.add_tasks(kind=int(TaskKind.COLLECTIVE), resource=resource, name=names,
                          duration_ns=[p[3] for p in plan], bytes=[p[1] for p in plan],
                          iteration=iteration, phase=graph.tasks["phase"][after],
                          measured_start_ns=graph.tasks["measured_end_ns"][after],
                          measured_end_ns=graph.tasks["measured_end_ns"][after])
    graph.add_edges(after, ids, DepKind.COMMUNICATION)
    if chain and ids.size > 1:
        graph.add_edges(ids[:-1], ids[1:], DepKind.STREAM_ORDER)
    return ids


def first_task(graph: Graph, iteration: int, phase: int) -> int | None:
    """The earliest work task of `phase` in `iteration` (GPU work when the graph has any)."""
    work = phase_work(graph, iteration, phase)
    return int(work[0]) if work.size else None


def optimizer_step(graph: Graph, iteration: int, ready: int) -> tuple[int | None, str | None]:
    """The task that must wait for the gradients task `ready` made,
    once communicated: the optimizer step of `iteration`, else (with a
    problem to say) the iteration's end; None when there is neither.

    The step is the first optimizer work recorded after `ready`: optimizer work before it
    (`zero_grad` at the top of the loop) is not the step, and waiting there would be a cycle.
    """
    tasks = graph.tasks
    optimizer = phase_work(graph, iteration, OPTIMIZER)
    start, ready_start = tasks["measured_start_ns"][optimizer], tasks["measured_start_ns"][ready]
    after = optimizer[(start > ready_start) | ((start == ready_start) & (optimizer > ready))]
    if after.size:
        return int(after[0]), None
    if iteration < len(graph.iteration_markers):
        return (graph.iteration_markers[iteration][1],
                "no optimizer work after backward found: the iteration's end waits for the last "
                "bucket instead")
    return None, None


def scale_optimizer(graph: Graph, iteration: int, world: float) -> np.ndarray:
    """Each rank updates its 1/world shard: the optimizer's device work (a CPU-only graph: its host
    ops) of `iteration` ÷ world (a share of the parameters split: ÷ 1/share), its launches as they
    were. Returns the tasks scaled."""
    tasks = graph.tasks
    kinds = [int(k) for k in DEVICE_WORK] if graph.has_device_work() else [int(TaskKind.HOST_OP)]
    chosen = np.flatnonzero((tasks["iteration"] == iteration) & (
        tasks["phase"] == OPTIMIZER) & np.isin(tasks["kind"], kinds))
    tasks["duration_ns"][chosen] = np.round(tasks["duration_ns"][chosen] / world).astype(np.int64)
    return chosen


def dispatched_optimizer(graph: Graph, iteration: int, world: float, op_ns: int) -> int:
    """`scale_optimizer` (each rank updates its share), and each of the optimizer's host ops (a
    GPU's: those that launched its work) paying `op_ns` more: DTensor's dispatch, where the
    parameters are DTensors. Returns how many paid it."""
    work = scale_optimizer(graph, iteration, world)
    if graph.has_device_work():
        launch = graph.edges_of_kind(DepKind.LAUNCH)
        work = np.unique(graph.edges["src"][launch][np.isin(graph.edges["dst"][launch], work)])
    graph.tasks["duration_ns"][work] += op_ns
    return int(work.size)


def true_runs(member: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each maximal run of True in `member`."""
    padded = np.r_[False, member, False].astype(np.int8)
    edges = np.diff(padded)
    return list(zip(np.flatnonzero(edges == 1).tolist(),
                    (np.flatnonzero(edges == -1) - 1).tolist()))


def iterations_of(graph: Graph) -> list[int]:
    found = np.unique(graph.tasks["iteration"])
    return [int(i) for i in found if i >= 0]


def collectives(graph: Graph) -> np.ndarray:
    """The ids of the graph's collectives, recorded or inserted."""
    return np.flatnonzero(graph.tasks["kind"] == TaskKind.COLLECTIVE)


def no_existing_collectives(graph: Graph, name: str) -> None:
    """Refuse a trace that recorded collectives (one rank of a job): a layout models the job from
    one rank's compute. Collectives another layout inserted (no recorded event) are that layout's,
    composed with this one."""
    found = collectives(graph)
    count = int(np.count_nonzero(graph.tasks["event"][found] >= 0))
    if count:
        raise InputError(f"{name}: the trace already has {count} collectives (it is a rank of a "
                         f"distributed job) — put no-comm before {name} (--opt no-comm --opt "
                         f"{name}:...) to model the job from this rank's compute")


def gradient_volume(graph: Graph, params: dict[str, Any]) -> int | None:
    if params.get("params"):
        return parse_bytes(params["params"], "params")
    removed = graph.data_parallel.removed_allreduce_bytes
    return removed or None



def last_task(graph: Graph, iteration: int, phase: int) -> int | None:
    """The work task of `phase` in `iteration` that ends last."""
    work = phase_work(graph, iteration, phase)
    return int(work[np.argmax(graph.tasks["measured_end_ns"][work])]) if work.size else None


def before_next_iteration(graph: Graph, iteration: int, task: int,
                          layer: int | None = None) -> None:
    """`task` must finish before the next iteration's first forward work (of `layer`, if given), or,
    after the last iteration, before the iteration's end."""
    target = (first_task(graph, iteration + 1, FORWARD) if layer is None
              else first_forward_of(graph, iteration + 1, layer))
    if target is None and iteration < len(graph.iteration_markers):
        target = graph.iteration_markers[iteration][1]
    if target is not None:
        graph.add_edges([task], [target], DepKind.COMMUNICATION)



def first_tasks(graph: Graph, iteration: int, context: Context,
                phase: int) -> list[tuple[int, int, int]]:
    """(layer, bytes, its first task of `phase`) for layers with
    parameters, in the order they run."""
    work = phase_work(graph, iteration, phase)
    return layer_tasks(graph, work, context.gradient_bytes, last=False) if work.size else []


def first_forward_of(graph: Graph, iteration: int, layer: int) -> int | None:
    work = phase_work(graph, iteration, FORWARD)
    work = work[graph.tasks["layer"][work] == layer]
    return int(work[0]) if work.size else None

