"""`grad-compression`: send the top 1/ratio of each gradient (Deep Gradient Compression)."""

from __future__ import annotations

from typing import Any

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.transforms.distributed.buckets import collectives
from daydream.transforms.distributed.comm import is_allreduce
from daydream.transforms.distributed.fabric import LINK_PARAMETERS, Fabric, fabric
from daydream.transforms.registry import (
    MAX_WORLD,
    Context,
    Optimization,
    Parameter,
    bandwidth,
    register,
)


def _grad_compression(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    ratio = float(params["ratio"])
    if ratio < 1:
        raise InputError(f"grad-compression: ratio={ratio} — the compression ratio is at least 1")
    tasks = graph.tasks
    chosen = [t for t in collectives(graph).tolist()
              if tasks["bytes"][t] > 0 and is_allreduce(graph.task_name(t))]
    if not chosen:
        raise InputError("grad-compression: no all-reduce with a known size to compress — put it "
                         "after ddp (--opt ddp:world=8 --opt grad-compression:ratio=100)")
    world = int(params["world"]) or graph.data_parallel.world or context.world_size
    if world < 2:
        raise InputError("grad-compression: the number of ranks is unknown — give world=N")
    own_link = params.get("interconnect", "auto") != "auto" or params.get("bandwidth")
    if not own_link and graph.data_parallel.link is not None:
        # the link the data-parallel what-if before it used
        net = Fabric(graph.data_parallel.link, world, str(params.get("algorithm", "auto")))
    else:
        net = fabric(params, context, world)
    memory_gbs = (float(params["memory_bandwidth"])
                  or (context.device.memory_bandwidth_gbs if context.device else 0.0))
    if not memory_gbs:
        raise InputError("grad-compression: the device's memory bandwidth is unknown — give "
                         "memory_bandwidth=GB/s")
    passes = float(params["passes"])
    before = int(tasks["duration_ns"][chosen].sum())
    for task in chosen:
        size = float(tasks["bytes"][task])
        sparse = 2 * size / ratio  # values and 32-bit indices of the kept fp32 elements
        compress_ns = passes * size / memory_gbs
        decompress_ns = world * sparse / memory_gbs
        tasks["duration_ns"][task] = int(round(compress_ns
                                               + net.time_ns("allgather", world * sparse)
                                               + decompress_ns))
    after = int(tasks["duration_ns"][chosen].sum())
    return [f"grad-compression: {len(chosen)} all-reduces become top-1/{ratio:g} selection "
            f"({passes:g} passes over the gradient at {memory_gbs:g} GB/s), a sparse all-gather of "
            f"values and indices among {world} ranks and their accumulation: {before / 1e6:.2f} ms "
            f"-> {after / 1e6:.2f} ms of communication"]


register(Optimization(
    "grad-compression", "gradient compression (e.g. DGC): send the top 1/ratio of each gradient",
    "each all-reduce of S bytes becomes: selecting the top elements (passes=4 passes over S at the "
    "device's memory bandwidth), an all-gather of the kept values and 32-bit indices (2S/ratio "
    "bytes per rank), and accumulating world such sets (world·2S/ratio bytes at memory bandwidth), "
    "on the communication stream. Apply after ddp, or to a trace's own all-reduces (with world= "
    "and a link)",
    _grad_compression,
    {"ratio": Parameter(float, 100.0, "compression ratio (DGC: 270-600)", 1.0, 1e9),
     "passes": Parameter(float, 4.0, "passes over the gradient to select the top elements", 0.0,
                         1e3),
     "memory_bandwidth": Parameter(bandwidth, 0.0,
                                   "GB/s for compression work (default: the device table's)", 0.0,
                                   1e6),
     **LINK_PARAMETERS,
     "world": Parameter(int, 0, "ranks (default: ddp's, or the trace's world size)", 0, MAX_WORLD)},
))
