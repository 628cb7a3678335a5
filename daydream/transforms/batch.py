"""`batch-size`: the same step at a batch `factor` times as large, each
op re-timed at its new shapes.

What changes, and who times it:

- which work grows: every CPU op whose recorded inputs carry the batch (a tensor with an axis of the
  batch size, or of a whole multiple of it where leading dims were flattened into it; a factory op
  such as `aten::randn` whose size list holds the batch size) and the GPU work it launched. Ops
  whose inputs carry no batch keep their time: weight transposes, AccumulateGrad, zeroing, the
  optimizer, a hand-written update loop, collectives. Parameters are told apart from activations by
  the shapes the optimizer (or update loop) touches;
- how much: the cost stage (daydream/cost). On a CPU trace a matrix multiply or convolution runs
  here at its scaled and its recorded shapes (the measured tier) and its own time grows by their
  ratio; other ops by the work their inputs carry (FLOPs of a GEMM, bytes otherwise), past one host
  unit of dispatch. On a GPU trace a kernel keeps the trace's shortest kernel as its fixed part and
  grows by the roofline of its op's GEMM at the new shapes (wave quantization, the device table) or
  by its bytes; host work that made no GPU work (making the batch on the CPU) as on a CPU trace;
  launches and the rest of the host side keep their time;
- without recorded shapes: every forward, backward and data task as fixed + (t - fixed) x factor,
  the fixed cost a low percentile of the trace's durations, marked as by ratio.

    found = batch_ops(trace, attribution.phase, update_rows)  # the batch and the ops that carry it
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any

import numpy as np

from daydream.cost import CostModel, Tier
from daydream.cost.heap import heap_note
from daydream.cost.host import UNIT_OPS
from daydream.cost.measure import MULTIPLIES
from daydream.cost.shapes import (
    ITEM_BYTES,
    Argument,
    OpShapes,
    Tensor,
    gemm_dims,
    gemm_flops,
    matrix_operands,
    parameter_shapes,
    product_shape,
    tensor_bytes,
    top_level_ops,
)
from daydream.errors import InputError
from daydream.graph import Graph, TaskKind
from daydream.graph.model import GPU_WORK
from daydream.mapping import PHASES
from daydream.mapping.linking import innermost_enclosing
from daydream.trace import EventKind, Trace
from daydream.trace.model import batch_size
from daydream.transforms.kernels import low_percentile, matching
from daydream.transforms.primitives import select
from daydream.transforms.registry import Context, Optimization, Parameter, register
from daydream.transforms.reshape import (
    ShapedOp,
    grow_kernel,
    launched_work,
    retime_host,
    scaled_arguments,
    shaped_ops,
)

SCALED_PHASES = tuple(PHASES.index(p) for p in ("forward", "backward", "other"))
#: Ops that make a tensor from a size list: with the batch size in that list, they make the batch.
FACTORIES = frozenset(f"aten::{op}" for op in ("randn", "rand", "randint", "randperm", "empty",
                                               "zeros", "ones", "full", "normal", "arange",
                                               "new_empty", "new_zeros", "new_ones"))


@dataclass(slots=True)
class BatchOps:
    """The trace's batch: its size (and where that came from) and the
    ops that carry it; `shaped` ops had shapes."""

    shape: BatchShape | None = None
    source: str = ""  # "recorded" (daydream trace) or "inferred" (the forward's first input)
    ops: list[ShapedOp] = field(default_factory=list)
    by_row: dict[int, ShapedOp] = field(default_factory=dict)
    # rows of CPU ops with recorded shapes, carrying the batch or not
    shaped: set[int] = field(default_factory=set)
    has_shapes: bool = False  # the trace recorded op shapes at all

    @property
    def batch(self) -> int | None:
        return self.shape.batch if self.shape is not None else None

    def pair_bytes(self) -> frozenset[int]:
        """The bytes of the ops' tensors that hold the batch twice, at each type they have, less
        those a tensor that holds it once also has (an allocation is told by its size alone: a
        1,024 × 1,024 bool mask and a 1,024 × 256 float activation both take 1 MiB)."""
        shape = self.shape
        if shape is None or not shape.pairs:
            return frozenset()
        pairs: set[int] = set()
        once: set[int] = set()
        for op in self.ops:
            for t in op.tensors:
                if t is None or t[1] not in ITEM_BYTES:
                    continue
                if shape.pair_axes(t[0]):
                    pairs.add(tensor_bytes(t))
                elif shape.axis(t[0]) is not None:
                    once.add(tensor_bytes(t))
        return frozenset(pairs - once)


@dataclass(slots=True, frozen=True)
class BatchShape:
    """How to tell the batch in a shape: `batch` samples, `tokens` the sizes that count samples ×
    positions (a sequence input's batch × length, flattened), and the shapes of the parameters
    (which the batch leaves alone)."""

    batch: int
    tokens: frozenset[int] = frozenset()
    parameters: frozenset[tuple[int, ...]] = frozenset()
    # sizes that vary from iteration to iteration with the data (`ragged_sizes`): the rows a
    # mixture of experts routes to each expert, the boxes a detector keeps
    ragged: frozenset[int] = frozenset()
    # the shapes of tensors that hold the batch twice, each with those axes: the product of two
    # activations across their batch axes and what follows it (a contrastive loss's similarity of
    # every sample with every other: `pairwise_products`)
    pairs: frozenset[tuple[tuple[int, ...], tuple[int, ...]]] = frozenset()
    # of `parameters`, the shapes that are only a 2-D parameter's transpose: a weight as a
    # multiply's operand, an activation anywhere else (a [512, 256] activation of a batch of 512
    # beside a [256, 512] weight)
    transposed: frozenset[tuple[int, ...]] = frozenset()

    def pair_axes(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """The two batch axes of a tensor of `shape` that holds the batch twice, else None."""
        return next((axes for known, axes in self.pairs if known == shape), None)

    def axis(self, shape: tuple[int, ...], operand: bool = False) -> int | None:
        """The axis of `shape` that holds the batch: the first of the batch size (dim 1 of a
        sequence-first input) or of a token count (of a batch of 1, only a leading 1); a parameter's
        shape only by a token count (a weight as wide as the tokens are many is ambiguous and taken
        as activation); else the first of a ragged size; else the first that is a whole multiple of
        the batch (leading dims flattened into it, attention heads folded into it); None where no
        axis is. A 2-D parameter's transpose is a parameter's shape only as a multiply's
        `operand`."""
        parameter = shape in self.parameters and (operand or shape not in self.transposed)
        for axis, size in enumerate(shape):
            if (size in self.tokens
                or (size == self.batch and not parameter and (self.batch > 1 or axis == 0))):
                return axis
        if parameter:
            return None
        for axis, size in enumerate(shape):
            if size in self.ragged:
                return axis
        if self.batch < 2:  # every size is a multiple of 1
            return None
        for axis, size in enumerate(shape):
            if size > self.batch and size % self.batch == 0:
                return axis
        return None

    def scaled(self, tensor: Tensor | None, factor: float, operand: bool = False
               ) -> Tensor | None:
        """`tensor` with its batch axis scaled by `factor`; None where it carries no batch
        (`operand`: it is a multiply's, see `axis`)."""
        if tensor is None:
            return None
        shape = tensor[0]
        axes = self.pair_axes(shape) if self.pairs else None
        if axes is None:
            axis = self.axis(shape, operand)
            if axis is None:
                return None
            axes = (axis,)
        return grown(tensor, axes, factor)

    def growth(self, name: str, tensors: list[Tensor | None], factor: float) -> float:
        """How many times its FLOPs a multiply of `tensors` does at the new batch: `factor`, or its
        square where an operand or the product holds the batch twice."""
        if any(t is not None and self.pair_axes(t[0]) is not None for t in tensors):
            return factor * factor
        product = product_shape(name, tensors)
        return factor * factor if product is not None and self.pair_axes(product) else factor


@dataclass(frozen=True, slots=True)
class BatchScaling:
    """What a batch `factor` times as large does to an op's inputs (reshape.Scaling)."""

    shape: BatchShape
    factor: float
    additive: bool = False  # a measured op scaled by its ratio: the activations grow
    pointwise: bool = False  # elementwise ops by their bytes

    def inputs(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        return scale_inputs(name, tensors, self.shape, self.factor)

    def arguments(self, name: str, arguments: list[Argument]) -> list[Argument]:
        return scale_arguments(name, arguments, self.shape, self.factor)

    def unscaled(self, op: ShapedOp) -> tuple[float, Tier]:
        """A factory op whose size list holds the batch (twice: a pairwise mask), or a multiply
        whose scaling is ambiguous: by the factor (its square for a pair), modelled."""
        size = factory_size(op.name, op.arguments)
        pair = size is not None and self.shape.pairs and self.shape.pair_axes(size) is not None
        return (self.factor * self.factor if pair else self.factor), Tier.MODELLED


#: Of ops whose inputs mix activations and weights in a known order,
#: the positions of the activations.
ACTIVATION_INPUTS = {**{f"aten::{op}": (0,)
                        for op in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution",
                                                        "mkldnn_convolution", "cudnn_convolution",
                                   "conv_transpose2d")},
                     "aten::convolution_backward": (0, 1)}


def scale_inputs(name: str, tensors: list[Tensor | None], shape: BatchShape, factor: float
                 ) -> list[Tensor | None] | None:
    """The op's inputs with every batch axis scaled, or None where no
    input carries the batch. A multiply whose operands would no longer
    fit scales only its first matrix operand (the same FLOPs); one whose
    operands all look like weights, or that neither way fits, is scaled
    as activations where it can be (`_as_activations`)."""
    positions = ACTIVATION_INPUTS.get(name)
    operand = name in MULTIPLIES
    scaled = [shape.scaled(t, factor, operand) if positions is None or i in positions else None
              for i, t in enumerate(tensors)]
    if all(s is None for s in scaled):
        return _as_activations(name, tensors, shape, factor) if operand else None
    found = [s if s is not None else t for s, t in zip(scaled, tensors)]
    if not operand:
        return found
    growth = shape.growth(name, tensors, factor) if shape.pairs else factor
    if not _grows_by(name, tensors, found, growth):
        first = matrix_operands(name)[0]
        alone = [shape.scaled(t, factor, operand) if i == first else t
                 for i, t in enumerate(tensors)]
        if alone[first] is not None and _grows_by(name, tensors, alone, factor):
            return alone
        return _as_activations(name, tensors, shape, factor)
    return found


def _as_activations(name: str, tensors: list[Tensor | None], shape: BatchShape,
                    factor: float) -> list[Tensor | None] | None:
    """A multiply whose operands look like weights where the batch size is also one of the model's
    widths (a linear layer's backward at a batch of 512 beside a [256, 512] weight: the gradient
    [512, 256] is the weight's transpose in shape), scaled as activations: the batch-sized axes of
    two operands it contracts (a weight's gradient), else of one operand, such that the multiply
    still fits and its FLOPs grow by `factor`; None where no such scaling is."""
    axes: list[tuple[int, int, Tensor]] = []  # (input, axis, its tensor), never a bias
    for i in matrix_operands(name):
        tensor = tensors[i] if i < len(tensors) else None
        if tensor is not None and shape.batch > 1:
            axes += [(i, axis, tensor) for axis, size in enumerate(tensor[0])
                     if size == shape.batch]
    choices = [list(p) for p in combinations(axes, 2) if p[0][0] != p[1][0]]
    for chosen in choices + [[a] for a in axes]:
        new = list(tensors)
        for i, axis, tensor in chosen:  # one axis of each operand chosen
            new[i] = grown(tensor, (axis,), factor)
        if _grows_by(name, tensors, new, factor):
            return new
    return None


def grown(tensor: Tensor, axes: tuple[int, ...], factor: float) -> Tensor:
    """`tensor` with each of its `axes` scaled by `factor` (to at least 1)."""
    new = list(tensor[0])
    for axis in axes:
        new[axis] = max(1, int(round(new[axis] * factor)))
    return tuple(new), tensor[1]


def _grows_by(name: str, old: list[Tensor | None], new: list[Tensor | None],
              growth: float) -> bool:
    """Whether the scaled operands of a multiply still fit and its FLOPs
    grow `growth` times (the batch factor: exactly one of its dimensions
    grows; a weight as wide as the tokens are many must not grow along with
    the activation)."""
    if not operands_fit(name, new):
        return False
    before, after = gemm_dims(name, old), gemm_dims(name, new)
    if before is None or after is None:
        return True
    ratio = gemm_flops(after) / max(gemm_flops(before), 1.0)
    return abs(ratio / growth - 1.0) < 0.02


def operands_fit(name: str, tensors: list[Tensor | None]) -> bool:
    """Whether a multiply's operands agree on their inner dimension (and batch, for bmm)."""
    shaped = [t[0] if t is not None else () for t in tensors]
    try:
        if name == "aten::mm":
            return shaped[0][1] == shaped[1][0]
        if name == "aten::addmm":
            return shaped[1][1] == shaped[2][0]
        if name == "aten::bmm":
            return shaped[0][0] == shaped[1][0] and shaped[0][2] == shaped[1][1]
        if name == "aten::baddbmm":
            return shaped[1][0] == shaped[2][0] and shaped[1][2] == shaped[2][1]
        if name == "aten::linear":
            return shaped[0][-1] == shaped[1][1]
        if name == "aten::matmul":
            return len(shaped[1]) < 2 or shaped[0][-1] == shaped[1][-2]
    except IndexError:
        return False
    return True


def scale_arguments(name: str, arguments: list[Argument], shape: BatchShape,
                    factor: float) -> list[Argument]:
    """Recorded call arguments with each activation tensor's batch axis
    scaled (values as recorded)."""
    positions = ACTIVATION_INPUTS.get(name)
    return scaled_arguments(arguments, lambda index, tensor: shape.scaled(tensor, factor)
                            if positions is None or index in positions else None)


def _makes_batch(name: str, arguments: list[Argument] | None, batch: int) -> bool:
    """A factory op whose recorded size list holds the batch size."""
    size = factory_size(name, arguments)
    return size is not None and batch in size


def factory_size(name: str, arguments: list[Argument] | None) -> tuple[int, ...] | None:
    """The shape a factory op makes: its recorded size list, or an identity matrix's n × m (`eye(n,
    m, ...)` has three or six arguments, `eye(n, ...)` two or five); None for other ops."""
    if not arguments:
        return None
    if name == "aten::eye":
        sizes = [a[1] for a in arguments[:2] if a[0] == "value" and isinstance(a[1], int)]
        if not sizes:
            return None
        with_m = len(arguments) in (3, 6) and len(sizes) == 2
        return (sizes[0], sizes[1]) if with_m else (sizes[0], sizes[0])
    if name not in FACTORIES:
        return None
    return next((tuple(a[1]) for a in arguments
                 if a[0] == "value" and isinstance(a[1], list)), None)


#: Per-parameter and bookkeeping ops whose time does not follow the batch (autograd's nodes:
#: reshape.AUTOGRAD_NODE).
NOT_BATCH_PROPORTIONAL = re.compile(r"AccumulateGrad|zero_|fill_|Optimizer", re.IGNORECASE)
#: Autograd's and the optimizers' per-parameter scopes: nothing inside them grows with the batch.
PER_PARAMETER = ("AccumulateGrad", "Optimizer.", "optimizer_step", "zero_grad")


def batch_ops(trace: Trace, phase_of_row: np.ndarray, excluded: np.ndarray | None = None,
              batch: int = 0, iteration_of_row: np.ndarray | None = None) -> BatchOps:
    """The trace's batch and the CPU ops of forward, backward and data work that carry it (ops in
    `excluded`, a hand-written update loop, and those inside per-parameter scopes left out). The
    batch size is `batch` where given, else the one `daydream trace` recorded, else the size most of
    the forward's data inputs lead with. `iteration_of_row`: each row's iteration (-1: none), from
    which the sizes that vary with the data are told (`ragged_sizes`; none without it)."""
    shapes = OpShapes(trace)
    found = BatchOps()
    if not len(shapes):
        return found
    found.has_shapes = True
    ops = trace.indices(EventKind.CPU_OP)
    excluded = excluded if excluded is not None else np.zeros(0, dtype=np.int64)
    parameters = parameter_shapes(shapes, ops[phase_of_row[ops] == PHASES.index("optimizer")],
                                   excluded, transposed=False)
    transposed = {tuple(p[::-1]) for p in parameters if len(p) == 2} - parameters
    parameters |= transposed
    first = _first_input(trace, shapes, ops, phase_of_row, parameters)
    size, found.source = (batch, "given") if batch > 0 else (batch_size(trace), "recorded")
    if size is None and first is not None:
        size, found.source = first[0][0], "inferred"
    if size is None:
        return found
    found.shape = _shape(trace, shapes, ops[np.isin(phase_of_row[ops], SCALED_PHASES)],
                         phase_of_row, size, first, parameters, iteration_of_row, transposed)
    ops = _scaled_rows(trace, ops, phase_of_row, excluded)
    found.shaped = {row for row in ops.tolist() if row in shapes}

    def carries(name: str, tensors: list[Tensor | None], arguments: list[Argument] | None) -> bool:
        assert found.shape is not None
        return (scale_inputs(name, tensors, found.shape, 2.0) is not None
                or _makes_batch(name, arguments, size))

    found.ops = shaped_ops(trace, ops, shapes, carries)
    found.by_row = {op.row: op for op in found.ops}
    if not found.ops and found.source == "recorded" and first is not None and first[0][0] != size:
        # `daydream trace --batch-size` counts samples (environment
        # steps of a rollout, say), not an axis of any
        # input: the batch the inputs show is the one that grows
        inferred = batch_ops(trace, phase_of_row, excluded, first[0][0], iteration_of_row)
        inferred.source = (f"inferred: the recorded {size} is in no op's inputs; if wrong, give "
                           "batch-size:batch=N")
        return inferred
    return found


def _scaled_rows(trace: Trace, ops: np.ndarray, phase_of_row: np.ndarray,
                 excluded: np.ndarray) -> np.ndarray:
    """Of CPU-op rows `ops`, those of forward, backward and data work that may carry the batch:
    not in `excluded`, not inside a per-parameter scope, not a cheap dispatcher op."""
    scoped = [i for i, name in enumerate(trace.strings) if any(p in name for p in PER_PARAMETER)]
    scopes = ops[np.isin(trace.name[ops], scoped)]
    ops = ops[np.isin(phase_of_row[ops],
                      SCALED_PHASES) & ~np.isin(ops, excluded) & ~np.isin(ops, scopes)]
    ops = ops[innermost_enclosing(trace, scopes, ops) < 0]
    unit_names = [i for i in (trace.string_index(n) for n in UNIT_OPS) if i >= 0]
    return ops[~np.isin(trace.name[ops], unit_names)]


def _shape(trace: Trace, shapes: OpShapes, rows: np.ndarray, phase_of_row: np.ndarray, size: int,
           first: Tensor | None, parameters: set[tuple[int, ...]],
           iteration_of_row: np.ndarray | None,
           transposed: set[tuple[int, ...]] | None = None) -> BatchShape:
    """How the batch of `size` shows in the shapes of `rows` (forward, backward and data work);
    `transposed`: which of `parameters` are only a 2-D parameter's transpose."""
    tokens = _token_counts(first, size)
    ragged = ragged_sizes(trace, shapes, rows, iteration_of_row, parameters, {size, *tokens})
    dims = {dim for parameter in parameters for dim in parameter}
    ragged |= _varying_batches(trace, shapes, rows, phase_of_row, iteration_of_row, parameters,
                               size) - dims
    shape = BatchShape(size, tokens, frozenset(parameters), ragged,
                       transposed=frozenset(transposed or ()))
    return replace(shape, pairs=pairwise_products(trace, shapes, rows, shape))


def _varying_batches(trace: Trace, shapes: OpShapes, rows: np.ndarray, phase_of_row: np.ndarray,
                     iteration_of_row: np.ndarray | None, parameters: set[tuple[int, ...]],
                     size: int) -> frozenset[int]:
    """Where the model's input shows the batch size in no axis in some iteration, the size its
    input leads with in each such iteration: that iteration's batch (the nodes of a batch of graphs
    of varying size, whose recorded batch is one warm-up step's node count; a last, shorter batch).
    Empty where every iteration's input shows the batch (a sequence-first input whose length
    varies leads with the length)."""
    if iteration_of_row is None:
        return frozenset()
    found: set[int] = set()
    inside = rows[iteration_of_row[rows] >= 0]
    inside = inside[np.argsort(iteration_of_row[inside], kind="stable")]
    # each iteration's rows, split once (not a mask over all rows per iteration)
    for mine in np.split(inside, np.flatnonzero(np.diff(iteration_of_row[inside])) + 1):
        first = _first_input(trace, shapes, mine, phase_of_row, parameters)
        if first is not None and first[0] and size not in first[0]:
            found.add(int(first[0][0]))
    return frozenset(found)


#: Multiplies of two activations whose product may hold the batch twice.
PAIRWISE = ("aten::mm", "aten::bmm", "aten::matmul")


def pairwise_products(trace: Trace, shapes: OpShapes, rows: np.ndarray, shape: BatchShape
                      ) -> frozenset[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The products (shape, batch axes) of `rows`' multiplies that hold the batch twice: two
    activations, the first with its batch along the product's rows, the second along its columns,
    neither along a leading (batched) dim, and the two sizes equal (every sample against every
    other: SimCLR's and CLIP's similarities) or each exactly the batch. Their work, and that of
    every op on a tensor of their shape, grows with the square of the batch. A 2-D product's
    transpose is one too."""
    names = [i for i in (trace.string_index(n) for n in PAIRWISE) if i >= 0]
    found: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for row in rows[np.isin(trace.name[rows], names)].tolist():
        tensors = (shapes.tensors(row) or [])[:2]
        product = product_shape(trace.name_of(row), tensors)
        if product is None or not _holds_pair(tensors, product, shape):
            continue
        found.add((product, (len(product) - 2, len(product) - 1)))
        if len(product) == 2:
            found.add((product[::-1], (0, 1)))
    return frozenset(found)


def _holds_pair(tensors: list[Tensor | None], product: tuple[int, ...], shape: BatchShape) -> bool:
    """Whether a multiply of activations `tensors` into `product` holds the batch twice (see
    `pairwise_products`)."""
    if len(tensors) < 2 or any(t is None or t[0] in shape.parameters for t in tensors):
        return False
    first, second = tensors[0][0], tensors[1][0]  # type: ignore[index]
    if shape.axis(first) != len(first) - 2 or shape.axis(second) != len(second) - 1:
        return False
    leading = int(np.prod(product[:-2])) if len(product) > 2 else 1
    if shape.batch > 1 and leading >= shape.batch and leading % shape.batch == 0:
        return False  # the batch is in the leading dims (attention's heads × samples)
    rows, columns = product[-2], product[-1]
    exact = {shape.batch, *shape.tokens}
    return rows == columns or (rows in exact and columns in exact)


def ragged_sizes(trace: Trace, shapes: OpShapes, rows: np.ndarray,
                 iteration_of_row: np.ndarray | None, parameters: set[tuple[int, ...]],
                 batch: set[int]) -> frozenset[int]:
    """The sizes of `rows`' inputs that vary from iteration to iteration: per op name, input and
    axis, those some iteration's ops show and another's do not, less any size that one of them
    shows in every iteration, any parameter's dim, the batch's own and any below the batch size
    (`batch`: the batch size and its token counts). What varies with the data
    in a training loop counts what the batch holds (the tokens a mixture of experts routes to each
    expert: 245, 272, 264 and 243 of 1,024 in one step, 257, 254, 279 and 234 in the next; the
    boxes a detector keeps), so it grows with the batch; so does a size below the batch's where it
    stands in for the batch's own in another iteration (the model's input varies: the nodes of a
    batch of graphs). Needs two iterations."""
    if iteration_of_row is None:
        return frozenset()
    rows = rows[iteration_of_row[rows] >= 0]
    iterations = set(iteration_of_row[rows].tolist())
    if len(iterations) < 2:
        return frozenset()
    seen: dict[tuple[int, int, int], dict[int, set[int]]] = {}
    for row, iteration in zip(rows.tolist(), iteration_of_row[rows].tolist()):
        for index, tensor in enumerate(shapes.tensors(row) or []):
            for axis, size in enumerate(tensor[0] if tensor is not None else ()):
                key = (int(trace.name[row]), index, axis)
                seen.setdefault(key, {}).setdefault(iteration, set()).add(size)
    varying: set[int] = set()
    steady: set[int] = set()
    batches: set[int] = set()  # the batch's own sizes in the other iterations
    for by_iteration in seen.values():
        if len(by_iteration) < len(iterations):
            continue  # an op some iterations do not run
        common = set.intersection(*by_iteration.values())
        steady |= common
        moving = set.union(*by_iteration.values()) - common
        varying |= moving
        if moving & batch:
            batches |= moving
    fixed = {size for shape in parameters for size in shape} | batch
    # what a batch holds counts at least its samples: a size below them varies with something else,
    # unless it is where the batch is in another iteration (a batch of graphs' nodes, recorded as
    # the first iteration's node count)
    return frozenset(size for size in varying - steady - fixed
                     if size > min(batch) or size in batches)


#: An inferred batch size must lead the data input of at least this share of the forward's ops.
INFERRED_SHARE = 0.3


def _first_input(trace: Trace, shapes: OpShapes, ops: np.ndarray, phase_of_row: np.ndarray,
                 parameters: set[tuple[int, ...]]) -> Tensor | None:
    """The model's input as the forward's ops show it: the first tensor input, not a
    parameter's shape, of the first forward op whose data input leads with the size
    most of them lead with (the batch); None where no size leads `INFERRED_SHARE` of
    them (a weight first, then activations of changing shapes)."""
    forward = top_level_ops(trace, ops[phase_of_row[ops] == PHASES.index("forward")])
    forward = forward[np.argsort(trace.ts_ns[forward], kind="stable")]
    firsts = []
    for row in forward.tolist():
        tensor = next((t for t in shapes.tensors(row) or [] if t is not None and len(t[0]) >= 1
                       and t[0] not in parameters and min(t[0]) > 0), None)
        if tensor is not None:
            firsts.append(tensor)
    if not firsts:
        return None
    leading = Counter(t[0][0] for t in firsts)
    size, count = leading.most_common(1)[0]
    if count < INFERRED_SHARE * len(firsts):
        return None
    return next(t for t in firsts if t[0][0] == size)


def _token_counts(first: Tensor | None, batch: int) -> frozenset[int]:
    """The sizes that count the batch's samples × positions: of token ids ([batch, length],
    integers) all their other dims, of a sequence of vectors ([batch, length, features], 3-D) its
    length, times the batch. Images and flat features have none."""
    if first is None or batch not in first[0]:
        return frozenset()
    shape = list(first[0])
    axis = shape.index(batch)
    others = shape[:axis] + shape[axis + 1:]
    if first[1] in ("long int", "int"):
        positions = others
    elif len(shape) == 3:
        positions = others[:-1]
    else:
        return frozenset()
    count = batch * int(np.prod(positions)) if positions else batch
    return frozenset({count}) if count != batch else frozenset()


# --------------------------------------------------------------------------- the transform


def _batch_size(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    if not factor > 0 or not np.isfinite(factor):
        raise InputError(
            f"--opt batch-size:factor={factor:g}: the factor must be a positive number")
    of_batch = context.batch_ops
    found: BatchOps | None = of_batch(int(params["batch"])) if of_batch is not None else None
    costs = context.costs
    if found is None or not found.has_shapes or costs is None:
        return _by_ratio(graph, params, context, "the trace recorded no op shapes (record_shapes)")
    if found.batch is None:
        return _by_ratio(graph, params, context,
                         "the trace records no batch size and its forward's inputs do not make "
                         "one clear (give it: batch-size:batch=N)")
    if graph.has_device_work():
        return _retime_gpu(graph, found, factor, costs, context, params)
    return _retime_cpu_trace(graph, found, factor, costs, context)


def _retime_cpu(graph: Graph, shape: BatchShape, factor: float, costs: CostModel,
                ops: list[ShapedOp], fixed_ns: float = 0.0) -> str:
    """Each of `ops` re-timed at the new batch (reshape.retime_host), in words."""
    done = retime_host(graph, BatchScaling(shape, factor), costs, ops, fixed_ns)
    before, after = done.per_iteration(graph)
    what = "dispatch" if fixed_ns <= costs.host.unit_ns else "the trace's smallest elementwise ops"
    return (f"{done.changed} CPU ops whose inputs carry it re-timed at their new shapes "
            f"({done.fixed_ns} ns each kept, as {what}): their own work {before:.0f} → "
            f"{after:.0f} µs per iteration; {done.wrappers} wrappers (of a multiply or "
            "convolution, autograd nodes) keep their time")


def _batch_note(found: BatchOps, factor: float) -> str:
    shape = found.shape
    assert shape is not None
    tokens = f", tokens {'/'.join(str(t) for t in sorted(shape.tokens))}" if shape.tokens else ""
    source = found.source
    if found.source == "inferred":
        source = "inferred from the forward's inputs; if wrong, give batch-size:batch=N"
    return f"batch-size: batch {shape.batch} ({source}{tokens}) ×{factor:g}"


def _retime_cpu_trace(graph: Graph, found: BatchOps, factor: float, costs: CostModel,
                      context: Context) -> list[str]:
    shape = found.shape
    assert shape is not None
    speed = context.elementwise_speed(False)
    done = _retime_cpu(graph, shape, factor, costs, found.ops,
                       speed.overhead_ns if speed is not None else 0.0)
    still = len(found.shaped) - len(found.ops)
    return [f"{_batch_note(found, factor)}: {done}; {still} ops whose inputs carry no batch "
            "(weights, per-parameter work) keep their time, as do the optimizer and host gaps; "
            f"timed by the cost stage ({costs.tiers_note()})",
            *heap_note(context.large_host_blocks, "batch-size")]


def _retime_gpu(graph: Graph, found: BatchOps, factor: float, costs: CostModel, context: Context,
                params: dict[str, Any]) -> list[str]:
    """Each GPU task whose op carries the batch grows past the trace's shortest kernel by its op's
    ratio; GPU tasks whose op recorded no shapes by ratio; host work that launched nothing and
    carries the batch as on a CPU trace."""
    shape = found.shape
    assert shape is not None
    work, ops = launched_work(graph, context, [PHASES[p] for p in SCALED_PHASES])
    floor = costs.floor_ns
    unknown = []
    grown, kept = 0, 0
    for task, op_row in zip(work.tolist(), ops.tolist()):
        op = found.by_row.get(op_row)
        if op is None:
            if op_row >= 0 and op_row in found.shaped:
                kept += 1  # its op had shapes, none carrying the batch: per-parameter work
            else:
                unknown.append(task)
            continue
        grow_kernel(graph, task, op, BatchScaling(shape, factor), costs)
        grown += 1
    by_ratio = np.array(unknown, dtype=np.int64)
    if by_ratio.size:
        by_ratio = np.setdiff1d(by_ratio, matching(graph, by_ratio, NOT_BATCH_PROPORTIONAL))
        _grow(graph, by_ratio, factor, float(params["fixed_percentile"]))
        costs.count(Tier.RATIO, int(by_ratio.size))
    host = [o for o in found.ops if not o.launched]
    host_note = ""
    if host:
        retimed = _retime_cpu(graph, shape, factor, costs, host)
        host_note = f"; host work that launched no GPU work (making the batch): {retimed}"
    return [f"{_batch_note(found, factor)}: {grown} GPU tasks whose op's inputs carry it grown "
            f"past {floor} ns (the trace's shortest kernel) by their op's work at the new shapes "
            f"(GEMMs by the roofline with wave quantization, others by bytes); {kept} GPU tasks of "
            f"ops that carry no batch (per-parameter work) kept; {by_ratio.size} GPU tasks whose "
            f"op recorded no shapes by ratio (fixed + linear){host_note}; launches, the optimizer "
            f"and collectives kept; timed by the cost stage ({costs.tiers_note()})"]


def retime_ops(graph: Graph, found: BatchOps, rows: set[int], factor: float, costs: CostModel,
               context: Context) -> str:
    """The ops `rows` of `found` (and on a GPU graph the work they launched) at `factor` of the
    batch, by the cost stage as the batch-size what-if times them: what a layout that splits some
    layers' work `factor`-fold does to those layers' ops. Returns what was done, in words."""
    shape = found.shape
    if shape is None:
        return "no batch found, nothing re-timed"
    chosen = [op for op in found.ops if op.row in rows]
    if not graph.has_device_work():
        return _retime_cpu(graph, shape, factor, costs, chosen)
    work, launched = launched_work(graph, context)
    floor, grown = costs.floor_ns, 0
    for task, row in zip(work.tolist(), launched.tolist()):
        op = found.by_row.get(row) if row in rows else None
        if op is None:
            continue
        grow_kernel(graph, task, op, BatchScaling(shape, factor), costs)
        grown += 1
    return (f"{grown} GPU tasks of {len(chosen)} ops grown past {floor} ns by their op's work at "
            "the new shapes")


def _grow(graph: Graph, tasks: np.ndarray, factor: float, percentile: float) -> int:
    """fixed + (t - fixed) × factor, the fixed cost the `percentile`th
    duration of `tasks`; returns it."""
    durations = graph.tasks["duration_ns"][tasks]
    fixed = low_percentile(durations, percentile)
    part = np.minimum(durations, fixed)
    graph.tasks["duration_ns"][tasks] = np.rint(part + (durations - part) * factor).astype(np.int64)
    return fixed


def _by_ratio(graph: Graph, params: dict[str, Any], context: Context, why: str) -> list[str]:
    """Every forward, backward and data task (GPU tasks; CPU ops on a
    CPU trace) as fixed + (t - fixed) × factor."""
    factor = float(params["factor"])
    gpu = graph.has_device_work()
    kinds = GPU_WORK if gpu else (TaskKind.HOST_OP,)
    work = select(graph, kind=kinds, phase=["forward", "backward", "other"])
    work = np.setdiff1d(work, matching(graph, work, NOT_BATCH_PROPORTIONAL))
    # gradients do not grow with the batch
    work = work[graph.tasks["kind"][work] != TaskKind.COLLECTIVE]
    fixed = _grow(graph, work, factor, float(params["fixed_percentile"]))
    if context.costs is not None:
        context.costs.count(Tier.RATIO, int(work.size))
    unit = "GPU tasks" if gpu else "CPU ops"
    return [f"batch-size: {why}, so by ratio: {work.size} batch-proportional {unit} rescaled "
            f"×{factor:g} above a fixed cost of {fixed} ns each (the "
            f"{params['fixed_percentile']:g}th-percentile duration); optimizer, gradient "
            "accumulation, collectives and host overhead kept"]


register(Optimization(
    "batch-size", "change the batch size by a factor",
    "each CPU op whose recorded inputs carry the batch (an axis of the batch size, or a multiple "
    "of it; parameters told apart by the shapes the optimizer touches) re-timed at its new shapes "
    "by the cost stage: on a CPU trace multiplies and convolutions measured here at both shapes, "
    "other ops by their FLOPs or bytes, one host unit of dispatch kept; on a GPU trace each kernel "
    "past the trace's shortest by its op's roofline (GEMMs, wave quantization) or bytes, and host "
    "work that launched nothing (making the batch) as on a CPU trace. Ops carrying no batch "
    "(weights, AccumulateGrad, zeroing), the optimizer, collectives, launches and host gaps keep "
    "their time. Without recorded shapes: fixed + (t - fixed) × factor with a low-percentile fixed "
    "cost, by ratio",
    _batch_size,
    {"factor": Parameter(float, 2.0, "new batch size / old batch size", 1e-3, 1e4),
     "batch": Parameter(int, 0, "the trace's batch size where it does not record it (0: recorded, "
                                "else inferred from "
                                "the forward's inputs)", 0, 2**31),
     "fixed_percentile": Parameter(float, 10.0, "percentile of durations taken as a task's fixed "
                                                "cost where shapes "
                                                "are not recorded", 0.0, 100.0)},
))
