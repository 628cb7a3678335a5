"""`depth:` and `width:`: predict a bigger model from a small run (BOOM's "use your desktop").

`depth:layers=REGEX,factor=N`: the same model with its repeated blocks N times over.

Time: in every iteration, each matching block's forward work (its host tasks, children
included, and the GPU work they launch) runs N - 1 more times right after the original, and
so does its backward work; the optimizer's work grows with the parameters, by
(all parameters + (N - 1) x the blocks' parameters) / all parameters, where the trace
records each layer's parameter bytes (traces of `daydream trace`). Memory (memory.whatif):
the blocks' activations N times over, weights, gradients and optimizer state by the same
parameter ratio.

`width:layers=REGEX,factor=F`: the matching layers F times wider (hidden sizes x F). Their GEMM and
convolution work (kernels, or CPU ops on a CPU trace) x F^2 (both dimensions of each weight grow),
attention, normalization, elementwise and other work x F (the activations grow by F); the
optimizer's work by the parameter ratio (all + (F^2 - 1) x the layers'). Memory: the layers'
activations x F, weights, gradients and optimizer state by the parameter ratio. A layer that
connects a widened one to a fixed size (the first and last) grows by F, not F^2: matching only the
inner layers is exact, matching the edges too overstates them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.graph import DepKind, Graph
from daydream.mapping import PHASES
from daydream.mapping.attribution import choose_layers, parameter_ratio
from daydream.mapping.classes import CLASSES
from daydream.transforms.checkpoint import copy_launched_work
from daydream.transforms.kernels import kernel_classes
from daydream.transforms.primitives import GPU_WORK, HOST_WORK, scale, select, splice_chain, unpin
from daydream.transforms.registry import FACTOR_RANGE, Context, Optimization, Parameter, register


def _grow_optimizer(graph: Graph, context: Context, targets: list[int], factor: float, name: str,
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
    return [*notes, _grow_optimizer(graph, context, targets, factor, "depth", "the blocks'")]


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


def _width(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    targets, owner, chosen = choose_layers(graph.layers, str(params["layers"]),
                                           context.gradient_bytes, "width")
    kinds = (*GPU_WORK,) if graph.has_device_work() else HOST_WORK
    work = select(graph, kind=kinds, phase=["forward", "backward"])
    work = work[owner[graph.tasks["layer"][work]] >= 0]
    classes = kernel_classes(graph, work)
    square = np.isin(classes, [CLASSES.index("gemm"), CLASSES.index("convolution")])
    scale(graph, work[square], factor=factor ** 2)
    scale(graph, work[~square], factor=factor)
    unit = "kernels" if graph.has_device_work() else "CPU ops"
    notes = [f"width: {len(targets)} layer(s) {chosen} ×{factor:g} wide: "
             f"{int(square.sum())} GEMM/conv {unit} ×{factor ** 2:g}, {int((~square).sum())} other "
             f"{unit} ×{factor:g}"]
    return [*notes, _grow_optimizer(graph, context, targets, factor ** 2, "width", "the layers'")]


register(Optimization(
    "width", "a wider model: the matching layers' hidden sizes times F",
    "the matching layers' GEMM and convolution work (kernels, or CPU ops on a CPU trace) x "
    "factor^2, their other forward and backward work x factor; the optimizer's work by the "
    "parameter ratio (all + (factor^2 - 1) x the layers')",
    _width,
    {"layers": Parameter(str, "", "regular expression over layer paths: the layers made wider "
                                  "(default: the model's repeated blocks)"),
     "factor": Parameter(float, 2.0, "how many times wider", **FACTOR_RANGE)},
))
