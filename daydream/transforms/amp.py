"""`amp`: automatic mixed precision, as torch.autocast would run the recorded fp32 step.

What changes, and who times it:

- the casts autocast inserts (transforms/autocast.py: which inputs of which ops, from the recorded
  shapes and types), each a host dispatch and a device copy, and, for a tensor that requires grad,
  its gradient's cast back in backward: timed by the cost stage (daydream/cost), a copy at the
  trace's own elementwise speed;
- the autocast wrapper's own dispatch on every op it decides;
- GPU kernels of fp32/tf32 work: GEMM/convolution kernels at the reduced-precision peak over the
  fp32 (or tf32) peak of the device table, never faster than the bytes they move at the trace's own
  memory speed or the trace's shortest kernel; other forward and backward kernels ÷`memory` (half
  the bytes), with the same floor; optimizer kernels unchanged (fp32 master weights);
- a CPU trace: casts and dispatch as above; the ops' own time unchanged
  unless the measured tier runs (torch here).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream.cost import CostModel, Tier
from daydream.cost.heap import HeapWalk, heap_note
from daydream.cost.measure import CALLED_AGAIN, NORMALIZATION_AGAIN, core_cache_bytes
from daydream.cost.shapes import (
    FLOATING,
    OpShapes,
    Tensor,
    elements,
    footprint_bytes,
    tensor_bytes,
    top_level_ops,
)
from daydream.devices import FALLBACK_COMPUTE_FACTOR, FALLBACK_MEMORY_FACTOR
from daydream.graph import DepKind, Graph
from daydream.graph.model import HOST_WORK, KERNELS
from daydream.mapping import PHASES
from daydream.mapping.classes import (
    CLASSES,
    FULL_PRECISION,
    PRECISIONS,
    REDUCED_PRECISION,
    classify,
)
from daydream.mapping.linking import innermost_enclosing
from daydream.trace import EventKind, Trace
from daydream.transforms.autocast import (
    LISTING,
    REDUCED_NAME,
    Cast,
    ForwardOp,
    autocast_view,
    decided_anywhere,
    decided_everywhere,
    decides,
    enclosing_layers,
    plan,
)
from daydream.transforms.kernels import kernel_classes, kernel_precisions, launchers, of_labels
from daydream.transforms.primitives import HostSpans, Spans, scale, select, splice, task_of_event
from daydream.transforms.registry import Context, Optimization, Parameter, register

FORWARD, BACKWARD, OTHER = (PHASES.index(phase) for phase in ("forward", "backward", "other"))


def forward_ops(trace: Trace, layer_of_row: np.ndarray, phase_of_row: np.ndarray,
                iteration_of_row: np.ndarray, layer_names: list[str] | None = None,
                between: bool = False, parameters: frozenset[tuple[int, ...]] = frozenset()
                ) -> tuple[dict[int, list[ForwardOp]], Spans]:
    """Per iteration, its forward's top-level CPU ops in program order, with their recorded tensor
    inputs, and, under an op some autocast list leaves out, the ops it called where they reach one
    the lists name (`ForwardOp.inner`, autocast.autocast_view); and each op's recorded span and
    thread. `layer_names`: the layers `layer_of_row` indexes (what layers hold each op's).
    `between`: also the ops of no layer that run in a forward region, after a forward op and
    before the next backward op (`forward_regions`). `parameters`: the shapes of the model's
    parameters (`ForwardOp.broadcast`)."""
    rows = trace.indices(EventKind.CPU_OP)
    rows = rows[iteration_of_row[rows] >= 0]
    rows = rows[np.argsort(trace.ts_ns[rows], kind="stable")]
    inside, region = forward_regions(trace, rows, phase_of_row, iteration_of_row)
    chosen = phase_of_row[rows] == FORWARD
    if between:
        chosen |= inside & (layer_of_row[rows] < 0) & (phase_of_row[rows] == OTHER)
    rows, region = rows[chosen], region[chosen]
    tree = _OpTree(trace, rows, layer_of_row, enclosing_layers(layer_names or []), parameters)
    region_of = dict(zip(rows.tolist(), region.tolist()))
    found: dict[int, list[ForwardOp]] = {}
    for row in top_level_ops(trace, rows).tolist():
        found.setdefault(int(iteration_of_row[row]), []).append(tree.op(row, region_of[row]))
    return found, tree.spans


def forward_regions(trace: Trace, rows: np.ndarray, phase_of_row: np.ndarray,
                    iteration_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For CPU-op `rows` in time order: whether each runs in a forward region (the last forward or
    backward op of its iteration that started before it, or itself, is a forward op: the model's
    calls and what the script runs between and after them under the same autocast, such as a loss
    or its own `.float()`, up to the backward), and which of its iteration's forward regions that
    is, from 0 (a forward op after a backward op begins the next one: a second `with autocast():`,
    whose weight cache starts empty, as a GAN's generator step has)."""
    order = np.argsort(iteration_of_row[rows], kind="stable")  # time order kept within each
    phase = phase_of_row[rows[order]]
    iteration = iteration_of_row[rows[order]]
    marked = np.where((phase == FORWARD) | (phase == BACKWARD), np.arange(len(rows)), -1)
    last = np.maximum.accumulate(marked) if len(rows) else marked  # at or before each
    before = np.concatenate([[-1], last[:-1]]).astype(np.int64)  # strictly before each

    def phase_at(where: np.ndarray) -> np.ndarray:
        # the phase there, where it is of the same iteration
        same = (where >= 0) & (iteration[np.maximum(where, 0)] == iteration)
        return np.where(same, phase[np.maximum(where, 0)], -1)

    inside = phase_at(last) == FORWARD
    begins = np.cumsum((phase == FORWARD) & (phase_at(before) == BACKWARD))
    first = np.searchsorted(iteration, iteration, side="left")  # each iteration's first position
    region = begins - np.where(first > 0, begins[np.maximum(first - 1, 0)], 0)
    unsorted_inside, unsorted_region = np.empty_like(inside), np.empty_like(region)
    unsorted_inside[order], unsorted_region[order] = inside, region
    return unsorted_inside, unsorted_region


class _OpTree:
    """The forward's CPU ops as `ForwardOp`s, each with the ops it called where autocast may decide
    on them; their spans."""

    def __init__(self, trace: Trace, rows: np.ndarray, layer_of_row: np.ndarray,
                 enclosing: list[tuple[int, ...]],
                 parameters: frozenset[tuple[int, ...]] = frozenset()) -> None:
        self.trace, self.layer_of_row, self.enclosing = trace, layer_of_row, enclosing
        self.parameters = parameters
        self.shapes = OpShapes(trace)
        self.spans: Spans = {}
        self.end_ns = trace.end_ns  # a computed column: once, not per op
        self.children: dict[int, list[int]] = {}
        parents = innermost_enclosing(trace, rows, rows)
        for row, parent in zip(rows.tolist(), parents.tolist()):
            if parent >= 0:
                self.children.setdefault(parent, []).append(row)
        self.reaching: dict[int, bool] = {}

    def reaches(self, row: int) -> bool:
        """Whether an op `row` called, or one they called, is one autocast decides on somewhere."""
        if row not in self.reaching:
            self.reaching[row] = any(decided_anywhere(self.trace.name_of(child))
                                     or self.reaches(child)
                                     for child in self.children.get(row, ()))
        return self.reaching[row]

    def op(self, row: int, region: int = 0) -> ForwardOp:
        name = self.trace.name_of(row)
        inner = (tuple(self.op(child, region) for child in self.children.get(row, ()))
                 if not decided_everywhere(name) and self.reaches(row) else ())
        self.spans[row] = (int(self.trace.ts_ns[row]), int(self.end_ns[row]),
                           int(self.trace.track[row]))
        layer = int(self.layer_of_row[row])
        listed = (next((a[1] for a in self.shapes.arguments(row, lists=True) or []
                        if a[0] == "tensors"), ()) if name in LISTING else ())
        inputs = self.shapes.tensors(row) or []
        return ForwardOp(row, name, layer, inputs, arguments=self.shapes.arguments(row),
                         inner=inner, enclosing=self.enclosing[layer]
                         if 0 <= layer < len(self.enclosing) else (), listed=listed,
                         region=region, broadcast=self._broadcast(inputs))

    def _broadcast(self, inputs: list[Tensor | None]) -> tuple[int, ...]:
        """The inputs of a parameter's shape with fewer elements than the op's largest input: a
        parameter it broadcasts (a bias, a layer scale; autocast leaves it in fp32)."""
        largest = max((elements(t[0]) for t in inputs if t is not None), default=0)
        return tuple(i for i, t in enumerate(inputs) if t is not None and t[0] in self.parameters
                     and elements(t[0]) < largest)


def _amp(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    recorded = context.autocast_ops
    costs = context.costs
    gpu = graph.has_device_work()
    # of the fp32 kernels, before they are re-timed
    ratio_cast_ns = _ratio_cast_ns(graph) if gpu else 0
    notes = [_retime_kernels(graph, params, context)] if gpu else []
    facts, spans = recorded if recorded is not None else ({}, {})
    device_type = "cuda" if gpu else "cpu"
    facts = {iteration: autocast_view(ops, device_type) for iteration, ops in facts.items()}
    if costs is None or not any(facts.values()):
        notes.append("amp: no recorded forward ops with shapes (record_shapes): autocast's casts "
                     "are not modelled")
        return notes
    shapes_known = sum(1 for ops in facts.values() for op in ops if op.inputs)
    if shapes_known == 0:
        notes.append(_ratio_casts(graph, costs, ratio_cast_ns) if gpu else
                     "amp: the trace recorded no op shapes (record_shapes): autocast's casts are "
                     "not modelled")
        return notes
    planned = {iteration: plan(ops, device_type, str(params["dtype"]))
               for iteration, ops in facts.items()}
    casts = {iteration: found for iteration, (found, _) in planned.items()}
    types = {row: kind for _, computes in planned.values() for row, kind in computes.items()}
    decided = sum(1 for ops in facts.values() for op in ops if decides(op.name, device_type))
    anchors = _host_anchors(graph, spans)
    dispatch = _add_dispatch(graph, facts, device_type, costs, anchors)
    added, weights = _insert_casts(graph, casts, costs, anchors, _backward_anchors(graph, facts))
    count = sum(c.forward for cs in casts.values() for c in cs)
    backward = sum(c.backward for cs in casts.values() for c in cs)
    iterations = max(1, len(casts))
    notes.append(f"amp: autocast ({device_type}, {params['dtype']}) decides "
                 f"{decided // iterations} ops per forward; {count // iterations} casts per "
                 f"forward and {backward // iterations} gradient casts back per backward inserted "
                 f"({added} tasks in all), each timed by the cost stage ({costs.tiers_note()}); "
                 f"its own dispatch on {dispatch // iterations} ops per forward "
                 f"({costs.dispatch_ns() / 1e3:.1f} µs each, host unit {costs.host.unit_ns} ns); "
                 f"{shapes_known} of the forward's ops had recorded shapes")
    if not gpu:
        warmth: dict[int, float] = {}
        notes.append(_retime_cpu_ops(graph, facts, types, str(params["dtype"]), costs, context,
                                     spans, warmth))
        notes += _warm_weight_casts(graph, weights, warmth, costs, iterations)
        notes += heap_note(context.large_host_blocks, "amp")
    return notes


#: Matrix multiplies, convolutions and attention a CPU backward runs (inside autograd's nodes):
#: under autocast they run in the reduced type too (bf16 flash attention's backward on a CPU without
#: bf16 arithmetic can take several times its
#: fp32 time: measured, not assumed).
BACKWARD_GEMMS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul",
                  "aten::convolution_backward",
                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                  "aten::mkldnn_rnn_layer_backward")
#: The forward ops a CPU trace's amp re-times by measurement: matrix multiplies and convolutions,
#: whose time is their arithmetic, and batch norm, which a CPU runs on another path per type
#: (`NORMALIZATION_AGAIN`; its backward too, `MEASURED_BACKWARD`).
#: Elementwise and pooling ops are left as recorded: alone, in a loop, a bf16 relu of this CPU
#: measured 1.9x its fp32 time, while in the real bf16 training run the same ops took less (half the
#: bytes to allocate and touch).
RETIMED_ON_CPU = frozenset({"aten::linear", "aten::matmul", "aten::conv1d", "aten::conv2d",
                            "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
                            "aten::conv_transpose3d", "aten::scaled_dot_product_attention",
                            "aten::mkldnn_rnn_layer", "aten::batch_norm", *BACKWARD_GEMMS})
#: Backward normalization ops measured in the reduced type where their layer runs in it, as the
#: forward's batch norm is: in examples/cnn.py's real bf16 steps its backward took 0.69, 0.95 and
#: 1.28 of its fp32 time at three sizes, where halving the bytes gave 0.5-0.6.
MEASURED_BACKWARD = frozenset({"aten::native_batch_norm_backward"})


def _retime_cpu_ops(graph: Graph, facts: dict[int, list[ForwardOp]], types: dict[int, str],
                    reduced: str, costs: CostModel, context: Context, spans: Spans,
                    warmth: dict[int, float]) -> str:
    """On a CPU trace, each forward matrix multiply autocast runs in the reduced type, and each of
    backward, at the time the measured tier gives for it in that type over its time in fp32 (both
    run here at the recorded shapes; `reduced_ns`), the signatures that hold the most time measured
    first (`_measure_most_first`); each measured forward op's warmth into `warmth` (trace row ->
    `_Retimed.warmth`)."""
    measurer = costs.measurer
    if measurer is None:
        return ("amp: on the CPU the ops' own time is kept: the measured tier is off or torch is "
                "not importable, and this CPU's bf16 speed has no model")
    low = REDUCED_NAME[reduced]
    of_event = task_of_event(graph)
    # Only tasks read from the trace hold nested ops: taken before anything is re-timed or halved.
    enclosing = HostSpans(graph)
    held = _HeldOps(graph, of_event, enclosing, spans)
    walk = _walk_of(context)
    found = _forward_retimed(facts, types, low, held, walk)
    fixed = costs.elementwise.overhead_ns if costs.elementwise is not None else 0.0
    cache = core_cache_bytes()
    halving = _halve_memory_bound(graph, facts, types, low, held, context, fixed, cache)
    halved = halving.halved
    found.extend(halving.measured)
    for row, name, inputs, duration, start, track, arguments in context.backward_gemms or []:
        task = of_event.get(row, enclosing.holding(start, track))
        if task >= 0:
            found.append(_Retimed(task, duration, name, inputs=inputs, arguments=arguments,
                                  walked_ns=walk.walked_ns(row)))
    _measure_most_first(measurer, found, low)
    warmth.update((item.row, item.warmth()) for item in found if item.row >= 0 and item.pair)
    saved, by_kind = _apply_retimed(graph, found)
    retimed = sum(item.pair is not None for item in found)
    ratios = [item.pair[0] / item.pair[1] for item in found if item.pair is not None]
    unmeasured = len(found) - retimed - by_kind
    costs.count(Tier.MEASURED, retimed)
    costs.count(Tier.RATIO, halved + by_kind)
    iterations = max(1, len(facts))
    why = (f"; {by_kind} could not be measured (the measuring budget, or shapes that do not run "
           f"here) and take the median change measured for ops of their name, else of their "
           f"class, else of all" if by_kind else "")
    why += f"; {unmeasured} could not be measured and keep their time" if unmeasured else ""
    if (by_kind or unmeasured) and measurer.spent_s >= measurer.budget_s:
        why += (f" (the measuring budget, {measurer.budget_s:g} s, ran out: `--measure-budget` "
                f"more, or the same what-if again, which starts from what the cache kept, "
                f"measures more of them)")
    return (f"amp: {retimed} CPU ops re-timed in {reduced} by the measured tier (this CPU, the "
            f"recorded shapes, {measurer.threads} thread(s); {len(measurer.ran)} signatures run "
            f"now, the rest from the cache): {abs(saved) / iterations / 1e3:.0f} µs "
            f"{'less' if saved >= 0 else 'more'} per "
            f"iteration{why}{measured_ratios(ratios, reduced)}; {halved} elementwise and "
            f"normalization ops of the {len(halving.low_layers)} layers that run in {reduced}, "
            f"forward and backward, their time beyond a small elementwise op's ({fixed / 1e3:.1f} "
            f"µs, this trace's) ÷2 (half the bytes; by ratio)"
            + (f"; {halving.cached} whose tensors fit in a core's cache ({cache >> 10} KiB) keep "
               f"their time (no fewer bytes from memory in {reduced})" if halving.cached else ""))


def _forward_retimed(facts: dict[int, list[ForwardOp]], types: dict[int, str], low: str,
                     held: _HeldOps, walk: HeapWalk) -> list[_Retimed]:
    """The forward ops autocast runs in `low` that amp re-times by measurement on a CPU: their
    tasks, their own recorded time, and what they spent on memory new to the recording."""
    found = []
    for ops in facts.values():
        for op in ops:
            task, own_ns = held.task(op.row)
            if (types.get(op.row) == low and task >= 0 and op.inputs
                    and op.name in RETIMED_ON_CPU):
                found.append(_Retimed(task, own_ns, op.name, inputs=op.inputs,
                                      arguments=op.arguments, walked_ns=walk.walked_ns(op.row),
                                      row=op.row))
    return found


def _walk_of(context: Context) -> HeapWalk:
    """Which ops of a CPU trace wrote memory the recording had not allocated before, and at what
    cost a page (cost/heap.heap_walk); none where the trace cannot tell."""
    blocks = context.large_host_blocks
    return blocks.walk if blocks is not None and blocks.walk is not None else HeapWalk({}, 0.0)


@dataclass(slots=True)
class _Retimed:
    """An op amp re-times on a CPU: its task (the op itself, or the backward node that ran it), its
    recorded time, its name, its measured (reduced, fp32) times (None: not measured), what it is
    measured on (its recorded tensor inputs and arguments), and the part of its recorded time it
    spent writing memory the recording had not allocated before (`walked_ns`: cost/heap.HeapWalk).

    That part is the recording's, not the op's: the profiler's records pushed its output onto new
    memory, which the run without the profiler reuses, and which the bf16 run moved elsewhere
    (examples/mlp.py: the weight gradient's fp32 copy, which autocast's cast back writes). It is
    kept as recorded, and not read as cold caches (`in_situ_ns`): in one recording that multiply
    took 383 µs on new memory against 262 µs hot alone, which read as cold gave 370 µs in bf16; its
    real bf16 time was 83 µs."""
    task: int
    recorded_ns: int
    name: str
    pair: tuple[int, int] | None = None
    inputs: list[Any] | None = None
    arguments: list[Any] | None = None
    cold: tuple[int, int] | None = None
    walked_ns: int = 0
    row: int = -1  # the forward op's trace row (-1: a backward op)

    def warmth(self) -> float:
        """Where its own recorded time sits between its hot and cold fp32 times (`warmth_of`)."""
        return warmth_of(self.own_ns, self.pair, self.cold) if self.pair is not None else 0.0

    @property
    def own_ns(self) -> int:
        """Its recorded time less what it spent on memory the recording had not allocated before."""
        return max(0, self.recorded_ns - self.walked_ns)

    def new_ns(self) -> int | None:
        """Its time in the reduced type (`in_situ_ns`), None where it was not measured."""
        if self.pair is None:
            return None
        return in_situ_ns(self.own_ns, self.pair, self.cold) + self.recorded_ns - self.own_ns


def _measure_most_first(measurer: Any, found: list[_Retimed], low: str) -> None:
    """Each op's measured times (`pair`), its distinct signatures measured in the order that spends
    the measuring budget where it matters: first the signature of each name that holds the most
    recorded time, names by their recorded time; then the rest, most recorded time first. A budget
    that runs out then leaves the ops that hold the least time, and no name unmeasured that has a
    median to share (`_apply_retimed`): in program order, a large model's backward was never
    reached."""
    signatures: dict[str, list[_Retimed]] = {}
    for item in found:
        key = json.dumps([item.name, item.inputs, item.arguments], default=str)
        signatures.setdefault(key, []).append(item)
    held = {key: sum(item.recorded_ns for item in items) for key, items in signatures.items()}
    by_name: dict[str, int] = {}
    for key, items in signatures.items():
        by_name[items[0].name] = by_name.get(items[0].name, 0) + held[key]
    order = sorted(held, key=lambda key: -held[key])
    first: dict[str, str] = {}
    for key in order:
        first.setdefault(signatures[key][0].name, key)
    leading = sorted(first.values(), key=lambda key: -by_name[signatures[key][0].name])
    chosen = set(leading)
    ranked = [*leading, *[key for key in order if key not in chosen]]
    for key in ranked:
        items = signatures[key]
        pair = _measured_pair(measurer, items[0].name, items[0].inputs or [], low,
                              items[0].arguments)
        for item in items:
            item.pair = pair
    # then, in the same order, each signature some of whose ops ran well above their hot fp32 time
    # at its coldest (`in_situ_ns`)
    for key in ranked:
        items = signatures[key]
        hot = items[0].pair
        if hot is None or not any(item.own_ns > hot[1] * WARMER for item in items):
            continue
        cold = _measured_pair(measurer, items[0].name, items[0].inputs or [], low,
                              items[0].arguments, cold=True)
        for item in items:
            item.cold = cold


def _apply_retimed(graph: Graph, found: list[_Retimed]) -> tuple[int, int]:
    """Each measured op's task changed by its new time less its recorded one (`reduced_ns`); an op
    that could not be measured changes by the median new-over-recorded of the measured ops of its
    name, else of its class (a GEMM, a convolution, attention: mapping/classes.py), else of all the
    measured ops: a budget that ran out before a model's last convolutions, or before its GRU's
    multiplies, leaves them no faster or slower than the ops it measured. Ops keep their time only
    where none was measured. Returns the time saved (ns, all iterations) and how many ops took a
    median."""
    durations = graph.tasks["duration_ns"]
    predicted = [item.new_ns() for item in found]
    factors: dict[str, list[float]] = {}
    for item, new in zip(found, predicted):
        if new is not None and item.recorded_ns > 0:
            for key in _sharing(item.name):
                factors.setdefault(key, []).append(new / item.recorded_ns)
    median = {key: statistics.median(values) for key, values in factors.items()}
    saved, by_kind = 0, 0
    for item, new in zip(found, predicted):
        if new is not None:
            change = item.recorded_ns - new
        else:
            shared = next((key for key in _sharing(item.name) if key in median), None)
            if shared is None:
                continue
            change = item.recorded_ns - int(round(item.recorded_ns * median[shared]))
            by_kind += 1
        durations[item.task] = max(0, int(durations[item.task]) - change)
        saved += change
    return saved, by_kind


def _sharing(name: str) -> tuple[str, ...]:
    """The groups whose median change an unmeasured op of `name` takes, nearest first: its name, its
    class, all measured ops (not for a normalization: those are mostly multiplies)."""
    kind = classify(name)
    return (name, f"class:{kind}") if kind == "normalization" else (name, f"class:{kind}", "all")


def measured_ratios(ratios: list[float], reduced: str) -> str:
    """What the measured tier found, for the note: the range and median of the re-timed ops' time
    in the reduced type over fp32; and, where most of them ran slower in it, that autocast slows
    them on this CPU (one without native arithmetic in that type takes a slow path)."""
    if not ratios:
        return ""
    middle = statistics.median(ratios)
    text = (f" (each op's {reduced} time over its fp32 time, measured: {min(ratios):.2f}x to "
            f"{max(ratios):.2f}x, median {middle:.2f}x)")
    if middle > 1:
        text += (f"; most of these ops run slower in {reduced} than in fp32 on this CPU, so "
                 f"autocast slows them here (each by the time it measured beyond fp32, added to "
                 f"its recorded time)")
    return text


#: Kernel classes of the memory-bound CPU ops a reduced type halves
#: (their bytes), when their layer runs in it.
HALVED_CLASSES = ("elementwise", "normalization")


@dataclass(slots=True)
class _HeldOps:
    """Where a forward op's time is in the graph: its own task, or, for an op called inside one
    the graph holds whole, that task (the op's own time is then its recorded span)."""

    graph: Graph
    of_event: dict[int, int]
    enclosing: HostSpans
    spans: Spans

    def task(self, row: int) -> tuple[int, int]:
        """(the task that holds op `row`'s time or -1, the op's own time, ns)."""
        task = self.of_event.get(row, -1)
        if task >= 0:
            return task, int(self.graph.tasks["duration_ns"][task])
        if row not in self.spans:
            return -1, 0
        start, end, track = self.spans[row]
        return self.enclosing.holding(start, track), end - start


@dataclass(slots=True)
class _Halved:
    """What `_halve_memory_bound` did: ops halved, ops kept because their tensors fit in a core's
    cache, the layers that run in the reduced type."""

    halved: int = 0
    cached: int = 0
    low_layers: set[int] = field(default_factory=set)
    # backward ops of those layers measured instead (MEASURED_BACKWARD)
    measured: list[_Retimed] = field(default_factory=list)


def _halve_memory_bound(graph: Graph, facts: dict[int, list[ForwardOp]], types: dict[int, str],
                        low: str, held: _HeldOps, context: Context, fixed_ns: float = 0.0,
                        cache_bytes: int = 0) -> _Halved:
    """On a CPU trace, the forward's elementwise and normalization ops that run in the reduced type,
    and the backward ones of the same layers, move half the bytes: the part of each op's time
    beyond `fixed_ns` (the trace's own per-op overhead of a small elementwise op,
    cost/elementwise.py) is halved, so an op on a small tensor, all overhead, keeps its time. (Timed
    alone they mislead, see RETIMED_ON_CPU; in the real bf16 runs of examples/cnn.py batch norm,
    relu and their backward took 0.34-0.77 of their fp32 time.) An op whose tensors fit in a
    core's cache in fp32 (`cache_bytes`; `footprint_bytes`) moves no fewer bytes from memory in
    bf16 and keeps its time: in the real bf16 runs of examples/own/imagine.py the ELUs, layer norms
    and their backward on [32, 256] took 1.13-1.25 times their fp32 time, a GRU cell's gates on
    [32, 128] 1.07-1.18 times. An op whose shapes were not recorded is halved."""
    done = _Halved()
    durations = graph.tasks["duration_ns"]

    def halve(task: int, own_ns: int, footprint: int) -> None:
        if 0 < footprint < cache_bytes:
            done.cached += 1
            return
        durations[task] = max(0, int(durations[task]) - int(max(0.0, own_ns - fixed_ns) // 2))
        done.halved += 1

    for ops in facts.values():
        for op in ops:
            if types.get(op.row) != low:
                continue
            if op.layer >= 0:
                done.low_layers.add(op.layer)
            task, own_ns = held.task(op.row)
            if task >= 0 and classify(op.name) in HALVED_CLASSES and op.name not in RETIMED_ON_CPU:
                halve(task, own_ns, footprint_bytes(op.inputs))
    _backward_of(done, context, held, halve)
    return done


def _backward_of(done: _Halved, context: Context, held: _HeldOps,
                 halve: Callable[[int, int, int], None]) -> None:
    """The backward's elementwise and normalization ops of the layers that run in the reduced type
    (`done.low_layers`): those amp measures (`MEASURED_BACKWARD`, with recorded arguments) into
    `done.measured`, the others `halve`d."""
    for _, duration, start, track, layer, footprint, name, arguments in (
            context.backward_memory_ops or []):
        task = held.enclosing.holding(start, track)
        if task < 0 or layer not in done.low_layers:
            continue
        if name in MEASURED_BACKWARD and arguments:
            done.measured.append(_Retimed(task, duration, name, arguments=arguments))
        else:
            halve(task, duration, footprint)


def _measured_pair(measurer: Any, name: str, inputs: list[Any], low: str,
                   arguments: list[Any] | None = None,
                   cold: bool = False) -> tuple[int, int] | None:
    """The op's measured times in the reduced type and in fp32, ns, both run here in turns, hot
    (operands just written) or `cold` (caches emptied, net of a view's time); None if either cannot
    run."""
    if name in CALLED_AGAIN or name in NORMALIZATION_AGAIN:
        if arguments is None:
            return None
        return measurer.call_pair_ns(name, _retyped_arguments(arguments, low, name),
                                     _retyped_arguments(arguments, "float", name),
                                     hot=not cold, cold=cold)
    operands = _ordered(arguments) if arguments is not None else inputs
    return measurer.op_pair_ns(name, _retyped(operands, low), _retyped(operands, "float"),
                               hot=not cold, cold=cold)


#: An op is measured cold too only where it ran in the trace more than this times its hot fp32 time.
WARMER = 1.1


def in_situ_ns(recorded: int, hot: tuple[int, int], cold: tuple[int, int] | None) -> int:
    """An op's time in the reduced type from its `recorded` (fp32) time in the run and its measured
    (reduced, fp32) times alone, `hot` (operands just written) and `cold` (caches emptied, net of a
    view's time: the op's code, data and address translations all evicted), ns.

    Inside a training step an op runs somewhere between the two: a small multiply of a policy
    called between the steps of a simulated environment finds its code and data evicted by the
    ops in between, one in a run of large multiplies finds them warm. Where it sits is read off its
    own fp32 time: warmth w = (recorded - hot fp32) / (cold fp32 - hot fp32), within [0, 1], and
    both types are taken at that warmth (`reduced_ns` of the two). Measured on this project's
    2-core machine, a bf16 multiply of [64, 4] by [4, 128] took 22 µs hot and 76 µs cold against
    fp32's 5 and 31; in an a2c step whose fp32 one took 18 µs (w = 0.5) the bf16 one took 51 µs
    (49 at w = 0.5; 35 from the hot pair alone). Without a cold pair, the hot one (w = 0)."""
    if cold is None or cold[1] <= hot[1]:
        return reduced_ns(recorded, *hot)
    warmth = warmth_of(recorded, hot, cold)
    reduced = hot[0] + warmth * (cold[0] - hot[0])
    full = hot[1] + warmth * (cold[1] - hot[1])
    return reduced_ns(recorded, max(1, int(round(reduced))), max(1, int(round(full))))


def _ordered(arguments: list[Any]) -> list[Any]:
    """The tensor arguments as (shape, type), or (shape, type, memory order) where the recorded one
    was not contiguous: a multiply of a transposed operand (attention's scores) is not timed as one
    of contiguous operands (an AVX2-only CPU's bf16 one took twice as long)."""
    return [(a[1], a[2], *([a[3]] if len(a) > 3 and a[3] is not None else []))
            for a in arguments if a[0] == "tensor"]


def warmth_of(recorded: int, hot: tuple[int, int], cold: tuple[int, int] | None) -> float:
    """Where an op's `recorded` fp32 time sits between its measured fp32 times `hot` and `cold`
    ((reduced, fp32) pairs), 0 to 1; 0 without a cold pair, or one not slower than hot."""
    if cold is None or cold[1] <= hot[1]:
        return 0.0
    return min(1.0, max(0.0, (recorded - hot[1]) / (cold[1] - hot[1])))


def reduced_ns(recorded: int, reduced: int, full: int) -> int:
    """An op's time in the reduced type from its `recorded` (fp32) time in the run and its measured
    times alone in the `reduced` type and in `full` fp32 (hot: autocast has just written the
    operands it casts), ns.

    Where the op measured slower in the reduced type (a CPU without native bf16 arithmetic runs it
    on a slow path), the time it measured beyond fp32 is that path's own arithmetic, and is added:
    recorded + (reduced - full). Scaling instead (recorded x reduced / full) would multiply
    whatever sets the run apart from the measurement (the profiler's own cost per op, a run slower
    than the measurement) by the slow path's factor: a2c's small multiplies recorded 17-96 µs in
    fp32 and measured 6-49 µs alone. Where it measured faster, scaled: its bytes and arithmetic
    shrink together."""
    if reduced > full:
        return recorded + reduced - full
    return int(round(recorded * reduced / full))


def _retyped(inputs: list[Any], kind: str) -> list[Any]:
    """Tensor inputs with their floating ones in `kind`."""
    return [(t[0], kind if t[1] in FLOATING else t[1], *t[2:]) if t is not None else None
            for t in inputs]


#: Tensor arguments (by position) an op takes in fp32 whatever autocast runs it in: flash
#: attention's log-sum-exp is kept in its accumulation type; a normalization's own parameters and
#: statistics.
KEPT_FP32 = {"aten::_scaled_dot_product_flash_attention_for_cpu_backward": frozenset({5}),
             # batch norm's weight, bias, running and saved statistics: the module's own, in fp32
             "aten::batch_norm": frozenset({1, 2, 3, 4}),
             "aten::native_batch_norm": frozenset({1, 2, 3, 4}),
             "aten::native_batch_norm_backward": frozenset({2, 3, 4, 5, 6})}


def _retyped_arguments(arguments: list[Any], kind: str, name: str = "") -> list[Any]:
    kept = KEPT_FP32.get(name, frozenset())
    return [("tensor", a[1], kind if a[2] in FLOATING and i not in kept else a[2],
             *a[3:4]) if a[0] == "tensor" else a
            for i, a in enumerate(arguments)]


#: Without recorded shapes, a cast is taken as half the trace's median elementwise kernel (4 bytes
#: read and 2 written per element against an fp32 elementwise pass's 4 + 4 + 4), one before each
#: forward GEMM/convolution kernel.
CAST_OF_ELEMENTWISE = 0.5


def _ratio_cast_ns(graph: Graph) -> int:
    """A weight cast by ratio: half the trace's median (fp32)
    elementwise kernel, ns (0 without any)."""
    kernels = select(graph, kind=KERNELS)
    elementwise = kernels[kernel_classes(graph, kernels) == CLASSES.index("elementwise")]
    return (int(np.median(graph.tasks["duration_ns"][elementwise]) * CAST_OF_ELEMENTWISE)
            if elementwise.size else 0)


def _ratio_casts(graph: Graph, costs: CostModel, cast_ns: int) -> str:
    """The casts of a trace without op shapes, by ratio: each forward
    GEMM/convolution kernel gets a weight cast (`cast_ns`, from `_ratio_cast_ns`)
    and its launch (the trace's median launch call) on the host."""
    kernels = select(graph, kind=KERNELS)
    classes = kernel_classes(graph, kernels)
    forward = graph.tasks["phase"][kernels] == FORWARD
    compute = kernels[forward & of_labels(classes, CLASSES, ("gemm", "convolution"))]
    calls = launchers(graph, compute)
    graph.tasks["duration_ns"][compute] += cast_ns
    graph.tasks["gap_ns"][calls] += costs.host.launch_ns
    costs.count(Tier.RATIO, int(compute.size))
    return ("amp: the trace recorded no op shapes (record_shapes), so autocast's casts are taken "
            f"by ratio: one weight cast per forward GEMM/convolution kernel ({compute.size}), "
            f"{cast_ns} ns on the device (half the median elementwise kernel) and "
            f"{costs.host.launch_ns} ns of launch on the host each")


def _host_anchors(graph: Graph, spans: Spans) -> dict[int, int]:
    """Per forward op (trace row), the host task its casts and autocast's dispatch go before: the
    first task within its span (the op itself on a CPU graph, its first API call on a GPU one), or,
    for an op called inside one the graph holds whole (a CPU graph's `aten::gru`), that task."""
    enclosing = HostSpans(graph)
    anchors = enclosing.first_within(spans)
    for row, (start, _, track) in spans.items():
        if row not in anchors:
            holder = enclosing.holding(start, track)
            if holder >= 0:
                anchors[row] = holder
    return anchors


def _backward_anchors(graph: Graph, facts: dict[int, list[ForwardOp]]) -> dict[int, int]:
    """Per forward op (trace row), the first host-work task of its layer's backward in the same
    iteration: where the gradient of a cast made for it is cast back."""
    tasks = graph.tasks
    host = np.flatnonzero(np.isin(tasks["kind"],
                                  [int(k) for k in HOST_WORK]) & (tasks["phase"] == BACKWARD))
    first: dict[tuple[int, int], int] = {}
    for task in host[np.argsort(tasks["measured_start_ns"][host], kind="stable")].tolist():
        first.setdefault((int(tasks["iteration"][task]), int(tasks["layer"][task])), task)
    return {op.row: first[(iteration, op.layer)] for iteration, ops in facts.items() for op in ops
            if op.layer >= 0 and (iteration, op.layer) in first}


def _insert_casts(graph: Graph, casts: dict[int, list[Cast]], costs: CostModel,
                  host_anchor: dict[int, int], backward_anchor: dict[int, int]
                  ) -> tuple[int, list[tuple[int, Cast]]]:
    """Each cast's host task (and on a GPU its copy kernel) spliced in before its anchor: the tasks
    added, and each weight's cast down with its host task (`_warm_weight_casts`)."""
    hosts: list[int] = []
    host_ns: list[int] = []
    device_ns: list[int] = []
    weights: list[tuple[int, Cast]] = []  # (index into hosts, the cast)
    cache = core_cache_bytes()
    for cast_list in casts.values():
        for cast in cast_list:
            anchor = host_anchor.get(cast.row, -1)
            if anchor < 0:
                continue
            # an activation the op before has just written, where it fits in a core's cache; a
            # weight was last written by the previous step's optimizer
            fits = tensor_bytes((cast.shape, cast.from_type)) <= cache
            hot = not cast.weight and fits
            if cast.forward:
                timed = costs.cast(cast.shape, cast.from_type, cast.to_type, hot)
                if cast.weight:
                    weights.append((len(hosts), cast))
                hosts.append(anchor)
                host_ns.append(timed.host_ns)
                device_ns.append(timed.device_ns)
            if cast.backward:
                back = backward_anchor.get(cast.row, -1)
                if back >= 0:
                    # a gradient, a weight's too, the backward op before has just written: the
                    # MLP's [512, 512] weight gradient cast up measured 64 µs hot and 206 µs cold;
                    # in its real bf16 step 60-64 µs on memory written before (133-310 µs on memory
                    # the recording had not allocated before: cost/heap.py)
                    again = costs.cast(cast.shape, cast.to_type, cast.from_type, fits)
                    hosts.append(back)
                    # a forward cast op has its ToCopyBackward0 node; the engine casts a promoted
                    # op's gradient inside the op's own node
                    host_ns.append(again.host_ns
                                   + (costs.cast_backward_host_ns() if cast.forward else 0))
                    device_ns.append(again.device_ns)
    if not hosts:
        return 0, []
    host_tasks = splice(graph, hosts, host_ns, "autocast: cast (host)", after=False)
    added = host_tasks.size
    if graph.has_device_work():
        added += _cast_kernels(graph, np.asarray(hosts), host_tasks, np.asarray(device_ns))
    return int(added), [(int(host_tasks[index]), cast) for index, cast in weights]


def _warm_weight_casts(graph: Graph, weights: list[tuple[int, Cast]], warmth: dict[int, float],
                       costs: CostModel, iterations: int = 1) -> list[str]:
    """On a CPU trace, each weight's cast down at the warmth its op showed (`_Retimed.warmth`):
    between its time hot and its time with the caches emptied, which `_insert_casts` gave it.

    The optimizer wrote the weight a step before; how far the step's own traffic has pushed it
    since, the op that reads it shows. Emptying the caches by writing 64 MiB also evicts code and
    address translations: the MLP's [512, 512] weight measured 207 µs so and 64 µs hot, and its
    real bf16 step cast it in 95-104 µs, the multiply that reads it running 1.1 times its hot fp32
    time. A weight whose op was not measured keeps the cold time."""
    measurer = costs.measurer
    durations = graph.tasks["duration_ns"]
    warmed, before, after = 0, 0, 0
    for task, cast in weights:
        if cast.row not in warmth or measurer is None:
            continue
        hot = measurer.cast_ns(cast.shape, cast.to_type, cast.from_type, hot=True)
        cold = int(durations[task])
        if hot is None or hot >= cold:
            continue
        new = int(round(hot + warmth[cast.row] * (cold - hot)))
        before, after, warmed = before + cold, after + new, warmed + 1
        durations[task] = new
    if not warmed:
        return []
    return [f"amp: {warmed / iterations:,.0f} weight casts per iteration timed at the warmth of "
            f"the op that reads each (between hot and caches emptied, as the op's recorded fp32 "
            f"time sits between its own): {before / iterations / 1e3:,.0f} → "
            f"{after / iterations / 1e3:,.0f} µs an iteration"]


def _cast_kernels(graph: Graph, anchors: np.ndarray, host_tasks: np.ndarray,
                  device_ns: np.ndarray) -> int:
    """A copy kernel per cast, on the stream of the first kernel its
    anchor call launched, right before it."""
    edges = graph.edges
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    first_kernel: dict[int, int] = {}
    starts = graph.tasks["measured_start_ns"]
    for src, dst in zip(edges["src"][launch].tolist(), edges["dst"][launch].tolist()):
        if src not in first_kernel or starts[dst] < starts[first_kernel[src]]:
            first_kernel[src] = dst
    chosen = [i for i, a in enumerate(anchors.tolist()) if a in first_kernel and device_ns[i] > 0]
    if not chosen:
        return 0
    kernels = splice(graph, [first_kernel[int(anchors[i])] for i in chosen], device_ns[chosen],
                     "autocast: cast kernel", after=False)
    graph.add_edges(host_tasks[chosen], kernels, DepKind.LAUNCH,
                    latency_ns=graph.calibration.launch_latency_ns)
    return int(kernels.size)


def _add_dispatch(graph: Graph, facts: dict[int, list[ForwardOp]], device_type: str,
                  costs: CostModel, anchors: dict[int, int]) -> int:
    """The autocast wrapper's own host work before each op it decides; how many ops got it."""
    chosen = [anchors[op.row] for ops in facts.values() for op in ops
              if decides(op.name, device_type) and op.row in anchors]
    splice(graph, chosen, costs.dispatch_ns(), "autocast: dispatch (host)", after=False)
    return len(chosen)


def _retime_kernels(graph: Graph, params: dict[str, Any], context: Context) -> str:
    """Speed up the fp32/tf32 kernels AMP converts; returns the note."""
    kernels = select(graph, kind=KERNELS)
    kernels = kernels[graph.tasks["phase"][kernels] != PHASES.index("optimizer")]
    classes, precisions = kernel_classes(graph, kernels), kernel_precisions(graph, kernels)
    durations = graph.tasks["duration_ns"][kernels]
    reduced = of_labels(precisions, PRECISIONS, REDUCED_PRECISION)
    full = of_labels(precisions, PRECISIONS, FULL_PRECISION)
    known_ns = int(durations[reduced | full].sum())
    reduced_share = float(durations[reduced].sum()) / known_ns if known_ns else 0.0
    unknown = precisions == PRECISIONS.index("unknown")
    convertible = full | (unknown & (reduced_share < 0.5))
    kernels, classes, precisions = (kernels[convertible], classes[convertible],
                                    precisions[convertible])
    is_compute = of_labels(classes, CLASSES, ("gemm", "convolution"))
    tensor_core = kernels[is_compute & (precisions == PRECISIONS.index("tf32"))]
    simt = np.setdiff1d(kernels[is_compute], tensor_core)
    memory = kernels[~is_compute & ~of_labels(classes, CLASSES, ("communication",))]
    device = context.device
    if params["compute"] > 0:
        simt_factor = core_factor = float(params["compute"])
        source = "--opt amp:compute="
    elif device is not None:
        simt_factor, core_factor = (device.amp_compute_factor_from_fp32,
                                    device.amp_compute_factor_from_tf32)
        source = f"the device table ({device.name})"
    else:
        simt_factor = core_factor = FALLBACK_COMPUTE_FACTOR
        source = "Daydream's published constant (GPU not in the device table)"
    memory_factor = float(params["memory"]) if params["memory"] > 0 else FALLBACK_MEMORY_FACTOR
    costs = context.costs
    floor = costs.floor_ns if costs is not None else 0
    for chosen, factor in ((simt, simt_factor), (tensor_core, core_factor),
                           (memory, memory_factor)):
        before = graph.tasks["duration_ns"][chosen]
        scale(graph, chosen, factor=1 / factor)
        # No kernel gets faster than the trace's shortest: launch, ramp-up and drain stay.
        graph.tasks["duration_ns"][chosen] = np.maximum(graph.tasks["duration_ns"][chosen],
                                                        np.minimum(before, floor))
    memory_bound = _gemm_memory_floor(graph, np.concatenate([simt, tensor_core]), context)
    already = (f"{reduced_share:.0%} of the GPU time whose precision the kernel names state "
               "already runs in bf16/fp16/fp8 and is left as it is" if known_ns
               else "no kernel name states its precision")
    return (f"amp: {simt.size} fp32 GEMM/conv kernels ÷{simt_factor:.2f} and {tensor_core.size} "
            f"tf32 tensor-core kernels ÷{core_factor:.2f} (from {source}), {memory_bound} of them "
            "held at the time their 16-bit operands take to move (shapes recorded, the trace's "
            f"own memory speed); {memory.size} memory-bound kernels ÷{memory_factor:g}; none below "
            f"{floor} ns, the trace's shortest kernel (1st percentile); {already}")


def _gemm_memory_floor(graph: Graph, kernels: np.ndarray, context: Context) -> int:
    """A sped-up GEMM whose op recorded its shapes takes at least the time
    its operands and result take to move in 16 bits at the trace's memory
    speed: small GEMMs are memory-bound in bf16. How many that held."""
    shapes, costs = context.gemm_shapes, context.costs
    if shapes is None or costs is None or kernels.size == 0:
        return 0
    events = graph.tasks["event"][kernels]
    known = events >= 0
    elements = np.full(kernels.size, np.nan)
    elements[known] = shapes[1][events[known]]
    floor = np.array([costs.memory_bound_ns(2.0 * e) if np.isfinite(e) else 0 for e in elements],
                     dtype=np.int64)
    held = floor > graph.tasks["duration_ns"][kernels]
    graph.tasks["duration_ns"][kernels[held]] = floor[held]
    return int(np.count_nonzero(held))


register(Optimization(
    "amp", "automatic mixed precision (bf16/fp16 autocast)",
    "torch.autocast's rules on the recorded forward (transforms/autocast.py): the casts it inserts "
    "(inputs of the ops it runs in 16 bits, each weight once per forward; reduced inputs of the "
    "ops it keeps in fp32), each a host dispatch and a copy kernel timed by the cost stage, and "
    "its gradient's cast back in backward; the wrapper's dispatch on every op it decides. GPU "
    "kernels of fp32/tf32 work (precision from kernel names): GEMM/convolution ÷ the device "
    "table's fp16-tensor-core / fp32 (or tf32) peak ratio (÷3 when the GPU is unknown), other "
    "forward and backward kernels ÷2 (half the bytes), none below the trace's shortest kernel; "
    "optimizer kernels unchanged (fp32 master weights). On a CPU trace, the ops autocast runs in "
    "16 bits and backward's matrix multiplies at the time the measured tier gives them here in "
    "that type over fp32. Host costs from this trace's own ops, and what it cannot show in host "
    "units recorded from real bf16 runs (daydream/cost)",
    _amp,
    {"compute": Parameter(float, 0.0, "override the compute speed-up (0: device table)", 0.0, 1e3),
     "memory": Parameter(float, 0.0, "override the memory-bound speed-up (0: 2)", 0.0, 1e3),
     "dtype": Parameter(str, "bf16", "the reduced type: bf16 or fp16")},
))
