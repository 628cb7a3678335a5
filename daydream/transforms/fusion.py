"""Fewer, larger launches: a fused / multi-tensor optimizer step, CUDA
graphs, fused elementwise kernels."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.cost import Tier
from daydream.cost.heap import heap_note
from daydream.cost.optimizer import (
    FUSED_ON_GPU,
    IMPLEMENTATIONS,
    fused_step_bytes,
    step_key,
    step_ratio,
)
from daydream.errors import InputError
from daydream.graph import Graph, TaskKind
from daydream.graph.model import KERNELS
from daydream.mapping import PHASES
from daydream.mapping.classes import CLASSES
from daydream.trace import runtime_api
from daydream.transforms.kernels import kernel_classes, launchers, low_percentile, matching
from daydream.transforms.primitives import remove, select
from daydream.transforms.registry import Context, Optimization, Parameter, register

MULTI_TENSOR = re.compile(r"multi_tensor|_foreach|fused", re.IGNORECASE)
#: fused-optimizer's default form: torch.optim's fused=True on a GPU trace (AdamW's fused CUDA
#: kernel moves a third of its loop's bytes), foreach=True on a CPU one (what this project's CPU
#: validation runs).
AUTO = "auto"


def _fused_optimizer(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    implementation = str(params["implementation"])
    if implementation not in (AUTO, *IMPLEMENTATIONS):
        raise InputError(f"--opt fused-optimizer:implementation={implementation}: the forms are "
                         f"{' and '.join(IMPLEMENTATIONS)} (torch.optim's keyword set to True), "
                         f"or {AUTO} (fused on a GPU trace, foreach on a CPU one)")
    gpu = graph.has_device_work()
    if implementation == AUTO:
        implementation = "fused" if gpu else "foreach"
    kinds = KERNELS if gpu else (TaskKind.HOST_OP,)
    work = select(graph, kind=kinds)
    work = work[graph.tasks["phase"][work] == PHASES.index("optimizer")]
    work = np.setdiff1d(work, matching(graph, work, MULTI_TENSOR))
    found_in, in_step = "the optimizer's step", work.size > 0
    if not in_step:
        work = _update_loop_tasks(graph, kinds, context.update_loop)
        found_in = ("a hand-written update loop over the parameters (in-place updates after "
                    "backward)")
    if work.size == 0:
        return ["fused-optimizer: no per-parameter optimizer work in the trace (already fused?), "
                "and no hand-written update loop after backward; nothing changed"]
    keep = max(1, int(params["kernels"]))
    measured, why = (_measured_step(context, implementation) if in_step and not gpu
                     else (None, ""))
    if gpu and in_step:
        streamed, why = _fused_kernels(context, implementation, keep)
    else:
        streamed = None
    fixed = low_percentile(graph.tasks["duration_ns"][work])
    if measured is not None:
        gone, kept = _fuse_iterations(graph, work, keep,
                                      lambda mine: _scaled_step(graph, mine, measured[1]))
    else:
        gone, kept = _fuse_iterations(graph, work, keep, lambda mine: min(
            _fixed_cost_step(graph, mine, fixed, keep), streamed.time_ns if streamed else 2**62))
    calls = launchers(graph, gone) if gpu else np.zeros(0, dtype=np.int64)
    calls = np.setdiff1d(calls, launchers(graph, np.setdiff1d(work, gone)))
    remove(graph, np.concatenate([gone, calls]))
    if context.costs is not None:
        # by ratio: the loop's bytes at its time less a percentile's fixed cost per kernel removed
        context.costs.count(Tier.MEASURED if measured is not None
                            else Tier.MODELLED if streamed else Tier.RATIO, kept)
    unit = "kernels" if gpu else "CPU ops"
    heap = [] if gpu else heap_note(context.large_host_blocks, "fused-optimizer")
    became = (f"fused-optimizer: {gone.size + kept} per-parameter {unit} of {found_in} became "
              f"{kept} multi-tensor ones")
    if measured is not None:
        name, ratio, count = measured
        return [f"{became}, timed by stepping torch.optim.{name}({implementation}=True) here "
                f"at the trace's {count} parameters' shapes: it took ×{ratio:.2f} the time of "
                "its loop over the parameters, and so does the step's recorded per-parameter "
                "work with the host time between its ops", *heap]
    timed = (streamed.note + f" (or the loop's time less {fixed} ns each removed, from the "
             "trace's 10th-percentile optimizer kernel, where that is less)" if streamed else
             f" (fixed cost {fixed} ns each removed, from the trace's 10th-percentile optimizer "
             f"{unit[:-1]}){why}")
    return [f"{became}{timed}; {calls.size} launches and the CPU work between them removed", *heap]


def _measured_step(context: Context, implementation: str
                   ) -> tuple[tuple[str, float, int] | None, str]:
    """(optimizer class, the measured ratio of its `implementation` step to its loop, parameters
    stepped), or None and why not (for the note; empty where the measured tier does not apply)."""
    costs = context.costs
    if costs is None or costs.measurer is None:
        return None, ""
    found = context.stepped_optimizer
    if found is None:
        return None, ("; not measured: no torch.optim class named by the trace's steps, or no "
                      "recorded gradient shapes")
    ratio = step_ratio(costs.measurer, found, implementation)
    if ratio is None:
        why = costs.measurer.failed.get(step_key(found, implementation), "it could not run here")
        return None, (f"; not measured: torch.optim.{found.name}({implementation}=True) did not "
                      f"step here ({why})")
    return (found.name, ratio, len(found.parameters)), ""


@dataclass(frozen=True, slots=True)
class _Streamed:
    """A fused step's kernels timed by the bytes they move: their time per iteration, and how."""

    time_ns: int
    note: str


def _fused_kernels(context: Context, implementation: str, kernels: int
                   ) -> tuple[_Streamed | None, str]:
    """On a GPU, the `kernels` kernels of one fused step (`implementation` "fused") timed by the
    bytes they move at the trace's own streaming speed (cost/optimizer.fused_step_bytes), or None
    and why not (for the note; empty where the form is foreach, whose kernels run the loop's
    updates over lists of parameters: the same bytes)."""
    if implementation != "fused":
        return None, ""
    found, costs = context.stepped_optimizer, context.costs
    if found is None:
        return None, ("; the fused step not timed by its bytes: no torch.optim class named by the "
                      "trace's steps, or no recorded gradient shapes")
    if found.name not in FUSED_ON_GPU:
        return None, (f"; torch.optim.{found.name} has no fused step on a GPU "
                      f"({', '.join(FUSED_ON_GPU)} have): timed as its foreach form")
    moved = fused_step_bytes(found)
    speed = costs.elementwise if costs is not None else None
    if moved is None or costs is None or speed is None:
        missing = ("its state tensors per parameter (daydream trace records them)" if moved is None
                   else "the trace's streaming speed (too few large elementwise kernels)")
        return None, f"; the fused step not timed by its bytes: not known, {missing}"
    time_ns = kernels * costs.stream_ns(moved / kernels)
    return _Streamed(time_ns, (
        f", timed by the bytes torch.optim.{found.name}(fused=True) moves: each of "
        f"{len(found.parameters)} parameters' gradient read, it and its {found.state_tensors} "
        f"state tensor(s) read and written, {moved / 2**20:,.1f} MiB per step at the trace's "
        f"own streaming speed ({speed.bytes_per_ns:,.0f} GB/s; {speed.source})")), ""


def _fuse_iterations(graph: Graph, work: np.ndarray, keep_per_iteration: int,
                     fused_ns: Callable[[np.ndarray], int]) -> tuple[np.ndarray, int]:
    """Per iteration, `work`'s first `keep_per_iteration` tasks take `fused_ns(its work in program
    order)` between them; (the rest, to remove; how many were kept)."""
    removed: list[np.ndarray] = []
    kept_total = 0
    for iteration in np.unique(graph.tasks["iteration"][work]).tolist():
        mine = work[graph.tasks["iteration"][work] == iteration]
        mine = mine[np.argsort(graph.tasks["measured_start_ns"][mine], kind="stable")]
        keep = mine[:keep_per_iteration]
        graph.tasks["duration_ns"][keep] = fused_ns(mine) // keep.size
        removed.append(mine[keep.size:])
        kept_total += keep.size
    gone = np.concatenate(removed) if removed else np.zeros(0, dtype=np.int64)
    return gone, kept_total


def _fixed_cost_step(graph: Graph, mine: np.ndarray, fixed: int, keep_per_iteration: int) -> int:
    """The same bytes move through fewer, larger kernels: each removed one takes its fixed cost
    with it."""
    keep = min(keep_per_iteration, mine.size)
    total = int(graph.tasks["duration_ns"][mine].sum())
    return max(total - fixed * (mine.size - keep), fixed * keep)


def _scaled_step(graph: Graph, mine: np.ndarray, ratio: float) -> int:
    """The per-parameter ops `mine` (in program order) and the host time between them, scaled by
    `ratio`; the gaps before all but the first are taken into it."""
    recorded = (int(graph.tasks["duration_ns"][mine].sum())
                + int(graph.tasks["gap_ns"][mine[1:]].sum()))
    graph.tasks["gap_ns"][mine[1:]] = 0
    return int(round(recorded * ratio))


def _update_loop_tasks(graph: Graph, kinds: tuple[TaskKind, ...],
                       rows: np.ndarray | None) -> np.ndarray:
    """The tasks of a hand-written update loop (`rows`: its ops' trace rows): the ops themselves on
    a CPU graph, the kernels they launched on a GPU one (a task's `event` is its trace row; a
    kernel's op is the trace's link)."""
    if rows is None or rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    work = select(graph, kind=kinds)
    events = graph.tasks["event"][work]
    return work[(events >= 0) & np.isin(events, rows)]


register(Optimization(
    "fused-optimizer", "a fused / multi-tensor optimizer step (e.g. Adam(fused=True) or foreach)",
    "per-parameter optimizer kernels (CPU ops on a CPU trace) — of the optimizer's step, or else "
    "of a hand-written update loop (per-parameter in-place updates after backward) — and their "
    "launches replaced by `kernels` multi-tensor ones per iteration, whose time follows the bytes "
    "moved: the removed ones' total minus, for each removed one, the fixed cost of a near-empty "
    "one (10th percentile of the optimizer's kernels in this trace); the CPU work between the "
    "removed launches goes too. The fused form (fused=True) on a GPU trace whose steps name Adam, "
    "AdamW or SGD: its kernels timed by the bytes they move (each gradient read, each parameter "
    "and its state tensors read and written, at the parameters' recorded shapes) at the trace's "
    "own streaming speed, where that is less (the modelled tier). On a CPU trace whose steps name "
    "a torch.optim class, the step is timed instead by stepping that class here in both forms at "
    "the parameters' recorded shapes (the measured tier): the recorded per-parameter work and the "
    "host time between its ops scaled by their ratio",
    _fused_optimizer,
    {"kernels": Parameter(int, 4, "multi-tensor kernels per iteration", 1, 1e6),
     "implementation": Parameter(str, AUTO, "the form: foreach or fused (torch.optim's keyword "
                                 "set to True); auto: fused on a GPU trace, foreach on a CPU one")},
))


#: Calls a captured graph cannot hold: each waits for GPU work (a capture that met one would fail),
#: so they stay where the trace has them.
_SYNCING = (runtime_api.CallRole.DEVICE_SYNC, runtime_api.CallRole.STREAM_SYNC,
            runtime_api.CallRole.EVENT_SYNC, runtime_api.CallRole.BLOCKING_COPY,
            runtime_api.CallRole.GRAPH_LAUNCH)


def _captured_calls(graph: Graph, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of the API calls `calls`, those a graph replay no longer makes (launches, async copies
    and sets, attribute and error queries, event records and waits) and those it still must
    (syncs, blocking copies, graph launches)."""
    names = graph.tasks["name"][calls]
    syncing = np.zeros(calls.size, dtype=bool)
    for name in np.unique(names).tolist():
        if runtime_api.role_of(graph.strings[int(name)]) in _SYNCING:
            syncing[names == name] = True
    return calls[~syncing], calls[syncing]


def _cuda_graphs(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if not graph.has_device_work():
        return ["cuda-graphs: the trace has no GPU work; nothing changed"]
    phases = [p.strip() for p in str(params["phases"]).split("+") if p.strip()]
    calls, syncing = _captured_calls(graph, select(graph, kind=TaskKind.HOST_CALL, phase=phases))
    launches = matching(graph, calls, runtime_api.LAUNCH)
    keep = []
    for iteration in np.unique(graph.tasks["iteration"][launches]).tolist():
        mine = launches[graph.tasks["iteration"][launches] == iteration]
        keep.append(mine[np.argmin(graph.tasks["measured_start_ns"][mine])])
    gone = np.setdiff1d(calls, np.array(keep, dtype=np.int64))
    remove(graph, gone)
    other = gone.size - (launches.size - len(keep))
    notes = [f"cuda-graphs: {launches.size - len(keep)} kernel launches and {other} other API "
             f"calls (async copies and sets, attribute and error queries) in {'+'.join(phases)} "
             "removed with the CPU work before them; one graph launch per iteration kept; GPU "
             "work unchanged"]
    if syncing.size:
        notes.append(f"cuda-graphs: {syncing.size} calls in the captured phases wait for the GPU "
                     "(syncs, blocking copies) and stay, with the CPU work before them: a capture "
                     "cannot hold them, so the step must drop them (e.g. a loss.item() per step) "
                     "before it can be captured")
    return notes


register(Optimization(
    "cuda-graphs", "capture the training step in CUDA graphs",
    "the API calls of the captured phases (kernel launches, async copies and sets, queries) "
    "removed with the CPU work before them (a graph replay runs no Python, no dispatcher and no "
    "runtime calls); calls that wait for the GPU stay (a capture cannot hold them); one launch per "
    "iteration stays as the graph launch; every kernel keeps its time and order",
    _cuda_graphs,
    {"phases": Parameter(str, "forward+backward+optimizer", "captured phases, joined by +")},
))


def _fuse_elementwise(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if not graph.has_device_work():
        return ["fuse-elementwise: the trace has no GPU kernels, and what a compiler does to CPU "
                "ops (torch.compile's C++ kernels) is not modelled: nothing changed, so this "
                "prediction is the baseline, not what compiling would do"]
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
            # Without layer information (-1 on both), consecutive
            # elementwise kernels still form a chain.
            same_layer = (bool(chain) and task >= 0
                          and graph.tasks["layer"][task] == graph.tasks["layer"][chain[0]])
            if task >= 0 and elementwise[task] and (not chain or same_layer):
                chain.append(task)
                continue
            if len(chain) > 1:
                durations = graph.tasks["duration_ns"][chain]
                rest = durations.sum() - durations.max()
                graph.tasks["duration_ns"][chain[0]] = int(durations.max() + (1 - saving) * rest)
                removed.extend(chain[1:])
                chains += 1
            chain = [task] if task >= 0 and elementwise[task] else []
    gone = np.array(removed, dtype=np.int64)
    calls = launchers(graph, gone)
    remove(graph, np.concatenate([gone, calls]))
    return ([f"fuse-elementwise: {chains} chains of elementwise kernels fused ({gone.size} kernels "
             "and launches removed)"])


register(Optimization(
    "fuse-elementwise", "fuse chains of elementwise kernels inside each layer, as a compiler would",
    "consecutive elementwise kernels of one layer (or, in traces without layers, of one stream) "
    "become one kernel lasting as long as the longest plus "
    "(1 - saving) of the others (the intermediate tensors are no longer written and read back); "
    "the other kernels and their launches are removed",
    _fuse_elementwise,
    {"saving": Parameter(float, 0.8, "share of the non-longest kernels' time the fusion saves", 0.0,
                         1.0)},
))
