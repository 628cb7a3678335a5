"""`ddp`: data parallelism over WORLD ranks modelled on one rank's trace (PyTorch
DistributedDataParallel).

Every rank runs the same step, so one rank's graph plus its communication is
the job's step: gradients fill buckets in the order backward produces them,
each bucket is one all-reduce on a communication stream of its own,
overlapping the rest of backward, and the optimizer waits for the last bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from daydream.errors import InputError
from daydream.graph import DepKind, Graph
from daydream.interconnect import collective_steps
from daydream.transforms.distributed.buckets import (
    FORWARD,
    buckets,
    comm_resource,
    first_task,
    gradient_events,
    gradient_volume,
    insert_collectives,
    iterations_of,
    no_existing_collectives,
    optimizer_step,
)
from daydream.transforms.distributed.contention import CONTENTION_PARAMETER, calibrate
from daydream.transforms.distributed.copies import (
    CopySpeed,
    copy_back,
    copy_speed,
    scale_into_buckets,
)
from daydream.transforms.distributed.fabric import (
    GPUS_PER_NODE,
    LINK_PARAMETERS,
    Fabric,
    fabric,
    parse_bytes,
)
from daydream.transforms.distributed.stragglers import (
    STRAGGLERS_PARAMETER,
    StragglerWait,
    straggler_wait,
)
from daydream.transforms.registry import MAX_WORLD, Context, Optimization, Parameter, register

DATA_PARALLEL_PARAMETERS: dict[str, Parameter] = {
    "world": Parameter(int, 8, "data-parallel ranks", 1, MAX_WORLD), **LINK_PARAMETERS,
     "bucket": Parameter(str, "25MiB", "bucket size"),
     "params": Parameter(str, "", "trainable parameter bytes, when the trace does not list them "
                                  "(e.g. 97MB)"),
     "contention": CONTENTION_PARAMETER, "stragglers": STRAGGLERS_PARAMETER}


#: torch.nn.parallel.DistributedDataParallel's broadcast_bucket_size: buffers are broadcast in
#: coalesced buckets of it.
BROADCAST_BUCKET_BYTES = 250 * 2**20


def _ddp(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    world = int(params["world"])
    net = fabric(params, context, world)
    channel = comm_resource(graph, "ddp communication")
    used_map = used_parameter_map(context) if int(params["find_unused"]) and world > 1 else None
    copies = (("in" if int(params["bucket_view"]) else "in and back") if int(params["copies"])
              else "")
    notes = data_parallel(graph, params, context, "ddp", "allreduce", (net, channel), copies=copies,
                          used_map=used_map)
    if int(params["broadcast_buffers"]) and context.buffer_bytes > 0 and world > 1:
        notes.append(broadcast_buffers(graph, context, net, channel))
    return notes


def used_parameter_map(context: Context) -> tuple[int, str]:
    """find_unused_parameters' used-parameter map: one int32 per parameter tensor, all-reduced every
    iteration; its bytes and how the tensors were counted."""
    if context.gradient_tensors > 0:
        return 4 * context.gradient_tensors, f"{context.gradient_tensors} parameter tensors"
    # an older recording: at least one tensor per layer with gradients
    layers = len(context.gradient_bytes)
    return (4 * max(layers, 1), f"at least {layers} parameter tensor(s), one per layer with "
                                "gradients (the recording does not count them)")


def broadcast_buffers(graph: Graph, context: Context, net: Fabric, resource: int) -> str:
    """Each iteration's forward waits for rank 0's broadcast of the
    model's buffers (DDP's broadcast_buffers=True): as DDP coalesces them,
    one broadcast per dtype and per BROADCAST_BUCKET_BYTES of it, on the
    communication channel `resource` after the last iteration's buckets.

    The graph is the view of the ranks that receive: they wait for the buffers. Rank 0
    does not: over gloo a broadcast is done for its root once sent, so rank 0's forward
    runs while it is in flight and the receivers catch up at the first bucket. On a CPU
    host the broadcasts are marked `rooted` for the contention pass, which stretches
    them by the share of rank 0's forward they overlap (simulate/contention.py); a
    GPU's compute stream waits for the broadcast on every rank, root included."""
    sizes = [(dtype, min(BROADCAST_BUCKET_BYTES, total - start))
             for dtype, total in context.buffers.items()
             for start in range(0, total, BROADCAST_BUCKET_BYTES)]
    each = 0
    names: set[int] = set()
    for iteration in iterations_of(graph):
        forward = first_task(graph, iteration, FORWARD)
        if forward is None or iteration >= len(graph.iteration_markers):
            continue
        start = graph.iteration_markers[iteration][0]
        plan = [(start, size, f"ddp broadcast of {dtype or 'the'} buffers ({size / 2**10:.1f} KiB)",
                 net.time_ns("broadcast", size)) for dtype, size in sizes]
        ids = insert_collectives(graph, resource, iteration, plan)
        graph.add_edges([int(ids[-1])], [forward], DepKind.COMMUNICATION)
        names.update(graph.tasks["name"][ids].tolist())
        each = sum(p[3] for p in plan)
    on_cpu = not graph.has_device_work()
    if on_cpu:
        graph.data_parallel = replace(graph.data_parallel,
                                      rooted=graph.data_parallel.rooted | frozenset(names))
    dtypes = [dtype for dtype in context.buffers if dtype]
    grouped = (f"one per dtype ({', '.join(dtypes)}) as DDP coalesces them"
               if len(dtypes) == len(context.buffers)
               else "their dtypes not recorded: counted as one")
    return (f"ddp: broadcast_buffers: {len(sizes)} broadcast(s) of "
            f"{context.buffer_bytes / 2**10:.1f} KiB of buffers before each forward ({grouped}), "
            f"{each / 1e3:.0f} µs each iteration (broadcast_buffers=0 as DDP's "
            "broadcast_buffers=False)" + ("; rank 0 sends them and runs on, so contention "
                                          "stretches them by the share of "
                                          "its forward they overlap; the other ranks wait for them"
                                         if on_cpu and graph.data_parallel.contention > 1.0
                                          else ""))


@dataclass(slots=True)
class _Sync:
    """What one data-parallel what-if inserts into each iteration, and
    what it has inserted so far."""

    name: str
    operation: str
    net: Fabric
    resource: int
    cap: int
    total: int | None
    speed: CopySpeed | None
    copies: str
    used_map: tuple[int, str] | None
    straggler: StragglerWait
    inserted: int = 0
    volume: int = 0
    copied_in: int = 0
    copied_out: int = 0
    synchronized: int = 0
    problems: list[str] = field(default_factory=list)

    def iteration(self, graph: Graph, iteration: int, context: Context) -> None:
        """The iteration's gradients in buckets, a collective per
        bucket, the optimizer after the last."""
        events = gradient_events(graph, iteration, context, self.total)
        if not events:
            return
        self.synchronized += 1
        if self.speed is not None:
            events = scale_into_buckets(graph, events, self.speed)
            self.copied_in += sum(int(graph.tasks["duration_ns"][task]) for task, _ in events)
        plan = [(task, nbytes,
                 f"{self.name} {self.operation} (bucket {index}, {nbytes / 2**20:.1f} MiB)",
                 self.net.time_ns(self.operation, nbytes))
                for index, (task, nbytes) in enumerate(buckets(events, self.cap))]
        self.volume = sum(p[1] for p in plan)
        self.inserted += len(plan)
        if self.used_map is not None:
            # launched once the last bucket is ready; finalize_backward waits for it
            plan.append((plan[-1][0], self.used_map[0],
                         f"{self.name} all-reduce of the used-parameter map ({self.used_map[0]} B)",
                         self.net.time_ns("allreduce", self.used_map[0])))
        last_bucket = len(plan) - 1 - (self.used_map is not None)
        ids = insert_collectives(graph, self.resource, iteration, plan)
        if self.straggler.wait_ns or self.straggler.from_trace:
            # the last bucket meets the slowest rank
            graph.add_edges([plan[last_bucket][0]], [int(ids[last_bucket])], DepKind.SLOWEST_RANK,
                            latency_ns=self.straggler.wait_ns)
        self._optimizer_after(graph, iteration, plan[-1][0], int(ids[-1]), len(events))

    def _optimizer_after(self, graph: Graph, iteration: int, last_ready: int, last_collective: int,
                         count: int) -> None:
        target, problem = optimizer_step(graph, iteration, last_ready)
        if target is not None:
            if self.speed is not None and problem is None and self.copies == "in and back":
                target = copy_back(graph, target, self.volume, count, self.speed)
                self.copied_out += int(graph.tasks["duration_ns"][target])
            graph.add_edges([last_collective], [target], DepKind.COMMUNICATION)
        if problem and problem not in self.problems:
            self.problems.append(problem)


def data_parallel(graph: Graph, params: dict[str, Any], context: Context, name: str, operation: str,
                  link: tuple[Fabric, int] | None = None, copies: str = "",
                  used_map: tuple[int, str] | None = None) -> list[str]:
    """Buckets of gradients, one `operation` per bucket on a communication stream, the optimizer
    after the last. `link`: the fabric and the channel to use (default: `fabric(params)` and a
    channel of its own); `copies`: DDP's bucket copies on the rank's compute
    (transforms/distributed/copies.py): "in and back", "in" (gradients as bucket
    views: nothing to copy back) or "" (none); `used_map`: (bytes, how counted) of
    find_unused_parameters' used-parameter map, all-reduced once the
    last bucket is ready, before the optimizer."""
    from daydream.graph.windows import measured_windows

    no_existing_collectives(graph, name)
    world = int(params["world"])
    recorded = [window.duration_ns for window in measured_windows(graph)] if world > 1 else []
    net, resource = link if link is not None else (fabric(params, context, world),
                                                   comm_resource(graph, f"{name} communication"))
    speed = (copy_speed(graph, context.elementwise_speed(graph.has_device_work()), context.device)
             if copies and world > 1 else None)
    accumulate = int(params.get("accumulate", 1))
    sync = _Sync(name, operation, net, resource,
                 parse_bytes(params.get("bucket", "25MiB"), "bucket"),
                 gradient_volume(graph, params), speed, copies, used_map,
                 straggler_wait(name, params.get("stragglers", "auto"), recorded, world, accumulate,
                                context.simulated_ranks))
    for position, iteration in enumerate(iterations_of(graph)):
        if (position + 1) % accumulate == 0:
            # otherwise under no_sync: gradients accumulate locally, nothing is sent
            sync.iteration(graph, iteration, context)
    if not sync.inserted:
        raise InputError(f"{name}: no gradient sizes — the trace has no backward work with known "
                         "layers; record it with daydream trace, or give params=BYTES (the model's "
                         "trainable parameters, e.g. params=97MB)")
    factor, source = calibrate(graph, params, context, min(world, net.per_node))
    straggler = sync.straggler
    graph.data_parallel = replace(
        graph.data_parallel, world=world, link=net.network if net.hierarchical else net.link,
        contention=factor, contention_source=source, host_ranks=min(world, net.per_node),
        slowest_rank=(straggler.spread_ns, straggler.multiplier) if straggler.from_trace
        and straggler.multiplier > 0 else None,
        collective_steps=collective_steps(operation, world, "tree" if net.algorithm == "tree"
                                          else "ring"))
    return _data_parallel_notes(graph, sync, world, accumulate, (factor, source))


def _data_parallel_notes(graph: Graph, sync: _Sync, world: int, accumulate: int,
                         contention: tuple[float, str]) -> list[str]:
    name, (factor, source) = sync.name, contention
    per_iteration = sync.inserted / max(sync.synchronized, 1)
    shown = {"allreduce": "all-reduces",
             "reducescatter": "reduce-scatters"}.get(sync.operation, sync.operation)
    notes = [f"{name}: world={world}, {per_iteration:.0f} {shown} of {sync.volume / 2**20:.1f} MiB "
             f"per iteration over {sync.net.describe()}; the optimizer waits for the last bucket",
             *sync.problems]
    if factor > 1.0:
        notes.append(f"{name}: contention ×{factor:.2f} where the all-reduces overlap compute "
                     f"({source})")
    elif world > 1:
        notes.append(f"{name}: no contention modelled ({source})")
    if sync.copies and world > 1:
        notes.append(_copies_note(name, sync.speed, sync.copied_in, sync.copied_out
                                  if sync.copies == "in and back" else None, sync.synchronized))
    if sync.used_map is not None:
        notes.append(f"{name}: find_unused_parameters: one more all-reduce per iteration, of the "
                     f"used-parameter map ({sync.used_map[0]} B: {sync.used_map[1]}), once the "
                     "last bucket is ready; the optimizer waits for it. The search of the autograd "
                     "graph after each forward is not modelled (a trace without it has no cost for "
                     "it)")
    if sync.straggler.note:
        notes.append(sync.straggler.note)
    if accumulate > 1:
        notes.append(f"{name}: accumulate={accumulate}: {sync.synchronized} of "
                     f"{len(iterations_of(graph))} iterations all-reduce (the others run under "
                     "no_sync); every iteration keeps its optimizer work as recorded")
    return notes


def _copies_note(name: str, speed: CopySpeed | None, copied_in_ns: int, copied_out_ns: int | None,
                 iterations: int) -> str:
    if speed is None:
        return (f"{name}: bucket copies not modelled: the trace has no elementwise ops with "
                "recorded shapes to time them by (record it with daydream trace)")
    each = max(iterations, 1)
    return (f"{name}: bucket copies: gradients scaled into their buckets as they become ready "
            f"(+{copied_in_ns / each / 1e3:.0f} µs of backward per iteration) and "
            + ("not copied back (bucket_view=1: the gradients are views of the buckets)"
               if copied_out_ns is None else
               f"copied back before the optimizer (+{copied_out_ns / each / 1e3:.0f} µs)")
            + f", at {speed.bytes_per_ns:.1f} GB/s + {speed.overhead_ns / 1e3:.1f} µs "
              f"per op from {speed.source} (copies=0 leaves them out)")


register(Optimization(
    "ddp", "data parallelism over WORLD ranks (PyTorch DDP), from a one-rank trace",
    "gradients become ready when their layer's last backward work ends; in that order they fill "
    "buckets (1 MiB first, then bucket=25MiB); one all-reduce per bucket on a communication "
    "stream, timed by the ring/tree alpha-beta model of daydream.interconnect (2(n-1)/n·S/B + "
    "2(n-1)·latency for a ring), overlapping backward; the optimizer waits for the last bucket. "
    f"Link: interconnect= preset, else the GPU's NVLink/PCIe within {GPUS_PER_NODE} ranks and "
    "network=ib-hdr beyond; bandwidth=GB/s and latency=µs override; topology=hierarchical across "
    "nodes: reduce-scatter inside each node, all-reduce of each rank's 1/gpus_per_node shard "
    "between nodes, all-gather inside (BlueConnect); each iteration's last bucket waits for the "
    "slowest rank (stragglers=auto: the spread of the trace's iterations × E[max of world normal "
    "draws]). world=1 changes nothing",
    _ddp,
    {**DATA_PARALLEL_PARAMETERS,
     "accumulate": Parameter(int, 1, "gradient accumulation: one iteration in every N all-reduces "
                                     "(no_sync on the rest)", 1, 1e6),
     "broadcast_buffers": Parameter(int, 1, "1: rank 0 broadcasts the buffers (BatchNorm "
                                            "statistics) before each forward, as DDP does by "
                                            "default (on a CPU host rank 0 runs on while the "
                                            "others wait, so it competes with rank 0's forward); "
                                            "0: not", 0, 1),
     "find_unused": Parameter(int, 0, "1: as DDP's find_unused_parameters=True: the used-parameter "
                                      "map is all-reduced after the last bucket every iteration; "
                                      "0: not", 0, 1),
     "bucket_view": Parameter(int, 0, "1: as DDP's gradient_as_bucket_view=True: the gradients are "
                                      "views of the buckets, so nothing is copied back before the "
                                      "optimizer; 0: copied back", 0, 1),
     "copies": Parameter(int, 1, "1: each gradient is scaled into its bucket as it becomes ready "
                                 "and the buckets are copied back before the optimizer, on the "
                                 "rank's compute, as DDP does; 0: not", 0, 1)},
))

