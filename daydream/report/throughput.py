"""Samples per second and how busy the machine was, per iteration (the
TBD paper's throughput and utilization).

Throughput needs the samples per iteration: `daydream trace` records the batch size (the
leading dimension of the model's first input, or `trace --batch-size`) in the trace's
`daydream.batch_size`; other traces have none, and their throughput is None.

Utilization of one iteration `[start, end)`:

* `gpu_busy_share`: the union of GPU activity (kernels, copies, sets, collectives) over the span;
* `tensor_core_share`: of the kernel time, the share in GEMM, convolution and attention kernels
  whose names say a reduced or tf32 precision (mapping/classes.py) — the work tensor cores run;
* `host_busy_share`: per host thread, the union of its CPU ops and runtime calls over the span.

* `gemm_flop_per_s`: the FLOPs of the matrix multiplies (aten::mm, addmm, bmm,
  baddbmm) that start in the span, from their recorded input shapes
  (`record_shapes`, as `daydream trace` records), over the span; None when the
  trace has no shapes. Convolutions and attention kernels are not counted yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.intervals import Coverage, Overlaps
from daydream.mapping.classes import CLASSES, PRECISIONS, classes_of, precisions_of
from daydream.trace import GPU_ACTIVITY_KINDS, KERNEL_KINDS, EventKind, Trace, TrackKind
from daydream.trace.model import unsigned

_TENSOR_CORE_CLASSES = [CLASSES.index(c) for c in ("gemm", "convolution", "attention")]
_TENSOR_CORE_PRECISIONS = [PRECISIONS.index(p) for p in ("tf32", "bf16", "fp16", "fp8", "int8")]


def samples_per_s(samples: float | None, iteration_ns: float | None) -> float | None:
    return samples * 1e9 / iteration_ns if samples and iteration_ns else None


class Utilization:
    """The utilization of any window of one trace; the trace's columns are indexed once, so each
    window costs O(log n) per host thread instead of passes over every event (a summary of thousands
    of iterations stays linear in the trace)."""

    def __init__(self, trace: Trace) -> None:
        ts, finish = trace.ts_ns, trace.ts_ns + trace.dur_ns
        gpu = trace.indices(*GPU_ACTIVITY_KINDS)
        self.gpu = Overlaps(ts[gpu], finish[gpu])
        self.gpu_busy = Coverage(ts[gpu], finish[gpu])
        kernels = trace.indices(*KERNEL_KINDS)
        duration = trace.dur_ns[kernels].astype(np.float64)
        tensor = (np.isin(classes_of(trace.name[kernels], trace.strings), _TENSOR_CORE_CLASSES)
                  & np.isin(precisions_of(trace.name[kernels], trace.strings),
                            _TENSOR_CORE_PRECISIONS))
        self.kernel_time = Overlaps(ts[kernels], finish[kernels], duration)
        self.tensor_time = Overlaps(ts[kernels[tensor]], finish[kernels[tensor]], duration[tensor])
        work = trace.indices(EventKind.CPU_OP, EventKind.RUNTIME, EventKind.DRIVER)
        self.threads = []  # (label, overlaps, coverage) per host thread, in track order
        for track in np.unique(trace.track[work]).tolist():
            info = trace.tracks[track]
            if info.kind is TrackKind.HOST:
                mine = work[trace.track[work] == track]
                self.threads.append((f"thread {unsigned(info.tid)}",
                                     Overlaps(ts[mine], finish[mine]),
                                     Coverage(ts[mine], finish[mine])))
        flops = trace.tables.get("flops")
        self.flops = None
        if flops is not None and flops["event"].size:
            order = np.argsort(ts[flops["event"]], kind="stable")
            self.flop_times = ts[flops["event"]][order]
            self.flops = np.r_[0.0, np.cumsum(flops["flops"][order])]

    def window(self, start: int, end: int) -> dict[str, Any]:
        """GPU busy share, GEMM FLOP/s, tensor-core share of kernel time and host busy share per
        thread, over [start, end) ns."""
        span = max(end - start, 1)
        kernel_ns = self.kernel_time.total(start, end)
        gemm_flop_per_s = None
        if self.flops is not None:
            first, stop = np.searchsorted(self.flop_times, [start, end], side="left")
            gemm_flop_per_s = float(self.flops[stop] - self.flops[first]) * 1e9 / span
        return {
            "gpu_busy_share": self.gpu_busy.within(start, end) / span if self.gpu.count(start, end)
            else None, "gemm_flop_per_s": gemm_flop_per_s,
            "tensor_core_share": self.tensor_time.total(start, end) / kernel_ns if kernel_ns
            else None, "host_busy_share": {label: coverage.within(start, end) / span
                                for label, overlaps, coverage in self.threads
                                           if overlaps.count(start, end)},
        }
