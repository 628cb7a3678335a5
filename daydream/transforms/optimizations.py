"""The what-if library: named, parameterized optimizations written with the primitives.

Each `Optimization` states its model in `describe()`: which tasks it touches, by what
factor, and where the factor comes from. `apply(graph, params, context)` changes the
graph in place and returns notes for people (what it did, with numbers).

    spec = parse_spec("batch-size:factor=2")
    notes = apply_spec(graph, spec, Context(device=find_device("V100")))
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream.cost import CostModel, Tier
from daydream.devices import Device
from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import GPU_WORK, HOST_TASKS, HOST_WORK, KERNELS
from daydream.mapping import PHASES
from daydream.mapping.attribution import layer_owners
from daydream.mapping.classes import CLASSES, classes_of, precisions_of
from daydream.trace import runtime_api
from daydream.transforms.pipeline import is_pipeline_file
from daydream.transforms.primitives import remove, scale, select, splice, unpin

MULTI_TENSOR = re.compile(r"multi_tensor|_foreach|fused", re.IGNORECASE)
NOT_BATCH_PROPORTIONAL = re.compile(r"AccumulateGrad|zero_|fill_|Optimizer", re.IGNORECASE)


@dataclass(slots=True, frozen=True)
class Context:
    """What an optimization may consult besides the graph."""

    device: Device | None = None
    device_name: str | None = None
    #: Gradient bytes of each layer's own parameters (module path -> bytes), where the trace records them.
    gradient_bytes: dict[str, int] = field(default_factory=dict)
    #: How many trainable parameter tensors those are, where the recording counts them (0: unknown).
    gradient_tensors: int = 0
    world_size: int = 0  # ranks of the job the trace comes from (0: unknown)
    #: Ranks of the job simulated together with this one (their recorded differences are in the job's time).
    simulated_ranks: int = 1
    #: Bytes of the model's buffers (BatchNorm statistics) by dtype, in the model's order, where a daydream recording
    #: lists them (empty: none or unknown; "": bytes of a recording that did not note their dtypes).
    buffers: dict[str, int] = field(default_factory=dict)
    #: The host daydream trace recorded (cpus, intra_op_threads); empty for other traces.
    host: dict[str, int] = field(default_factory=dict)
    #: Facts that take a pass over the trace, computed the first time an optimization asks for one (name -> how);
    #: see the properties below.
    derive: dict[str, Callable[[], Any]] = field(default_factory=dict)
    _derived: dict[str, Any] = field(default_factory=dict)

    @property
    def buffer_bytes(self) -> int:
        return sum(self.buffers.values())

    def made(self, name: str) -> Any:
        """Fact `name` if an optimization has asked for it, else None (without making it)."""
        return self._derived.get(name)

    def _fact(self, name: str) -> Any:
        if name not in self._derived:
            self._derived[name] = self.derive[name]() if name in self.derive else None
        return self._derived[name]

    @property
    def launch_blocks(self) -> np.ndarray | None:
        """Per trace row, the thread blocks its kernel launched (grid x*y*z; -1 where not recorded)."""
        return self._fact("launch_blocks")

    @property
    def gemm_shapes(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per trace row, (FLOPs, elements read and written) of the matrix multiply whose op launched the kernel, from
        the op's recorded input shapes (NaN where not known)."""
        return self._fact("gemm_shapes")

    def elementwise_speed(self, on_gpu: bool) -> Any:
        """The trace's streaming elementwise ops' speed (transforms/distributed/copies.CopySpeed), timed by their kernels
        (`on_gpu`) or on the CPU; None without enough of them."""
        return self._fact("elementwise_gpu" if on_gpu else "elementwise_cpu")

    @property
    def costs(self) -> CostModel | None:
        """The cost stage's model of this trace (daydream/cost): what added or re-shaped work takes, host and device."""
        return self._fact("costs")

    @property
    def forward_ops(self) -> Any:
        """Per iteration, the recorded forward's top-level ops with their inputs, and their spans (transforms/amp.py)."""
        return self._fact("forward_ops")

    @property
    def backward_gemms(self) -> Any:
        """The backward's matrix-multiply and convolution CPU ops: (row, name, inputs, duration ns, start ns, track,
        arguments) each."""
        return self._fact("backward_gemms")

    @property
    def backward_memory_ops(self) -> Any:
        """The backward's elementwise and normalization CPU ops (aten::*_backward): (row, duration ns, start ns, track,
        layer) each."""
        return self._fact("backward_memory_ops")

    @property
    def batch_ops(self) -> Any:
        """batch -> the trace's batch size (that one where above 0) and the CPU ops that carry it
        (transforms/batch.BatchOps); None where not derived."""
        return self._fact("batch_ops")

    @property
    def launching_op(self) -> np.ndarray | None:
        """Per trace row, the CPU op whose launch made that GPU work (mapping/linking.py), -1 where none."""
        return self._fact("launching_op")

    @property
    def update_loop(self) -> np.ndarray | None:
        """Trace rows of a hand-written optimizer: the per-parameter in-place updates after backward (for a GPU trace,
        the kernels they launched), outside any optimizer step; None or empty where there is none."""
        return self._fact("update_loop")

    @property
    def loader_ranges(self) -> Any:
        """The trace's DataLoader `__next__` ranges (transforms/loading.LoaderRanges); None where not derived."""
        return self._fact("loader_ranges")

    @property
    def gpu_contention(self) -> tuple[float, int] | None:
        """(factor, kernels) of compute kernels slowed beside the trace's own collectives (None: no evidence)."""
        return self._fact("gpu_contention")


Apply = Callable[[Graph, dict[str, Any], Context], list[str]]


@dataclass(slots=True, frozen=True)
class Parameter:
    """One parameter of an optimization: how its text becomes a value, and the values it may take.

    `type` turns the text into a value (int, float, str, or a converter such as `bandwidth`);
    numbers must be finite and, where given, within `low`..`high` (inclusive).
    """

    type: Callable[[str], Any]
    default: Any
    help: str
    low: float | None = None
    high: float | None = None


#: The largest data-parallel job a what-if may model: ranks are simulated one by one.
MAX_WORLD = 65536
#: Bounds of a speed-up (or slow-down) factor: beyond them the prediction means nothing.
FACTOR_RANGE = {"low": 1e-3, "high": 1e6}
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?:([kKmMgGtT])(B|b|bit)(?:ps|/s)?)?\s*$")
_RATE_SCALE = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def bandwidth(text: str) -> float:
    """A bandwidth in GB/s: '25' (GB/s), '25GB/s' or '25GBps' (bytes), '200Gbps', '200Gb/s' or '200Gbit/s' (bits)."""
    found = _RATE.match(str(text))
    if not found:
        raise ValueError(text)
    value, prefix, unit = float(found.group(1)), found.group(2), found.group(3)
    if prefix is None:
        return value
    return value * _RATE_SCALE[prefix.lower()] / (1 if unit == "B" else 8) / 1e9


@dataclass(slots=True, frozen=True)
class Optimization:
    """One what-if: its parameters and its time model (`apply`, a graph rewrite, and `model`, in words). Its memory
    model, where it has one, is in daydream.memory.whatif.MEMORY_MODELS under the same name."""

    name: str
    summary: str
    model: str  # the time model, in words: which tasks, what factor, where the factor comes from
    apply: Apply
    parameters: dict[str, Parameter] = field(default_factory=dict)

    def describe(self) -> str:
        params = ", ".join(f"{k}={p.default!r} ({p.help})" for k, p in self.parameters.items())
        return (f"{self.name}: {self.summary}\n  time: {self.model}"
                + (f"\n  parameters: {params}" if params else ""))


OPTIMIZATIONS: dict[str, Optimization] = {}
ALIASES = {"fused-adam": "fused-optimizer"}


def register(optimization: Optimization) -> Optimization:
    OPTIMIZATIONS[optimization.name] = optimization
    return optimization


def parse_spec(text: str) -> tuple[str, dict[str, Any]]:
    """'name:key=value,key=value' -> (canonical name, typed parameters with defaults filled in)."""
    name, _, rest = text.partition(":")
    name = ALIASES.get(name.strip(), name.strip())
    if name not in OPTIMIZATIONS:
        close = difflib.get_close_matches(name, [*OPTIMIZATIONS, *ALIASES], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? (daydream whatif --list)" if close else "see daydream whatif --list"
        raise InputError(f"--opt {text}: unknown optimization {name!r} — {hint}")
    optimization = OPTIMIZATIONS[name]
    params = {key: p.default for key, p in optimization.parameters.items()}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep and key in optimization.parameters:
            raise InputError(f"--opt {text}: {key} has no value — write {key}=VALUE")
        if key not in optimization.parameters:
            known = ", ".join(optimization.parameters) or "none"
            close = difflib.get_close_matches(key, list(optimization.parameters), n=1, cutoff=0.6)
            hint = f" — did you mean {close[0]!r}?" if close else ""
            raise InputError(f"--opt {text}: {name} has no parameter {key!r} (parameters: {known}){hint}")
        params[key] = _convert(text, key, value, optimization.parameters[key])
    return name, params


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """'world=1,2,4' -> ('world', ['1', '2', '4'])."""
    key, sep, rest = text.partition("=")
    values = [v.strip() for v in rest.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise InputError(f"--sweep {text}: write KEY=V1,V2,... (e.g. world=1,2,4,8)")
    return key.strip(), values


def with_value(spec: str, key: str, value: str) -> str:
    """The spec with parameter `key` set to `value`, if its optimization has that parameter."""
    if is_pipeline_file(spec):
        return spec
    name, _, rest = spec.partition(":")
    if key not in OPTIMIZATIONS[ALIASES.get(name.strip(), name.strip())].parameters:
        return spec
    items = [item for item in rest.split(",") if item.strip() and item.partition("=")[0].strip() != key]
    return f"{name}:{','.join([*items, f'{key}={value}'])}"


def _convert(spec: str, key: str, value: str, parameter: Parameter) -> Any:
    kind = parameter.type
    try:
        converted = kind(value)
    except (ValueError, OverflowError):
        example = " (e.g. 25GB/s or 200Gbps)" if kind is bandwidth else ""
        raise InputError(f"--opt {spec}: {key}={value!r} is not a {getattr(kind, '__name__', 'value')}{example}") from None
    if isinstance(converted, (int, float)):
        if not math.isfinite(converted):
            raise InputError(f"--opt {spec}: {key}={value!r} is not a finite number — give a value such as {parameter.default!r}")
        low, high = parameter.low, parameter.high
        if (low is not None and converted < low) or (high is not None and converted > high):
            span = f"from {low:g} to {high:g}" if low is not None and high is not None else (
                f"at least {low:g}" if low is not None else f"at most {high:g}")
            raise InputError(f"--opt {spec}: {key}={value} is out of range — give a value {span}")
    return converted


def samples_factor(specs: list[str]) -> float:
    """How many times the samples per iteration the optimizations `specs` process (batch-size:factor=F multiplies)."""
    factor = 1.0
    for spec in specs:
        if is_pipeline_file(spec):
            continue
        name, params = parse_spec(spec)
        if name == "batch-size":
            factor *= float(params["factor"])
    return factor


def job_ranks(specs: list[str], traced: int) -> int:
    """How many data-parallel ranks run the step under the optimizations `specs`: the last `world` one of them sets
    (ddp:world=8, zero:world=64, ...), else `traced`, the ranks simulated from their traces."""
    ranks = traced
    for spec in specs:
        if is_pipeline_file(spec):
            continue
        world = parse_spec(spec)[1].get("world")
        if isinstance(world, int) and world > 0:
            ranks = world
    return ranks


def apply_spec(graph: Graph, spec: tuple[str, dict[str, Any]], context: Context) -> list[str]:
    name, params = spec
    return OPTIMIZATIONS[name].apply(graph, params, context)


def _names(graph: Graph, ids: np.ndarray) -> list[str]:
    return [graph.strings[int(i)] for i in graph.tasks["name"][ids]]


def _matching(graph: Graph, ids: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    by_string = np.array([bool(pattern.search(s)) for s in graph.strings], dtype=bool)
    return ids[by_string[graph.tasks["name"][ids]]]


def _launchers(graph: Graph, kernels: np.ndarray) -> np.ndarray:
    """The launch calls of the given GPU tasks."""
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    mine = np.isin(graph.edges["dst"][launch], kernels)
    return np.unique(graph.edges["src"][launch][mine])


def _low_percentile(values: np.ndarray, q: float = 10) -> int:
    return int(np.percentile(values, q)) if values.size else 0


# --------------------------------------------------------------------------- amp


def kernel_classes(graph: Graph, ids: np.ndarray) -> np.ndarray:
    """The class (index into mapping.classes.CLASSES) of each task in `ids`, from its name."""
    return classes_of(graph.tasks["name"][ids], graph.strings)


def kernel_precisions(graph: Graph, ids: np.ndarray) -> np.ndarray:
    """The precision (index into mapping.classes.PRECISIONS) of each task in `ids`, from its name."""
    return precisions_of(graph.tasks["name"][ids], graph.strings)


def _of(values: np.ndarray, labels: tuple[str, ...], chosen: tuple[str, ...]) -> np.ndarray:
    return np.isin(values, [labels.index(label) for label in chosen])


# --------------------------------------------------------------------------- fused optimizer


def _fused_optimizer(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    optimizer = PHASES.index("optimizer")
    gpu = graph.has_device_work()
    kinds = KERNELS if gpu else (TaskKind.HOST_OP,)
    work = select(graph, kind=kinds)
    work = work[graph.tasks["phase"][work] == optimizer]
    work = np.setdiff1d(work, _matching(graph, work, MULTI_TENSOR))
    found_in = "the optimizer's step"
    if work.size == 0:
        work = _update_loop_tasks(graph, kinds, context.update_loop)
        found_in = "a hand-written update loop over the parameters (in-place updates after backward)"
    if work.size == 0:
        return ["fused-optimizer: no per-parameter optimizer work in the trace (already fused?), and no hand-written "
                "update loop after backward; nothing changed"]
    keep_per_iteration = max(1, int(params["kernels"]))
    fixed = _low_percentile(graph.tasks["duration_ns"][work])
    removed: list[np.ndarray] = []
    kept_total = 0
    for iteration in np.unique(graph.tasks["iteration"][work]).tolist():
        mine = work[graph.tasks["iteration"][work] == iteration]
        mine = mine[np.argsort(graph.tasks["measured_start_ns"][mine], kind="stable")]
        keep = mine[:keep_per_iteration]
        total = int(graph.tasks["duration_ns"][mine].sum())
        # The same bytes move through fewer, larger kernels: each removed one takes its fixed cost with it.
        fused = max(total - fixed * (mine.size - keep.size), fixed * keep.size)
        graph.tasks["duration_ns"][keep] = fused // keep.size
        removed.append(mine[keep.size:])
        kept_total += keep.size
    gone = np.concatenate(removed) if removed else np.zeros(0, dtype=np.int64)
    calls = _launchers(graph, gone) if gpu else np.zeros(0, dtype=np.int64)
    calls = np.setdiff1d(calls, _launchers(graph, np.setdiff1d(work, gone)))
    remove(graph, np.concatenate([gone, calls]))
    if context.costs is not None:
        context.costs.count(Tier.RATIO, kept_total)  # the fused ones: the bytes left, at a percentile's fixed cost
    unit = "kernels" if gpu else "CPU ops"
    return [f"fused-optimizer: {gone.size + kept_total} per-parameter {unit} of {found_in} became {kept_total} multi-tensor ones "
            f"(fixed cost {fixed} ns each removed, from the trace's 10th-percentile optimizer {unit[:-1]}); "
            f"{calls.size} launches and the CPU work between them removed"]


def _update_loop_tasks(graph: Graph, kinds: tuple[TaskKind, ...], rows: np.ndarray | None) -> np.ndarray:
    """The tasks of a hand-written update loop (`rows`: its ops' trace rows): the ops themselves on a CPU graph, the
    kernels they launched on a GPU one (a task's `event` is its trace row; a kernel's op is the trace's link)."""
    if rows is None or rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    work = select(graph, kind=kinds)
    events = graph.tasks["event"][work]
    return work[(events >= 0) & np.isin(events, rows)]


register(Optimization(
    "fused-optimizer", "a fused / multi-tensor optimizer step (e.g. Adam(fused=True) or foreach)",
    "per-parameter optimizer kernels (CPU ops on a CPU trace) — of the optimizer's step, or else of a hand-written "
    "update loop (per-parameter in-place updates after backward) — and their launches replaced by `kernels` multi-tensor "
    "ones per iteration, whose time follows the bytes moved: the removed ones' total minus, for each removed one, the "
    "fixed cost of a near-empty one (10th percentile of the optimizer's kernels in this trace); the CPU work between "
    "the removed launches goes too",
    _fused_optimizer,
    {"kernels": Parameter(int, 4, "multi-tensor kernels per iteration", 1, 1e6)},
))


# --------------------------------------------------------------------------- CUDA graphs


def _cuda_graphs(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if not graph.has_device_work():
        return ["cuda-graphs: the trace has no GPU work; nothing changed"]
    phases = [p.strip() for p in str(params["phases"]).split("+") if p.strip()]
    calls = select(graph, kind=TaskKind.HOST_CALL, phase=phases)
    calls = _matching(graph, calls, runtime_api.LAUNCH)
    keep = []
    for iteration in np.unique(graph.tasks["iteration"][calls]).tolist():
        mine = calls[graph.tasks["iteration"][calls] == iteration]
        keep.append(mine[np.argmin(graph.tasks["measured_start_ns"][mine])])
    kept = np.array(keep, dtype=np.int64)
    gone = np.setdiff1d(calls, kept)
    remove(graph, gone)
    return [f"cuda-graphs: {gone.size} kernel launches in {'+'.join(phases)} and the CPU work before them removed; "
            f"one graph launch per iteration kept; GPU work unchanged"]


register(Optimization(
    "cuda-graphs", "capture the training step in CUDA graphs",
    "kernel launch calls of the captured phases removed with the CPU work before them (a graph replay runs no Python "
    "and no dispatcher); one launch per iteration stays as the graph launch; every kernel keeps its time and order",
    _cuda_graphs,
    {"phases": Parameter(str, "forward+backward+optimizer", "captured phases, joined by +")},
))


# --------------------------------------------------------------------------- elementwise fusion


def _fuse_elementwise(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if not graph.has_device_work():
        return ["fuse-elementwise: the trace has no GPU kernels, and what a compiler does to CPU ops (torch.compile's "
                "C++ kernels) is not modelled: nothing changed, so this prediction is the baseline, not what compiling "
                "would do"]
    kernels = select(graph, kind=KERNELS)
    elementwise = np.zeros(graph.task_count, dtype=bool)
    elementwise[kernels[kernel_classes(graph, kernels) == CLASSES.index("elementwise")]] = True
    saving = float(params["saving"])
    removed, chains = [], 0
    for resource in np.unique(graph.tasks["resource"][kernels]).tolist():
        mine = kernels[graph.tasks["resource"][kernels] == resource]
        mine = mine[np.argsort(graph.tasks["measured_start_ns"][mine], kind="stable")]
        chain: list[int] = []
        for task in [*mine.tolist(), -1]:
            # Without layer information (-1 on both), consecutive elementwise kernels still form a chain.
            same_layer = bool(chain) and task >= 0 and graph.tasks["layer"][task] == graph.tasks["layer"][chain[0]]
            if task >= 0 and elementwise[task] and (not chain or same_layer):
                chain.append(task)
                continue
            if len(chain) > 1:
                durations = graph.tasks["duration_ns"][chain]
                graph.tasks["duration_ns"][chain[0]] = int(durations.max() + (1 - saving) * (durations.sum() - durations.max()))
                removed.extend(chain[1:])
                chains += 1
            chain = [task] if task >= 0 and elementwise[task] else []
    gone = np.array(removed, dtype=np.int64)
    calls = _launchers(graph, gone)
    remove(graph, np.concatenate([gone, calls]))
    return [f"fuse-elementwise: {chains} chains of elementwise kernels fused ({gone.size} kernels and launches removed)"]


register(Optimization(
    "fuse-elementwise", "fuse chains of elementwise kernels inside each layer, as a compiler would",
    "consecutive elementwise kernels of one layer (or, in traces without layers, of one stream) become one kernel "
    "lasting as long as the longest plus "
    "(1 - saving) of the others (the intermediate tensors are no longer written and read back); the other kernels and "
    "their launches are removed",
    _fuse_elementwise,
    {"saving": Parameter(float, 0.8, "share of the non-longest kernels' time the fusion saves", 0.0, 1.0)},
))


# --------------------------------------------------------------------------- activation checkpointing


def _checkpoint(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    # A checkpointed layer's forward includes its children's.
    targets, member = layer_owners(graph.layers, str(params["layers"]))
    if not targets:
        raise InputError(f"--opt checkpoint:layers={params['layers']}: no layer matches; "
                         "see the layers in daydream inspect")
    layer_of = member[graph.tasks["layer"]]  # -1 index hits the trailing -1
    forward, backward = PHASES.index("forward"), PHASES.index("backward")
    iterations = graph.tasks["iteration"].copy()
    phases = graph.tasks["phase"].copy()
    work = []  # chosen before any copy is added, so that copies are never copied again
    for iteration in np.unique(iterations[iterations >= 0]).tolist():
        for target in targets:
            in_layer = (layer_of == target) & (iterations == iteration)
            work.append((np.flatnonzero(in_layer & (phases == forward)), np.flatnonzero(in_layer & (phases == backward))))
    recomputed, calls = 0, 0
    wrapper = _wrapper_costs(graph, context)
    previous = _previous_host_task(graph)
    for forward_tasks, backward_tasks in work:
        if forward_tasks.size and backward_tasks.size:
            added, invocations = _recompute_before(graph, forward_tasks, backward_tasks, wrapper, previous)
            recomputed += added
            calls += invocations
    forward_ns, backward_ns, source = wrapper
    if context.costs is not None and (forward_ns or backward_ns):
        context.costs.count(Tier.MODELLED, 2 * calls)  # the wrapper's host work, forward and backward of each call
    return [f"checkpoint: the forward work of {len(targets)} layer(s) matching {params['layers']!r} recomputed before "
            f"their backward ({recomputed} tasks per run added); the checkpoint wrapper's own host work on each of "
            f"{calls} checkpointed calls: {forward_ns / 1e3:.1f} µs in forward and {backward_ns / 1e3:.1f} µs in "
            f"backward ({source})"]


def _wrapper_costs(graph: Graph, context: Context) -> tuple[int, int, str]:
    """(forward ns, backward ns, where from) of torch.utils.checkpoint's own host work per checkpointed call."""
    costs = context.costs
    if costs is None:
        return 0, 0, "no host costs: not added"
    kind = "cuda" if graph.has_device_work() else "cpu"
    forward = costs.host.recorded_ns(f"checkpoint.forward.{kind}")
    backward = costs.host.recorded_ns(f"checkpoint.backward.{kind}")
    unit = f"{costs.host.unit_ns} ns" + (" from this trace's own ops" if costs.host.unit_from == "trace" else ", a default")
    return forward, backward, f"recorded in host units (daydream/cost/host.py, {kind}), at this host's unit of {unit}"


def _previous_host_task(graph: Graph) -> np.ndarray:
    """Per task, the host task that ran right before it on its thread (by recorded start; -1 for the first one and
    for tasks that are not host work)."""
    tasks = graph.tasks
    host = np.flatnonzero(np.isin(tasks["kind"], [int(k) for k in HOST_WORK]))
    ordered = host[np.lexsort((tasks["measured_start_ns"][host], tasks["resource"][host]))]
    previous = np.full(graph.task_count, -1, dtype=np.int64)
    same = tasks["resource"][ordered[1:]] == tasks["resource"][ordered[:-1]]
    previous[ordered[1:][same]] = ordered[:-1][same]
    return previous


def _recompute_before(graph: Graph, forward_tasks: np.ndarray, backward_tasks: np.ndarray,
                      wrapper: tuple[int, int, str] = (0, 0, ""), previous: np.ndarray | None = None) -> tuple[int, int]:
    """Copy `forward_tasks` (host and GPU) and splice the copies in before the first backward task; the checkpoint
    wrapper's own host work (`wrapper`: forward ns, backward ns) before each call of the layer's forward and before
    its recomputation. A layer called several times in an iteration (a policy network in each step of a rollout) is
    that many checkpointed calls: each run of its host tasks that some other host work on the thread precedes
    (`previous`: `_previous_host_task`). Returns (tasks added, checkpointed calls)."""
    tasks = graph.tasks
    host = forward_tasks[np.isin(tasks["kind"][forward_tasks], [int(k) for k in HOST_WORK])]
    host = host[np.argsort(tasks["measured_start_ns"][host], kind="stable")]
    if host.size == 0:
        return 0, 0
    backward_host = backward_tasks[np.isin(tasks["kind"][backward_tasks], [int(k) for k in HOST_WORK])]
    if backward_host.size == 0:
        return 0, 0
    first_backward = int(backward_host[np.argmin(tasks["measured_start_ns"][backward_host])])
    copies = graph.add_tasks(**{column: values[host] for column, values in tasks.items()})
    unpin(graph, copies)
    graph.tasks["phase"][copies] = PHASES.index("backward")
    _splice_host(graph, copies, first_backward)
    gpu_copies = _copy_launched_work(graph, host, copies, backward_tasks)
    starts = np.flatnonzero(~np.isin(previous[host], host)) if previous is not None else np.zeros(1, dtype=np.int64)
    forward_ns, backward_ns, _ = wrapper
    if forward_ns or backward_ns:
        anchors = np.concatenate([host[starts], copies[starts]])
        durations = np.concatenate([np.full(starts.size, forward_ns), np.full(starts.size, backward_ns)])
        splice(graph, anchors, durations, "checkpoint wrapper (host)", after=False)
    return int(copies.size + gpu_copies), int(starts.size)


def _splice_host(graph: Graph, chain: np.ndarray, before: int) -> None:
    """Put `chain` in host program order right before `before`: pred -> chain... -> before."""
    edges = graph.edges
    into = np.flatnonzero((edges["dst"] == before) & (edges["kind"] == DepKind.HOST_ORDER))
    predecessors = edges["src"][into].tolist()
    keep = np.ones(graph.edge_count, dtype=bool)
    keep[into] = False
    graph.edges = {c: v[keep] for c, v in edges.items()}
    graph.add_edges(predecessors, [int(chain[0])] * len(predecessors), DepKind.HOST_ORDER)
    graph.add_edges(chain[:-1], chain[1:], DepKind.HOST_ORDER)
    graph.add_edges([int(chain[-1])], [before], DepKind.HOST_ORDER)


def copy_launched_work(graph: Graph, calls: np.ndarray, call_copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copy the GPU work that `calls` launched, each copy launched by the copy of its call (`call_copies`, in the
    order of `calls`) with the same latency; returns (the originals, in recorded start order, their copies)."""
    edges = graph.edges
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    launched = launch[np.isin(edges["src"][launch], calls)]
    if launched.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    kernels, sources, latency = edges["dst"][launched], edges["src"][launched], edges["latency_ns"][launched]
    order = np.argsort(graph.tasks["measured_start_ns"][kernels], kind="stable")
    kernels, sources, latency = kernels[order], sources[order], latency[order]
    kernel_copies = graph.add_tasks(**{column: values[kernels] for column, values in graph.tasks.items()})
    unpin(graph, kernel_copies)
    copy_of_call = dict(zip(calls.tolist(), call_copies.tolist()))
    graph.add_edges([copy_of_call[int(s)] for s in sources], kernel_copies, DepKind.LAUNCH, latency_ns=latency, from_start=True)
    return kernels, kernel_copies


def _copy_launched_work(graph: Graph, calls: np.ndarray, call_copies: np.ndarray, backward_tasks: np.ndarray) -> int:
    """Copy the GPU work the original calls launched, and queue it before the layer's first backward GPU work."""
    _, kernel_copies = copy_launched_work(graph, calls, call_copies)
    if kernel_copies.size == 0:
        return 0
    gap = graph.calibration.kernel_gap_ns
    graph.add_edges(kernel_copies[:-1], kernel_copies[1:], DepKind.STREAM_ORDER, latency_ns=gap)
    backward_gpu = backward_tasks[np.isin(graph.tasks["kind"][backward_tasks], [int(k) for k in GPU_WORK])]
    if backward_gpu.size:
        first = int(backward_gpu[np.argmin(graph.tasks["measured_start_ns"][backward_gpu])])
        graph.add_edges([int(kernel_copies[-1])], [first], DepKind.STREAM_ORDER, latency_ns=gap)
    return int(kernel_copies.size)


register(Optimization(
    "checkpoint", "activation checkpointing of the matching layers",
    "for each iteration and each matching layer, its forward work (host tasks and the GPU work they launch, children "
    "included) runs again right before the layer's first backward task; torch.utils.checkpoint's own host work on "
    "each checkpointed call (saved-tensor hooks, RNG state, the recomputation's frames) before the layer's forward "
    "and before its recomputation, in host units recorded from real runs (daydream/cost/host.py) times this trace's "
    "host unit; everything else unchanged (the memory it saves is reported by the memory what-if)",
    _checkpoint,
    {"layers": Parameter(str, r"blocks\.\d+$", "regular expression over layer paths")},
))


# --------------------------------------------------------------------------- host and GPU speed


def _faster_host(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    if factor <= 0:
        raise InputError(f"--opt faster-host:factor={factor:g}: the factor must be positive")
    host = select(graph, kind=HOST_TASKS)
    scale(graph, host, factor=1 / factor, gaps=True)
    return [f"faster-host: {host.size} host tasks and the CPU time between them ÷{factor:g}"]


def _no_host_overhead(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if select(graph, kind=GPU_WORK).size == 0:
        raise InputError("no-host-overhead: the trace holds no GPU work, so all of its time is host work and an "
                         "infinitely fast host would take no time at all — for a faster CPU, try faster-host:factor=2")
    host = select(graph, kind=HOST_TASKS)
    scale(graph, host, factor=0.0, gaps=True)
    return [f"no-host-overhead: {host.size} host tasks and the CPU time between them set to zero"]


register(Optimization(
    "faster-host", "a faster host (CPU, Python, framework)",
    "every host call and CPU op, and the CPU time between them, ÷factor; GPU work and waits unchanged",
    _faster_host, {"factor": Parameter(float, 2.0, "host speed-up", **FACTOR_RANGE)},
))
register(Optimization(
    "no-host-overhead", "an infinitely fast host: is the step launch-bound?",
    "every host call and CPU op, and the CPU time between them, take no time; GPU work and waits unchanged",
    _no_host_overhead,
))


def _faster_gpu(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    if factor <= 0:
        raise InputError(f"--opt faster-gpu:factor={factor:g}: the factor must be positive")
    chosen = str(params["kernels"])
    if chosen in CLASSES:  # a kernel class of mapping/classes.py, e.g. kernels=gemm
        work = select(graph, kind=GPU_WORK)
        work = work[kernel_classes(graph, work) == CLASSES.index(chosen)]
        what = f"of class {chosen}"
    else:
        work = select(graph, kind=GPU_WORK, name=chosen or None)
        what = f"matching {chosen!r}" if chosen else "(all)"
    scale(graph, work, factor=1 / factor)
    return [f"faster-gpu: {work.size} GPU tasks {what} ÷{factor:g}"]


register(Optimization(
    "faster-gpu", "a faster (factor > 1) or slower (factor < 1) GPU, or faster matching kernels",
    "GPU kernels, copies and memsets (or only those whose name matches `kernels`) ÷factor; host unchanged",
    _faster_gpu,
    {"factor": Parameter(float, 2.0, "GPU speed-up", **FACTOR_RANGE),
     "kernels": Parameter(str, "", "a kernel class (gemm, convolution, attention, ...) or a regular expression over kernel names")},
))


# --------------------------------------------------------------------------- memory-only what-ifs


def _memory_only(name: str) -> Apply:
    def apply(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
        return [f"{name}: time unchanged — this version models its memory only (daydream whatif --memory)"]

    return apply


register(Optimization(
    "optimizer", "another optimizer (SGD, SGD with momentum, Adam, AdamW, Adagrad, RMSprop)",
    "unchanged in this version: another optimizer's step time is not modelled (its memory is)",
    _memory_only("optimizer"),
    {"name": Parameter(str, "adam", "sgd, sgd-momentum, adam, adamw, adagrad or rmsprop")},
))
