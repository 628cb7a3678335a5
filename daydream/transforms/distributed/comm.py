"""The trace's own collectives: `no-comm` removes them, `comm` re-times them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.interconnect import normalize_operation
from daydream.transforms.distributed.buckets import collectives, iterations_of
from daydream.transforms.distributed.fabric import LINK_PARAMETERS, fabric
from daydream.transforms.primitives import remove
from daydream.transforms.registry import (
    FACTOR_RANGE,
    MAX_WORLD,
    Context,
    Optimization,
    Parameter,
    register,
)


def _no_comm(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    chosen = collectives(graph)
    if chosen.size == 0:
        return ["no-comm: the trace has no collectives; nothing to remove"]
    names = [graph.task_name(int(t)) for t in chosen]
    reduce = np.array([is_allreduce(n) for n in names], dtype=bool)
    iterations = max(len(iterations_of(graph)), 1)
    in_iterations = graph.tasks["iteration"][chosen] >= 0
    payload = int(graph.tasks["bytes"][chosen[reduce & in_iterations]].sum()) // iterations
    busy = int(graph.tasks["duration_ns"][chosen].sum())
    remove(graph, chosen)
    if payload:
        graph.data_parallel = replace(graph.data_parallel, removed_allreduce_bytes=payload)
    return [f"no-comm: removed {chosen.size} collectives ({busy / 1e6:.2f} ms of communication "
            f"kernels; {payload / 2**20:.1f} MiB of all-reduce per iteration, which a following "
            "ddp uses as the gradient volume)"]


def is_allreduce(name: str) -> bool:
    try:
        return normalize_operation(name) == "allreduce"
    except ValueError:
        return False


register(Optimization(
    "no-comm", "the step without communication",
    "removes every collective (NCCL kernel); what waited for one waits for what it waited for. "
    "Records the all-reduce bytes per iteration, so that a following ddp models the job from this "
    "rank's compute",
    _no_comm,
))


def _comm(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    chosen = collectives(graph)
    if chosen.size == 0:
        return ["comm: the trace has no collectives; nothing to re-time"]
    factor = float(params["factor"])
    if factor <= 0:
        raise InputError(f"comm: factor={factor} must be positive")
    tasks = graph.tasks
    if params.get("interconnect", "auto") == "auto" and not params.get("bandwidth"):
        tasks["duration_ns"][chosen] = np.round(tasks["duration_ns"][chosen] / factor).astype(
            np.int64)
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
    note = (f"comm: {timed} of {chosen.size} collectives re-timed among {world} ranks over "
            f"{net.describe()}")
    if timed < chosen.size:
        note += f"; {chosen.size - timed} without a recorded size kept their time"
    return [note]


register(Optimization(
    "comm", "re-time the trace's collectives",
    "factor=F: every collective F times faster. interconnect=/bandwidth=: each collective with a "
    "recorded size (elements × dtype from its metadata) takes the cost model's time for its "
    "operation among world ranks (the trace's world size unless world= is given), divided by "
    "factor",
    _comm,
    {"factor": Parameter(float, 1.0, "speed-up of every collective", **FACTOR_RANGE),
     **LINK_PARAMETERS,
     "world": Parameter(int, 0, "ranks in the job (default: the trace's world size)", 0,
                        MAX_WORLD)},
))

