"""Distributed-training what-ifs: data parallelism from one rank's trace, and re-timed communication.

    ddp:world=8[,interconnect=nvlink3][,bandwidth=GB/s][,latency=us][,bucket=25MB]
    comm:factor=2 | comm:bandwidth=100 | no-comm
    p3:world=8[,slice=4MB]  grad-compression:ratio=100[,world=8]  zero:stage=1|2|3,world=8

Data parallelism (`ddp`, `p3`, `zero`) is modelled on the trace of one rank: every rank
runs the same step, so one rank's graph plus its communication is the job's step.
Gradients become ready when the last backward work of their layer ends; they are
grouped into buckets in that order (PyTorch DDP: a first bucket of 1 MiB, then
`bucket` bytes), and each bucket is one all-reduce on a communication stream of its
own, timed by daydream.interconnect's cost model, overlapping the rest of backward;
the optimizer waits for the last bucket. Gradient sizes come from the layers a
`daydream trace` recording lists, else from the collectives `no-comm` removed, else
from `params=BYTES` spread evenly over the backward work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import DEVICE_WORK
from daydream.interconnect import Interconnect, collective_time_ns, interconnect, interconnect_of_device, normalize_operation
from daydream.mapping import PHASES
from daydream.transforms.optimizations import FACTOR_RANGE, MAX_WORLD, Context, Optimization, Parameter, bandwidth, register
from daydream.transforms.primitives import GPU_WORK, HOST_WORK, remove

BACKWARD, OPTIMIZER, FORWARD = PHASES.index("backward"), PHASES.index("optimizer"), PHASES.index("forward")
FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
GPUS_PER_NODE = 8
REMOVED_BYTES_KEY = "no-comm.allreduce_bytes_per_iteration"
_SIZE = re.compile(r"^\s*([0-9.]+(?:e[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def parse_bytes(text: str, what: str) -> int:
    """'25MB' -> 25e6, '25MiB' -> 25 * 2**20, '1e8' -> 1e8 (bytes)."""
    found = _SIZE.match(str(text))
    if not found or found.group(2).lower() not in _UNITS:
        raise InputError(f"{what}={text!r} is not a size — write bytes like 25MB, 512KiB or 1e8")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


# ------------------------------------------------------------------ where the links come from


@dataclass(slots=True, frozen=True)
class Fabric:
    """The link a data-parallel job of `world` ranks communicates over."""

    link: Interconnect
    world: int
    algorithm: str

    def time_ns(self, operation: str, message_bytes: float) -> int:
        return collective_time_ns(operation, message_bytes, self.world, self.link, self.algorithm)


def fabric(params: dict[str, Any], context: Context, world: int) -> Fabric:
    """interconnect= (preset), else the trace's GPU's link within a node and network= across nodes; bandwidth=/latency= override."""
    if world < 1:
        raise InputError(f"world={world}: the number of ranks must be at least 1")
    name = str(params.get("interconnect") or "auto")
    if name != "auto":
        link = interconnect(name)
    elif world > int(params.get("gpus_per_node", GPUS_PER_NODE)):
        link = interconnect(str(params.get("network", "ib-hdr")))
    else:
        found = interconnect_of_device(context.device.interconnect if context.device else None)
        if found is None and not params.get("bandwidth"):
            raise InputError("the trace's GPU is not in the device table, so its interconnect is unknown — "
                             "give interconnect=NAME (e.g. nvlink3, pcie4, ib-hdr) or bandwidth=GB/s")
        link = found or Interconnect("custom", 1.0, 10.0)
    if params.get("bandwidth"):
        link = Interconnect(link.name, float(params["bandwidth"]), link.step_latency_us)
    if float(params.get("latency", -1.0)) >= 0:
        link = Interconnect(link.name, link.bus_bandwidth_gbs, float(params["latency"]))
    algorithm = str(params.get("algorithm", "auto"))
    if algorithm not in ("ring", "tree", "auto"):
        raise InputError(f"algorithm={algorithm!r}: choose ring, tree or auto")
    return Fabric(link, world, algorithm)


# ------------------------------------------------------------------ gradients and buckets


def _work_kinds(graph: Graph) -> list[int]:
    """GPU work in a GPU graph, host work in a CPU-only one (see Graph.has_device_work)."""
    return [int(k) for k in (GPU_WORK if graph.has_device_work() else HOST_WORK)]


def gradient_events(graph: Graph, iteration: int, context: Context, total_bytes: int | None) -> list[tuple[int, int]]:
    """(task after which a gradient is ready, its bytes), in the order backward produces them."""
    backward = phase_work(graph, iteration, BACKWARD)
    if backward.size == 0:
        return []
    if total_bytes is None and context.gradient_bytes:
        events = [(task, size) for _, size, task in layer_tasks(graph, backward, context.gradient_bytes, last=True)]
        if events:
            return events
    if total_bytes is None:
        return []
    # Gradients spread evenly over backward work: chunk k is ready once that share of the work is done.
    work = np.cumsum(graph.tasks["duration_ns"][backward].astype(np.float64))
    chunks = min(64, backward.size)
    marks = np.searchsorted(work, work[-1] * np.arange(1, chunks + 1) / chunks, side="left")
    sizes = np.diff(np.round(np.linspace(0, total_bytes, chunks + 1))).astype(np.int64)
    return [(int(backward[min(m, backward.size - 1)]), int(b)) for m, b in zip(marks, sizes) if b > 0]


def phase_work(graph: Graph, iteration: int, phase: int) -> np.ndarray:
    """The work tasks of `phase` in `iteration`, in recorded order."""
    tasks = graph.tasks
    work = np.flatnonzero((tasks["iteration"] == iteration) & (tasks["phase"] == phase) & np.isin(tasks["kind"], _work_kinds(graph)))
    return work[np.lexsort((tasks["measured_end_ns"][work], tasks["measured_start_ns"][work]))]


def layer_tasks(graph: Graph, work: np.ndarray, sizes: dict[str, int], last: bool) -> list[tuple[int, int, int]]:
    """(layer, its bytes, its first or last task in `work`) for each layer with bytes, in the order of those tasks.

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


def buckets(events: list[tuple[int, int]], cap_bytes: int, first_bytes: int = FIRST_BUCKET_BYTES) -> list[tuple[int, int]]:
    """Group ready gradients into buckets: (task the bucket waits for, bytes). The first bucket is `first_bytes`."""
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


def insert_collectives(graph: Graph, resource: int, iteration: int, plan: list[tuple[int, int, str, int]],
                       chain: bool = True) -> np.ndarray:
    """Add collectives (waits-for task, bytes, name, duration ns) on `resource`, chained in order when `chain`."""
    if not plan:
        return np.empty(0, dtype=np.int64)
    names = [graph.strings.index(n) if n in graph.strings else _add_string(graph, n) for _, _, n, _ in plan]
    after = np.array([p[0] for p in plan], dtype=np.int64)
    ids = graph.add_tasks(kind=int(TaskKind.COLLECTIVE), resource=resource, name=names,
                          duration_ns=[p[3] for p in plan], bytes=[p[1] for p in plan], iteration=iteration,
                          phase=graph.tasks["phase"][after], measured_start_ns=graph.tasks["measured_end_ns"][after],
                          measured_end_ns=graph.tasks["measured_end_ns"][after])
    graph.add_edges(after, ids, DepKind.COMMUNICATION)
    if chain and ids.size > 1:
        graph.add_edges(ids[:-1], ids[1:], DepKind.STREAM_ORDER)
    return ids


def _add_string(graph: Graph, text: str) -> int:
    graph.strings.append(text)
    return len(graph.strings) - 1


def first_task(graph: Graph, iteration: int, phase: int) -> int | None:
    """The earliest work task of `phase` in `iteration` (GPU work when the graph has any)."""
    work = phase_work(graph, iteration, phase)
    return int(work[0]) if work.size else None


def wait_before_optimizer(graph: Graph, iteration: int, last: int) -> str | None:
    """The optimizer of `iteration` waits for task `last`; without one, the iteration's end does."""
    target = first_task(graph, iteration, OPTIMIZER)
    problem = None
    if target is None and iteration < len(graph.iteration_markers):
        target = graph.iteration_markers[iteration][1]
        problem = "no optimizer work found: the iteration's end waits for the last bucket instead"
    if target is not None:
        graph.add_edges([last], [target], DepKind.COMMUNICATION)
    return problem


def iterations_of(graph: Graph) -> list[int]:
    found = np.unique(graph.tasks["iteration"])
    return [int(i) for i in found if i >= 0]


def _no_existing_collectives(graph: Graph, name: str) -> None:
    count = int(np.sum(graph.tasks["kind"] == TaskKind.COLLECTIVE))
    if count:
        raise InputError(f"{name}: the trace already has {count} collectives (it is a rank of a distributed job) — "
                         f"put no-comm before {name} (--opt no-comm --opt {name}:...) to model the job from this rank's compute")


def _gradient_volume(graph: Graph, params: dict[str, Any]) -> int | None:
    if params.get("params"):
        return parse_bytes(params["params"], "params")
    removed = graph.calibration.get(REMOVED_BYTES_KEY)
    return int(removed) if removed else None


# ------------------------------------------------------------------ ddp


#: What `fabric` reads: the link a collective is timed over.
LINK_PARAMETERS: dict[str, Parameter] = {
    "interconnect": Parameter(str, "auto", "preset: nvlink2..5, pcie3..5, ib-edr/hdr/ndr, ethernet-10g/25g/100g"),
    "network": Parameter(str, "ib-hdr", "the preset between nodes, when world exceeds gpus_per_node"),
    "gpus_per_node": Parameter(int, GPUS_PER_NODE, "ranks that share the intra-node link", 1, 4096),
    "bandwidth": Parameter(bandwidth, 0.0, "bus bandwidth in GB/s, or with a unit: 25GB/s, 200Gbps (overrides the preset)", 0.0, 1e6),
    "latency": Parameter(float, -1.0, "per-step latency in µs (overrides the preset)", -1.0, 1e7),
    "algorithm": Parameter(str, "auto", "ring, tree or auto (the faster per message)"),
}
DATA_PARALLEL_PARAMETERS: dict[str, Parameter] = {"world": Parameter(int, 8, "data-parallel ranks", 1, MAX_WORLD), **LINK_PARAMETERS,
     "bucket": Parameter(str, "25MiB", "bucket size"),
     "params": Parameter(str, "", "trainable parameter bytes, when the trace does not list them (e.g. 97MB)")}


def _ddp(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    return data_parallel(graph, params, context, "ddp", "allreduce")


def data_parallel(graph: Graph, params: dict[str, Any], context: Context, name: str, operation: str) -> list[str]:
    """Buckets of gradients, one `operation` per bucket on a communication stream, the optimizer after the last."""
    _no_existing_collectives(graph, name)
    world = int(params["world"])
    net = fabric(params, context, world)
    cap = parse_bytes(params.get("bucket", "25MiB"), "bucket")
    total = _gradient_volume(graph, params)
    resource = comm_resource(graph, f"{name} communication")
    notes: list[str] = []
    inserted = 0
    volume = 0
    for iteration in iterations_of(graph):
        events = gradient_events(graph, iteration, context, total)
        if not events:
            continue
        plan = []
        for index, (task, nbytes) in enumerate(buckets(events, cap)):
            plan.append((task, nbytes, f"{name} {operation} (bucket {index}, {nbytes / 2**20:.1f} MiB)",
                         net.time_ns(operation, nbytes)))
        ids = insert_collectives(graph, resource, iteration, plan)
        inserted += ids.size
        volume = sum(p[1] for p in plan)
        problem = wait_before_optimizer(graph, iteration, int(ids[-1]))
        if problem and problem not in notes:
            notes.append(problem)
    if not inserted:
        raise InputError(f"{name}: no gradient sizes — the trace has no backward work with known layers; record it with "
                         "daydream trace, or give params=BYTES (the model's trainable parameters, e.g. params=97MB)")
    graph.calibration.update({"dp.world": world, "dp.bandwidth_gbs": net.link.bus_bandwidth_gbs,
                              "dp.latency_us": net.link.step_latency_us})
    per_iteration = inserted / max(len(iterations_of(graph)), 1)
    shown = {"allreduce": "all-reduces", "reducescatter": "reduce-scatters"}.get(operation, operation)
    notes.insert(0, f"{name}: world={world}, {per_iteration:.0f} {shown} of {volume / 2**20:.1f} MiB per iteration over "
                    f"{net.link.name} ({net.link.bus_bandwidth_gbs:g} GB/s bus, {net.link.step_latency_us:g} µs per step, "
                    f"{net.algorithm}); the optimizer waits for the last bucket")
    return notes


register(Optimization(
    "ddp", "data parallelism over WORLD ranks (PyTorch DDP), from a one-rank trace",
    "gradients become ready when their layer's last backward work ends; in that order they fill buckets "
    "(1 MiB first, then bucket=25MiB); one all-reduce per bucket on a communication stream, timed by the ring/tree "
    "alpha-beta model of daydream.interconnect (2(n-1)/n·S/B + 2(n-1)·latency for a ring), overlapping backward; "
    "the optimizer waits for the last bucket. Link: interconnect= preset, else the GPU's NVLink/PCIe within "
    f"{GPUS_PER_NODE} ranks and network=ib-hdr beyond; bandwidth=GB/s and latency=µs override. world=1 changes nothing",
    _ddp,
    DATA_PARALLEL_PARAMETERS,
))


# ------------------------------------------------------------------ existing collectives


def _collectives(graph: Graph) -> np.ndarray:
    return np.flatnonzero(graph.tasks["kind"] == TaskKind.COLLECTIVE)


def _no_comm(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    chosen = _collectives(graph)
    if chosen.size == 0:
        return ["no-comm: the trace has no collectives; nothing to remove"]
    names = [graph.task_name(int(t)) for t in chosen]
    reduce = np.array([_is_allreduce(n) for n in names], dtype=bool)
    iterations = max(len(iterations_of(graph)), 1)
    in_iterations = graph.tasks["iteration"][chosen] >= 0
    payload = int(graph.tasks["bytes"][chosen[reduce & in_iterations]].sum()) // iterations
    busy = int(graph.tasks["duration_ns"][chosen].sum())
    remove(graph, chosen)
    if payload:
        graph.calibration[REMOVED_BYTES_KEY] = payload
    return [f"no-comm: removed {chosen.size} collectives ({busy / 1e6:.2f} ms of communication kernels; "
            f"{payload / 2**20:.1f} MiB of all-reduce per iteration, which a following ddp uses as the gradient volume)"]


def _is_allreduce(name: str) -> bool:
    try:
        return normalize_operation(name) == "allreduce"
    except ValueError:
        return False


register(Optimization(
    "no-comm", "the step without communication",
    "removes every collective (NCCL kernel); what waited for one waits for what it waited for. Records the all-reduce "
    "bytes per iteration, so that a following ddp models the job from this rank's compute",
    _no_comm,
))


def _comm(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    chosen = _collectives(graph)
    if chosen.size == 0:
        return ["comm: the trace has no collectives; nothing to re-time"]
    factor = float(params["factor"])
    if factor <= 0:
        raise InputError(f"comm: factor={factor} must be positive")
    tasks = graph.tasks
    if params.get("interconnect", "auto") == "auto" and not params.get("bandwidth"):
        tasks["duration_ns"][chosen] = np.round(tasks["duration_ns"][chosen] / factor).astype(np.int64)
        return [f"comm: {chosen.size} collectives {factor:g}x faster"]
    world = int(params["world"]) or context.world_size
    if world < 2:
        raise InputError("comm: the trace does not say how many ranks the job has — give world=N")
    net = fabric(params, context, world)
    timed = 0
    for task in chosen.tolist():
        size = int(tasks["bytes"][task])
        try:
            operation = normalize_operation(graph.task_name(task))
        except ValueError:
            continue
        if size > 0:
            tasks["duration_ns"][task] = int(round(net.time_ns(operation, size) / factor))
            timed += 1
    note = (f"comm: {timed} of {chosen.size} collectives re-timed over {net.link.name} ({net.link.bus_bandwidth_gbs:g} GB/s, "
            f"world={world}, {net.algorithm})")
    if timed < chosen.size:
        note += f"; {chosen.size - timed} without a recorded size kept their time"
    return [note]


register(Optimization(
    "comm", "re-time the trace's collectives",
    "factor=F: every collective F times faster. interconnect=/bandwidth=: each collective with a recorded size "
    "(elements × dtype from its metadata) takes the cost model's time for its operation among world ranks "
    "(the trace's world size unless world= is given), divided by factor",
    _comm,
    {"factor": Parameter(float, 1.0, "speed-up of every collective", **FACTOR_RANGE), **LINK_PARAMETERS,
     "world": Parameter(int, 0, "ranks in the job (default: the trace's world size)", 0, MAX_WORLD)},
))


# ------------------------------------------------------------------ sharding (ZeRO / FSDP)


def _scale_optimizer(graph: Graph, iteration: int, world: int) -> int:
    """Each rank updates its 1/world shard: the optimizer's device work shrinks, its launches do not."""
    tasks = graph.tasks
    kinds = [int(k) for k in DEVICE_WORK] if graph.has_device_work() else [int(TaskKind.HOST_OP)]
    chosen = np.flatnonzero((tasks["iteration"] == iteration) & (tasks["phase"] == OPTIMIZER) & np.isin(tasks["kind"], kinds))
    tasks["duration_ns"][chosen] = np.round(tasks["duration_ns"][chosen] / world).astype(np.int64)
    return int(chosen.size)


def _last_task(graph: Graph, iteration: int, phase: int) -> int | None:
    """The work task of `phase` in `iteration` that ends last."""
    work = phase_work(graph, iteration, phase)
    return int(work[np.argmax(graph.tasks["measured_end_ns"][work])]) if work.size else None


def _before_next_iteration(graph: Graph, iteration: int, task: int, layer: int | None = None) -> None:
    """`task` must finish before the next iteration's first forward work (of `layer`, if given), or, after the
    last iteration, before the iteration's end."""
    target = first_task(graph, iteration + 1, FORWARD) if layer is None else _first_forward_of(graph, iteration + 1, layer)
    if target is None and iteration < len(graph.iteration_markers):
        target = graph.iteration_markers[iteration][1]
    if target is not None:
        graph.add_edges([task], [target], DepKind.COMMUNICATION)


def _gather_before(graph: Graph, resource: int, iteration: int, items: list[tuple[int, int, int]], net: Fabric,
                   anchor: int | None, label: str) -> int:
    """One all-gather per layer on `resource`, in order after `anchor` (prefetching), each before its layer's first task."""
    if not items or anchor is None:
        return 0
    plan = [(anchor, size, f"zero all-gather ({label}, {graph.layers[layer]})", net.time_ns("allgather", size))
            for layer, size, _ in items]
    ids = insert_collectives(graph, resource, iteration, plan)
    graph.add_edges(ids, [task for _, _, task in items], DepKind.COMMUNICATION)
    return int(ids.size)


def _zero(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    stage, world = int(params["stage"]), int(params["world"])
    if stage not in (1, 2, 3):
        raise InputError(f"zero:stage={stage}: the stage is 1, 2 or 3")
    notes = data_parallel(graph, params, context, "zero", "reducescatter")
    net = fabric(params, context, world)
    total = _gradient_volume(graph, params)
    gather = comm_resource(graph, "zero parameter all-gather")
    volume = total if total is not None else sum(context.gradient_bytes.values())
    gathers = scaled = 0
    iterations = max(len(iterations_of(graph)), 1)
    for iteration in iterations_of(graph):
        scaled += _scale_optimizer(graph, iteration, world)
        if stage < 3:
            last = _last_task(graph, iteration, OPTIMIZER)
            if last is not None and volume:
                ids = insert_collectives(graph, gather, iteration, [(last, volume, "zero all-gather (parameters)",
                                                                     net.time_ns("allgather", volume))])
                _before_next_iteration(graph, iteration, int(ids[0]))
                gathers += 1
            continue
        start = graph.iteration_markers[iteration][0] if iteration < len(graph.iteration_markers) else None
        gathers += _gather_before(graph, gather, iteration, _first_tasks(graph, iteration, context, FORWARD), net, start, "forward")
        gathers += _gather_before(graph, gather, iteration, _first_tasks(graph, iteration, context, BACKWARD), net,
                                  _last_task(graph, iteration, FORWARD), "backward")
    notes.append(f"zero stage {stage}: reduce-scatter instead of all-reduce; the optimizer's device work ÷{world} "
                 f"({scaled // iterations} tasks per iteration); {gathers // iterations} parameter all-gathers per iteration "
                 + ("after each optimizer step, before the next forward" if stage < 3 else
                    "per layer before its forward and its backward (prefetched in order on their own stream)"))
    if stage == 3 and not context.gradient_bytes:
        notes.append("zero stage 3: the trace lists no per-layer parameters, so no per-layer all-gathers were added "
                     "(record it with daydream trace)")
    return notes


register(Optimization(
    "zero", "ZeRO / FSDP: data parallelism with sharded optimizer state, gradients (stage 2) and weights (stage 3)",
    "time: as ddp, but each bucket is reduce-scattered; the optimizer's device work ÷world; stages 1-2 all-gather "
    "the updated parameters after the optimizer, before the next forward; stage 3 all-gathers each layer's "
    "parameters before its forward and before its backward, on a stream of their own, in order. "
    "memory: optimizer state ÷world (stage ≥ 1), gradients ÷world (stage ≥ 2), weights ÷world (stage 3)",
    _zero,
    {"stage": Parameter(int, 2, "1, 2 or 3", 1, 3), "world": Parameter(int, 8, "data-parallel ranks", 1, MAX_WORLD),
     **{k: v for k, v in DATA_PARALLEL_PARAMETERS.items() if k != "world"}},
))


# ------------------------------------------------------------------ priority-based parameter propagation (P3)


def _p3(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    _no_existing_collectives(graph, "p3")
    world = int(params["world"])
    net = fabric(params, context, world)
    slice_bytes = parse_bytes(params.get("slice", "4MiB"), "slice")
    resource = comm_resource(graph, "p3 communication")
    graph.queue_policies[resource] = "priority"
    slices = 0
    for iteration in iterations_of(graph):
        backward = phase_work(graph, iteration, BACKWARD)
        ready = layer_tasks(graph, backward, context.gradient_bytes, last=True) if backward.size else []
        forward_order = {layer: k for k, (layer, _, _) in enumerate(_first_tasks(graph, iteration, context, FORWARD))}
        for layer, size, gradient_ready in ready:
            count = max(1, -(-size // slice_bytes))
            plan = [(gradient_ready, size // count, f"p3 all-reduce ({graph.layers[layer]}, slice {k})",
                     net.time_ns("allreduce", size // count)) for k in range(count)]
            ids = insert_collectives(graph, resource, iteration, plan, chain=False)
            graph.tasks["priority"][ids] = forward_order.get(layer, len(forward_order)) * 1_000_000 + np.arange(ids.size)
            _before_next_iteration(graph, iteration, int(ids[-1]), layer)
            slices += ids.size
    if not slices:
        raise InputError("p3: no per-layer gradient sizes — P3 slices each layer's gradients, so the trace must list its "
                         "layers' parameters (record it with daydream trace)")
    return [f"p3: world={world}, {slices // max(len(iterations_of(graph)), 1)} slices of at most {slice_bytes / 2**20:.1f} MiB "
            f"per iteration, all-reduced over {net.link.name} in priority order (the layer the next forward needs first, "
            "first); each layer's next forward waits for its own slices, not for the whole model's"]


def _first_tasks(graph: Graph, iteration: int, context: Context, phase: int) -> list[tuple[int, int, int]]:
    """(layer, bytes, its first task of `phase`) for layers with parameters, in the order they run."""
    work = phase_work(graph, iteration, phase)
    return layer_tasks(graph, work, context.gradient_bytes, last=False) if work.size else []


def _first_forward_of(graph: Graph, iteration: int, layer: int) -> int | None:
    work = phase_work(graph, iteration, FORWARD)
    work = work[graph.tasks["layer"][work] == layer]
    return int(work[0]) if work.size else None


register(Optimization(
    "p3", "priority-based parameter propagation (P3): sliced gradients, sent in the order the next forward needs them",
    "as ddp, but each layer's gradients are cut into slices of at most slice=4MiB, each an all-reduce on a "
    "communication channel that runs the waiting slice of the earliest layer (in forward order) first; each layer's "
    "parameters are updated as their slices arrive, so the next iteration's forward of a layer waits for that "
    "layer's slices only (the optimizer's own work stays where it was). Needs per-layer parameter sizes",
    _p3,
    {"slice": Parameter(str, "4MiB", "slice size"), **DATA_PARALLEL_PARAMETERS},
))


# ------------------------------------------------------------------ gradient compression


def _grad_compression(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    ratio = float(params["ratio"])
    if ratio < 1:
        raise InputError(f"grad-compression: ratio={ratio} — the compression ratio is at least 1")
    tasks = graph.tasks
    chosen = [t for t in np.flatnonzero(tasks["kind"] == TaskKind.COLLECTIVE).tolist()
              if tasks["bytes"][t] > 0 and _is_allreduce(graph.task_name(t))]
    if not chosen:
        raise InputError("grad-compression: no all-reduce with a known size to compress — put it after ddp "
                         "(--opt ddp:world=8 --opt grad-compression:ratio=100)")
    world = int(params["world"]) or int(graph.calibration.get("dp.world", 0)) or context.world_size
    if world < 2:
        raise InputError("grad-compression: the number of ranks is unknown — give world=N")
    own_link = params.get("interconnect", "auto") != "auto" or params.get("bandwidth")
    if not own_link and "dp.bandwidth_gbs" in graph.calibration:  # the link the data-parallel what-if before it used
        link = Interconnect("the data-parallel link", graph.calibration["dp.bandwidth_gbs"], graph.calibration["dp.latency_us"])
        net = Fabric(link, world, str(params.get("algorithm", "auto")))
    else:
        net = fabric(params, context, world)
    memory_gbs = float(params["memory_bandwidth"]) or (context.device.memory_bandwidth_gbs if context.device else 0.0)
    if not memory_gbs:
        raise InputError("grad-compression: the device's memory bandwidth is unknown — give memory_bandwidth=GB/s")
    passes = float(params["passes"])
    before = int(tasks["duration_ns"][chosen].sum())
    for task in chosen:
        size = float(tasks["bytes"][task])
        sparse = 2 * size / ratio  # values and 32-bit indices of the kept fp32 elements
        compress_ns = passes * size / memory_gbs
        decompress_ns = world * sparse / memory_gbs
        tasks["duration_ns"][task] = int(round(compress_ns + net.time_ns("allgather", world * sparse) + decompress_ns))
    after = int(tasks["duration_ns"][chosen].sum())
    return [f"grad-compression: {len(chosen)} all-reduces become top-1/{ratio:g} selection ({passes:g} passes over the "
            f"gradient at {memory_gbs:g} GB/s), a sparse all-gather of values and indices among {world} ranks and their "
            f"accumulation: {before / 1e6:.2f} ms -> {after / 1e6:.2f} ms of communication"]


register(Optimization(
    "grad-compression", "gradient compression (e.g. DGC): send the top 1/ratio of each gradient",
    "each all-reduce of S bytes becomes: selecting the top elements (passes=4 passes over S at the device's memory "
    "bandwidth), an all-gather of the kept values and 32-bit indices (2S/ratio bytes per rank), and accumulating "
    "world such sets (world·2S/ratio bytes at memory bandwidth), on the communication stream. Apply after ddp, or to a "
    "trace's own all-reduces (with world= and a link)",
    _grad_compression,
    {"ratio": Parameter(float, 100.0, "compression ratio (DGC: 270-600)", 1.0, 1e9),
     "passes": Parameter(float, 4.0, "passes over the gradient to select the top elements", 0.0, 1e3),
     "memory_bandwidth": Parameter(bandwidth, 0.0, "GB/s for compression work (default: the device table's)", 0.0, 1e6),
     **LINK_PARAMETERS, "world": Parameter(int, 0, "ranks (default: ddp's, or the trace's world size)", 0, MAX_WORLD)},
))
