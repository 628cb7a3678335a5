"""`zero`: ZeRO / FSDP, data parallelism with sharded optimizer state,
gradients (stage 2) and weights (stage 3)."""

from __future__ import annotations

from typing import Any

from daydream.errors import InputError
from daydream.graph import DepKind, Graph
from daydream.transforms.distributed.buckets import (
    BACKWARD,
    FORWARD,
    OPTIMIZER,
    before_next_iteration,
    comm_resource,
    first_tasks,
    gradient_volume,
    insert_collectives,
    iterations_of,
    last_task,
    scale_optimizer,
)
from daydream.transforms.distributed.ddp import DATA_PARALLEL_PARAMETERS, data_parallel
from daydream.transforms.distributed.fabric import Fabric, fabric
from daydream.transforms.registry import MAX_WORLD, Context, Optimization, Parameter, register


def _gather_before(graph: Graph, resource: int, iteration: int, items: list[tuple[int, int, int]],
                   net: Fabric, anchor: int | None, label: str) -> int:
    """One all-gather per layer on `resource`, in order after `anchor` (prefetching), each before
    its layer's first task."""
    if not items or anchor is None:
        return 0
    plan = [(anchor, size, f"zero all-gather ({label}, {graph.layers[layer]})",
             net.time_ns("allgather", size))
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
    total = gradient_volume(graph, params)
    gather = comm_resource(graph, "zero parameter all-gather")
    volume = total if total is not None else sum(context.gradient_bytes.values())
    gathers = scaled = 0
    iterations = max(len(iterations_of(graph)), 1)
    for iteration in iterations_of(graph):
        scaled += int(scale_optimizer(graph, iteration, world).size)
        if stage < 3:
            last = last_task(graph, iteration, OPTIMIZER)
            if last is not None and volume:
                gathered = (last, volume, "zero all-gather (parameters)",
                            net.time_ns("allgather", volume))
                ids = insert_collectives(graph, gather, iteration, [gathered])
                before_next_iteration(graph, iteration, int(ids[0]))
                gathers += 1
            continue
        start = (graph.iteration_markers[iteration][0] if iteration < len(graph.iteration_markers)
                 else None)
        gathers += _gather_before(graph, gather, iteration,
                                  first_tasks(graph, iteration, context, FORWARD), net, start,
                                  "forward")
        gathers += _gather_before(graph, gather, iteration,
                                  first_tasks(graph, iteration, context, BACKWARD), net,
                                  last_task(graph, iteration, FORWARD), "backward")
    notes.append(f"zero stage {stage}: reduce-scatter instead of all-reduce; the optimizer's "
                 f"device work ÷{world} ({scaled // iterations} tasks per iteration); "
                 f"{gathers // iterations} parameter all-gathers per iteration "
                 + ("after each optimizer step, before the next forward" if stage < 3 else
                    "per layer before its forward and its backward (prefetched in order on their "
                    "own stream)"))
    if stage == 3 and not context.gradient_bytes:
        notes.append("zero stage 3: the trace lists no per-layer parameters, so no per-layer "
                     "all-gathers were added (record it with daydream trace)")
    return notes


register(Optimization(
    "zero", "ZeRO / FSDP: data parallelism with sharded optimizer state, gradients (stage 2) and "
            "weights (stage 3)",
    "as ddp, but each bucket is reduce-scattered; the optimizer's device work ÷world; stages 1-2 "
    "all-gather the updated parameters after the optimizer, before the next forward; stage 3 "
    "all-gathers each layer's parameters before its forward and before its backward, on a stream "
    "of their own, in order",
    _zero,
    {"stage": Parameter(int, 2, "1, 2 or 3", 1, 3),
     "world": Parameter(int, 8, "data-parallel ranks", 1, MAX_WORLD),
     **{k: v for k, v in DATA_PARALLEL_PARAMETERS.items() if k != "world"}},
))

