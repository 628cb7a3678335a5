"""`bn-restructure`: BatchNorm's passes over memory fused with its
neighbours (Jung et al., "Restructuring Batch Normalization to Accelerate
CNN Training", SysML 2019; modelled by the Daydream paper, ATC 2020).

A training BatchNorm reads its input twice in forward (the batch statistics, then the normalization)
and writes its output once; the ReLU after it reads that output and writes its own. Restructured,
the statistics are gathered while the convolution before it writes its output, and normalization and
ReLU are one pass: the forward keeps one pass that reads the input and writes the output. In
backward, ReLU's mask is applied inside BatchNorm's backward, which keeps one pass that reads the
gradient and the input and writes the input's gradient.

The model, per BatchNorm op (`aten::batch_norm`) of the matching layers
with its recorded input shape:

- forward: its work (the CPU op on a CPU trace; its normalization kernels on a
  GPU one) makes 2 passes over its input's bytes instead of 3, at the speed it
  reached in the trace (its recorded time x 2/3); the ReLU right after it (the
  next forward op, on the same shape) and its kernels and launches are removed;
- backward: its backward (the `...BatchNormBackward` node, or its layer's normalization kernels)
  makes 3 passes instead of 5 (x 3/5); the ReLU's backward is removed (on a GPU trace only where the
  ReLU is a layer of its own, so that its kernels can be told apart).

Each BatchNorm keeps the speed it reached: a BatchNorm slower than
streaming (a reduction over a strided layout, a CPU's single thread)
stays that slow, and only the passes it no longer makes are saved.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from daydream.cost import Tier
from daydream.cost.shapes import ITEM_BYTES, elements
from daydream.graph import Graph
from daydream.graph.model import GPU_WORK, HOST_WORK, KERNELS
from daydream.mapping.attribution import BACKWARD, layer_owners
from daydream.mapping.classes import CLASSES
from daydream.transforms.activations import RELU_OPS
from daydream.transforms.autocast import ForwardOp
from daydream.transforms.kernels import kernel_classes, launchers
from daydream.transforms.primitives import HostSpans, Spans, launched_by, remove, task_of_event
from daydream.transforms.registry import Context, Optimization, Parameter, register

BATCH_NORM = "aten::batch_norm"
BN_BACKWARD = re.compile(r"BatchNormBackward")
RELU_BACKWARD = re.compile(r"ReluBackward|ThresholdBackward")
#: Passes over the input's bytes: a training BatchNorm's forward makes 3 (the statistics read the
#: input, the normalization reads it again and writes the output), restructured 2 (read, write); its
#: backward 5 (the reductions read the gradient and the input; the input's gradient reads both again
#: and is written), restructured 3.
FORWARD_PASSES, BACKWARD_PASSES = (3, 2), (5, 3)


def pairs(facts: dict[int, list[ForwardOp]],
          owner: np.ndarray) -> list[tuple[int, ForwardOp, ForwardOp | None]]:
    """(iteration, BatchNorm op, the ReLU right after it on the same
    shape or None) of the matching layers."""
    found = []
    for iteration, ops in facts.items():
        for position, op in enumerate(ops):
            if (op.name != BATCH_NORM or op.layer < 0 or owner[op.layer] < 0 or not op.inputs
                or op.inputs[0] is None):
                continue
            after = ops[position + 1] if position + 1 < len(ops) else None
            relu = after if (after is not None and after.name in RELU_OPS and after.inputs
                             and after.inputs[0] is not None
                             and after.inputs[0][0] == op.inputs[0][0]) else None
            found.append((iteration, op, relu))
    return found


def _work_ns(graph: Graph, gpu: bool) -> int:
    """The time of the graph's kernels (of its CPU ops on a CPU trace), ns."""
    kinds = [int(k) for k in (KERNELS if gpu else HOST_WORK)]
    return int(graph.tasks["duration_ns"][np.isin(graph.tasks["kind"], kinds)].sum())


def _input_bytes(op: ForwardOp) -> int:
    tensor = op.inputs[0] if op.inputs else None
    return elements(tensor[0]) * ITEM_BYTES.get(tensor[1], 4) if tensor is not None else 0


def _bn_restructure(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    pattern = str(params["layers"])
    targets, owner = layer_owners(graph.layers, pattern)
    recorded = context.forward_ops
    costs = context.costs
    facts, spans = recorded if recorded is not None else ({}, {})
    found = pairs(facts, owner) if targets else []
    if not found:
        return ["bn-restructure: no BatchNorm (aten::batch_norm) with recorded shapes in the "
                f"layers matching {pattern!r}; nothing changed"]
    gpu = graph.has_device_work()
    sizes = [_input_bytes(bn) for _, bn, _ in found]
    if costs is not None:
        costs.count(Tier.MODELLED, 2 * len(found))
    before = _work_ns(graph, gpu)
    gone = (_gpu_forward if gpu else _cpu_forward)(graph, found, spans)
    gone = np.concatenate([gone, _backward(graph, found, gpu)])
    relus = sum(1 for *_, relu in found if relu is not None)
    remove(graph, np.unique(gone))
    after = _work_ns(graph, gpu)
    iterations = max(1, len({iteration for iteration, *_ in found}))
    work = "kernels" if gpu else "CPU ops"
    return [f"bn-restructure: {len(found) // iterations} BatchNorms per iteration "
            f"({relus // iterations} with the ReLU after them fused in; inputs of "
            f"{sum(sizes) / iterations / 2**20:.1f} MiB) make 2 passes over their input in forward "
            "instead of 3 and 3 in backward instead of 5, each at the speed it reached in the "
            f"trace; {work} time per iteration {before / iterations / 1e3:.1f} -> "
            f"{after / iterations / 1e3:.1f} µs"]


def _kept(durations: np.ndarray, passes: tuple[int, int]) -> int:
    """The time of work that made `passes[0]` passes over its bytes
    when it makes `passes[1]` at the same speed."""
    return int(round(float(durations.sum()) * passes[1] / passes[0]))


def _cpu_forward(graph: Graph, found: list[tuple[int, ForwardOp, ForwardOp | None]],
                 spans: Spans) -> np.ndarray:
    of_event = task_of_event(graph)
    gone = []
    for _, bn, relu in found:
        task = of_event.get(bn.row, -1)
        if task < 0:
            continue
        graph.tasks["duration_ns"][task] = _kept(graph.tasks["duration_ns"][[task]], FORWARD_PASSES)
        if relu is not None and relu.row in of_event:
            gone.append(of_event[relu.row])
    return np.array(gone, dtype=np.int64)


def _gpu_forward(graph: Graph, found: list[tuple[int, ForwardOp, ForwardOp | None]],
                 spans: Spans) -> np.ndarray:
    """The BatchNorm's normalization kernels become one; the ReLU's kernels and launches go."""
    holding = HostSpans(graph)
    launched = launched_by(graph)
    normalization = CLASSES.index("normalization")
    gone: list[int] = []
    for _, bn, relu in found:
        kernels = _launched_within(holding, launched, spans.get(bn.row))
        kernels = (kernels[kernel_classes(graph, kernels) == normalization] if kernels.size
                   else kernels)
        if kernels.size == 0:
            continue
        graph.tasks["duration_ns"][kernels[0]] = _kept(graph.tasks["duration_ns"][kernels],
                                                       FORWARD_PASSES)
        gone += kernels[1:].tolist()
        if relu is not None:
            relu_kernels = _launched_within(holding, launched, spans.get(relu.row))
            gone += relu_kernels.tolist() + launchers(graph, relu_kernels).tolist()
    gone_array = np.array(gone, dtype=np.int64)
    return np.concatenate([gone_array, launchers(graph, gone_array)])


def _launched_within(holding: HostSpans, launched: dict[int, list[int]],
                     span: tuple[int, int, int] | None
                     ) -> np.ndarray:
    """The GPU work launched by the host tasks within an op's span, in launch order."""
    return np.array([k for task in holding.within(span).tolist() for k in launched.get(task, [])],
                    dtype=np.int64)


def _backward(graph: Graph, found: list[tuple[int, ForwardOp, ForwardOp | None]],
              gpu: bool) -> np.ndarray:
    """Each BatchNorm's backward becomes one pass; its ReLU's backward goes (with its launches)."""
    tasks = graph.tasks
    kinds = [int(k) for k in (GPU_WORK if gpu else HOST_WORK)]
    chosen = np.flatnonzero(np.isin(tasks["kind"],
                                    kinds) & (tasks["phase"] == BACKWARD) & (tasks["event"] >= 0))
    chosen = chosen[np.argsort(tasks["measured_start_ns"][chosen], kind="stable")]
    if gpu:
        classes = kernel_classes(graph, chosen)
        is_bn = classes == CLASSES.index("normalization")
        is_relu = classes == CLASSES.index("elementwise")
    else:
        names = np.array([graph.strings[int(n)] for n in tasks["name"][chosen]], dtype=object)
        is_bn = np.array([bool(BN_BACKWARD.search(n)) for n in names], dtype=bool)
        is_relu = np.array([bool(RELU_BACKWARD.search(n)) for n in names], dtype=bool)
    key = (tasks["iteration"][chosen].astype(np.int64) * (len(graph.layers) + 1)
           + tasks["layer"][chosen])
    gone: list[int] = []
    for iteration, bn, relu in found:
        mine = chosen[(key == iteration * (len(graph.layers) + 1) + bn.layer) & is_bn]
        if mine.size == 0:
            continue
        tasks["duration_ns"][mine[0]] = _kept(tasks["duration_ns"][mine], BACKWARD_PASSES)
        gone += mine[1:].tolist()
        if relu is not None and (not gpu or relu.layer != bn.layer):
            gone += chosen[(key == iteration * (len(graph.layers) + 1)
                            + relu.layer) & is_relu].tolist()
    gone_array = np.array(gone, dtype=np.int64)
    return np.concatenate([gone_array, launchers(graph, gone_array)]) if gpu else gone_array


register(Optimization(
    "bn-restructure",
    "BatchNorm restructured: statistics fused into the convolution, normalization with the ReLU",
    "each BatchNorm (aten::batch_norm with recorded shapes) of the matching layers: its forward "
    "work (the CPU op, or its normalization kernels) makes 2 passes over its input instead of 3 "
    "and its backward 3 instead of 5, each at the speed it reached in the trace (x 2/3, x 3/5); "
    "the ReLU right after it (same shape) removed in forward and backward with its kernels and "
    "launches (Jung et al., SysML 2019, as the Daydream paper models it)",
    _bn_restructure,
    {"layers": Parameter(str, r"bn\d*$|norm\d*$",
                         "regular expression over layer paths (the BatchNorm layers)")},
))
