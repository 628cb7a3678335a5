"""`depth:`: predict a bigger model from a small run (BOOM's "use your desktop").

`depth:layers=REGEX,factor=N`: the same model with its repeated blocks N times over.

Time: in every iteration, each matching block's forward work (its host tasks, children
included, and the GPU work they launch) runs N - 1 more times right after the original, and
so does its backward work; the optimizer's work grows with the parameters, by
(all parameters + (N - 1) x the blocks' parameters) / all parameters, where the trace
records each layer's parameter bytes (traces of `daydream trace`). Memory (memory.whatif):
the blocks' activations N times over, weights, gradients and optimizer state by the same
parameter ratio.

`width:` is in transforms/width.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.graph import DepKind, Graph
from daydream.mapping import PHASES
from daydream.mapping.attribution import choose_layers, parameter_ratio
from daydream.transforms.checkpoint import copy_launched_work
from daydream.transforms.primitives import GPU_WORK, HOST_WORK, scale, select, splice_chain, unpin
from daydream.transforms.registry import Context, Optimization, Parameter, register


def grow_optimizer(graph: Graph, context: Context, targets: list[int], factor: float, name: str,
                   whose: str) -> str:
    """Scale the optimizer's work by the parameter ratio (the matching
    layers' parameters x factor); the note."""
    ratio = parameter_ratio(context.gradient_bytes, graph.layers, targets, factor)
    if ratio is None:
        return (f"{name}: the trace records no parameter sizes per layer (record with daydream "
                f"trace): the optimizer's work is unchanged, so the prediction is low by {whose} "
                "share of it")
    optimizer = select(graph, kind=(*GPU_WORK, *HOST_WORK), phase=["optimizer"])
    scale(graph, optimizer, factor=ratio)
    return (f"{name}: the optimizer's {optimizer.size} tasks ×{ratio:.2f} (parameters: all + "
            f"{factor - 1:g} × {whose})")


def repeat_after(graph: Graph, tasks: np.ndarray) -> int:
    """Run the host tasks in `tasks` once more right after the last of
    them, with copies of the GPU work they launch queued after the last
    of the originals on each stream; returns the tasks added."""
    columns = graph.tasks
    host = tasks[np.isin(columns["kind"][tasks], [int(k) for k in HOST_WORK])]
    if host.size == 0:
        return 0
    host = host[np.argsort(columns["measured_start_ns"][host], kind="stable")]
    copies = graph.add_tasks(**{column: values[host] for column, values in columns.items()})
    unpin(graph, copies)
    splice_chain(graph, copies, int(host[-1]), DepKind.HOST_ORDER, after=True)
    kernels, kernel_copies = copy_launched_work(graph, host, copies)
    gap = graph.calibration.kernel_gap_ns
    resources = graph.tasks["resource"][kernels]
    for resource in np.unique(resources).tolist():
        mine = resources == resource
        splice_chain(graph, kernel_copies[mine], int(kernels[mine][-1]), DepKind.STREAM_ORDER,
                     after=True, latency_ns=gap)
    return int(copies.size + kernel_copies.size)


def _depth(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = int(params["factor"])
    targets, owner, described = choose_layers(graph.layers, str(params["layers"]),
                                              context.gradient_bytes, "depth")
    if factor == 1:
        return ["depth: factor=1 is the model as traced; nothing changed"]
    layer_of = owner[graph.tasks["layer"]]
    iterations, phases = graph.tasks["iteration"].copy(), graph.tasks["phase"].copy()
    chosen = []  # before any copy exists, so that copies are never copied again
    for iteration in np.unique(iterations[iterations >= 0]).tolist():
        for target in targets:
            in_block = (layer_of == target) & (iterations == iteration)
            for phase in (PHASES.index("forward"), PHASES.index("backward")):
                chosen.append(np.flatnonzero(in_block & (phases == phase)))
    added = sum(repeat_after(graph, tasks) for tasks in chosen for _ in range(factor - 1))
    notes = [f"depth: {len(targets)} block(s) {described} ×{factor}: their "
             f"forward and backward work repeated ({added} tasks added)"]
    return [*notes, grow_optimizer(graph, context, targets, factor, "depth", "the blocks'")]


register(Optimization(
    "depth", "a deeper model: the matching repeated blocks N times over",
    "in every iteration each matching block's forward and backward work (host tasks, children "
    "included, and the GPU work they launch) runs factor - 1 more times right after the original; "
    "the optimizer's work grows by the parameter ratio (all + (factor - 1) x the blocks') where "
    "the trace records parameter sizes",
    _depth,
    {"layers": Parameter(str, "", "regular expression over layer paths: the repeated blocks "
                                  "(default: the model's, such as blocks.0, blocks.1, ...)"),
     "factor": Parameter(int, 2, "how many times the blocks' count (2: twice as deep)", 1, 64)},
))
