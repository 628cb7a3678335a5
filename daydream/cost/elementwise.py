"""The speed of the trace's own streaming elementwise ops (copy_, mul, add, ...): what a copy or
cast a what-if adds costs on this trace's device.

Their recorded shapes and types give the bytes each read and wrote (the `elementwise` side table);
they are timed on the CPU for a CPU trace and by the kernels they launched for a GPU one: the
overhead is the median time of the small ones (under 16 KiB), the speed the median of bytes / (time
- overhead) of the large ones (64 KiB and more).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.mapping.linking import link
from daydream.trace import EventKind, Trace

#: Ops below this many bytes give the per-op overhead; ops of LARGE_BYTES and more give the speed.
SMALL_BYTES = 16 * 2**10
LARGE_BYTES = 64 * 2**10
#: Large ops needed for a speed.
MIN_LARGE = 3


@dataclass(slots=True, frozen=True)
class CopySpeed:
    """How long a streaming elementwise op takes: `overhead_ns` + bytes
    moved / `bytes_per_ns`, and where it came from."""

    overhead_ns: float
    bytes_per_ns: float
    source: str

    def time_ns(self, gradient_bytes: float, ops: int = 1) -> int:
        """One pass over `gradient_bytes` (read once, written once) in `ops` ops."""
        return int(round(ops * self.overhead_ns + 2.0 * gradient_bytes / self.bytes_per_ns))


def elementwise_speed(trace: Trace, on_gpu: bool) -> CopySpeed | None:
    """The trace's streaming elementwise ops: their median overhead and
    speed (CPU ops' own time for a CPU graph, the time of the kernels
    they launched for a GPU graph); None without enough large ones."""
    table = trace.tables.get("elementwise")
    if table is None or table["event"].size == 0:
        return None
    ops, moved = table["event"], table["bytes"]
    if on_gpu:
        kernels = trace.indices(EventKind.KERNEL)
        owner = link(trace).op[kernels]
        entry = np.full(len(trace), -1, dtype=np.int64)
        entry[ops] = np.arange(ops.size)
        known = owner >= 0
        row = np.where(known, entry[np.maximum(owner, 0)], -1)
        durations = np.zeros(ops.size)
        np.add.at(durations, row[row >= 0], trace.dur_ns[kernels[row >= 0]])
    else:
        durations = trace.dur_ns[ops].astype(np.float64)
    timed = durations > 0
    moved, durations = moved[timed], durations[timed]
    small = moved < SMALL_BYTES
    overhead = float(np.median(durations[small])) if small.any() else 0.0
    large = (moved >= LARGE_BYTES) & (durations > overhead)
    if np.count_nonzero(large) < MIN_LARGE:
        return None
    speed = float(np.median(moved[large] / (durations[large] - overhead)))
    where = "their kernels" if on_gpu else "the CPU"
    return CopySpeed(overhead, speed, f"{np.count_nonzero(large)} large and "
                                      f"{np.count_nonzero(small)} small elementwise ops of the "
                                      f"trace on {where}")
