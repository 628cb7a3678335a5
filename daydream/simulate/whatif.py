"""What-if prediction: transform a trace's graph, replay it, and compare with the untouched replay.

    prediction = predict(trace, ["amp", "fused-optimizer"])
    prediction.speedup            # simulated baseline / predicted, per iteration (mean)

The baseline is the simulated untouched graph, not the measurement, so that the
speed-up compares like with like; the measured time is reported beside both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daydream.cost import CostModel, CostOptions
from daydream.cost.elementwise import elementwise_speed
from daydream.cost.heap import large_host_blocks
from daydream.cost.measure import measuring_enabled
from daydream.cost.optimizer import stepped_optimizer
from daydream.cost.saved import saved_tensors_of
from daydream.devices import Device, device, recorded_device
from daydream.errors import InputError
from daydream.graph import Graph, TaskKind
from daydream.graph.job import build_job_graphs
from daydream.graph.model import GPU_WORK, HOST_WORK, Timeline
from daydream.graph.windows import Window, iteration_windows
from daydream.mapping import PHASES, Attribution, Iteration, attribute, find_iterations
from daydream.mapping.attribution import layer_work
from daydream.mapping.capture import captures
from daydream.mapping.linking import link
from daydream.mapping.parameters import recorded_parameters
from daydream.simulate.bound import Bound, bound_line, iteration_bounds, merge, warnings_for
from daydream.simulate.contention import with_contention
from daydream.simulate.interval import Interval, interval_of
from daydream.simulate.job import simulate_job
from daydream.simulate.kernel_time import kernel_time_warning
from daydream.simulate.replay import Replay, measure_replay
from daydream.simulate.steady import left_out, median_of, steady
from daydream.trace import GPU_ACTIVITY_KINDS, EventKind, Trace
from daydream.trace.collect.speed import PROBE_FACT
from daydream.trace.model import recorded_fact
from daydream.transforms import (
    Context,
    apply_pipeline,
    apply_spec,
    is_pipeline_file,
    load_pipeline,
    parse_spec,
)
from daydream.transforms.distributed.contention import gpu_slowdown
from daydream.transforms.loading import loader_ranges_of


@dataclass(slots=True)
class Prediction:
    """One rank: measured, simulated baseline and predicted iteration
    times (mean, ns) and what moved."""

    trace: Trace
    optimizations: list[str]
    measured_ns: int
    simulated_ns: int
    predicted_ns: int
    per_iteration: list[dict[str, Any]]
    phases: dict[str, dict[str, int]]  # phase -> {"baseline": ns of work, "predicted": ns of work}
    layers: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    graph: Graph | None = None
    timeline: Timeline | None = None
    bound: Bound | None = None  # the predicted critical path of the mean iteration, by category
    baseline_bound: Bound | None = None
    warnings: list[str] = field(default_factory=list)
    # where the iteration time may really be (simulate/interval.py)
    interval: Interval | None = None

    @property
    def speedup(self) -> float:
        return self.simulated_ns / self.predicted_ns if self.predicted_ns else float("inf")


def resolve_device(trace: Trace, name: str | None) -> tuple[Device | None, str | None]:
    """The device the trace ran on, from the device table: as the trace
    says, or `name` (--device) where it does not. A `name` that contradicts
    the trace is an input error: predicting another GPU is gpu:target=."""
    recorded, recorded_name = recorded_device(trace)
    if not name:
        return recorded, recorded_name
    named = device(name)
    if recorded is not None and named is not recorded:
        raise InputError(f"--device {name}: the trace says it ran on {recorded_name} "
                         f"({recorded.key}); --device only names the GPU of a trace that does not "
                         f"say — to predict the {named.key}, use --opt gpu:target={name}")
    return named, name


def predict(trace: Trace, specs: list[str], device_name: str | None = None,
            cost_options: CostOptions | None = None
            ) -> Prediction:
    """Apply the optimizations `specs` ("amp", "batch-size:factor=2",
    "path/to/opt.yaml") in order."""
    return predict_traces([trace], specs, device_name, cost_options=cost_options)[0]


def predict_traces(traces: list[Trace], specs: list[str], device_name: str | None = None,
                   graphs: list[Graph] | None = None,
                   cost_options: CostOptions | None = None) -> list[Prediction]:
    """Predict every rank of a job under `specs`; the ranks are simulated together (see
    simulate.job). `graphs`: the ranks' graphs, already built (daydream.ranks); `cost_options`:
    whether the cost stage may measure (daydream/cost)."""
    for trace in traces:
        found = captures(trace)
        if found.capture_only:
            raise InputError(f"{trace.meta.source}: this trace records a CUDA-graph capture and no "
                             f"execution of it: {found.describe()}; there is no run to replay or "
                             "speed up — profile the steps that replay the graph "
                             "(cudaGraphLaunch), not its capture")
    baseline_graphs, _ = build_job_graphs(traces, graphs)
    baselines = [measure_replay(t, g, tl)
                 for t, g, tl in zip(traces, baseline_graphs,
                                     simulate_job(baseline_graphs, warmup=True))]
    graphs, notes = [], []
    for trace, baseline_graph in zip(traces, baseline_graphs):
        graph = baseline_graph.copy()
        notes.append(transform(graph, trace, specs, device_name, simulated_ranks=len(traces),
                               cost_options=cost_options))
        problems = graph.validate()
        if problems:
            raise ValueError(f"the transformed graph cannot be simulated: {problems[0]}")
        graphs.append(graph)
    timelines = simulate_job(graphs, warmup=True)
    timelines, contention_notes = with_contention(graphs, timelines,
                                                  lambda ranks: simulate_job(ranks, warmup=True))
    notes = [rank_notes + extra for rank_notes, extra in zip(notes, contention_notes)]
    predictions = [_prediction(trace, specs, baseline, graph, timeline, rank_notes)
                   for trace, baseline, graph, timeline, rank_notes in zip(
                       traces, baselines, graphs, timelines, notes)]
    if any(p.per_iteration and p.predicted_ns <= 0 for p in predictions):
        raise InputError(f"{' + '.join(specs)}: the optimizations leave no work in the iteration "
                         "(0 ns predicted), so there is no speed-up to give — check what they "
                         "select")
    return predictions


def transform(graph: Graph, trace: Trace, specs: list[str], device_name: str | None = None,
              simulated_ranks: int = 1, cost_options: CostOptions | None = None) -> list[str]:
    """Apply `specs` to `graph` (a graph of `trace`) in place; returns the notes of the models
    applied. `simulated_ranks`: the ranks of the job simulated together with it; `cost_options`:
    whether the cost stage may measure, and for how long."""
    found, name = resolve_device(trace, device_name)
    options = cost_options or CostOptions()
    host = host_of(trace)
    # Passes over the trace that several facts need: each made once, when first asked for.
    attribution = functools.cache(lambda: attribute(trace))
    iterations = functools.cache(lambda: find_iterations(trace))
    speed = functools.cache(lambda on_gpu: elementwise_speed(trace, on_gpu))
    update_loop = functools.cache(lambda: update_loop_of(trace, attribution(), iterations()))

    def costs() -> CostModel:
        return CostModel.of(trace, found, measuring_enabled(options.measure), options.budget_s,
                            host.get("intra_op_threads", 0), elementwise_of=speed,
                            compile_budget_s=options.compile_budget_s,
                            speed_at=host.get(PROBE_FACT, 0))

    context = Context(device=found, device_name=name, gradient_bytes=gradient_bytes_of(trace),
                      world_size=trace.meta.world_size or 0, simulated_ranks=simulated_ranks,
                      host=host, buffers=buffer_bytes_of(trace),
                      gradient_tensors=gradient_tensors_of(trace),
                      derive={"launch_blocks": lambda: launch_blocks_of(trace),
                              "gemm_shapes": lambda: gemm_shapes_of(trace),
                              "gpu_contention": lambda: gpu_slowdown(trace), "costs": costs,
                              "forward_ops": lambda: forward_ops_of(
                                  trace, attribution(), iterations()),
                              "autocast_ops": lambda: forward_ops_of(
                                  trace, attribution(), iterations(), between=True,
                                  update_loop=update_loop()),
                              "compiler_view": lambda: compiler_view_of(trace, attribution()),
                              "module_calls": lambda: module_calls_of(trace),
                              "backward_gemms": lambda: backward_gemms_of(trace, attribution()),
                              "update_loop": update_loop,
                              "stepped_optimizer": lambda: stepped_optimizer(
                                  trace, iteration_of_row(trace, iterations()),
                                  attribution().phase),
                              "batch_ops": lambda: functools.cache(lambda batch: batch_ops_of(
                                  trace, attribution(), update_loop(), batch, iterations())),
                              "step_ops": lambda: step_ops_of(trace, attribution(),
                                                              update_loop()),
                              "layer_parameters": lambda: recorded_parameters(trace),
                              "launching_op": lambda: link(trace).op,
                              "saved_tensors": lambda: functools.partial(saved_tensors_of, trace),
                              "large_host_blocks": lambda: large_host_blocks(trace, iterations()),
                              "layer_work": lambda: layer_work(trace, attribution()),
                              "loader_ranges": lambda: loader_ranges_of(trace),
                              "backward_memory_ops": lambda: backward_memory_ops_of(
                                  trace, attribution()), "elementwise_gpu": lambda: speed(True),
                              "elementwise_cpu": lambda: speed(False)})
    notes: list[str] = []
    if name and found is None:
        notes.append(f"{name} is not in the device table: Daydream's published constants are used")
    notes += _apply_specs(graph, specs, context)
    model = context.made("costs")
    return notes + ([f"{TIERS_NOTE}{model.tiers_note()}"] if model is not None and model.tally
                    else [])


def _apply_specs(graph: Graph, specs: list[str], context: Context) -> list[str]:
    """`specs` applied to `graph` in order, their notes; what the cost stage measured is saved for
    the next run, also where one of them fails."""
    notes: list[str] = []
    try:
        for spec in specs:
            if is_pipeline_file(spec):
                notes += apply_pipeline(graph, load_pipeline(spec))
            else:
                notes += apply_spec(graph, parse_spec(spec), context)
    finally:
        model = context.made("costs")
        if model is not None and model.measurer is not None:
            model.measurer.save()
    return notes


#: The note that says how the cost stage timed the work the optimizations added or changed, by tier.
TIERS_NOTE = "cost stage: changed work timed "


def forward_ops_of(trace: Trace, attribution: Attribution | None = None,
                   iterations: list[Iteration] | None = None, between: bool = False,
                   update_loop: np.ndarray | None = None) -> Any:
    """Per iteration, the forward's top-level CPU ops with their recorded inputs, and their spans
    (transforms/amp.py). `attribution` and `iterations`: the trace's, where already made;
    `between`: with the ops of no layer in the forward regions (amp.forward_regions);
    `update_loop`: a hand-written update loop's rows (its tensors are parameters)."""
    from daydream.cost.shapes import OpShapes, parameter_shapes
    from daydream.transforms.amp import forward_ops

    attribution = attribution if attribution is not None else attribute(trace)
    ops = trace.indices(EventKind.CPU_OP)
    optimizer = ops[attribution.phase[ops] == PHASES.index("optimizer")]
    parameters = frozenset(parameter_shapes(
        OpShapes(trace), optimizer,
        update_loop if update_loop is not None else np.zeros(0, dtype=np.int64)))
    iteration = iteration_of_row(trace, iterations if iterations is not None
                                 else find_iterations(trace))
    return forward_ops(trace, attribution.layer, attribution.phase, iteration, attribution.layers,
                       between, parameters)


def compiler_view_of(trace: Trace, attribution: Attribution) -> Any:
    """The top-level CPU ops of forward and backward as torch.compile
    sees them (cost/compiled.py)."""
    from daydream.cost.compiled import compiler_view
    from daydream.cost.shapes import top_level_ops

    rows = trace.indices(EventKind.CPU_OP)
    rows = rows[np.isin(attribution.phase[rows],
                        [PHASES.index("forward"), PHASES.index("backward")])]
    return compiler_view(trace, top_level_ops(trace, rows))


def module_calls_of(trace: Trace) -> dict[str, np.ndarray]:
    """Per module path, the start times of its forward calls (ns, sorted), from the
    `daydream.layer::PATH` ranges a daydream recording wraps each call in."""
    from daydream.trace.collect.hooks import LAYER_PREFIX

    rows = trace.indices(EventKind.ANNOTATION)
    starts: dict[str, list[int]] = {}
    for row, name in zip(rows.tolist(), trace.name[rows].tolist()):
        text = trace.strings[name]
        if text.startswith(LAYER_PREFIX):
            starts.setdefault(text[len(LAYER_PREFIX):], []).append(int(trace.ts_ns[row]))
    return {path: np.sort(np.array(times, dtype=np.int64)) for path, times in starts.items()}


def batch_ops_of(trace: Trace, attribution: Attribution, update_loop: np.ndarray,
                 batch: int = 0, iterations: list[Iteration] | None = None) -> Any:
    """The trace's batch (`batch` where given) and the CPU ops that carry it (transforms/batch.py),
    the update loop's ops left out. `iterations`: the trace's, where already found."""
    from daydream.transforms.batch import batch_ops

    iterations = iterations if iterations is not None else find_iterations(trace)
    return batch_ops(trace, attribution.phase, update_loop, batch,
                     iteration_of_row(trace, iterations))


def step_ops_of(trace: Trace, attribution: Attribution, update_loop: np.ndarray) -> Any:
    """The step's CPU ops with their shapes (transforms/width.py), the update loop's tensors counted
    as parameters."""
    from daydream.transforms.width import step_ops

    return step_ops(trace, attribution.phase, update_loop)


def pair_bytes_of(trace: Trace, attribution: Attribution, batch: int = 0) -> frozenset[int]:
    """The bytes of the trace's tensors that hold the batch twice (what `batch-size`'s memory model
    grows with the square of its factor); empty where none does or the trace has no shapes."""
    found = batch_ops_of(trace, attribution, update_loop_of(trace, attribution), batch)
    return found.pair_bytes()


def iteration_of_row(trace: Trace, iterations: list[Iteration]) -> np.ndarray:
    """Per trace row, the iteration it starts in (-1: none)."""
    iteration = np.full(len(trace), -1, dtype=np.int64)
    if iterations:
        bounds = np.array([it.start_ns for it in iterations] + [iterations[-1].end_ns],
                          dtype=np.int64)
        index = np.searchsorted(bounds, trace.ts_ns, side="right") - 1
        inside = (index >= 0) & (index < len(iterations))
        iteration[inside] = index[inside]
    return iteration


def backward_gemms_of(trace: Trace, attribution: Attribution | None = None
                      ) -> list[tuple[int, str, list[Any], int, int, int, Any]]:
    """The backward's matrix-multiply and convolution CPU ops with recorded shapes: (row, name,
    inputs, duration, start, track, arguments)."""
    from daydream.cost.shapes import OpShapes
    from daydream.transforms.amp import BACKWARD_GEMMS

    wanted = [trace.string_index(name) for name in BACKWARD_GEMMS]
    rows = trace.indices(EventKind.CPU_OP)
    rows = rows[np.isin(trace.name[rows], [w for w in wanted if w >= 0])]
    if rows.size == 0:
        return []
    rows = rows[(attribution if attribution is not None
                 else attribute(trace)).phase[rows] == PHASES.index("backward")]
    shapes = OpShapes(trace)
    found = []
    for row in rows.tolist():
        inputs = shapes.tensors(row)
        if inputs:
            found.append((row, trace.name_of(row), inputs, int(trace.dur_ns[row]),
                          int(trace.ts_ns[row]), int(trace.track[row]), shapes.arguments(row)))
    return found


def backward_memory_ops_of(trace: Trace, attribution: Attribution | None = None
                           ) -> list[tuple[int, int, int, int, int, int, str, Any]]:
    """The backward's elementwise and normalization CPU ops (aten::..._backward): (row, duration,
    start, track, layer, the bytes its tensors take in fp32: `footprint_bytes`, 0 where its shapes
    were not recorded, name, and for those amp measures (`MEASURED_BACKWARD`) the recorded
    arguments, else None)."""
    from daydream.cost.shapes import OpShapes, footprint_bytes
    from daydream.mapping.classes import classify
    from daydream.transforms.amp import MEASURED_BACKWARD

    rows = trace.indices(EventKind.CPU_OP)
    attribution = attribution if attribution is not None else attribute(trace)
    rows = rows[attribution.phase[rows] == PHASES.index("backward")]
    names = {i: trace.strings[i] for i in np.unique(trace.name[rows]).tolist()}
    wanted = [i for i, n in names.items() if n.startswith("aten::") and n.endswith("_backward")
              and classify(n) in ("elementwise", "normalization")]
    rows = rows[np.isin(trace.name[rows], wanted)]
    shapes = OpShapes(trace)
    found = []
    for r in rows.tolist():
        name = names[int(trace.name[r])]
        found.append((r, int(trace.dur_ns[r]), int(trace.ts_ns[r]), int(trace.track[r]),
                      int(attribution.layer[r]), footprint_bytes(shapes.tensors(r) or []), name,
                      shapes.arguments(r) if name in MEASURED_BACKWARD else None))
    return found


#: In-place updates a hand-written optimizer applies to each parameter (p.add_(g, alpha=-lr),
#: p.data.sub_(...), ...).
UPDATE_OPS = ("aten::add_", "aten::sub_", "aten::mul_", "aten::addcdiv_", "aten::addcmul_",
              "aten::lerp_", "aten::div_")
#: Fewer updates than this per iteration are not a loop over parameters.
MIN_UPDATES = 2


def update_loop_of(trace: Trace, attribution: Attribution | None = None,
                   iterations: list[Iteration] | None = None
                   ) -> np.ndarray:
    """Trace rows of a hand-written update loop: per iteration, the top-level in-place updates
    (UPDATE_OPS) outside forward, backward and any optimizer step, after the iteration's last
    backward op; on a GPU trace, the GPU work they launched. Empty where there is none."""
    from daydream.cost.shapes import top_level_ops

    wanted = [i for i in (trace.string_index(name) for name in UPDATE_OPS) if i >= 0]
    iterations = iterations if iterations is not None else find_iterations(trace)
    if not wanted or not iterations:
        return np.zeros(0, dtype=np.int64)
    attribution = attribution if attribution is not None else attribute(trace)
    ops = trace.indices(EventKind.CPU_OP)
    backward = ops[attribution.phase[ops] == PHASES.index("backward")]
    candidates = ops[np.isin(trace.name[ops],
                             wanted) & (attribution.phase[ops] == PHASES.index("other"))]
    candidates = top_level_ops(trace, candidates)
    chosen = []
    for it in iterations:
        inside = (
            backward[(trace.ts_ns[backward] >= it.start_ns) & (trace.ts_ns[backward] < it.end_ns)])
        after = int(trace.end_ns[inside].max()) if inside.size else it.end_ns
        mine = (
            candidates[(trace.ts_ns[candidates] >= after) & (trace.ts_ns[candidates] < it.end_ns)])
        if mine.size >= MIN_UPDATES:
            chosen.append(mine)
    rows = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    if rows.size and trace.count(EventKind.KERNEL):
        gpu = trace.indices(*GPU_ACTIVITY_KINDS)
        rows = np.concatenate([rows, gpu[np.isin(link(trace).op[gpu], rows)]])
    return rows


def launch_blocks_of(trace: Trace) -> np.ndarray | None:
    """Per trace row, the thread blocks of its kernel launch (grid
    x*y*z), -1 where not recorded; None without any."""
    table = trace.tables.get("launch_config")
    if table is None or table["event"].size == 0:
        return None
    blocks = np.full(len(trace), -1, dtype=np.int64)
    grid = [np.maximum(table[axis].astype(np.int64), 1) for axis in ("grid_x", "grid_y", "grid_z")]
    recorded = table["grid_x"] > 0
    blocks[table["event"][recorded]] = (grid[0] * grid[1] * grid[2])[recorded]
    return blocks


def host_of(trace: Trace) -> dict[str, int]:
    """The host facts daydream trace recorded (cpus, intra_op_threads, the speed probe);
    empty when the trace does not say."""
    host = recorded_fact(trace, "host")
    if not isinstance(host, dict):
        return {}
    return {key: int(value) for key, value in host.items() if isinstance(value, int)
            and not isinstance(value, bool)}


def gemm_shapes_of(trace: Trace) -> tuple[np.ndarray, np.ndarray] | None:
    """Per trace row, (FLOPs, elements moved) of the matrix-multiply op that launched the row's GPU
    work (the innermost enclosing CPU op, mapping/linking.py), NaN where the op's shapes are not
    recorded; None without any."""
    table = trace.tables.get("flops")
    if table is None or table["event"].size == 0:
        return None
    op = link(trace).op
    entry = np.full(len(trace), -1, dtype=np.int64)
    entry[table["event"]] = np.arange(table["event"].size)
    row = np.where(op >= 0, entry[np.maximum(op, 0)], -1)
    known = row >= 0
    return (np.where(known, table["flops"][np.maximum(row, 0)], np.nan),
            np.where(known, table["elements"][np.maximum(row, 0)], np.nan))


def _recorded_layers(trace: Trace) -> dict[str, dict[str, Any]]:
    """The layers a daydream recording lists (module path -> its facts); empty for other traces."""
    layers = recorded_fact(trace, "layers")
    return ({path: info for path, info in layers.items() if isinstance(info, dict)}
            if isinstance(layers, dict) else {})


def _positive(value: Any) -> int:
    """A recorded count or size: the int if it is one above 0, else 0 (missing or malformed)."""
    return value if isinstance(value, int) and value > 0 else 0


def gradient_bytes_of(trace: Trace) -> dict[str, int]:
    """Per layer (module path), the bytes of its own trainable
    parameters, from a daydream recording."""
    return {path: size for path, info in _recorded_layers(trace).items()
            if (size := _positive(info.get("gradient_bytes")))}


def gradient_tensors_of(trace: Trace) -> int:
    """How many trainable parameter tensors a daydream recording's layers own (0: not recorded)."""
    return sum(_positive(info.get("gradient_tensors")) for info in _recorded_layers(trace).values())


def buffer_bytes_of(trace: Trace) -> dict[str, int]:
    """The model's buffer bytes by dtype ("float32", "int64", ...) in the
    order its layers list them, from a daydream recording; a recording
    that did not note dtypes gives its buffer bytes under ""."""
    total: dict[str, int] = {}
    for info in _recorded_layers(trace).values():
        dtypes = info.get("buffer_dtypes")
        if not isinstance(dtypes, dict):
            dtypes = {"": info.get("buffer_bytes")}
        for dtype, size in dtypes.items():
            if _positive(size):
                total[str(dtype)] = total.get(str(dtype), 0) + size
    return total


def _prediction(trace: Trace, specs: list[str], baseline: Replay, graph: Graph, timeline: Timeline,
                notes: list[str]) -> Prediction:
    per_iteration: list[dict[str, Any]] = []
    windows = iteration_windows(graph, timeline) or _whole_run(baseline, graph, timeline)
    for replayed, window in zip(baseline.iterations, windows):
        per_iteration.append({"name": replayed.name, "measured_ns": replayed.measured_ns,
                              "simulated_ns": replayed.simulated_ns,
                              "predicted_ns": window.duration_ns})

    bounds = iteration_bounds(graph, timeline, windows)
    for entry, bound in zip(per_iteration, bounds):
        entry["bound_by"] = bound.as_dict()
    predicted_bound = merge(bounds) if bounds else None
    baseline_windows = iteration_windows(baseline.graph, baseline.timeline) \
        or _whole_run(baseline, baseline.graph, baseline.timeline)
    baseline_bound = (merge(iteration_bounds(baseline.graph, baseline.timeline, baseline_windows))
                      if bounds else None)

    measured = [int(it["measured_ns"]) for it in per_iteration]
    chosen = steady(measured)

    def mean(key: str) -> int:
        # the headline: the median of the steady iterations (simulate/steady.py)
        return median_of([int(it[key]) for it in per_iteration], chosen)

    outliers = left_out([str(it["name"]) for it in per_iteration], measured, chosen)

    return Prediction(
        trace=trace,
        optimizations=specs,
        measured_ns=mean("measured_ns"),
        simulated_ns=mean("simulated_ns"),
        predicted_ns=mean("predicted_ns"),
        per_iteration=per_iteration,
        phases=_work_by(baseline.graph, graph, "phase", list(PHASES)),
        layers=_layers(baseline.graph, graph),
        notes=notes,
        graph=graph,
        timeline=timeline,
        bound=predicted_bound,
        baseline_bound=baseline_bound,
        warnings=_warnings(predicted_bound, baseline_bound, mean("simulated_ns"),
                           mean("predicted_ns"), specs)
        + ([outliers] if outliers else []) + _no_host(graph) + _kernel_time(trace),
        interval=interval_of(mean("predicted_ns"), per_iteration, _names(specs),
                             graph.has_device_work(), predicted_bound.unexplained_share
                             if predicted_bound else 0.0),
    )


def _names(specs: list[str]) -> list[str]:
    """The optimizations' names (a YAML pipeline by its file name)."""
    return [Path(spec).name if is_pipeline_file(spec) else parse_spec(spec)[0] for spec in specs]


def _kernel_time(trace: Trace) -> list[str]:
    """Recorded iterations slowed by page faults the profiler caused (simulate/kernel_time.py)."""
    warning = kernel_time_warning(trace.meta.collector)
    return [warning] if warning else []


def _no_host(graph: Graph) -> list[str]:
    """What a trace of GPU work alone cannot say."""
    if not graph.has_device_work() or graph.has_host_work():
        return []
    return ["the trace holds GPU work and no host work (no CPU ops or runtime calls): the GPU's "
            "idle time between its kernels is kept as recorded, as waiting the trace cannot "
            "explain, and host what-ifs change nothing; record the host too (torch.profiler with "
            "ProfilerActivity.CPU, or daydream trace) to derive it"]


def _whole_run(baseline: Replay, graph: Graph, timeline: Timeline) -> list[Window]:
    """A graph with no iteration markers (a trace with no host thread to carry them: GPU work alone)
    whose replay is one iteration, the whole trace: that iteration's window is the whole predicted
    run, first start to last end."""
    if len(baseline.iterations) != 1 or graph.task_count == 0 or graph.iteration_markers:
        return []
    first, last = int(np.argmin(timeline.start_ns)), int(np.argmax(timeline.end_ns))
    return [Window(int(timeline.start_ns[first]), int(timeline.end_ns[last]), first, last)]


#: A prediction within this of the baseline did not move.
UNMOVED = 0.005


def _warnings(bound: Bound | None, baseline: Bound | None, simulated_ns: int, predicted_ns: int,
              specs: list[str]) -> list[str]:
    """What bounds the prediction, where the user must know it:
    unexplained waits, or a step the what-if cannot reach."""
    if bound is None or baseline is None:
        return []
    warnings = warnings_for(bound)
    if simulated_ns and abs(predicted_ns - simulated_ns) <= UNMOVED * simulated_ns:
        warnings.append(f"the prediction did not move: the baseline step is {baseline.bound}-bound "
                        f"({bound_line(baseline.as_dict())} of its critical path), "
                        f"and {' + '.join(specs)} does not shorten that path")
    return warnings


def _work(graph: Graph) -> tuple[np.ndarray, str]:
    """Which tasks count as the work to compare: GPU work if any, else host work."""
    kinds = graph.tasks["kind"]
    if graph.has_device_work():
        return np.flatnonzero(np.isin(kinds, [int(k) for k in GPU_WORK])), "gpu"
    # A CPU-only trace; communication a what-if added counts as work too.
    return (np.flatnonzero(np.isin(kinds, [int(k) for k in (*HOST_WORK, TaskKind.COLLECTIVE)])),
            "cpu")


def _iterations(graph: Graph) -> int:
    return max(len(graph.iteration_markers), 1)


def _work_by(before: Graph, after: Graph, column: str,
             labels: list[str]) -> dict[str, dict[str, int]]:
    result = {}
    sums = []
    for graph in (before, after):
        ids, _ = _work(graph)
        ids = ids[graph.tasks["iteration"][ids] >= 0]
        values = graph.tasks[column][ids].astype(np.int64)
        ok = values >= 0
        sums.append(np.bincount(values[ok], weights=graph.tasks["duration_ns"][ids][ok],
                                minlength=len(labels)) / _iterations(graph))
    for index, label in enumerate(labels):
        result[label] = {"baseline_ns": int(sums[0][index]), "predicted_ns": int(sums[1][index])}
    return result


def _layers(before: Graph, after: Graph, top: int = 10) -> list[dict[str, Any]]:
    moved = _work_by(before, after, "layer", before.layers)
    ranked = sorted(moved.items(),
                    key=lambda item: -abs(item[1]["baseline_ns"] - item[1]["predicted_ns"]))
    return ([{"name": name, **values} for name, values in ranked[:top]
             if values["baseline_ns"] != values["predicted_ns"]])
