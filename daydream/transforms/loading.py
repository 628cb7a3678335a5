"""`overlap-data-loading`: a torch DataLoader's batches made by N
worker processes instead of the training thread.

The trace is of a loader without workers (`num_workers=0`): each batch is made inside an
`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` range on the training thread (the
dataset's `__getitem__` per sample, the collate, any pinning). With N workers:

- the training thread no longer makes the batch: the work inside each such range (its ops and the
  host time between them) leaves the thread, which keeps only what it did outside the range;
- each batch is made on a worker thread instead, in the range's recorded time (the
  same code on the same CPU), batch k by worker k mod N, each worker one batch after
  another, in their steady state from the start (a batch every L / N): the workers
  run ahead of the training thread as DataLoader's prefetching lets them, so a step
  waits only when N workers make batches more slowly than the step uses them;
- receiving a batch from a worker costs the training thread host work the trace
  cannot show (the queue, unpickling each tensor's shared-memory handle):
  recorded once per batch and per tensor in host units (daydream/cost/host.py),
  at this trace's host unit, before the first op after the range;
- the workers need CPUs of their own: where the recording says how many the host has and how many
  threads the training process computes with, N workers share what is left (fewer cores than
  workers: each batch takes proportionally longer; none left: the workers share the training
  thread's core, and no gain is predicted).

A loader that already runs workers (`_MultiProcessingDataLoaderIter`) is refused: its ranges on the
training thread are waits for the workers, whose own work the trace does not hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.cost import Tier
from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import HOST_TASKS, Resource, ResourceKind
from daydream.mapping import PHASES
from daydream.trace import EventKind, Trace
from daydream.transforms.registry import Context, Optimization, Parameter, register

#: The range torch.utils.data puts around each batch it hands out (a
#: user annotation; an op in 2021 traces).
LOADER_RANGE = re.compile(r"^enumerate\(DataLoader\)#(_\w+DataLoaderIter)\.__next__$")
SINGLE_PROCESS = "_SingleProcessDataLoaderIter"


@dataclass(slots=True)
class LoaderRanges:
    """The trace's DataLoader `__next__` ranges, in time order: their host track, start, end (ns),
    and the iterator's class per range."""

    track: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    iterators: list[str]
    tensors: int  # tensors per batch (the collate's inputs of one range), 0 where not recorded


def loader_ranges_of(trace: Trace) -> LoaderRanges:
    """Every DataLoader `__next__` range of `trace` (annotations and CPU ops)."""
    rows = trace.indices(EventKind.ANNOTATION, EventKind.CPU_OP)
    names = trace.strings
    matched = {i: found.group(1) for i, name in enumerate(names)
               if (found := LOADER_RANGE.match(name[:200]))}
    rows = rows[np.isin(trace.name[rows], list(matched))] if matched else rows[:0]
    rows = rows[np.argsort(trace.ts_ns[rows], kind="stable")]
    return LoaderRanges(track=trace.track[rows], start_ns=trace.ts_ns[rows],
                        end_ns=trace.end_ns[rows],
                        iterators=[matched[int(i)] for i in trace.name[rows]],
                        tensors=_batch_tensors(trace, rows))


def _batch_tensors(trace: Trace, ranges: np.ndarray) -> int:
    """How many tensors a batch holds: the `aten::stack` calls (default_collate stacks each field
    once) in the first range, 0 where none is recorded."""
    if ranges.size == 0:
        return 0
    stack = trace.string_index("aten::stack")
    if stack < 0:
        return 0
    ops = trace.indices(EventKind.CPU_OP)
    ops = ops[trace.name[ops] == stack]
    first = ranges[0]
    inside = (trace.track[ops] == trace.track[first]) & (trace.ts_ns[ops] >= trace.ts_ns[first]) \
        & (trace.end_ns[ops] <= trace.end_ns[first])
    return int(inside.sum())


def _overlap_data_loading(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    workers = int(params["workers"])
    ranges: LoaderRanges | None = context.loader_ranges
    if ranges is None or ranges.start_ns.size == 0:
        raise InputError("overlap-data-loading: the trace holds no DataLoader batches (no "
                         "`enumerate(DataLoader)#...__next__` range): it models a "
                         "torch.utils.data.DataLoader, and a loop that makes its batches itself "
                         "has none to move — record the script with its DataLoader (num_workers=0)")
    others = sorted({name for name in ranges.iterators if name != SINGLE_PROCESS})
    if others:
        raise InputError("overlap-data-loading: the trace's DataLoader already runs worker "
                         f"processes ({others[0]}): its ranges on the training thread are waits "
                         "for them, not their work — record the script with num_workers=0 to "
                         "predict what N workers give")
    stretch, cores_note = _worker_stretch(workers, context.host)
    if stretch is None:
        return ([f"overlap-data-loading: {cores_note}; the batches stay on the training thread's "
                 "time (no change)"])
    tasks = graph.tasks
    on_host = np.isin(tasks["kind"], [int(k) for k in HOST_TASKS])
    host_work = np.flatnonzero(on_host & np.isin(tasks["kind"],
                                                 [int(TaskKind.HOST_CALL), int(TaskKind.HOST_OP)]))
    threads = _HostThreads(graph, on_host)
    receive_ns, receive_from = _receive_cost(ranges, context)
    batches: list[tuple[int, int, int]] = []  # (receiver task, batch ns, the receiver's iteration)
    emptied = []
    for track, start, end in zip(ranges.track.tolist(), ranges.start_ns.tolist(),
                                 ranges.end_ns.tolist()):
        inside, receiver, previous_end = threads.around(track, start, end)
        if receiver < 0:
            continue  # the trace ends inside this batch: nothing waits for it
        inside = np.intersect1d(inside, host_work)
        emptied.append(inside)
        # The training thread keeps its host time outside the range, and receives the batch.
        outside = (max(0, start - previous_end)
                   + max(0, int(tasks["measured_start_ns"][receiver]) - end))
        held = (int(tasks["gap_ns"][receiver])
                + int(tasks["gap_ns"][inside].sum() + tasks["duration_ns"][inside].sum()))
        tasks["gap_ns"][receiver] = min(held, outside) + receive_ns
        batches.append((receiver, end - start, int(tasks["iteration"][receiver])))
    if not batches:
        raise InputError("overlap-data-loading: every DataLoader batch of the trace is still being "
                         "made when the trace ends: record a few more steps")
    moved = np.unique(np.concatenate(emptied)) if emptied else np.zeros(0, dtype=np.int64)
    tasks["duration_ns"][moved] = 0
    tasks["gap_ns"][moved] = 0
    _add_workers(graph, batches, workers, stretch)
    if context.costs is not None:
        context.costs.count(Tier.MODELLED, len(batches))
    made = float(np.median([b[1] for b in batches]))
    slower = "" if stretch == 1 else f" ×{stretch:.3g}"
    return [f"overlap-data-loading: {len(batches)} DataLoader batches (median {made / 1e6:.3g} ms "
            f"each on the training thread, {moved.size} host tasks) made by {workers} worker "
            "process(es) instead, one after another per worker, a batch every "
            f"{made * stretch / workers / 1e6:.3g} ms at most, each in its recorded time{slower} "
            f"({cores_note}); the training thread waits only where the workers fall behind, and "
            f"receives each batch in {receive_ns / 1e3:.0f} µs ({receive_from}); pinning and the "
            "workers' start-up are not modelled"]


class _HostThreads:
    """The host tasks of each trace track in recorded order, for asking about a range of time on one
    of them without a pass over every task."""

    def __init__(self, graph: Graph, on_host: np.ndarray) -> None:
        tasks = graph.tasks
        track_of = np.array([r.track for r in graph.resources], dtype=np.int64)[tasks["resource"]]
        host = np.flatnonzero(on_host)
        self.tasks = tasks
        self.by_track: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for track in np.unique(track_of[host]).tolist():
            mine = host[track_of[host] == track]
            # by start, then by task id
            ordered = mine[np.lexsort((mine, tasks["measured_start_ns"][mine]))]
            self.by_track[track] = (ordered, tasks["measured_start_ns"][ordered],
                                    np.sort(tasks["measured_end_ns"][mine]))

    def around(self, track: int, start: int, end: int) -> tuple[np.ndarray, int, int]:
        """(the tasks on `track` that begin in [start, end), the first that begins at or after `end`
        (-1: none), the latest end at or before `start` (`start` where none ends before it))."""
        ordered, begins, ends = self.by_track.get(track, (np.zeros(0, dtype=np.int64),) * 3)
        low, high = np.searchsorted(begins, [start, end], side="left")
        receiver = int(ordered[high]) if high < ordered.size else -1
        ended = int(np.searchsorted(ends, start, side="right"))
        return ordered[low:high], receiver, int(ends[ended - 1]) if ended else int(start)


def _receive_cost(ranges: LoaderRanges, context: Context) -> tuple[int, str]:
    """(ns, where from) the training thread spends receiving one batch from a worker."""
    costs = context.costs
    if costs is None:
        return 0, "no host costs: not added"
    tensors = ranges.tensors or 2
    ns = (costs.host.recorded_ns("dataloader.receive.batch")
          + tensors * costs.host.recorded_ns("dataloader.receive.tensor"))
    unit = (f"{costs.host.unit_ns} ns"
            + (" from this trace's own ops" if costs.host.unit_from == "trace" else ", a default"))
    told = (f"{ranges.tensors} tensors per batch" if ranges.tensors
            else "2 tensors per batch assumed (no collate recorded)")
    return (ns, f"recorded in host units (daydream/cost/host.py), {told}, at this host's unit of "
                f"{unit}")


def _worker_stretch(workers: int, host: dict[str, int]) -> tuple[float | None, str]:
    """(how much longer a batch takes on a worker, in words why); None
    where no core is left for the workers."""
    cpus, threads = int(host.get("cpus", 0)), int(host.get("intra_op_threads", 0))
    if cpus <= 0 or threads <= 0:
        return (1.0, "the recording does not say how many CPUs the host has: each worker on a core "
                     "of its own assumed")
    spare = cpus - threads
    if spare <= 0:
        return None, (f"the host's {cpus} CPU(s) all compute for the training process ({threads} "
                      f"intra-op threads), so {workers} worker(s) would share its cores")
    if spare >= workers:
        return (1.0, f"{workers} of the host's {spare} spare CPU(s) ({cpus} less {threads} "
                     "intra-op threads)")
    return (workers / spare, f"{workers} workers share the host's {spare} spare CPU(s) ({cpus} "
                             f"less {threads} intra-op threads)")


def _add_workers(graph: Graph, batches: list[tuple[int, int, int]], workers: int,
                 stretch: float) -> None:
    """One host thread per worker; batch k a task on worker k mod N, in
    program order there, that its receiver waits for.

    The workers start with the first batch's iteration, in their steady state: worker w's first
    batch is (w + 1) / N done then, so that batches come every L / N apart as they do once N workers
    have run for a while (all starting together would hand the first N batches at once). The tasks
    belong to no iteration: an iteration is the training thread's, and a warm-up copy of the first
    one (simulate.warmup) takes no batch of the workers'.
    """
    first = len(graph.resources)
    for worker in range(workers):
        graph.resources.append(Resource(ResourceKind.HOST_THREAD, f"data-loader worker {worker}"))
    receivers = np.array([b[0] for b in batches], dtype=np.int64)
    durations = np.array([b[1] for b in batches], dtype=np.float64) * stretch
    head = np.arange(min(workers, receivers.size))
    durations[head] *= (head + 1) / workers
    resource = first + np.arange(receivers.size) % workers
    tasks = graph.tasks
    made = graph.add_tasks(kind=np.full(receivers.size, int(TaskKind.HOST_OP)), resource=resource,
                           duration_ns=np.round(durations).astype(np.int64),
                           name=graph.string_id("DataLoader worker: batch"), iteration=-1, layer=-1,
                           phase=PHASES.index("other"),
                           measured_start_ns=tasks["measured_start_ns"][receivers],
                           measured_end_ns=tasks["measured_start_ns"][receivers])
    for worker in range(head.size):
        chain = made[worker::workers]
        if chain.size > 1:
            graph.add_edges(chain[:-1], chain[1:], DepKind.HOST_ORDER)
    graph.add_edges(made, receivers, DepKind.CROSS_THREAD)
    graph.add_edges(np.full(head.size, _start_of(graph, receivers[0])), made[head],
                    DepKind.CROSS_THREAD, from_start=True)


def _start_of(graph: Graph, receiver: int) -> int:
    """The task the workers start with: the start marker of the first batch's iteration, else the
    first task on the training thread."""
    iteration = int(graph.tasks["iteration"][receiver])
    if 0 <= iteration < len(graph.iteration_markers):
        return int(graph.iteration_markers[iteration][0])
    mine = np.flatnonzero(graph.tasks["resource"] == graph.tasks["resource"][receiver])
    return int(mine[np.argmin(graph.tasks["measured_start_ns"][mine])])


register(Optimization(
    "overlap-data-loading",
    "a torch DataLoader with N worker processes (num_workers=N) instead of none", "each DataLoader "
    "batch's range on the training thread (its ops and the host time between them) moved to one of "
    "N worker threads, batch k on worker k mod N, one after another from the start, each in its "
    "recorded time; the step waits for its batch only where the workers fall behind. Receiving a "
    "batch costs the training thread a recorded host cost per batch and per tensor "
    "(daydream/cost/host.py, host units). Where the recording names the host's CPUs, workers share "
    "the CPUs the training process leaves (none left: no gain). Refused for a trace whose loader "
    "already has workers",
    _overlap_data_loading,
    {"workers": Parameter(int, 2, "DataLoader worker processes (num_workers)", 1, 256)},
))
