"""`compile`: torch.compile (inductor) of the model's modules, on a CPU trace.

What changes inside each call of a compiled module, forward and backward (cost/compiled.py reads the
recorded ops the way the compiler sees them):

- the host work between its ops (Python, module calls, hooks, autograd's per-node overhead) is gone:
  the compiled graph runs as one call, whose own wrapper (guards, runtime wrappers) costs what real
  runs recorded, in host units (cost/host.py `compile.forward.cpu`, `compile.backward.cpu`);
- extern ops (matrix multiplies, convolutions, CPU attention) run as recorded, except that a
  convolution runs channels-last, as inductor lays it out: the measured tier times each recorded
  convolution both ways here;
- every other op between two externs becomes part of one fused loop: each run of them is compiled
  here with inductor and timed (cost/fused.py: a forward run with gradients on and with the extern
  op it feeds, as a training step's forward graph holds it; cold, or warm where the call follows
  the same module's last call closely, as its wrapper), within `--compile-budget`; a run it
  cannot time takes `FUSED_SHARE` of its recorded time (cost/compiled.py), and the note says why.

The loss stays as recorded unless `modules` names it, and the optimizer step always does. What the
trace cannot show is said in the note: graph breaks and recompilation.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream._regex import user_regex
from daydream.cost import CostModel, Tier
from daydream.cost.compiled import (
    FUSED_SHARE,
    CompilerView,
    Unit,
    channels_last,
    contiguous,
    fed_runs,
    grouped_backward,
)
from daydream.cost.fused import (
    FusedTimes,
    Step,
    fused_key,
    fused_steps,
    fused_times,
    graph_floor,
    pieces,
)
from daydream.cost.measure import Measurer
from daydream.errors import InputError
from daydream.graph import Graph
from daydream.graph.model import HOST_WORK
from daydream.mapping import PHASES
from daydream.transforms.primitives import remove, select
from daydream.transforms.registry import Context, Optimization, Parameter, register

FORWARD, BACKWARD = PHASES.index("forward"), PHASES.index("backward")
#: Module paths of loss functions: not part of the model a script compiles, by default.
LOSS = re.compile(r"Loss$")
#: Ops whose output's shape or value depends on the data: dynamo breaks its graph at each, as
#: torch.compile's defaults leave `capture_dynamic_output_shape_ops` and `capture_scalar_outputs`
#: off (`.item()` records aten::item, and aten::_local_scalar_dense inside it).
GRAPH_BREAKS = frozenset({"aten::nonzero", "aten::item", "aten::_local_scalar_dense",
                          "aten::masked_select", "aten::unique", "aten::_unique", "aten::_unique2",
                          "aten::unique_dim",
                          "aten::unique_consecutive", "aten::unique_dim_consecutive"})
#: A call of a compiled module that begins at most this long after the last call of the same module
#: (in the same phase and iteration) ended finds the wrapper's code and data still in the host's
#: caches: it pays the warm wrapper (cost/host.py `compile.forward_warm.cpu`), ns.
WARM_WITHIN_NS = 5_000_000


@dataclass(slots=True)
class Region:
    """One call of the compiled modules, in one phase: its host tasks in program order."""

    phase: int
    tasks: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Tally:
    calls: dict[int, int] = field(default_factory=lambda: {FORWARD: 0, BACKWARD: 0})
    removed: int = 0
    saved_gap_ns: int = 0
    convolutions: int = 0
    convolution_change_ns: int = 0
    unmeasured: int = 0
    # convolutions recorded channels-last already, or without the arguments to re-run them
    laid_out: int = 0
    recurrent: int = 0  # recurrent layers (LSTM, GRU) kept as recorded
    grouped: int = 0  # grouped convolutions' backward ops
    grouped_risk_ns: int = 0  # what they would take more with their images contiguous (measured)
    fused_runs: int = 0
    fused_before_ns: int = 0
    measured_runs: int = 0  # fused runs compiled and timed here (cost/fused.py)
    measured_before_ns: int = 0
    measured_after_ns: int = 0
    unfused: dict[str, int] = field(default_factory=dict)  # distinct runs not measured, by why
    unrunnable: int = 0  # runs without the recorded arguments to re-run them
    floor: FusedTimes = FusedTimes(0, 0)  # a compiled graph's own call, cold and warm
    nodes: int = 0  # compiled backward nodes (one per forward call autograd recorded)
    warm: dict[int, int] = field(default_factory=lambda: {FORWARD: 0, BACKWARD: 0})
    breaks: Counter[str] = field(default_factory=Counter)  # forward ops that break a graph, by name
    iterations: int = 0  # the iterations the calls are in


def _compile(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    unchanged = _why_unchanged(graph, str(params["modules"]))
    if unchanged:
        return [f"compile: {unchanged}: nothing changed, so this prediction is the baseline"]
    roots = compiled_roots(graph, params["modules"])
    view: CompilerView | None = context.compiler_view
    costs = context.costs
    recorded = context.module_calls or {}
    started = [recorded[root] for root in sorted(roots) if root in recorded]
    calls = regions(graph, roots, np.sort(np.concatenate(started)) if started else None)
    if view is None or costs is None or not calls:
        return (["compile: no forward or backward work of the compiled modules in the trace; "
                 "nothing changed"])
    tally = _Tally()
    wrapper = Wrapper(
        cold={FORWARD: costs.host.recorded_ns("compile.forward.cpu"),
              BACKWARD: costs.host.recorded_ns("compile.backward.cpu")},
        warm={FORWARD: costs.host.recorded_ns("compile.forward_warm.cpu"),
              BACKWARD: costs.host.recorded_ns("compile.backward_warm.cpu")})
    graded = _graded(graph, calls, context)
    _merge_calls(graph, calls, roots, view, costs, wrapper.per_call(graph, calls, graded, tally),
                 tally)
    costs.count(Tier.MODELLED, tally.calls[FORWARD] + tally.calls[BACKWARD])
    costs.count(Tier.RATIO, tally.fused_runs - tally.measured_runs)
    costs.count(Tier.MEASURED, tally.convolutions + tally.measured_runs)
    return _notes(roots, tally, wrapper, costs)


def _why_unchanged(graph: Graph, pattern: str) -> str:
    """Why compile cannot apply to `graph` ("" where it can);
    InputError for modules that match nothing."""
    if graph.has_device_work():
        return ("on a GPU trace, what torch.compile does on the host is not modelled yet; for its "
                "kernels see fuse-elementwise (chains of elementwise kernels fused) and for its "
                "launches cuda-graphs")
    if not graph.layers:
        return ("the trace records no module structure (record it with daydream trace, or "
                "torch.profiler's with_modules), so which ops a compiled module would hold is "
                "unknown")
    if compiled_roots(graph, pattern):
        return ""
    if not pattern:
        return ("the trace's outermost modules are all loss functions "
                f"({', '.join(sorted(_all_roots(graph)))}); name the compiled ones with "
                "compile:modules=REGEX")
    raise InputError(f"--opt compile:modules={pattern}: no outermost module of the trace matches; "
                     "see the layers in daydream inspect")


@dataclass(slots=True)
class Warmth:
    """Which calls of the compiled modules find the host warm, asked in program order: a call is
    warm where the last call of the same module in the same phase and iteration ended at most
    WARM_WITHIN_NS before it began (scripts/compile_costs.py reads real runs by the same rule)."""

    graph: Graph
    ended: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def follows(self, task: int, phase: int, start: int, end: int) -> bool:
        """Whether the call of `task`'s module over [start, end] (ns) is warm; it is then the
        module's last call."""
        key = (_root(self.graph, task), phase, int(self.graph.tasks["iteration"][task]))
        last = self.ended.get(key)
        self.ended[key] = end
        return last is not None and start - last <= WARM_WITHIN_NS


@dataclass(slots=True, frozen=True)
class Wrapper:
    """The compiled wrapper's own work, per phase, ns: in a call that finds it cold, and in one that
    follows a call of the same module closely (WARM_WITHIN_NS)."""

    cold: dict[int, int]
    warm: dict[int, int]

    def per_call(self, graph: Graph, calls: list[Region], graded: list[bool],
                 tally: _Tally) -> list[_Nodes]:
        """Per call, its compiled graphs (cold and warm) and the wrapper's work in them, ns. A
        forward call runs one graph; a backward call one per compiled backward node: each forward
        call autograd recorded (`graded`) makes one, and the nodes of a module's iteration are
        shared over its backward calls in that iteration (a2c's one backward pass runs the sixteen
        nodes of its rollout's calls). A call's first graph finds the host warm where the last
        call of the same module in the same phase and iteration ended at most WARM_WITHIN_NS
        before it began; the further nodes of a backward call run back to back, warm."""
        tasks = graph.tasks
        keys = [(_root(graph, r.tasks[0]), int(tasks["iteration"][r.tasks[0]])) for r in calls]
        made = Counter(k for k, r, g in zip(keys, calls, graded) if r.phase == FORWARD and g)
        backward = Counter(k for k, r in zip(keys, calls) if r.phase == BACKWARD)
        shared: Counter[tuple[str, int]] = Counter()
        warmth = Warmth(graph)
        spent = []
        for key, region in zip(keys, calls):
            phase, nodes = region.phase, 1
            if phase == BACKWARD:
                made_here, calls_here = max(made[key], backward[key]), backward[key]
                nodes = made_here // calls_here + (shared[key] < made_here % calls_here)
                shared[key] += 1
                tally.nodes += nodes
            warm = warmth.follows(region.tasks[0], phase,
                                  int(tasks["measured_start_ns"][region.tasks[0]]),
                                  int(tasks["measured_end_ns"][region.tasks[-1]]))
            tally.warm[phase] += int(warm) + nodes - 1
            spent.append(_Nodes(cold=int(not warm), warm=int(warm) + nodes - 1,
                                wrapper_ns=(self.warm if warm else self.cold)[phase]
                                + (nodes - 1) * self.warm[phase]))
        return spent


@dataclass(slots=True, frozen=True)
class _Nodes:
    """A call's compiled graphs, as many as its nodes: how many find the host cold and how many
    warm, and their wrappers' work, ns."""

    cold: int
    warm: int
    wrapper_ns: int


def _graded(graph: Graph, calls: list[Region], context: Context) -> list[bool]:
    """Per call, whether autograd recorded it: a forward call run under no_grad makes no backward
    node (without the trace's sequence numbers every call counts)."""
    saved = context.saved_tensors
    if saved is None:
        return [True] * len(calls)
    events = graph.tasks["event"]
    recorded = saved(np.array([events[t] for region in calls for t in region.tasks],
                              dtype=np.int64)).recorded
    graded, at = [], 0
    for region in calls:
        graded.append(bool(recorded[at:at + len(region.tasks)].any()))
        at += len(region.tasks)
    return graded


def _merge_calls(graph: Graph, calls: list[Region], roots: set[str], view: CompilerView,
                 costs: CostModel, nodes: list[_Nodes], tally: _Tally) -> None:
    """Each call becomes its first task, lasting what the compiled call takes; its other tasks and
    the host work between them go."""
    gone: list[int] = []
    # the merged task is the call of the whole module: its time is the
    # module's, not its first layer's
    root_layer = {name: index for index, name in enumerate(graph.layers) if name in roots}
    called = [[u for task in region.tasks for u in view.units.get(int(graph.tasks["event"][task]),
                                                                  [])] for region in calls]
    runs = _fused(called, [region.phase for region in calls], view, costs.measurer, tally)
    tally.iterations = len({int(graph.tasks["iteration"][region.tasks[0]]) for region in calls})
    tally.breaks.update(view.name(unit.row) for region, units in zip(calls, called)
                        if region.phase == FORWARD for unit in units
                        if view.name(unit.row) in GRAPH_BREAKS)
    for region, units, fused, graphs in zip(calls, called, runs, nodes):
        tasks = region.tasks
        compiled_ns = (_externs_ns(units, view, costs, tally) + _fused_ns(fused, graphs, tally)
                       + graphs.wrapper_ns)
        tally.calls[region.phase] += 1
        tally.saved_gap_ns += int(graph.tasks["gap_ns"][tasks[1:]].sum())
        graph.tasks["duration_ns"][tasks[0]] = compiled_ns
        graph.tasks["layer"][tasks[0]] = root_layer.get(_root(graph, tasks[0]),
                                                        graph.tasks["layer"][tasks[0]])
        gone.extend(tasks[1:])
    tally.removed = len(gone)
    remove(graph, np.array(gone, dtype=np.int64))


def _root(graph: Graph, task: int) -> str:
    layer = int(graph.tasks["layer"][task])
    return graph.layers[layer].split(".", 1)[0] if layer >= 0 else ""


def _all_roots(graph: Graph) -> set[str]:
    return {layer.split(".", 1)[0] for layer in graph.layers}


def compiled_roots(graph: Graph, pattern: str) -> set[str]:
    """The outermost modules compiled: those `pattern` matches (a regex on the module's class name),
    or, by default, every outermost module that is not a loss function."""
    roots = _all_roots(graph)
    if pattern:
        chosen = user_regex(pattern, "--opt compile:modules", example="'Transformer|Encoder'")
        return {root for root in roots if chosen.search(root)}
    return {root for root in roots if not LOSS.search(root)}


def regions(graph: Graph, roots: set[str], starts: np.ndarray | None = None) -> list[Region]:
    """The calls of the compiled modules: per thread and iteration, each run of consecutive forward
    (or backward) host tasks of their layers; any other host task ends a run, except that in
    backward a task of no layer (AccumulateGrad)
    does not: the compiled backward is one autograd node, and the
    gradients it returns are accumulated after it. `starts`: the recorded start times of the
    compiled modules' calls (ns, sorted); a forward task past the next one begins another run (a
    model called on the anchors, the positives and the negatives with nothing between the calls
    is three compiled calls)."""
    tasks = graph.tasks
    host = select(graph, kind=HOST_WORK)
    host = host[(tasks["iteration"][host] >= 0) & (tasks["event"][host] >= 0)]
    host = host[np.lexsort((tasks["measured_start_ns"][host], tasks["resource"][host]))]
    compiled_layer = np.array([layer.split(".", 1)[0] in roots for layer in graph.layers] + [False],
                              dtype=bool)
    phase = tasks["phase"][host]
    # -1 reads the trailing False
    inside = compiled_layer[tasks["layer"][host]] & np.isin(phase, [FORWARD, BACKWARD])
    transparent = (phase == BACKWARD) & (tasks["layer"][host] < 0)
    found: list[Region] = []
    current: Region | None = None
    previous: tuple[int, int, int, int] | None = None
    call = (np.searchsorted(starts, tasks["measured_start_ns"][host], side="right")
            if starts is not None and starts.size else np.zeros(host.size, dtype=np.int64))
    call = np.where(phase == FORWARD, call, -1)
    for task, compiled, passes, made in zip(host.tolist(), inside.tolist(), transparent.tolist(),
                                            call.tolist()):
        key = (int(tasks["resource"][task]), int(tasks["iteration"][task]),
               int(tasks["phase"][task]), int(made))
        if key != previous or not (compiled or passes):
            current = None
        previous = key
        if compiled:
            if current is None:
                current = Region(key[2])
                found.append(current)
            current.tasks.append(task)
    return found


def _externs_ns(units: list[Unit], view: CompilerView, costs: CostModel, tally: _Tally) -> int:
    """The extern ops' time in the compiled call: as recorded, a
    convolution channels-last where measured."""
    total = 0
    for unit in units:
        if not unit.extern:
            continue
        tally.recurrent += unit.recurrent
        ns = unit.ns
        arguments = view.shapes.arguments(unit.row) if unit.convolution else None
        laid_out = channels_last(arguments) if arguments is not None else None
        tally.laid_out += unit.convolution and laid_out is None
        if laid_out is not None and arguments is not None:
            ratio = (costs.measurer.call_ratio(view.name(unit.row), laid_out, arguments)
                     if costs.measurer else None)
            if ratio is None:
                tally.unmeasured += 1
            else:
                tally.convolutions += 1
                tally.convolution_change_ns += int(round(ns * ratio)) - ns
                ns = int(round(ns * ratio))
                arguments = laid_out
        if grouped_backward(view.name(unit.row), arguments) and arguments is not None:
            tally.grouped += 1
            tally.grouped_risk_ns += _contiguous_extra_ns(view.name(unit.row), arguments, ns, costs)
        total += ns
    return total


def _contiguous_extra_ns(name: str, arguments: list[Any], ns: int, costs: CostModel) -> int:
    """What a grouped convolution's backward, timed at `ns` with `arguments`, would take more with
    its images contiguous, as the measured tier times the two (0 where it cannot, or they are).
    Inductor's backward graph leaves the layout of what it hands such an op to its own loops: in a
    ConvNeXt's real compiled step here (torch 2.13, one thread) the depthwise convolutions' saved
    inputs came back not channels-last and their backward took 50.1 ms a step against 21.9 ms
    eager; a [16, 48, 16, 16] depthwise 7x7 backward alone, 3.4 ms channels-last and 10.8 ms
    contiguous. Which layout a real compiled step picks is not in an eager trace."""
    plain = contiguous(arguments)
    if plain is None or costs.measurer is None:
        return 0
    ratio = costs.measurer.call_ratio(name, plain, arguments)
    return max(0, int(round(ns * ratio)) - ns) if ratio is not None else 0


@dataclass(slots=True, frozen=True)
class _Run:
    """One run of fusible ops in a compiled call: its recorded time, and what measured it."""

    recorded_ns: int
    key: str  # its program's cache key (cost/fused.py); "" where it cannot be re-run
    times: FusedTimes | None  # compiled and timed here; None: FUSED_SHARE of its recorded time


def _fused(called: list[list[Unit]], phases: list[int], view: CompilerView,
           measurer: Measurer | None, tally: _Tally) -> list[list[_Run]]:
    """Per call (of phase `phases[i]`), its runs of fusible ops, each compiled and timed here where
    the measured tier can (the distinct runs with the most recorded time first, within the compile
    budget); a forward run as a training step runs it, gradients on."""
    found: list[list[tuple[int, str]]] = []
    weight: dict[str, int] = {}
    programs: dict[str, tuple[list[Step], bool, bool, Step | None]] = {}
    for units, phase in zip(called, phases):
        laid_out = any(unit.convolution for unit in units)  # inductor's channels-last images
        mine = []
        for whole, after in fed_runs(units):
            cut = (pieces(whole, view) if measurer is not None
                   else [(whole, fused_steps(whole, view))])
            for number, (run, steps) in enumerate(cut):
                last = number == len(cut) - 1  # the piece that feeds the extern op after
                consumer = _consumer(after, view) if phase == FORWARD and last else None
                key = (fused_key(steps + ([consumer] if consumer else []), laid_out,
                                 phase == FORWARD) if steps is not None else "")
                recorded = sum(unit.ns for unit in run)
                if key:
                    weight[key] = weight.get(key, 0) + recorded
                    programs[key] = (steps or [], laid_out, phase == FORWARD, consumer)
                mine.append((recorded, key))
        found.append(mine)
    measured: dict[str, FusedTimes] = {}
    if measurer is not None and weight:
        tally.floor = graph_floor(measurer) or tally.floor
    for key in sorted(weight, key=lambda k: -weight[k]):
        times = fused_times(measurer, *programs[key]) if measurer is not None else None
        if times is not None:
            measured[key] = times
        elif measurer is not None:
            why = measurer.failed.get(key, "not run")
            tally.unfused[why] = tally.unfused.get(why, 0) + 1
    tally.unrunnable = sum(1 for mine in found for _, key in mine if not key)
    return [[_Run(recorded, key, measured.get(key)) for recorded, key in mine] for mine in found]


def _consumer(after: Unit | None, view: CompilerView) -> Step | None:
    """The extern op a forward run feeds, as a step to run again (None: none, a recurrent layer, or
    without its recorded arguments)."""
    if after is None or after.recurrent:
        return None
    arguments = view.shapes.arguments(after.row)
    return (view.name(after.row), arguments) if arguments is not None else None


def _fused_ns(runs: list[_Run], graphs: _Nodes, tally: _Tally) -> int:
    """The fusible ops' time in the compiled call: each run between externs one fused loop, as
    compiled and timed here, cold and warm in the shares of the call's graphs that find the host
    cold and warm, else FUSED_SHARE of its recorded time. Each run timed here was its own graph:
    the call's graphs pay a graph's own call (`tally.floor`) once each, so it is taken off each
    run and counted once per graph."""
    warm = graphs.warm / (graphs.cold + graphs.warm)
    floor = tally.floor
    total, measured = 0, False
    for run in runs:
        ns = int(round(FUSED_SHARE * run.recorded_ns))
        if run.times is not None:
            ns = int(round((1 - warm) * max(0, run.times.cold - floor.cold)
                           + warm * max(0, run.times.warm - floor.warm)))
            measured = True
            tally.measured_runs += 1
            tally.measured_before_ns += run.recorded_ns
            tally.measured_after_ns += ns
        tally.fused_runs += 1
        tally.fused_before_ns += run.recorded_ns
        total += ns
    return total + (graphs.cold * floor.cold + graphs.warm * floor.warm if measured else 0)


def _notes(roots: set[str], tally: _Tally, wrapper: Wrapper, costs: CostModel) -> list[str]:
    calls = tally.calls
    unit = costs.host.unit_ns
    convolutions = (f"; {tally.convolutions} convolutions re-timed channels-last by the measured "
                    f"tier ({tally.convolution_change_ns / 1e3:+.0f} µs in all)"
                    if tally.convolutions else "")
    unmeasured = (f"; {tally.unmeasured} convolutions could not be measured channels-last here and "
                  "keep their time"
                  if tally.unmeasured else "")
    if tally.laid_out:
        unmeasured += (f"; {tally.laid_out} convolutions keep their time (recorded channels-last "
                       "already, or without the arguments to run them again)")
    return [
        f"compile: {', '.join(sorted(roots))} compiled; {calls[FORWARD]} forward and "
        f"{calls[BACKWARD]} backward calls, each one compiled graph: {tally.removed} host tasks "
        f"merged into them and the host work between them gone ({tally.saved_gap_ns / 1e3:.0f} µs "
        f"in all); {_wrapper_note(tally, wrapper, unit)}{convolutions}{unmeasured}; "
        f"{_fused_note(tally, costs)}",
        "compile: not seen in an eager trace, so not modelled: graph breaks and recompilation "
        "(each break is one more compiled call) and the first iterations' compilation"
        + _breaks_note(tally.breaks, tally.iterations)
        + (f"; {tally.recurrent} recurrent layers (LSTM, GRU) are kept as recorded, though "
           "torch.compile decomposes them into per-step ops whose time is not modelled"
           if tally.recurrent else "")
        + (f"; the backward of {tally.grouped} grouped (depthwise) convolutions is timed at "
           "their recorded layout or channels-last, though inductor's backward may hand them "
           "images that are neither (a ConvNeXt's compiled step did, torch 2.13): contiguous, "
           "they would take "
           f"{tally.grouped_risk_ns / 1e3:.0f} µs more in all (measured tier)"
           if tally.grouped_risk_ns else ""),
    ]


def _breaks_note(breaks: Counter[str], iterations: int) -> str:
    """What the compiled forward holds that breaks its graph (GRAPH_BREAKS), per iteration: each
    splits the call, and what follows runs as another graph or eager, with dynamo's frame lookup
    at every module call after it, so the prediction, one graph per call, is a bound from below."""
    if not breaks:
        return ""
    count = sum(breaks.values()) // max(1, iterations)
    names = ", ".join(f"{name} ×{n // max(1, iterations)}" for name, n in breaks.most_common())
    return (f"; the compiled forward holds {count} ops per iteration whose output's shape or value "
            f"depends on the data ({names}), each a graph break under torch.compile's defaults: "
            "what follows runs as another graph or eager, with dynamo's lookup at each module "
            "call after it, none of it in this prediction, which is a bound from below (a mixture "
            "of experts' real compiled step, its experts' rows gathered by aten::nonzero: 18.5% "
            "slower than predicted)")


def _wrapper_note(tally: _Tally, wrapper: Wrapper, unit: int) -> str:
    """The compiled wrapper's own work: per forward call and per backward node, cold and warm."""
    def each(phase: int, what: str) -> str:
        warm = (f", {wrapper.warm[phase] / 1e3:.0f} µs in the {tally.warm[phase]} warm ones"
                if tally.warm[phase] else "")
        return f"{wrapper.cold[phase] / 1e3:.0f} µs per {what}{warm}"
    return (f"the compiled wrapper's own work {each(FORWARD, 'forward call')}"
            f", {each(BACKWARD, 'backward node')} ({tally.nodes} nodes: one per "
            f"forward call autograd recorded; warm: within {WARM_WITHIN_NS / 1e6:g} ms of the "
            f"module's last call; host units of {unit} ns, recorded from real runs)")


def _fused_note(tally: _Tally, costs: CostModel) -> str:
    """What became of the runs of fusible ops: compiled here, or at the ratio, and why."""
    ratio_runs = tally.fused_runs - tally.measured_runs
    measured = (f"{tally.measured_runs} compiled here with inductor and timed, cold and warm "
                f"(measured tier: {tally.measured_before_ns / 1e3:.0f} µs recorded eager, "
                f"{tally.measured_after_ns / 1e3:.0f} µs fused; a compiled graph's own call, "
                f"{tally.floor.cold / 1e3:.1f} µs cold and {tally.floor.warm / 1e3:.1f} warm, "
                "counted once per graph)" if tally.measured_runs else "")
    why = []
    if costs.measurer is None:
        why.append("the measured tier is off (--no-measure, or torch missing)")
    if tally.unrunnable:
        why.append(f"{tally.unrunnable} runs without the recorded arguments to run them again "
                   f"(or sized by their values, as a packed sequence's padding)")
    for reason, count in sorted(tally.unfused.items()):
        if reason == "over the compiling budget" and costs.measurer is not None:
            why.append(f"{count} distinct runs past the compiling budget "
                       f"({costs.measurer.compile_budget_s:g} s: --compile-budget times more)")
        else:
            why.append(f"{count} distinct runs could not be compiled or run here ({reason})")
    rest = (f"{ratio_runs} at {FUSED_SHARE:.2f} of their recorded "
            f"{(tally.fused_before_ns - tally.measured_before_ns) / 1e3:.0f} µs (by ratio, from "
            f"real runs{': ' + '; '.join(why) if why else ''})" if ratio_runs else "")
    return (f"{tally.fused_runs} runs of other ops between externs fused: "
            + "; ".join(part for part in (measured, rest) if part))


register(Optimization(
    "compile", "torch.compile (inductor) the model's modules, on a CPU trace",
    "per call of a compiled module, forward and backward: its host tasks merged into one, the host "
    "work between them gone, plus the compiled wrapper's own work (host units recorded from real "
    "runs); extern ops (matrix multiplies, convolutions, attention) as recorded, convolutions "
    "channels-last where the measured tier times them; the other ops between two externs fused at "
    "a share of their recorded time (from real runs); the loss, the optimizer and everything "
    "outside the modules unchanged",
    _compile,
    {"modules": Parameter(str, "", "regex on the outermost modules' class names that are compiled "
                                   "(default: every outermost module but loss functions)")},
))
