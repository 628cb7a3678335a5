"""The facts `daydream inspect` reports, as plain JSON-ready data.

`summarize_job` is the stable machine contract (`daydream inspect --json`):
`{"ranks": [{"rank", "gpu", "kernels", "iterations": [{"name", "measured_ns"}]}]}`
is guaranteed; the other keys are added to, never renamed. An iteration's `measured_ns` runs to its
completion (its GPU work done: docs/replay-model.md); `host_ns` is its host's span between markers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream import __version__
from daydream.devices import recorded_device
from daydream.mapping import attribute, find_iterations, link, phase_layer_times
from daydream.mapping.capture import captures
from daydream.mapping.iterations import SOURCE_PROFILER_STEP, completed
from daydream.report.throughput import Utilization, samples_per_s
from daydream.trace import GPU_ACTIVITY_KINDS, KERNEL_KINDS, Job, Trace, TrackKind
from daydream.trace.model import batch_size

SCHEMA_VERSION = 1
TOP_KERNELS = 10


def summarize_job(job: Job, iteration_marker: str | None = None,
                  top: int = TOP_KERNELS) -> dict[str, Any]:
    """JSON-ready summary of every rank of `job`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "daydream_version": __version__,
        "source": job.source,
        "world_size": job.world_size,
        # several captures of one process, not ranks: every capture's
        # file, oldest first (the one read is in ranks)
        "runs": list(job.runs),
        "ranks": [summarize_trace(t, iteration_marker, top) for t in job.traces],
    }


def summarize_trace(trace: Trace, iteration_marker: str | None = None,
                    top: int = TOP_KERNELS) -> dict[str, Any]:
    marked = find_iterations(trace, iteration_marker)
    # Each to its completion (GPU work done), as replay and whatif
    # measure it; the host's own span is host_ns.
    iterations = completed(trace, marked, link(trace).launch)
    busy = Utilization(trace)
    meta = trace.meta
    return {
        "rank": meta.rank,
        "world_size": meta.world_size,
        "source": meta.source,
        "format": meta.format,
        "features": meta.features,
        "runtime": meta.runtime,
        "gpu": gpu_labels(trace),
        "devices": [
            {
                "device": g.device,
                "name": g.name,
                "memory_bytes": g.total_memory_bytes,
                "compute_capability": g.compute_capability,
                "sm_count": g.sm_count,
            }
            for g in meta.gpus
        ],
        "events": {
            "in_file": meta.events_in_file,
            "kept": len(trace),
            "skipped_malformed": meta.skipped_total,
            "skipped_reasons": meta.skipped,
        },
        "kinds": {kind.label: count for kind, count in trace.kind_counts().items()},
        "kernels": trace.count(*KERNEL_KINDS),
        "gpu_activities": trace.count(*GPU_ACTIVITY_KINDS),
        "iteration_source": iterations[0].source if iterations else None,
        "iterations": [
            {"name": it.name, "start_ns": it.start_ns, "measured_ns": it.measured_ns,
             "host_start_ns": host.start_ns, "host_ns": host.measured_ns,
             "source": it.source,
             "utilization": busy.window(it.start_ns, it.start_ns + it.measured_ns)}
            for it, host in zip(iterations, marked)
        ],
        **_throughput(trace, iterations),
        "profiler_steps": [
            {"name": it.name, "measured_ns": it.measured_ns} for it in marked
            if it.source == SOURCE_PROFILER_STEP
        ],
        **_phases_and_layers(trace, marked),
        "streams": _streams(trace),
        "threads": _threads(trace),
        "top_kernels": _top_kernels(trace, top),
        "linking": _linking(trace),
        "capture": _capture(trace),
    }


def _capture(trace: Trace) -> str | None:
    """What the trace's CUDA-graph capture ranges hold, in words; None without any."""
    found = captures(trace)
    if not found.ranges:
        return None
    if found.capture_only:
        return (f"{found.describe()}; the trace records the capture and no execution of it, so "
                "what-ifs refuse it: profile the steps that replay the graph")
    return found.describe()


def _throughput(trace: Trace, iterations: list[Any]) -> dict[str, Any]:
    samples = batch_size(trace)
    mean_ns = sum(it.measured_ns for it in iterations) / len(iterations) if iterations else None
    return {"batch_size": samples, "samples_per_s": samples_per_s(samples, mean_ns)}


def _phases_and_layers(trace: Trace, iterations: list[Any]) -> dict[str, Any]:
    attribution = attribute(trace)
    times = phase_layer_times(trace, attribution, [(it.start_ns, it.end_ns) for it in iterations])
    return {
        "phases": times.phases,
        "layers": [{"name": entry["name"], "type": entry["type"], "forward_ns": entry["forward_ns"],
                    "backward_ns": entry["backward_ns"], "leaf": entry["leaf"]}
                   for entry in times.layers],
        "attribution": {
            "source": attribution.source,
            "basis": times.basis,
            "forward_layer_share": times.forward_layer_share,
            "forward_leaf_share": times.forward_leaf_share,
            "backward_layer_share": times.backward_layer_share,
        },
    }


def _streams(trace: Trace) -> list[dict[str, Any]]:
    rows = trace.indices(*GPU_ACTIVITY_KINDS)
    tracks = trace.track[rows]
    counts = np.bincount(tracks, minlength=len(trace.tracks))
    busy = np.bincount(tracks, weights=trace.dur_ns[rows], minlength=len(trace.tracks))
    streams = []
    for index, track in enumerate(trace.tracks):
        if track.kind is TrackKind.GPU and counts[index]:
            streams.append(
                {"device": track.device, "stream": track.stream, "activities": int(counts[index]),
                 "busy_ns": int(busy[index])}
            )
    return sorted(streams, key=lambda s: (s["device"], s["stream"]))


def _threads(trace: Trace) -> list[dict[str, Any]]:
    counts = np.bincount(trace.track, minlength=len(trace.tracks))
    return [
        {"pid": t.pid, "tid": t.tid, "events": int(counts[i])}
        for i, t in enumerate(trace.tracks)
        if t.kind is TrackKind.HOST and counts[i]
    ]


def _top_kernels(trace: Trace, top: int) -> list[dict[str, Any]]:
    rows = trace.indices(*KERNEL_KINDS)
    if rows.size == 0:
        return []
    names = trace.name[rows]
    total = np.bincount(names, weights=trace.dur_ns[rows])
    count = np.bincount(names)
    all_kernels = float(trace.dur_ns[rows].sum()) or 1.0
    best = np.argsort(-total, kind="stable")[:top]
    return [
        {
            "name": trace.strings[int(i)],
            "count": int(count[i]),
            "total_ns": int(total[i]),
            "share": float(total[i]) / all_kernels,
        }
        for i in best
        if count[i]
    ]


def _linking(trace: Trace) -> dict[str, Any]:
    links = link(trace)
    rows = trace.indices(*GPU_ACTIVITY_KINDS)
    duration = trace.dur_ns[rows]
    to_op = links.op[rows] >= 0
    total_ns = int(duration.sum())
    orphans = links.orphan[rows]
    launched = links.launch[rows] >= 0
    return {
        "convention": links.convention,
        "gpu_activities": int(rows.size),
        "linked_to_launch": int(np.count_nonzero(launched)),
        "linked_to_op": int(np.count_nonzero(to_op)),
        "linked_to_op_time_share": float(duration[to_op].sum()) / total_ns if total_ns else 0.0,
        "orphans": int(np.count_nonzero(orphans)),
        "unlinked": int(np.count_nonzero(~launched & ~orphans)),
    }


def gpu_labels(trace: Trace) -> list[str]:
    """The GPUs' names as recorded; a GPU the trace leaves unnamed (some ROCm traces) as the device
    table tells it from its architecture, memory and CU count, or said to be unnamed."""
    labels = []
    for name in trace.gpu_names:
        if name.strip():
            labels.append(name)
            continue
        row, _ = recorded_device(trace)
        gpu = trace.meta.gpus[0] if trace.meta.gpus else None
        facts = ", ".join(fact for fact in (
            f"{gpu.total_memory_bytes / 2**30:.0f} GiB" if gpu and gpu.total_memory_bytes else "",
            (gpu.arch or "").split(":")[0] if gpu else "", f"{gpu.sm_count} CUs" if gpu
            and gpu.sm_count else "") if fact)
        labels.append(f"{row.name} (unnamed in the trace; told by {facts})" if row else
                      "unnamed in the trace (give --device NAME where a what-if needs it)")
    return labels
