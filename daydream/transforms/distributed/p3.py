"""`p3`: priority-based parameter propagation (Jayarajan et al., SysML'19), as the Daydream paper models it."""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import Graph
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
from daydream.transforms.optimizations import Context, Optimization, Parameter, register


def _p3(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    no_existing_collectives(graph, "p3")
    world = int(params["world"])
    net = fabric(params, context, world)
    slice_bytes = parse_bytes(params.get("slice", "4MiB"), "slice")
    resource = comm_resource(graph, "p3 communication")
    graph.queue_policies[resource] = "priority"
    slices = 0
    for iteration in iterations_of(graph):
        backward = phase_work(graph, iteration, BACKWARD)
        ready = layer_tasks(graph, backward, context.gradient_bytes, last=True) if backward.size else []
        forward_order = {layer: k for k, (layer, _, _) in enumerate(first_tasks(graph, iteration, context, FORWARD))}
        for layer, size, gradient_ready in ready:
            count = max(1, -(-size // slice_bytes))
            plan = [(gradient_ready, size // count, f"p3 all-reduce ({graph.layers[layer]}, slice {k})",
                     net.time_ns("allreduce", size // count)) for k in range(count)]
            ids = insert_collectives(graph, resource, iteration, plan, chain=False)
            graph.tasks["priority"][ids] = forward_order.get(layer, len(forward_order)) * 1_000_000 + np.arange(ids.size)
            before_next_iteration(graph, iteration, int(ids[-1]), layer)
            slices += ids.size
    if not slices:
        raise InputError("p3: no per-layer gradient sizes — P3 slices each layer's gradients, so the trace must list its "
                         "layers' parameters (record it with daydream trace)")
    return [f"p3: world={world}, {slices // max(len(iterations_of(graph)), 1)} slices of at most {slice_bytes / 2**20:.1f} MiB "
            f"per iteration, all-reduced over {net.link.name} in priority order (the layer the next forward needs first, "
            "first); each layer's next forward waits for its own slices, not for the whole model's"]



register(Optimization(
    "p3", "priority-based parameter propagation (P3): sliced gradients, sent in the order the next forward needs them",
    "as ddp, but each layer's gradients are cut into slices of at most slice=4MiB, each an all-reduce on a "
    "communication channel that runs the waiting slice of the earliest layer (in forward order) first; each layer's "
    "parameters are updated as their slices arrive, so the next iteration's forward of a layer waits for that "
    "layer's slices only (the optimizer's own work stays where it was). Needs per-layer parameter sizes",
    _p3,
    {"slice": Parameter(str, "4MiB", "slice size"), **DATA_PARALLEL_PARAMETERS},
))

