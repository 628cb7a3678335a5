"""Ops re-timed at new shapes: what `batch-size` and `width` share.

A what-if that re-shapes work says, per recorded CPU op, what its inputs become (a `Scaling`); this
module times the op at both shapes by the cost stage and moves the graph:

- on a CPU trace, an op's own host time past its fixed part (one host unit of dispatch, or more)
  changes with its work: a matrix multiply or convolution run here at both shapes (the measured
  tier: the ratio, or what it measured more where the weights grow, `measured_growth`), else
  by the ratio of its FLOPs (a GEMM) or of the bytes its inputs carry (modelled);
- on a GPU trace, each kernel its op launched keeps the trace's shortest kernel as its fixed part
  and grows by the roofline of the op's GEMM at the new shapes (the device table, wave
  quantization) or by its bytes.

    ops = shaped_ops(trace, rows, keep)               # the recorded ops, with their own host time
    done = retime_host(graph, scaling, costs, ops)    # a CPU trace's ops at their new shapes
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from daydream.cost import CostModel, Tier
from daydream.cost.host import exclusive_host_ns
from daydream.cost.measure import CALLED_AGAIN, MULTIPLIES, POINTWISE_AGAIN, Measurer
from daydream.cost.roofline import Roofline, gemm_waves
from daydream.cost.shapes import (
    ITEM_BYTES,
    REDUCED,
    Argument,
    OpShapes,
    Tensor,
    gemm_bytes,
    gemm_dims,
    gemm_flops,
    read_bytes,
)
from daydream.graph import Graph, TaskKind
from daydream.graph.model import GPU_WORK
from daydream.mapping.linking import innermost_enclosing, link
from daydream.trace import GPU_ACTIVITY_KINDS, EventKind, Trace
from daydream.transforms.primitives import HostSpans, select, task_of_event
from daydream.transforms.registry import Context


@dataclass(slots=True, frozen=True)
class ShapedOp:
    """A recorded CPU op with its recorded inputs."""

    row: int
    name: str
    tensors: list[Tensor | None]
    arguments: list[Argument] | None
    exclusive_ns: int  # its own host time, nested ops and API calls taken out
    start_ns: int
    track: int
    launched: bool  # it, or an op nested in it, launched GPU work
    # it encloses another matrix multiply or convolution, or is an autograd node: others do the work
    wrapper: bool
    # another matrix multiply or convolution encloses it (a linear's matmul, a matmul's mm)
    nested: bool = False


class Scaling(Protocol):
    """What a re-shaping what-if does to an op's recorded inputs; `additive`: a measured op that
    grows gains what it measured more, rather than scaling by it (`measured_growth`)."""

    @property
    def additive(self) -> bool:
        """Whether a measured op that grows gains what it measured more (else it is scaled)."""

    @property
    def pointwise(self) -> bool:
        """Whether the elementwise ops of `POINTWISE_AGAIN` are measured too (called again with
        their recorded arguments), not only multiplies and `CALLED_AGAIN`'s."""

    def inputs(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        """The op's inputs at the new shapes; None where none of them changes."""

    def arguments(self, name: str, arguments: list[Argument]) -> list[Argument]:
        """The op's recorded call arguments at the new shapes (values as recorded)."""

    def unscaled(self, op: ShapedOp) -> tuple[float, Tier]:
        """How many times its work an op whose inputs do not change (`inputs` is None) does, and
        the tier that says so."""


#: Autograd's nodes (AddmmBackward0, autograd::engine::evaluate_function: ...): their own time is
#: the engine's, the ops they run do the work (in examples/mlp.py at twice the batch, AddmmBackward0
#: took the same time).
AUTOGRAD_NODE = re.compile(r"^autograd::|^torch::autograd::|^[A-Za-z0-9_]+Backward\d*$")


def shaped_ops(trace: Trace, rows: Iterable[int], shapes: OpShapes,
               keep: Callable[[str, list[Tensor | None], list[Argument] | None], bool]
               ) -> list[ShapedOp]:
    """The CPU ops of `rows` with recorded shapes that `keep` (name, inputs, arguments) takes, each
    with its own host time; wrappers (others do their work): autograd nodes, and the multiplies and
    convolutions that enclose another."""
    rows = np.asarray(list(rows), dtype=np.int64)
    found_rows, exclusive = exclusive_host_ns(trace)
    own = dict(zip(found_rows.tolist(), exclusive.tolist()))
    launched = launching(trace, link(trace).op[trace.indices(*GPU_ACTIVITY_KINDS)])
    compute_names = [i for i in (trace.string_index(n) for n in (*MULTIPLIES, *CALLED_AGAIN))
                     if i >= 0]
    wrappers, nested = wrappers_and_nested(trace, rows[np.isin(trace.name[rows], compute_names)])
    found = []
    for row in rows.tolist():
        if row not in shapes:
            continue
        tensors = shapes.tensors_listed(row) or []
        arguments = shapes.arguments(row)
        name = trace.name_of(row)
        if not keep(name, tensors, arguments):
            continue
        found.append(ShapedOp(row, name, tensors, arguments, int(own.get(row, trace.dur_ns[row])),
                              int(trace.ts_ns[row]), int(trace.track[row]), row in launched,
                              row in wrappers or bool(AUTOGRAD_NODE.search(name)),
                              row in nested))
    return found


def scaled_arguments(arguments: list[Argument],
                     scaled: Callable[[int, Tensor], Tensor | None]) -> list[Argument]:
    """Recorded call arguments with each tensor argument (by position, as (shape, type)) as
    `scaled` gives it, its memory layout kept; values, and tensors it gives None for, as
    recorded."""
    found: list[Argument] = []
    for index, argument in enumerate(arguments):
        new = scaled(index, (argument[1], argument[2])) if argument[0] == "tensor" else None
        found.append(("tensor", *new, *argument[3:4]) if new is not None else argument)
    return found


def wrappers_and_nested(trace: Trace, compute: np.ndarray) -> tuple[set[int], set[int]]:
    """Of the multiplies and convolutions `compute`: those that enclose another, and those another
    encloses (a linear's matmul, a matmul's mm)."""
    enclosing = innermost_enclosing(trace, compute, compute)
    return set(enclosing.tolist()), set(compute[enclosing >= 0].tolist())


def launching(trace: Trace, launching_ops: np.ndarray) -> set[int]:
    """The CPU ops that launched GPU work, and every op enclosing one of them."""
    ops = trace.indices(EventKind.CPU_OP)
    parent = dict(zip(ops.tolist(), innermost_enclosing(trace, ops, ops).tolist()))
    found: set[int] = set()
    for row in np.unique(launching_ops[launching_ops >= 0]).tolist():
        while row >= 0 and row not in found:
            found.add(row)
            row = parent.get(row, -1)
    return found


def launched_work(graph: Graph, context: Context,
                  phases: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The graph's GPU tasks (of `phases`, all where None; collectives aside) and, per task, the
    trace row of the CPU op that launched it (-1 where none is known)."""
    trace_op = context.launching_op
    work = select(graph, kind=GPU_WORK, phase=phases)
    work = work[graph.tasks["kind"][work] != TaskKind.COLLECTIVE]
    events = graph.tasks["event"][work]
    launched = (np.where(events >= 0, trace_op[np.maximum(events, 0)], -1) if trace_op is not None
                else np.full(work.size, -1))
    return work, launched


def op_layers(graph: Graph, ops: list[ShapedOp], context: Context) -> dict[int, int]:
    """Per op of `ops` (trace row), its layer: that of the host task holding it (a CPU graph) or
    of the GPU work it launched (a GPU graph); ops without one are left out."""
    layers: dict[int, int] = {}
    if graph.has_device_work():
        trace_op = context.launching_op
        if trace_op is None:
            return layers
        known = {op.row for op in ops}
        work = select(graph, kind=GPU_WORK)
        events = graph.tasks["event"][work]
        rows = np.where(events >= 0, trace_op[np.maximum(events, 0)], -1)
        for row, layer in zip(rows.tolist(), graph.tasks["layer"][work].tolist()):
            if row >= 0 and layer >= 0 and row in known:
                layers.setdefault(row, layer)
        return layers
    of_event = task_of_event(graph)
    spans = HostSpans(graph)
    for op in ops:
        task = of_event.get(op.row, spans.holding(op.start_ns, op.track))
        if task >= 0 and graph.tasks["layer"][task] >= 0:
            layers[op.row] = int(graph.tasks["layer"][task])
    return layers


@dataclass(frozen=True, slots=True)
class Growth:
    """How an op's own time changes at its new shapes: its work past the fixed part × `ratio`, plus
    `added_ns`; and the tier that says so."""

    ratio: float
    added_ns: int
    tier: Tier

    def new_ns(self, work: int) -> int:
        return max(0, int(round(work * self.ratio)) + self.added_ns)


def op_growth(op: ShapedOp, scaling: Scaling, costs: CostModel, measure: bool) -> Growth:
    """How the op's own work changes at its new shapes: measured here where `measure` and it is a
    multiply or a convolution (`measured_growth`), else by the ratio of its FLOPs (a GEMM) or of
    its bytes (modelled)."""
    scaled = scaling.inputs(op.name, op.tensors)
    if scaled is None:
        ratio, tier = scaling.unscaled(op)
        return Growth(ratio, 0, tier)
    if measure and costs.measurer is not None and not op.wrapper:
        growth = measured_growth(op, scaled, scaling, costs.measurer)
        if growth is not None:
            return growth
    old_dims, new_dims = gemm_dims(op.name, op.tensors), gemm_dims(op.name, scaled)
    if old_dims is not None and new_dims is not None:
        return Growth(gemm_flops(new_dims) / max(gemm_flops(old_dims), 1.0), 0, Tier.MODELLED)
    old_bytes, new_bytes = read_bytes(op.name, op.tensors), read_bytes(op.name, scaled)
    if old_bytes:
        return Growth(new_bytes / old_bytes, 0, Tier.MODELLED)
    ratio, tier = scaling.unscaled(op)
    return Growth(ratio, 0, tier)


def measured_growth(op: ShapedOp, scaled: list[Tensor | None], scaling: Scaling,
                    measurer: Measurer) -> Growth | None:
    """A multiply or convolution run here at its new shapes and its recorded ones, in turns, each
    run with the caches emptied; None where it cannot run.

    Where it grows and the scaling says so (`Scaling.additive`: what grows is the weights, which a
    step reads from memory), it gains the time it measured more: recorded + (new - old). Scaled
    instead, the recorded time would carry whatever sets the step apart from a measurement times
    the growth: a transformer's multiply took 1,559 µs in its step and 1,647 µs alone, and at twice
    the width 6,335 µs in the wider step and 6,410 µs alone (the same rule as `amp`'s slower path,
    amp.reduced_ns). Otherwise (a batch: what grows is activations the step just wrote; a layout
    that splits a layer's work) scaled by the ratio. Where the scaling asks (`Scaling.pointwise`),
    an elementwise op of `POINTWISE_AGAIN` is measured too, called again with its recorded
    arguments (an optimizer's update on a widened parameter)."""
    again = op.name in CALLED_AGAIN or (scaling.pointwise and op.name in POINTWISE_AGAIN)
    arguments = op.arguments if again else None
    if op.name not in MULTIPLIES and arguments is None:
        return None
    new_arguments = scaling.arguments(op.name, arguments) if arguments is not None else None
    if scaling.additive:
        pair = (measurer.call_pair_ns(op.name, new_arguments, arguments)
                if arguments is not None and new_arguments is not None
                else measurer.op_pair_ns(op.name, scaled, op.tensors))
        if pair is not None and pair[0] > pair[1]:
            return Growth(1.0, pair[0] - pair[1], Tier.MEASURED)
    # the activations a batch grows were just written by the op before them: timed hot
    hot = not scaling.additive
    ratio = (measurer.call_ratio(op.name, new_arguments, arguments, hot=hot)
             if arguments is not None and new_arguments is not None
             else measurer.op_ratio(op.name, scaled, op.tensors, hot=hot))
    return Growth(ratio, 0, Tier.MEASURED) if ratio is not None else None


@dataclass(slots=True)
class Retimed:
    """What `retime_host` did: ops re-timed, wrappers kept, their own work before and after (ns
    over all iterations), the part of each op kept (ns)."""

    changed: int = 0
    wrappers: int = 0
    before_ns: int = 0
    after_ns: int = 0
    fixed_ns: int = 0

    def add(self, other: Retimed) -> None:
        """`other`'s counts and work added to these (the part kept stays these')."""
        self.changed += other.changed
        self.wrappers += other.wrappers
        self.before_ns += other.before_ns
        self.after_ns += other.after_ns

    def per_iteration(self, graph: Graph) -> tuple[float, float]:
        """Their own work before and after, µs per iteration."""
        iterations = graph.tasks["iteration"]
        count = max(1, len(np.unique(iterations[iterations >= 0])))
        return self.before_ns / count / 1e3, self.after_ns / count / 1e3


def retime_host(graph: Graph, scaling: Scaling, costs: CostModel, ops: list[ShapedOp],
                fixed_ns: float = 0.0) -> Retimed:
    """Each of `ops`' own time, past its fixed part, times its work ratio, added to the task
    holding it. The fixed part: one host unit of dispatch, or `fixed_ns` where more (what the
    trace's smallest elementwise ops take whole: the part of an op's time its bytes do not grow)."""
    of_event = task_of_event(graph)
    spans = HostSpans(graph)
    done = Retimed(fixed_ns=int(round(max(costs.host.unit_ns, fixed_ns))))
    for op in ops:
        if op.wrapper:
            done.wrappers += 1
            continue
        task = of_event.get(op.row, spans.holding(op.start_ns, op.track))
        if task < 0:
            continue
        growth = op_growth(op, scaling, costs, measure=True)
        work = max(0, op.exclusive_ns - done.fixed_ns)
        delta = growth.new_ns(work) - work
        graph.tasks["duration_ns"][task] = max(0, int(graph.tasks["duration_ns"][task]) + delta)
        costs.count(growth.tier)
        done.changed += 1
        done.before_ns += work
        done.after_ns += work + delta
    return done


def grow_kernel(graph: Graph, task: int, op: ShapedOp, scaling: Scaling, costs: CostModel) -> None:
    """GPU task `task` of `op` grown past the trace's shortest kernel by its op's ratio at the new
    shapes."""
    ratio, tier = kernel_ratio(op, scaling, costs)
    duration = int(graph.tasks["duration_ns"][task])
    fixed = min(duration, costs.floor_ns)
    graph.tasks["duration_ns"][task] = int(round(fixed + (duration - fixed) * ratio))
    costs.count(tier)


def kernel_ratio(op: ShapedOp, scaling: Scaling, costs: CostModel) -> tuple[float, Tier]:
    """How many times its time a kernel of `op` takes at the new shapes: a GEMM by the roofline of
    the device table at the old and new shapes (wave quantization included), other work by its op's
    bytes."""
    scaled = scaling.inputs(op.name, op.tensors)
    device = costs.device
    old_dims = gemm_dims(op.name, op.tensors)
    new_dims = gemm_dims(op.name, scaled) if scaled is not None else None
    if (old_dims is not None and new_dims is not None and device is not None
            and device.fp32_tflops > 0):
        kind = next((t[1] for t in op.tensors if t is not None), "float")
        peak = ((device.bf16_tflops or device.fp16_tflops) if kind in REDUCED
                else (device.tf32_tflops or device.fp32_tflops))
        roofline = Roofline(peak, device.memory_bandwidth_gbs, device.sm_count)
        item = ITEM_BYTES.get(kind, 4)

        def model(dims: tuple[int, int, int, int]) -> float:
            waves = gemm_waves(dims[0], dims[1], dims[2], device.sm_count)
            return max(roofline.compute_ns(gemm_flops(dims), waves),
                       roofline.memory_ns(gemm_bytes(dims, item)))

        old = model(old_dims)
        if old > 0:
            return model(new_dims) / old, Tier.MODELLED
    growth = op_growth(op, scaling, costs, measure=False)
    return growth.ratio, growth.tier
