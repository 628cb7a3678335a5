"""Chrome-trace (Perfetto / chrome://tracing) export of a simulated timeline.

Events keep the input's categories (`cuda_runtime`, `cpu_op`, `kernel`,
`gpu_memcpy`, `gpu_memset`) and its process/thread ids, so that the recorded
and the simulated trace can be opened side by side; negative thread ids (Kineto
writes a pthread id that overflowed int32) are written as the unsigned id they
stand for. Every process and thread is named (host pid, GPU, stream; the main,
autograd and other threads, and threads a what-if adds such as data-loader workers)
by metadata events. Each event's args carry its layer and phase where known; each
launch is a flow (`ac2g`, as Kineto writes them) from the call to the GPU work it
launched. Iterations appear as `ProfilerStep#N`-style `user_annotation` spans at
their simulated times.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from daydream._files import write_atomically
from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import HOST_WORK, Resource, ResourceKind, Timeline
from daydream.mapping import PHASES
from daydream.trace import Trace
from daydream.trace.model import unsigned

_CATEGORY = {
    TaskKind.HOST_CALL: "cuda_runtime",
    TaskKind.HOST_OP: "cpu_op",
    TaskKind.COMPLETION: "cuda_runtime",
    TaskKind.KERNEL: "kernel",
    TaskKind.MEMCPY: "gpu_memcpy",
    TaskKind.MEMSET: "gpu_memset",
    TaskKind.COLLECTIVE: "kernel",
    TaskKind.MARKER: "user_annotation",
}


def timeline_events(trace: Trace, graph: Graph, timeline: Timeline,
                    iterations: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """Chrome-trace events of `timeline`; `iterations` are (name,
    simulated start, simulated end) in ns."""
    tasks = graph.tasks
    events: list[dict[str, Any]] = []
    completion_of_call = completions_of_calls(graph)
    host_pid, host_tid = _main_thread(trace, graph)
    for task in range(graph.task_count):
        kind = TaskKind(int(tasks["kind"][task]))
        if kind in (TaskKind.COMPLETION, TaskKind.MARKER):
            continue
        pid, tid = _place(trace, graph.resources[int(tasks["resource"][task])], host_pid)
        start = int(timeline.start_ns[task])
        end = int(timeline.end_ns[task])
        if task in completion_of_call:
            # a blocking call lasts until its completion, as in the input
            end = max(end, int(timeline.start_ns[completion_of_call[task]]))
        args: dict[str, Any] = {"daydream task": task}
        row = int(tasks["event"][task])
        if row >= 0 and trace.correlation[row] != -1:
            args["correlation"] = int(trace.correlation[row])
        layer, phase = int(tasks["layer"][task]), int(tasks["phase"][task])
        if 0 <= layer < len(graph.layers):
            args["layer"] = graph.layers[layer]
        if 0 <= phase < len(PHASES):
            args["phase"] = PHASES[phase]
        events.append({"ph": "X", "cat": _CATEGORY[kind], "name": graph.task_name(task), "pid": pid,
                       "tid": tid, "ts": start / 1000.0, "dur": (end - start) / 1000.0,
                       "args": args})
    for name, start, end in iterations:
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": unsigned(host_pid),
                       "tid": unsigned(host_tid), "ts": start / 1000.0,
                       "dur": (end - start) / 1000.0, "args": {}})
    return (_names(trace, graph, (host_pid, host_tid)) + events
            + _launch_flows(trace, graph, timeline, host_pid))


def _launch_flows(trace: Trace, graph: Graph, timeline: Timeline,
                  host_pid: Any) -> list[dict[str, Any]]:
    """A flow from each launch call to the GPU work it launched (Kineto's `ac2g` start and end
    events), so that a viewer draws the arrow."""
    launches = graph.edges_of_kind(DepKind.LAUNCH)
    flows: list[dict[str, Any]] = []
    for number, edge in enumerate(launches.tolist(), start=1):
        for phase, task in (("s", int(graph.edges["src"][edge])),
                            ("f", int(graph.edges["dst"][edge]))):
            pid, tid = _place(trace, graph.resources[int(graph.tasks["resource"][task])], host_pid)
            flow = {"ph": phase, "id": number, "cat": "ac2g", "name": "launch", "pid": pid,
                    "tid": tid, "ts": int(timeline.start_ns[task]) / 1000.0}
            if phase == "f":
                flow["bp"] = "e"
            flows.append(flow)
    return flows


def _place(trace: Trace, resource: Resource, host_pid: Any) -> tuple[Any, Any]:
    """(pid, tid) of a resource: its trace track's, or for one a what-if added (a data-loader
    worker, a communication channel), the training process and the resource's label."""
    if resource.track < 0:
        return unsigned(host_pid), resource.label
    track = trace.tracks[resource.track]
    return unsigned(track.pid), unsigned(track.tid)


def _names(trace: Trace, graph: Graph, main: tuple[Any, Any]) -> list[dict[str, Any]]:
    """process_name / thread_name metadata events for every process and thread that has a task."""
    used = sorted(set(graph.tasks["resource"].tolist()))
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    gpu_names = {g.device: g.name for g in trace.meta.gpus}
    host_pid, host_tid = main
    for index in used:
        resource = graph.resources[index]
        pid, tid = _place(trace, resource, host_pid)
        if resource.track < 0:
            processes.setdefault(pid, f"host (pid {pid})")
            threads[(pid, tid)] = resource.label
        elif resource.kind is ResourceKind.HOST_THREAD:
            processes.setdefault(pid, f"host (pid {pid})")
            is_main = (pid, tid) == (unsigned(host_pid), unsigned(host_tid))
            threads[(pid, tid)] = _thread_name(graph, index, is_main, tid)
        else:
            gpu = gpu_names.get(resource.device)
            processes.setdefault(pid, f"GPU {resource.device}" + (f" ({gpu})" if gpu else ""))
            threads[(pid, tid)] = (f"stream {resource.stream}" if resource.stream >= 0
                                   else resource.label)
    events = [{"ph": "M", "cat": "__metadata", "name": "process_name", "pid": pid, "tid": 0,
               "args": {"name": name}}
              for pid, name in processes.items()]
    events += [{"ph": "M", "cat": "__metadata", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": name}}
               for (pid, tid), name in threads.items()]
    return events


def _thread_name(graph: Graph, resource: int, main: bool, tid: Any) -> str:
    """"main thread", "autograd thread" (most of its work is backward) or "thread", with its id."""
    if main:
        return f"main thread ({tid})"
    phases = graph.tasks["phase"][graph.tasks["resource"] == resource]
    backward = int(np.count_nonzero(phases == PHASES.index("backward")))
    return (f"autograd thread ({tid})" if phases.size and backward * 2 > phases.size
            else f"thread {tid}")


def completions_of_calls(graph: Graph) -> dict[int, int]:
    """Blocking host call task -> its completion task (the moment the
    call returns), for drawing the call that long."""
    kinds = graph.tasks["kind"]
    src, dst = graph.edges["src"], graph.edges["dst"]
    mine = (kinds[src] == TaskKind.HOST_CALL) & (kinds[dst] == TaskKind.COMPLETION)
    return dict(zip(src[mine].tolist(), dst[mine].tolist()))


def _main_thread(trace: Trace, graph: Graph) -> tuple[Any, Any]:
    host = np.isin(graph.tasks["kind"], [int(k) for k in HOST_WORK])
    if not host.any():
        return 0, 0
    resource = graph.resources[int(np.bincount(graph.tasks["resource"][host]).argmax())]
    track = trace.tracks[resource.track]
    return track.pid, track.tid


def write_chrome_trace(path: str | os.PathLike[str], events: list[dict[str, Any]],
                       metadata: dict[str, Any]) -> None:
    """Write a Chrome-trace document atomically (gzip when the name ends in .gz)."""
    target = Path(path)
    document = {**metadata, "traceEvents": events, "displayTimeUnit": "ms"}
    data = json.dumps(document).encode("utf-8")
    if target.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    write_atomically(target, data)


def prediction_runs(
    predictions: list[Any]) -> list[tuple[Trace, Graph, Timeline, list[tuple[str, int, int]]]]:
    """What write_timelines draws of each prediction (simulate.whatif.Prediction): its trace,
    predicted graph and timeline, and its iterations' predicted windows."""
    from daydream.graph.windows import iteration_windows

    runs = []
    for p in predictions:
        if p.graph is None or p.timeline is None:
            raise ValueError("a prediction without its graph and timeline has no timeline to draw")
        windows = iteration_windows(p.graph, p.timeline)
        iterations = [(it["name"], w.start_ns, w.end_ns) for it, w in zip(p.per_iteration, windows)]
        runs.append((p.trace, p.graph, p.timeline, iterations))
    return runs


def write_timelines(pattern: str,
                    runs: list[tuple[Trace, Graph, Timeline, list[tuple[str, int, int]]]],
                    description: str) -> list[str]:
    """One Chrome trace per rank: `pattern` with {rank} replaced; or, for a
    job of several ranks and a name without {rank}, one file holding every
    rank (each rank's processes named "rank R: ..." and numbered apart).

    Each run is (trace, graph, timeline, iterations as (name, start ns,
    end ns)). Returns the paths written.
    """
    if len(runs) > 1 and "{rank}" not in pattern:
        events: list[dict[str, Any]] = []
        for position, (trace, graph, timeline, iterations) in enumerate(runs):
            rank = trace.meta.rank if trace.meta.rank is not None else position
            events += _as_rank(timeline_events(trace, graph, timeline, iterations), rank, position)
        header = {"schemaVersion": 1, "displayTimeUnit": "ms",
                  "daydream": f"{description}, {len(runs)} ranks merged"}
        write_chrome_trace(pattern, events, header)
        return [pattern]
    written = []
    for trace, graph, timeline, iterations in runs:
        metadata: dict[str, Any] = {"schemaVersion": 1, "displayTimeUnit": "ms",
                                    "daydream": description,
                                    "distributedInfo": trace.meta.distributed
                                    or {"rank": trace.meta.rank}}
        if trace.meta.base_time_ns:
            metadata["baseTimeNanoseconds"] = trace.meta.base_time_ns
        events = timeline_events(trace, graph, timeline, iterations)
        path = pattern.replace("{rank}", str(trace.meta.rank))
        write_chrome_trace(path, events, metadata)
        written.append(path)
    return written


#: A merged file numbers each rank's processes from rank position x
#: RANK_PIDS, and its flows from x RANK_FLOWS.
RANK_PIDS, RANK_FLOWS = 1_000, 1_000_000_000


def _as_rank(events: list[dict[str, Any]], rank: int, position: int) -> list[dict[str, Any]]:
    """One rank's events for a merged file: its processes renumbered apart from the other ranks' and
    named after the rank, its flow ids offset so that no two ranks share one."""
    pids: dict[Any, int] = {}
    for event in events:
        event["pid"] = pids.setdefault(event["pid"], position * RANK_PIDS + len(pids))
        if event["ph"] in ("s", "f"):
            event["id"] = position * RANK_FLOWS + int(event["id"])
        if event["ph"] == "M" and event["name"] == "process_name":
            event["args"] = {"name": f"rank {rank}: {event['args']['name']}"}
    return events
