"""`p3`: priority-based parameter propagation (Jayarajan et al.,
SysML'19), as the Daydream paper models it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.interconnect import Interconnect
from daydream.transforms.distributed.buckets import (
    BACKWARD,
    FORWARD,
    before_next_iteration,
    comm_resource,
    first_tasks,
    insert_collectives,
    iterations_of,
    layer_tasks,
    no_existing_collectives,
    phase_work,
)
from daydream.transforms.distributed.ddp import DATA_PARALLEL_PARAMETERS
from daydream.transforms.distributed.fabric import fabric, parse_bytes
from daydream.transforms.registry import MAX_WORLD, Context, Optimization, Parameter, register


def _p3(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    no_existing_collectives(graph, "p3")
    world = int(params["world"])
    net = fabric(params, context, world)
    slice_bytes = parse_bytes(params.get("slice", "4MiB"), "slice")
    sync = str(params.get("sync", "allreduce"))
    if sync not in ("allreduce", "ps"):
        raise InputError(f"p3: sync={sync!r} — choose allreduce or ps (parameter servers)")
    servers = int(params.get("servers", 0)) or world
    link = net.network if net.network is not None and net.hierarchical else net.link
    server = _Server(link, world, servers) if sync == "ps" else None
    resource = comm_resource(graph, "p3 communication" if server is None else "p3 push")
    graph.queue_policies[resource] = "priority"
    pull = comm_resource(graph, "p3 pull") if server is not None else resource
    graph.queue_policies[pull] = "priority"
    slices = 0
    for iteration in iterations_of(graph):
        backward = phase_work(graph, iteration, BACKWARD)
        ready = (layer_tasks(graph, backward, context.gradient_bytes, last=True) if backward.size
                 else [])
        forward_order = {layer: k
                         for k, (layer, _,
                                 _) in enumerate(first_tasks(graph, iteration, context, FORWARD))}
        for layer, size, gradient_ready in ready:
            count = max(1, -(-size // slice_bytes))
            priority = forward_order.get(layer, len(forward_order)) * 1_000_000 + np.arange(count)
            if server is None:
                plan = [(gradient_ready, size // count,
                         f"p3 all-reduce ({graph.layers[layer]}, slice {k})",
                         net.time_ns("allreduce", size // count)) for k in range(count)]
                ids = insert_collectives(graph, resource, iteration, plan, chain=False)
            else:
                ids = _push_pull(graph, (resource, pull), iteration, gradient_ready,
                                 graph.layers[layer], size // count, priority, server)
            graph.tasks["priority"][ids] = priority
            before_next_iteration(graph, iteration, int(ids[-1]), layer)
            slices += ids.size
    if not slices:
        raise InputError("p3: no per-layer gradient sizes — P3 slices each layer's gradients, so "
                         "the trace must list its layers' parameters (record it with daydream "
                         "trace)")
    how = (f"all-reduced over {net.describe()}" if server is None else
           f"pushed to and pulled from {servers} parameter server(s) over {link.name} "
           f"({link.bus_bandwidth_gbs:g} GB/s, {link.step_latency_us:g} µs; a server's link "
           f"carries {max(1.0, world / servers):g}× a worker's bytes)")
    return [f"p3: world={world}, "
            f"{slices // max(len(iterations_of(graph)), 1) // (1 if server is None else 2)} slices "
            f"of at most {slice_bytes / 2**20:.1f} MiB per iteration, {how}, in priority order "
            "(the layer the next forward needs first, first); each layer's next forward waits for "
            "its own slices, not for the whole model's"]


@dataclass(slots=True, frozen=True)
class _Server:
    """Parameter servers: the model's slices spread evenly over `servers`, each worker pushing every
    slice to its server and pulling it back updated. A push (or pull) of s bytes takes latency +
    s·max(1, world/servers)/bandwidth: the worker's link is the bottleneck while there are as many
    servers as workers, the server's beyond."""

    link: Interconnect
    world: int
    servers: int

    def time_ns(self, slice_bytes: int) -> int:
        if self.world <= 1:
            return 0
        load = max(1.0, self.world / self.servers)
        return int(round(self.link.step_latency_us * 1e3
                         + slice_bytes * load / self.link.bus_bandwidth_gbs))


def _push_pull(graph: Graph, channels: tuple[int, int], iteration: int, ready: int, layer: str,
               slice_bytes: int, priority: np.ndarray, server: _Server) -> np.ndarray:
    """One push per slice (`priority` each) of a layer's slices on the
    push channel and, each after its push, a pull on the pull channel;
    returns the pulls (what the layer's next forward waits for)."""
    push_channel, pull_channel = channels
    duration = server.time_ns(slice_bytes)
    pushed = [(ready, slice_bytes, f"p3 push ({layer}, slice {k})", duration)
              for k in range(priority.size)]
    pushes = insert_collectives(graph, push_channel, iteration, pushed, chain=False)
    pulled = [(int(push), slice_bytes, f"p3 pull ({layer}, slice {k})", duration)
              for k, push in enumerate(pushes.tolist())]
    pulls = insert_collectives(graph, pull_channel, iteration, pulled, chain=False)
    graph.tasks["priority"][pushes] = graph.tasks["priority"][pulls] = priority
    return pulls



register(Optimization(
    "p3", "priority-based parameter propagation (P3): sliced gradients, sent in the order the next "
          "forward needs them",
    "as ddp, but each layer's gradients are cut into slices of at most slice=4MiB, each an "
    "all-reduce on a communication channel that runs the waiting slice of the earliest layer (in "
    "forward order) first; each layer's parameters are updated as their slices arrive, so the next "
    "iteration's forward of a layer waits for that layer's slices only (the optimizer's own work "
    "stays where it was). sync=ps: each slice is pushed to its parameter server and pulled back "
    "(two channels, full duplex), each taking latency + slice·max(1, world/servers)/bandwidth. "
    "Needs per-layer parameter sizes",
    _p3,
    {"slice": Parameter(str, "4MiB", "slice size"),
     "sync": Parameter(str, "allreduce",
                       "allreduce, or ps: push to and pull from parameter servers (MXNet's P3)"),
     "servers": Parameter(int, 0, "parameter servers (default: one per worker)", 0, MAX_WORLD),
     # p3 times its slices without contention or a wait for the slowest
     # rank: it takes neither parameter.
     **{k: v for k, v in DATA_PARALLEL_PARAMETERS.items()
        if k not in ("contention", "stragglers")}},
))

