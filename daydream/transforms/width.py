"""`width:layers=REGEX,factor=F`: the model with the matching layers' hidden sizes F times larger,
each op re-timed at its new shapes.

- The hidden sizes: the sizes the matching layers make (by default the repeated blocks): the out
  features or channels of the parameters their forward's ops take (a linear's out features, a
  convolution's out channels, a normalization's width). Widening the blocks widens what feeds and
  reads them as well: every op of the step whose inputs hold one of those sizes grows along it, in
  the matching layers or not (the embedding that writes the blocks' width, the head that reads
  it, the optimizer's work on every widened parameter).
- Which axis of an input is a hidden one: a parameter's first two (out and in; never a kernel's
  extent); an activation's channels (axis 1) where it has four or more dims or feeds a
  channels-first op, a 3-D one's last where that is a hidden size, else axis 1; a 2-D one's any;
  never the batch's (or its tokens') axis. A normalization's or activation function's input is an
  activation even where its shape is a weight's too (`ACTIVATIONS_FIRST`). Where a size is both the
  tokens' and a hidden one, a multiply keeps the rows (else the contracted dim) and grows at most
  F² (`WidthShape.target`).
- How long: the cost stage, as `batch-size` times a re-shaped op (transforms/reshape.py). On a CPU
  trace a matrix multiply or convolution runs here at both shapes and gains the time it measured
  more (`reshape.measured_growth`), other ops grow by their FLOPs or bytes past the part the
  trace's smallest elementwise ops take whole; on a GPU trace each kernel past the trace's
  shortest by its GEMM's roofline or its bytes, the host side kept. An op of the matching layers
  whose inputs hold no hidden size is attention's work per head, at a fixed head count (as
  `nn.MultiheadAttention` takes it): the head width grows, so its multiplies, a fused attention and
  the ops on its queries, keys and values grow by F, by ratio; the scores (queries × keys per head)
  do not, so the softmax, dropout and masking of them keep their time (`attention_scores`).
- Without recorded shapes: the matching layers' GEMM and convolution work × F², the rest of their
  forward and backward × F, the optimizer by the parameter ratio (all + (F² - 1) × the layers'), by
  ratio.

    found = step_ops(trace, attribution.phase, update_rows)  # the step's ops with their shapes
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

import numpy as np

from daydream.cost import CostModel, Tier
from daydream.cost.host import UNIT_OPS
from daydream.cost.measure import MULTIPLIES
from daydream.cost.shapes import (
    WITH_BIAS,
    Argument,
    OpShapes,
    Tensor,
    gemm_dims,
    matrix_operands,
    parameter_shapes,
)
from daydream.graph import Graph
from daydream.graph.model import GPU_WORK
from daydream.mapping import PHASES
from daydream.mapping.attribution import choose_layers
from daydream.mapping.classes import CLASSES
from daydream.mapping.parameters import reading_data, widened
from daydream.trace import EventKind, Trace
from daydream.transforms.batch import BatchShape, grown, operands_fit
from daydream.transforms.kernels import kernel_classes
from daydream.transforms.model_size import grow_optimizer
from daydream.transforms.primitives import HOST_WORK, scale, select
from daydream.transforms.registry import FACTOR_RANGE, Context, Optimization, Parameter, register
from daydream.transforms.reshape import (
    Scaling,
    ShapedOp,
    grow_kernel,
    launched_work,
    op_layers,
    retime_host,
    scaled_arguments,
    shaped_ops,
)

LAYER_PHASES = (PHASES.index("forward"), PHASES.index("backward"))
#: Ops whose 3-D inputs are channels-first ([samples, channels, length]).
CHANNELS_FIRST = frozenset(f"aten::{op}" for op in (
    "conv1d", "conv_transpose1d", "convolution", "_convolution", "mkldnn_convolution",
    "cudnn_convolution", "convolution_backward", "batch_norm", "native_batch_norm",
    "_batch_norm_impl_index", "cudnn_batch_norm", "native_batch_norm_backward",
    "cudnn_batch_norm_backward", "instance_norm", "group_norm", "native_group_norm",
    "native_group_norm_backward", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d"))


#: Ops whose first N inputs are always activations (a normalization's input, and its gradient in
#: backward), however much their shapes look like a parameter's: a [24, 24] batch through 24-wide
#: layers has the shape of their square weight.
ACTIVATIONS_FIRST = {
    **{f"aten::{op}": 1 for op in (
        "native_layer_norm", "layer_norm", "native_batch_norm", "batch_norm",
        "_batch_norm_impl_index", "native_group_norm", "group_norm", "_softmax", "_log_softmax",
        "softmax", "log_softmax", "gelu", "relu", "clamp_min", "silu", "tanh", "sigmoid", "dropout",
        "native_dropout")},
    **{f"aten::{op}": 2 for op in (
        "native_layer_norm_backward", "native_batch_norm_backward", "native_group_norm_backward",
        "gelu_backward", "threshold_backward", "silu_backward", "tanh_backward",
        "sigmoid_backward", "_softmax_backward_data", "_log_softmax_backward_data")},
}


@dataclass(slots=True, frozen=True)
class StepOps:
    """The step's CPU ops with recorded shapes (cheap dispatcher ops aside), each one's phase, and
    the shapes of the parameters (those the optimizer or an update loop touches)."""

    ops: list[ShapedOp]
    phase: dict[int, int]
    parameters: frozenset[tuple[int, ...]]


def step_ops(trace: Trace, phase_of_row: np.ndarray, update_rows: np.ndarray | None) -> StepOps:
    """Every CPU op of the step (forward, backward, optimizer and other work) with recorded shapes,
    cheap dispatcher ops (views, transposes) left out; empty where the trace recorded no shapes."""
    shapes = OpShapes(trace)
    if not len(shapes):
        return StepOps([], {}, frozenset())
    rows = trace.indices(EventKind.CPU_OP)
    rows = rows[phase_of_row[rows] >= 0]
    unit = [i for i in (trace.string_index(n) for n in UNIT_OPS) if i >= 0]
    rows = rows[~np.isin(trace.name[rows], unit)]
    update = update_rows if update_rows is not None else np.zeros(0, dtype=np.int64)
    parameters = parameter_shapes(shapes, rows[phase_of_row[rows] == PHASES.index("optimizer")],
                                  update, transposed=False)
    found = shaped_ops(trace, rows, shapes, lambda *_: True)
    return StepOps(found, {op.row: int(phase_of_row[op.row]) for op in found},
                   frozenset(parameters))


@dataclass(slots=True, frozen=True)
class WidthShape:
    """The hidden sizes that grow by `factor`, and how to tell a parameter and the batch's axis
    (reshape.Scaling)."""

    sizes: frozenset[int]
    factor: float
    parameters: frozenset[tuple[int, ...]]
    batch: BatchShape | None = None
    additive: bool = True  # a measured op gains what it measured more (reshape.measured_growth)
    # the elementwise ops of cost/measure.POINTWISE_AGAIN measured too (the optimizer's, `_width`)
    pointwise: bool = False

    def axes(self, name: str, shape: tuple[int, ...], operand: bool,
             activation: bool = False) -> tuple[int, ...]:
        """The axes of an input of `shape` to op `name` that hold a hidden size (`operand`: it is a
        multiply's, where a 2-D parameter may enter transposed; `activation`: it is in a place only
        an activation takes, whatever its shape looks like)."""
        transposed = len(shape) == 2 and shape[::-1] in self.parameters
        if not activation and (shape in self.parameters or (operand and transposed)):
            candidates: tuple[int, ...] = tuple(range(min(2, len(shape))))
        else:
            batch = self._batch_axis(shape, operand, activation)
            if len(shape) >= 4 or (len(shape) == 3 and name in CHANNELS_FIRST):
                candidates = (1,)
            elif len(shape) == 3:
                candidates = (2,) if shape[2] in self.sizes else (1,)
            else:
                candidates = tuple(range(len(shape)))
            candidates = tuple(a for a in candidates if a != batch)
        return tuple(a for a in candidates if shape[a] in self.sizes)

    def _batch_axis(self, shape: tuple[int, ...], operand: bool, activation: bool) -> int | None:
        """The axis of `shape` that holds the batch (`BatchShape.axis`); of an `activation`, the
        first of the batch size or a token count even where the shape is a parameter's too."""
        if self.batch is None:
            return None
        if activation:
            counts = {self.batch.batch, *self.batch.tokens}
            return next((axis for axis, size in enumerate(shape) if size in counts), None)
        return self.batch.axis(shape, operand)

    def scaled(self, name: str, tensor: Tensor | None, operand: bool = False,
               activation: bool = False) -> Tensor | None:
        """`tensor` with its hidden axes grown, or None where it has none."""
        if tensor is None:
            return None
        axes = self.axes(name, tensor[0], operand, activation)
        return grown(tensor, axes, self.factor) if axes else None

    def inputs(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        if name in MULTIPLIES:
            return self._multiply(name, tensors)
        places = ACTIVATIONS_FIRST.get(name, 0)
        scaled = [self.scaled(name, t, activation=i < places) for i, t in enumerate(tensors)]
        if all(s is None for s in scaled):
            return None
        return [s if s is not None else t for s, t in zip(scaled, tensors)]

    def target(self, dims: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """A multiply's GEMM `dims` (batch, m, n, k) wider: each of m, n and k that is a hidden
        size grows, except one that counts the batch (its size or its tokens) where only hidden
        sizes do (a step of 256 tokens through 256-wide layers): the rows first (a layer's forward,
        an input's gradient), else the contracted dim. A weight's gradient then grows the same
        FLOPs along other sides: its shapes alone cannot tell which of its equal sizes are the
        tokens. Where none counts the batch, at most two grow (a weight's two sides)."""
        tokens = {self.batch.batch, *self.batch.tokens} if self.batch is not None else set()
        batched, m, n, k = dims
        grow = [d in self.sizes for d in (m, n, k)]
        counting = [d in tokens for d in (m, n, k)]
        held = (any(c and not g for c, g in zip(counting, grow))
                or (self.batch is not None and batched > 1 and batched % self.batch.batch == 0))
        if not held:
            for i in (0, 2, 1):
                if counting[i] or (not any(counting) and sum(grow) > 2):
                    grow[i] = False
                    break
        m, n, k = (max(1, int(round(d * self.factor))) if g else d for d, g in zip((m, n, k), grow))
        return batched, m, n, k

    def _multiply(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        """A multiply's operands grown along hidden axes such that they still fit and its GEMM is
        `target`'s (of the choices where a size is both hidden and the batch's, the one that is);
        None where nothing grows or no choice fits."""
        dims = gemm_dims(name, tensors)
        if dims is None:
            return None
        target = self.target(dims)
        if target == dims:
            return None
        first, second = matrix_operands(name)
        for a in self._choices(name, tensors[first]):
            for b in self._choices(name, tensors[second]):
                new = list(tensors)
                new[first], new[second] = a, b
                new = _with_bias(name, tensors, new)
                if operands_fit(name, new) and gemm_dims(name, new) == target:
                    return new
        return None

    def _choices(self, name: str, tensor: Tensor | None) -> list[Tensor | None]:
        """A multiply's operand grown along each subset of its axes of a hidden size: the one
        `axes` names first, the larger subsets before the smaller."""
        if tensor is None:
            return [None]
        shape = tensor[0]
        hidden = [a for a, size in enumerate(shape) if size in self.sizes]
        subsets = [tuple(c) for r in range(len(hidden), -1, -1) for c in combinations(hidden, r)]
        preferred = self.axes(name, shape, operand=True)
        ordered = [preferred] + [c for c in subsets if c != preferred]
        return [grown(tensor, axes, self.factor) for axes in ordered]

    def arguments(self, name: str, arguments: list[Argument]) -> list[Argument]:
        return scaled_arguments(arguments, lambda _, tensor: self.scaled(name, tensor))

    def unscaled(self, op: ShapedOp) -> tuple[float, Tier]:
        """An op of the matching layers whose inputs hold no hidden size: attention's work per
        head, at a fixed head count. Its multiplies (and a fused attention) contract over or make
        the head width, which grows: × factor, by ratio. Its scores (queries × keys per head) do
        not grow: an op on them alone (softmax, dropout, masking; `attention_scores`) keeps its
        time, modelled, as does one whose inputs have no axis that may hold a width (a scalar, a
        padding mask). Any other: × factor, by ratio."""
        if op.name in MULTIPLIES or "attention" in op.name:
            return self.factor, Tier.RATIO
        lengths = self.lengths()
        if attention_scores(op.tensors, lengths) or not self._sized(op.tensors, lengths):
            return 1.0, Tier.MODELLED
        return self.factor, Tier.RATIO

    def _sized(self, tensors: list[Tensor | None], lengths: frozenset[int]) -> bool:
        """Whether one of `tensors` has an axis that may hold a width: one of another size than
        the batch's, its tokens', a sequence's length, 1 or 0 (a scalar, a padding mask, an
        empty tensor have none)."""
        counted = {0, 1, *lengths}
        if self.batch is not None:
            counted |= {self.batch.batch, *self.batch.tokens}
        return any(size not in counted for t in tensors if t is not None for size in t[0])

    def lengths(self) -> frozenset[int]:
        """The positions per sample of a sequence input (its token counts ÷ the batch)."""
        if self.batch is None or self.batch.batch < 1:
            return frozenset()
        return frozenset(t // self.batch.batch for t in self.batch.tokens
                         if t % self.batch.batch == 0)


@dataclass(slots=True, frozen=True)
class LayerRatio:
    """The ops of a layer that reads the data (reshape.Scaling): its inputs as recorded, its work ×
    its parameters' growth (mapping/parameters.reading_data), modelled."""

    ratio: float
    additive: bool = False
    pointwise: bool = False

    def inputs(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        return None

    def arguments(self, name: str, arguments: list[Argument]) -> list[Argument]:
        return arguments

    def unscaled(self, op: ShapedOp) -> tuple[float, Tier]:
        return self.ratio, Tier.MODELLED


def attention_scores(tensors: list[Tensor | None], lengths: frozenset[int] = frozenset()) -> bool:
    """Whether `tensors` (an op's inputs) are attention's scores and what masks them: every input
    of two or more axes ends in queries × keys or a mask of them, and one at least does. Queries ×
    keys: two equal axes (self-attention's), or each a sequence's length (one of `lengths`); a mask:
    one of those sides and 1 ([batch, heads, 1, keys])."""
    found = [(t[0][-2], t[0][-1]) for t in tensors if t is not None and len(t[0]) >= 2]
    square = {last[0] for last in found if last[0] == last[1] and last[0] > 1}
    sides = square | lengths

    def scores(last: tuple[int, int]) -> bool:
        return last[0] == last[1] > 1 or (set(last) <= sides | {1} and bool(set(last) & sides))

    return bool(found) and all(scores(last) for last in found)


def _with_bias(name: str, old: list[Tensor | None], new: list[Tensor | None]
               ) -> list[Tensor | None]:
    """`new` operands of a multiply with its bias (addmm's, baddbmm's, linear's) made to match the
    product: its last axis grown where the product's columns grew, a 2-D bias's rows likewise."""
    position = 0 if name in WITH_BIAS else 2 if name == "aten::linear" else -1
    bias = old[position] if 0 <= position < len(old) else None
    before, after = gemm_dims(name, old), gemm_dims(name, new)
    if bias is None or before is None or after is None:
        return new
    shape = list(bias[0])
    if shape and shape[-1] == before[2]:
        shape[-1] = after[2]
    if len(shape) >= 2 and shape[-2] == before[1]:
        shape[-2] = after[1]
    found = list(new)
    found[position] = (tuple(shape), bias[1])
    return found


def hidden_sizes(ops: list[ShapedOp], phase: dict[int, int], layer_of: dict[int, int],
                 owner: np.ndarray, parameters: frozenset[tuple[int, ...]]) -> frozenset[int]:
    """The sizes the matching layers make: the out features or channels of each parameter their
    forward ops take (a weight's first axis, its second where it enters transposed or belongs to a
    transposed convolution; a bias's or a normalization's only one). A layer's in features are
    another's out, or the data's (an image's 3 channels): never a hidden size by themselves."""
    found: set[int] = set()
    for op in ops:
        layer = layer_of.get(op.row, -1)
        if phase.get(op.row) != PHASES.index("forward") or layer < 0 or owner[layer] < 0:
            continue
        out = 1 if _transposed_convolution(op) else 0
        for tensor in op.tensors:
            if tensor is None or not tensor[0]:
                continue
            if tensor[0] in parameters:
                found.add(tensor[0][out if len(tensor[0]) > 2 else 0])
            elif len(tensor[0]) == 2 and tensor[0][::-1] in parameters:
                found.add(tensor[0][1])
    return frozenset(found - {1})


def _transposed_convolution(op: ShapedOp) -> bool:
    """A transposed convolution, whose weight is (in channels, out channels, kernel...):
    `aten::conv_transpose2d` and the like, or `aten::convolution` with `transposed` set."""
    if "conv_transpose" in op.name:
        return True
    if op.name not in ("aten::convolution", "aten::_convolution") or not op.arguments:
        return False
    flag = op.arguments[6] if len(op.arguments) > 6 else None
    return flag is not None and flag[0] == "value" and flag[1] is True


def _width(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    targets, owner, chosen = choose_layers(graph.layers, str(params["layers"]),
                                           context.gradient_bytes, "width")
    found: StepOps | None = context.step_ops
    costs = context.costs
    if found is None or not found.ops or costs is None:
        return _by_ratio(graph, context, targets, owner, factor, chosen,
                         "the trace recorded no op shapes (record_shapes)")
    layer_of = op_layers(graph, found.ops, context)
    sizes = hidden_sizes(found.ops, found.phase, layer_of, owner, found.parameters)
    if not sizes:
        return _by_ratio(graph, context, targets, owner, factor, chosen,
                         "the matching layers' forward takes no parameter the optimizer steps")
    of_batch = context.batch_ops
    batch = of_batch(0).shape if of_batch is not None else None
    shape = WidthShape(sizes, factor, found.parameters, batch)
    readers = _reading_data(graph, context, targets, factor)
    scalings: dict[int, Scaling] = {row: readers[graph.layers[layer]]
                                    for row, layer in layer_of.items()
                                    if graph.layers[layer] in readers}
    updates = replace(shape, pointwise=True)
    optimizer = PHASES.index("optimizer")
    stepped = {op.row: updates for op in found.ops if op.row not in scalings
               and found.phase.get(op.row) == optimizer
               and shape.inputs(op.name, op.tensors) is not None}
    scalings.update(stepped)
    mine = [op for op in found.ops if op.row in scalings
            or shape.inputs(op.name, op.tensors) is not None
            or owner[layer_of.get(op.row, -1)] >= 0]
    head = (f"width: {len(targets)} layer(s) {chosen} ×{factor:g} wide, hidden sizes "
            f"{'/'.join(str(s) for s in sorted(sizes))}")
    done = (_retime_kernels(graph, shape, scalings, mine, owner, costs, context)
            if graph.has_device_work()
            else _retime_ops(graph, shape, scalings, mine, costs, context))
    said = (f"; {', '.join(sorted(readers))}: read(s) the data, whose features no width "
            "changes: its work × its parameters' growth" if readers else "")
    if stepped:
        said += (f"; the optimizer's {len(stepped)} ops on widened parameters: "
                 + ("its elementwise updates measured here at both shapes, as multiplies are"
                    if costs.measurer is not None else "by their bytes (nothing measured)"))
    return [f"{head}: {done}{said}; ops that hold no hidden size keep their time; timed by the "
            f"cost stage ({costs.tiers_note()})"]


def _reading_data(graph: Graph, context: Context, targets: list[int],
                  factor: float) -> dict[str, LayerRatio]:
    """The layers outside the matching ones that write a hidden size but read the data with as many
    features (mapping/parameters.reading_data; a daydream recording lists the layers' parameter
    shapes): per layer path, its ops' scaling."""
    recorded = context.layer_parameters
    if not recorded:
        return {}
    chosen = [graph.layers[t] for t in targets]
    wider = widened(recorded, list(graph.layers), chosen, factor)
    return {path: LayerRatio(ratio)
            for path, ratio in reading_data(recorded, wider, chosen, factor).items()}


def _retime_ops(graph: Graph, shape: WidthShape, scalings: dict[int, Scaling],
                ops: list[ShapedOp], costs: CostModel, context: Context) -> str:
    """A CPU trace's `ops` re-timed at their new shapes (those of `scalings` as it says), past the
    part of each that its bytes do not grow (the trace's smallest elementwise ops, at least one host
    unit); in words."""
    speed = context.elementwise_speed(False)
    fixed = speed.overhead_ns if speed is not None else 0.0
    retimed = retime_host(graph, shape, costs, [op for op in ops if op.row not in scalings], fixed)
    for scaling in set(scalings.values()):
        mine = [op for op in ops if scalings.get(op.row) == scaling]
        retimed.add(retime_host(graph, scaling, costs, mine, fixed))
    before, after = retimed.per_iteration(graph)
    return (f"{retimed.changed} CPU ops re-timed at their new shapes ({retimed.fixed_ns} ns of "
            f"each kept): their own work {before:.0f} → {after:.0f} µs per iteration; "
            f"{retimed.wrappers} wrappers (autograd nodes, a multiply's) keep their time")


def _retime_kernels(graph: Graph, shape: WidthShape, scalings: dict[int, Scaling],
                    ops: list[ShapedOp], owner: np.ndarray, costs: CostModel,
                    context: Context) -> str:
    """Each GPU task whose op is one of `ops` grown by its op's work at the new shapes; the matching
    layers' other forward and backward GPU tasks by ratio (GEMMs and convolutions × F², the rest ×
    F); the host side kept."""
    work, launched = launched_work(graph, context)
    by_row = {op.row: op for op in ops}
    grown, unknown = 0, []
    for task, row in zip(work.tolist(), launched.tolist()):
        op = by_row.get(row)
        if op is not None:
            grow_kernel(graph, task, op, scalings.get(op.row, shape), costs)
            grown += 1
        elif owner[graph.tasks["layer"][task]] >= 0 and graph.tasks["phase"][task] in LAYER_PHASES:
            unknown.append(task)
    by_ratio = np.array(unknown, dtype=np.int64)
    _square_or_linear(graph, by_ratio, shape.factor)
    costs.count(Tier.RATIO, int(by_ratio.size))
    return (f"{grown} GPU tasks grown past {costs.floor_ns} ns (the trace's shortest kernel) by "
            f"their op's work at the new shapes (GEMMs by the roofline with wave quantization, "
            f"others by bytes); {by_ratio.size} GPU tasks of the matching layers whose op recorded "
            "no shapes by ratio; launches and the rest of the host side kept")


def _square_or_linear(graph: Graph, tasks: np.ndarray, factor: float) -> tuple[int, int]:
    """GEMM and convolution tasks of `tasks` × factor², the others × factor; how many of each."""
    classes = kernel_classes(graph, tasks)
    square = np.isin(classes, [CLASSES.index("gemm"), CLASSES.index("convolution")])
    scale(graph, tasks[square], factor=factor ** 2)
    scale(graph, tasks[~square], factor=factor)
    return int(square.sum()), int((~square).sum())


def _by_ratio(graph: Graph, context: Context, targets: list[int], owner: np.ndarray,
              factor: float, chosen: str, why: str) -> list[str]:
    kinds = (*GPU_WORK,) if graph.has_device_work() else HOST_WORK
    work = select(graph, kind=kinds, phase=["forward", "backward"])
    work = work[owner[graph.tasks["layer"][work]] >= 0]
    square, linear = _square_or_linear(graph, work, factor)
    if context.costs is not None:
        context.costs.count(Tier.RATIO, int(work.size))
    unit = "kernels" if graph.has_device_work() else "CPU ops"
    notes = [f"width: {len(targets)} layer(s) {chosen} ×{factor:g} wide: {why}, so by ratio: "
             f"{square} GEMM/conv {unit} ×{factor ** 2:g}, {linear} other {unit} ×{factor:g}"]
    return [*notes, grow_optimizer(graph, context, targets, factor ** 2, "width", "the layers'")]


register(Optimization(
    "width", "a wider model: the matching layers' hidden sizes times F",
    "the hidden sizes are what the matching layers make (their parameters' out features or "
    "channels); every op of the step whose inputs hold one grows along it (what feeds and reads "
    "the layers, the optimizer's work on the widened parameters too) and is re-timed at its new "
    "shapes by the cost stage (CPU: multiplies and convolutions measured, each gaining the time it "
    "measured more, other ops by FLOPs or bytes past the part the trace's smallest elementwise ops "
    "take whole; GPU: each kernel by its GEMM's roofline or its bytes past the shortest kernel); "
    "an op of the matching layers that holds no hidden size x factor. Without recorded shapes, by "
    "ratio: the layers' GEMM/convolution work x factor^2, the rest of their work x factor, the "
    "optimizer by the parameter ratio",
    _width,
    {"layers": Parameter(str, "", "regular expression over layer paths: the layers made wider "
                                  "(default: the model's repeated blocks)"),
     "factor": Parameter(float, 2.0, "how many times wider", **FACTOR_RANGE)},
))
