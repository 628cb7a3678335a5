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
  op it feeds, as a training step's forward graph holds it), within `--compile-budget`; a run it
  cannot time takes `FUSED_SHARE` of its recorded time (cost/compiled.py), and the note says why.

The loss stays as recorded unless `modules` names it, and the optimizer step always does. What the
trace cannot show is said in the note: graph breaks and recompilation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream._regex import user_regex
from daydream.cost import CostModel, Tier
from daydream.cost.compiled import FUSED_SHARE, CompilerView, Unit, channels_last, fed_runs
from daydream.cost.fused import Step, fused_key, fused_ns, fused_steps
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
    fused_runs: int = 0
    fused_before_ns: int = 0
    measured_runs: int = 0  # fused runs compiled and timed here (cost/fused.py)
    measured_before_ns: int = 0
    measured_after_ns: int = 0
    unfused: dict[str, int] = field(default_factory=dict)  # distinct runs not measured, by why
    unrunnable: int = 0  # runs without the recorded arguments to re-run them


def _compile(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    unchanged = _why_unchanged(graph, str(params["modules"]))
    if unchanged:
        return [f"compile: {unchanged}: nothing changed, so this prediction is the baseline"]
    roots = compiled_roots(graph, params["modules"])
    view: CompilerView | None = context.compiler_view
    costs = context.costs
    calls = regions(graph, roots)
    if view is None or costs is None or not calls:
        return (["compile: no forward or backward work of the compiled modules in the trace; "
                 "nothing changed"])
    tally = _Tally()
    wrapper = {FORWARD: costs.host.recorded_ns("compile.forward.cpu"),
               BACKWARD: costs.host.recorded_ns("compile.backward.cpu")}
    _merge_calls(graph, calls, roots, view, costs, wrapper, tally)
    costs.count(Tier.MODELLED, tally.calls[FORWARD] + tally.calls[BACKWARD])
    costs.count(Tier.RATIO, tally.fused_runs - tally.measured_runs)
    costs.count(Tier.MEASURED, tally.convolutions + tally.measured_runs)
    if costs.measurer is not None:
        costs.measurer.save()
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


def _merge_calls(graph: Graph, calls: list[Region], roots: set[str], view: CompilerView,
                 costs: CostModel, wrapper: dict[int, int], tally: _Tally) -> None:
    """Each call becomes its first task, lasting what the compiled call takes; its other tasks and
    the host work between them go."""
    gone: list[int] = []
    # the merged task is the call of the whole module: its time is the
    # module's, not its first layer's
    root_layer = {name: index for index, name in enumerate(graph.layers) if name in roots}
    called = [[u for task in region.tasks for u in view.units.get(int(graph.tasks["event"][task]),
                                                                  [])] for region in calls]
    runs = _fused(called, [region.phase for region in calls], view, costs.measurer, tally)
    for region, units, fused in zip(calls, called, runs):
        tasks = region.tasks
        compiled_ns = (_externs_ns(units, view, costs, tally) + _fused_ns(fused, tally)
                       + wrapper[region.phase])
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


def regions(graph: Graph, roots: set[str]) -> list[Region]:
    """The calls of the compiled modules: per thread and iteration, each run of consecutive forward
    (or backward) host tasks of their layers; any other host task ends a run, except that in
    backward a task of no layer (AccumulateGrad)
    does not: the compiled backward is one autograd node, and the
    gradients it returns are accumulated after it."""
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
    previous: tuple[int, int, int] | None = None
    for task, compiled, passes in zip(host.tolist(), inside.tolist(), transparent.tolist()):
        key = (int(tasks["resource"][task]), int(tasks["iteration"][task]),
               int(tasks["phase"][task]))
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
        total += ns
    return total


@dataclass(slots=True, frozen=True)
class _Run:
    """One run of fusible ops in a compiled call: its recorded time, and what measured it."""

    recorded_ns: int
    key: str  # its program's cache key (cost/fused.py); "" where it cannot be re-run
    measured_ns: int | None  # compiled and timed here; None: FUSED_SHARE of its recorded time


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
        for run, after in fed_runs(units):
            steps = fused_steps(run, view)
            consumer = _consumer(after, view) if phase == FORWARD else None
            key = (fused_key(steps + ([consumer] if consumer else []), laid_out,
                             phase == FORWARD) if steps is not None else "")
            recorded = sum(unit.ns for unit in run)
            if key:
                weight[key] = weight.get(key, 0) + recorded
                programs[key] = (steps or [], laid_out, phase == FORWARD, consumer)
            mine.append((recorded, key))
        found.append(mine)
    measured: dict[str, int] = {}
    for key in sorted(weight, key=lambda k: -weight[k]):
        ns = fused_ns(measurer, *programs[key]) if measurer is not None else None
        if ns is not None:
            measured[key] = ns
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


def _fused_ns(runs: list[_Run], tally: _Tally) -> int:
    """The fusible ops' time in the compiled call: each run between externs one fused loop, as
    compiled and timed here, else FUSED_SHARE of its recorded time."""
    total = 0
    for run in runs:
        ns = (run.measured_ns if run.measured_ns is not None
              else int(round(FUSED_SHARE * run.recorded_ns)))
        tally.fused_runs += 1
        tally.fused_before_ns += run.recorded_ns
        if run.measured_ns is not None:
            tally.measured_runs += 1
            tally.measured_before_ns += run.recorded_ns
            tally.measured_after_ns += ns
        total += ns
    return total


def _notes(roots: set[str], tally: _Tally, wrapper: dict[int, int], costs: CostModel) -> list[str]:
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
        f"in all); the compiled wrapper's own work per call {wrapper[FORWARD] / 1e3:.0f} µs "
        f"forward, {wrapper[BACKWARD] / 1e3:.0f} µs backward (host units of {unit} ns, recorded "
        f"from real runs){convolutions}{unmeasured}; {_fused_note(tally, costs)}",
        "compile: not seen in an eager trace, so not modelled: graph breaks and recompilation "
        "(each break is one more compiled call) and the first iterations' compilation"
        + (f"; {tally.recurrent} recurrent layers (LSTM, GRU) are kept as recorded, though "
           "torch.compile decomposes them into per-step ops whose time is not modelled"
           if tally.recurrent else ""),
    ]


def _fused_note(tally: _Tally, costs: CostModel) -> str:
    """What became of the runs of fusible ops: compiled here, or at the ratio, and why."""
    ratio_runs = tally.fused_runs - tally.measured_runs
    measured = (f"{tally.measured_runs} compiled here with inductor and timed (measured tier: "
                f"{tally.measured_before_ns / 1e3:.0f} µs recorded eager, "
                f"{tally.measured_after_ns / 1e3:.0f} µs fused)" if tally.measured_runs else "")
    why = []
    if costs.measurer is None:
        why.append("the measured tier is off (--no-measure, or torch missing)")
    if tally.unrunnable:
        why.append(f"{tally.unrunnable} runs without the recorded arguments to run them again")
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
