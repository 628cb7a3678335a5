"""Samples per second and how busy the machine was, per iteration (the TBD paper's throughput and utilization).

Throughput needs the samples per iteration: `daydream trace` records the batch size (the
leading dimension of the model's first input, or `trace --batch-size`) in the trace's
`daydream.batch_size`; other traces have none, and their throughput is None.

Utilization of one iteration `[start, end)`:

* `gpu_busy_share`: the union of GPU activity (kernels, copies, sets, collectives) over the span;
* `tensor_core_share`: of the kernel time, the share in GEMM, convolution and attention kernels
  whose names say a reduced or tf32 precision (mapping/classes.py) — the work tensor cores run;
* `host_busy_share`: per host thread, the union of its CPU ops and runtime calls over the span.

* `gemm_flop_per_s`: the FLOPs of the matrix multiplies (aten::mm, addmm, bmm, baddbmm) that start in the
  span, from their recorded input shapes (`record_shapes`, as `daydream trace` records), over the span;
  None when the trace has no shapes. Convolutions and attention kernels are not counted yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.intervals import union_ns
from daydream.mapping.classes import CLASSES, PRECISIONS, classes_of, precisions_of
from daydream.trace import GPU_ACTIVITY_KINDS, KERNEL_KINDS, EventKind, Trace, TrackKind

_TENSOR_CORE_CLASSES = [CLASSES.index(c) for c in ("gemm", "convolution", "attention")]
_TENSOR_CORE_PRECISIONS = [PRECISIONS.index(p) for p in ("tf32", "bf16", "fp16", "fp8", "int8")]


def batch_size(trace: Trace) -> int | None:
    """Samples per iteration, as `daydream trace` recorded it; None when the trace does not say."""
    value = trace.meta.collector.get("batch_size") if isinstance(trace.meta.collector, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def samples_per_s(samples: float | None, iteration_ns: float | None) -> float | None:
    return samples * 1e9 / iteration_ns if samples and iteration_ns else None


def utilization(trace: Trace, start: int, end: int) -> dict[str, Any]:
    """GPU busy share, tensor-core share of kernel time and host busy share per thread, over [start, end) ns."""
    span = max(end - start, 1)
    ts, finish = trace.ts_ns, trace.ts_ns + trace.dur_ns
    gpu = trace.indices(*GPU_ACTIVITY_KINDS)
    gpu = gpu[(finish[gpu] > start) & (ts[gpu] < end)]
    kernels = gpu[np.isin(trace.kind[gpu], [int(k) for k in KERNEL_KINDS])]
    kernel_ns = float(trace.dur_ns[kernels].sum())
    if kernel_ns:
        tensor = (np.isin(classes_of(trace.name[kernels], trace.strings), _TENSOR_CORE_CLASSES)
                  & np.isin(precisions_of(trace.name[kernels], trace.strings), _TENSOR_CORE_PRECISIONS))
        tensor_share: float | None = float(trace.dur_ns[kernels[tensor]].sum()) / kernel_ns
    else:
        tensor_share = None
    host = {}
    work = trace.indices(EventKind.CPU_OP, EventKind.RUNTIME, EventKind.DRIVER)
    work = work[(finish[work] > start) & (ts[work] < end)]
    for track in np.unique(trace.track[work]).tolist():
        info = trace.tracks[track]
        if info.kind is not TrackKind.HOST:
            continue
        mine = work[trace.track[work] == track]
        host[f"thread {info.tid}"] = union_ns(ts[mine], finish[mine], start, end) / span
    flops = trace.tables.get("flops")
    gemm_flop_per_s = None
    if flops is not None and flops["event"].size:
        inside = (ts[flops["event"]] >= start) & (ts[flops["event"]] < end)
        gemm_flop_per_s = float(flops["flops"][inside].sum()) * 1e9 / span
    return {
        "gpu_busy_share": union_ns(ts[gpu], finish[gpu], start, end) / span if gpu.size else None,
        "gemm_flop_per_s": gemm_flop_per_s,
        "tensor_core_share": tensor_share,
        "host_busy_share": host,
    }
