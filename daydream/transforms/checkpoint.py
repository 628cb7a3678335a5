"""Activation checkpointing: the matching layers' forward work again before their backward, with the
wrapper's own host work.

The recomputation ends where torch.utils.checkpoint (use_reentrant=False) ends it by default (its
early stop): once the last tensor the call saved for backward is packed again. Autograd packs an
op's inputs before the op runs and its results after (cost/saved.py), so the work after that moment
of the recorded forward (a last matrix multiply, whose inputs are what it saves; a residual add,
which saves nothing) is not done again; `early_stop=0` recomputes the whole forward
(use_reentrant=True, or `torch.utils.checkpoint.set_checkpoint_early_stop(False)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.cost import Tier
from daydream.cost.heap import heap_note
from daydream.graph import DepKind, Graph
from daydream.graph.model import GPU_WORK, HOST_WORK
from daydream.mapping import PHASES
from daydream.mapping.attribution import choose_layers
from daydream.transforms.primitives import splice, splice_chain, unpin
from daydream.transforms.registry import Context, Optimization, Parameter, register


def _checkpoint(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    # A checkpointed layer's forward includes its children's.
    targets, member, chosen = choose_layers(graph.layers, str(params["layers"]),
                                            context.gradient_bytes, "checkpoint")
    layer_of = member[graph.tasks["layer"]]  # -1 index hits the trailing -1
    forward, backward = PHASES.index("forward"), PHASES.index("backward")
    iterations = graph.tasks["iteration"].copy()
    phases = graph.tasks["phase"].copy()
    work = []  # chosen before any copy is added, so that copies are never copied again
    runs = np.unique(iterations[iterations >= 0]).tolist()
    for iteration in runs:
        for target in targets:
            in_layer = (layer_of == target) & (iterations == iteration)
            work.append((np.flatnonzero(in_layer & (phases == forward)),
                         np.flatnonzero(in_layer & (phases == backward))))
    recomputed, calls, ungraded, skipped_ns = 0, 0, 0, 0
    early_stop = bool(params["early_stop"])
    wrapper = _wrapper_costs(graph, context)
    previous = _previous_host_task(graph)
    saved = _saved_per_task(graph, np.concatenate([f for f, _ in work] or [np.zeros(0, int)]),
                            context)
    for forward_tasks, backward_tasks in work:
        if forward_tasks.size and backward_tasks.size:
            found = _recompute_before(graph, forward_tasks, backward_tasks, wrapper, previous,
                                      saved.tensors, saved.recorded,
                                      saved.last_pack if early_stop else None)
            recomputed += found.added
            calls += found.calls
            ungraded += found.ungraded
            skipped_ns += found.skipped_ns
    if context.costs is not None and wrapper.forward_ns + wrapper.backward_ns:
        # the wrapper's host work, forward of each call and backward of each one recomputed
        context.costs.count(Tier.MODELLED, 2 * calls - ungraded)
    under_no_grad = (f" ({ungraded} of them under no_grad, which autograd does not record: run "
                     "once, not recomputed, no backward part)" if ungraded else "")
    heap = [] if graph.has_device_work() else heap_note(context.large_host_blocks, "checkpoint")
    stop = (f", each call's up to the last tensor it saved for backward (early stop; "
            f"{skipped_ns / max(len(runs), 1) / 1e3:.0f} µs of host work per iteration after it "
            "not done again)" if early_stop and saved.last_pack is not None else "")
    return [f"checkpoint: the forward work of {len(targets)} layer(s) {chosen} recomputed before "
            f"their backward{stop} ({recomputed} tasks per run added); the checkpoint wrapper's "
            f"own host work on each of {calls} checkpointed calls{under_no_grad}: "
            f"{wrapper.forward_ns / 1e3:.1f} µs in forward and "
            f"{wrapper.backward_ns / 1e3:.1f} µs in backward, and for each of the "
            f"{saved.total} tensors their ops save for backward "
            f"{wrapper.forward_tensor_ns / 1e3:.1f} µs and "
            f"{wrapper.backward_tensor_ns / 1e3:.1f} µs ({wrapper.source}){saved.said}", *heap]


@dataclass(slots=True, frozen=True)
class Wrapper:
    """torch.utils.checkpoint's own host work, ns: per checkpointed call, and per tensor the call's
    ops save for backward (a pack hook in forward; an unpack and the recomputation's pack in
    backward), forward and backward apart."""

    forward_ns: int = 0
    backward_ns: int = 0
    forward_tensor_ns: int = 0
    backward_tensor_ns: int = 0
    source: str = ""


@dataclass(slots=True, frozen=True)
class _Saved:
    """Per task of the graph, the tensors its ops save for backward (0 where not counted), and
    whether autograd recorded its ops (None: all taken as recorded)."""

    tensors: np.ndarray | None
    total: int
    said: str
    recorded: np.ndarray | None = None
    last_pack: np.ndarray | None = None  # per task: when its last saving op packed (-1: none)


@dataclass(slots=True, frozen=True)
class _Recomputed:
    """What `_recompute_before` did to one layer's iteration: tasks added, checkpointed calls, and
    those of them autograd did not record (run under no_grad: nothing to recompute)."""

    added: int
    calls: int
    ungraded: int = 0
    skipped_ns: int = 0  # host work of the recorded forward after each call's last pack: not redone


def _wrapper_costs(graph: Graph, context: Context) -> Wrapper:
    """torch.utils.checkpoint's own host work on this trace's host."""
    costs = context.costs
    if costs is None:
        return Wrapper(source="no host costs: not added")
    kind = "cuda" if graph.has_device_work() else "cpu"
    unit = (f"{costs.host.unit_ns} ns"
            + (" from this trace's own ops" if costs.host.unit_from == "trace" else ", a default"))
    forward, backward, forward_tensor, backward_tensor = (
        costs.host.recorded_ns(f"checkpoint.{part}.{kind}")
        for part in ("forward", "backward", "forward_tensor", "backward_tensor"))
    return Wrapper(forward, backward, forward_tensor, backward_tensor,
                   f"recorded in host units (daydream/cost/host.py, {kind}), at this host's unit "
                   f"of {unit}")


def _saved_per_task(graph: Graph, tasks: np.ndarray, context: Context) -> _Saved:
    """The tensors each of `tasks` (host tasks among them) saves for backward, from the trace's ops
    under it (cost/saved.py)."""
    count = context.saved_tensors
    host = tasks[np.isin(graph.tasks["kind"][tasks], [int(k) for k in HOST_WORK])]
    if count is None:
        return _Saved(None, 0, "; the trace is not at hand: no tensors counted")
    if host.size == 0:
        return _Saved(None, 0, "")
    found = count(graph.tasks["event"][host])
    tensors = np.zeros(graph.task_count, dtype=np.int64)
    tensors[host] = found.tensors
    recorded = np.ones(graph.task_count, dtype=bool)
    recorded[host] = found.recorded
    last_pack = np.full(graph.task_count, -1, dtype=np.int64)
    last_pack[host] = found.last_pack_ns
    unknown = int(found.unknown.sum())
    said = (f"; {unknown} of their ops are not in the table of saved tensors (cost/saved.py) and "
            "count as saving none" if unknown else "")
    return _Saved(tensors, int(found.tensors.sum()), said, recorded, last_pack)


def _previous_host_task(graph: Graph) -> np.ndarray:
    """Per task, the host task that ran right before it on its thread (by recorded start; -1 for the
    first one and for tasks that are not host work)."""
    tasks = graph.tasks
    host = np.flatnonzero(np.isin(tasks["kind"], [int(k) for k in HOST_WORK]))
    ordered = host[np.lexsort((tasks["measured_start_ns"][host], tasks["resource"][host]))]
    previous = np.full(graph.task_count, -1, dtype=np.int64)
    same = tasks["resource"][ordered[1:]] == tasks["resource"][ordered[:-1]]
    previous[ordered[1:][same]] = ordered[:-1][same]
    return previous


def _recompute_before(graph: Graph, forward_tasks: np.ndarray, backward_tasks: np.ndarray,
                      wrapper: Wrapper = Wrapper(), previous: np.ndarray | None = None,
                      saved: np.ndarray | None = None,
                      recorded: np.ndarray | None = None,
                      last_pack: np.ndarray | None = None) -> _Recomputed:
    """Copy `forward_tasks` (host and GPU) and splice the copies in before the first backward task;
    the checkpoint wrapper's own host work before each call of the layer's forward and before its
    recomputation: per call, and per tensor the call's tasks save (`saved`: per task of the graph).
    A layer called several times in an iteration (a policy network in each step of a rollout) is
    that many checkpointed calls: each run of its host tasks that some other host work on the
    thread precedes (`previous`: `_previous_host_task`). A call none of whose tasks autograd
    recorded (`recorded`: per task of the graph; a call under no_grad) is not recomputed and pays
    only the wrapper's forward part per call. With `last_pack` (per task of the graph: when its
    last saving op packed, trace ns), each call's recomputation ends at the last pack of its tasks:
    later tasks are not copied, the one it falls in is copied up to it (early stop)."""
    tasks = graph.tasks
    host = forward_tasks[np.isin(tasks["kind"][forward_tasks], [int(k) for k in HOST_WORK])]
    host = host[np.argsort(tasks["measured_start_ns"][host], kind="stable")]
    backward_host = backward_tasks[np.isin(tasks["kind"][backward_tasks],
                                           [int(k) for k in HOST_WORK])]
    if host.size == 0 or backward_host.size == 0:
        return _Recomputed(0, 0)
    starts = (np.flatnonzero(~np.isin(previous[host], host)) if previous is not None
              else np.zeros(1, dtype=np.int64))
    run_of = np.cumsum(np.isin(np.arange(host.size), starts)) - 1
    graded = (np.logical_or.reduceat(recorded[host], starts) if recorded is not None
              else np.ones(starts.size, dtype=bool))
    kept, until = _early_stop(graph, host, starts, run_of, last_pack)
    again_at = np.flatnonzero(graded[run_of] & kept)
    again = host[again_at]  # the calls' tasks that are recomputed, in order
    skipped = host[graded[run_of] & ~kept]
    skipped_ns = int(tasks["duration_ns"][skipped].sum())
    added = 0
    if again.size:
        first_backward = int(backward_host[np.argmin(tasks["measured_start_ns"][backward_host])])
        copies = graph.add_tasks(**{column: values[again] for column, values in tasks.items()})
        skipped_ns += _cut_at(graph, copies, until[again_at])
        unpin(graph, copies)
        graph.tasks["phase"][copies] = PHASES.index("backward")
        splice_chain(graph, copies, first_backward, DepKind.HOST_ORDER, after=False)
        added = int(copies.size + _copy_launched_work(graph, again, copies, backward_tasks))
        # each recomputed call's first copy: where its run starts among the copies
        copied_runs = run_of[again_at]
        recomputed_at = copies[np.flatnonzero(np.r_[True, copied_runs[1:] != copied_runs[:-1]])]
    else:
        recomputed_at = np.zeros(0, dtype=np.int64)
    tensors = (np.add.reduceat(saved[host], starts) if saved is not None
               else np.zeros(starts.size, dtype=np.int64))
    forward_ns = wrapper.forward_ns + tensors * wrapper.forward_tensor_ns
    backward_ns = (wrapper.backward_ns + tensors * wrapper.backward_tensor_ns)[graded]
    if forward_ns.any() or backward_ns.any():
        anchors = np.concatenate([host[starts], recomputed_at])
        splice(graph, anchors, np.concatenate([forward_ns, backward_ns]),
               "checkpoint wrapper (host)", after=False)
    return _Recomputed(added, int(starts.size), int((~graded).sum()), skipped_ns)


def _early_stop(graph: Graph, host: np.ndarray, starts: np.ndarray, run_of: np.ndarray,
                last_pack: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Of a layer's forward `host` tasks (calls starting at `starts`; `run_of`: each task's call),
    those recomputed, and per task when its call's recomputation stops (trace ns; the largest int64
    where it does not: no `last_pack`, or a call whose ops save nothing counted)."""
    kept = np.ones(host.size, dtype=bool)
    until = np.full(host.size, np.iinfo(np.int64).max, dtype=np.int64)
    if last_pack is None:
        return kept, until
    stops = np.maximum.reduceat(last_pack[host], starts)[run_of]
    until = np.where(stops >= 0, stops, until)
    kept = graph.tasks["measured_start_ns"][host] < until
    kept[starts] = True  # each call's recomputation begins, if only to stop at once
    return kept, until


def _cut_at(graph: Graph, copies: np.ndarray, until: np.ndarray) -> int:
    """Each copied task that its call's last pack (`until`) falls in runs up to it; the host time
    taken off, ns."""
    tasks = graph.tasks
    cut = np.clip(until - tasks["measured_start_ns"][copies], 0, tasks["duration_ns"][copies])
    shorter = cut < tasks["duration_ns"][copies]
    taken = int((tasks["duration_ns"][copies][shorter] - cut[shorter]).sum())
    tasks["duration_ns"][copies[shorter]] = cut[shorter]
    return taken


def copy_launched_work(graph: Graph, calls: np.ndarray,
                       call_copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copy the GPU work that `calls` launched, each copy launched by the copy of its call
    (`call_copies`, in the order of `calls`) with the same latency; returns (the originals, in
    recorded start order, their copies)."""
    edges = graph.edges
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    launched = launch[np.isin(edges["src"][launch], calls)]
    if launched.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    kernels, sources, latency = (edges["dst"][launched], edges["src"][launched],
                                 edges["latency_ns"][launched])
    order = np.argsort(graph.tasks["measured_start_ns"][kernels], kind="stable")
    kernels, sources, latency = kernels[order], sources[order], latency[order]
    kernel_copies = graph.add_tasks(**{column: values[kernels]
                                       for column, values in graph.tasks.items()})
    unpin(graph, kernel_copies)
    copy_of_call = dict(zip(calls.tolist(), call_copies.tolist()))
    graph.add_edges([copy_of_call[int(s)] for s in sources], kernel_copies, DepKind.LAUNCH,
                    latency_ns=latency, from_start=True)
    return kernels, kernel_copies


def _copy_launched_work(graph: Graph, calls: np.ndarray, call_copies: np.ndarray,
                        backward_tasks: np.ndarray) -> int:
    """Copy the GPU work the original calls launched, and queue it on the stream right before the
    layer's first backward GPU work."""
    _, kernel_copies = copy_launched_work(graph, calls, call_copies)
    if kernel_copies.size == 0:
        return 0
    gap = graph.calibration.kernel_gap_ns
    backward_gpu = backward_tasks[np.isin(graph.tasks["kind"][backward_tasks],
                                          [int(k) for k in GPU_WORK])]
    if backward_gpu.size:  # in the stream's queue: after what ran before that work, not beside it
        first = int(backward_gpu[np.argmin(graph.tasks["measured_start_ns"][backward_gpu])])
        splice_chain(graph, kernel_copies, first, DepKind.STREAM_ORDER, after=False,
                     latency_ns=gap)
    else:
        graph.add_edges(kernel_copies[:-1], kernel_copies[1:], DepKind.STREAM_ORDER, latency_ns=gap)
    return int(kernel_copies.size)


register(Optimization(
    "checkpoint", "activation checkpointing of the matching layers",
    "for each iteration and each matching layer, its forward work (host tasks and the GPU work "
    "they launch, children included) runs again right before the layer's first backward task; "
    "torch.utils.checkpoint's own host work on each checkpointed call (RNG state, the "
    "recomputation's frames) and on each tensor its ops save for backward (the saved-tensor hooks; "
    "the tensors counted from the trace's ops, cost/saved.py) before the layer's forward and "
    "before its recomputation, in host units recorded from real runs (daydream/cost/host.py) "
    "times this trace's host unit; "
    "the recomputation ends where torch's early stop ends it, once the last tensor the call saved "
    "is packed again (early_stop=0: the whole forward); "
    "everything else unchanged (the memory it saves is reported by the memory what-if)",
    _checkpoint,
    {"layers": Parameter(str, "", "regular expression over layer paths (default: the model's "
                                  "repeated blocks, such as blocks.0, blocks.1, ...)"),
     "early_stop": Parameter(int, 1, "1: each call's recomputation stops once the last tensor it "
                                     "saved is packed again (torch.utils.checkpoint's default, "
                                     "use_reentrant=False); 0: its whole forward again "
                                     "(use_reentrant=True)", low=0, high=1)},
))
