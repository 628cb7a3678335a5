"""DDP's bucket copies: each gradient scaled into its bucket as it becomes ready, the buckets copied back after their
all-reduces, both on the rank's own compute.

PyTorch's reducer does both on the thread or stream that runs backward: as a gradient becomes ready its autograd hook
writes it, times 1/world, into its bucket (`mul_out`); once backward has ended and the buckets' all-reduces are done,
`finalize_backward` copies each bucket back into the gradients (`copy_bucket_to_grad`) before `optimizer.step()`.
Each streams the gradient's bytes in and out once: an op of t = overhead + 2 · bytes / speed.

The speed is the trace's own: its streaming elementwise ops (copy_, mul, add, ...), whose recorded shapes and types
give the bytes they read and wrote (the `elementwise` side table), timed on the CPU for a CPU trace and by the
kernels they launched for a GPU one: the overhead is the median time of the small ones (under 16 KiB), the speed the
median of bytes / (time − overhead) of the large ones (64 KiB and more). Without such ops a GPU trace takes its
device's memory bandwidth and no overhead; a CPU trace without them gets no copies, and the note says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.devices import Device
from daydream.graph import Graph
from daydream.mapping.linking import link
from daydream.trace import EventKind, Trace
from daydream.transforms.primitives import splice

#: Ops below this many bytes give the per-op overhead; ops of LARGE_BYTES and more give the speed.
SMALL_BYTES = 16 * 2**10
LARGE_BYTES = 64 * 2**10
#: Large ops needed for a speed.
MIN_LARGE = 3


@dataclass(slots=True, frozen=True)
class CopySpeed:
    """How long a streaming elementwise op takes: `overhead_ns` + bytes moved / `bytes_per_ns`, and where it came from."""

    overhead_ns: float
    bytes_per_ns: float
    source: str

    def time_ns(self, gradient_bytes: float, ops: int = 1) -> int:
        """One pass over `gradient_bytes` (read once, written once) in `ops` ops."""
        return int(round(ops * self.overhead_ns + 2.0 * gradient_bytes / self.bytes_per_ns))


def elementwise_speed(trace: Trace, on_gpu: bool) -> CopySpeed | None:
    """The trace's streaming elementwise ops: their median overhead and speed (CPU ops' own time for a CPU graph, the
    time of the kernels they launched for a GPU graph); None without enough large ones."""
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
    return CopySpeed(overhead, speed, f"{np.count_nonzero(large)} large and {np.count_nonzero(small)} small elementwise "
                                      f"ops of the trace on {where}")


def copy_speed(graph: Graph, measured: CopySpeed | None, device: Device | None) -> CopySpeed | None:
    """The speed to copy gradients at: the trace's own, else a GPU's memory bandwidth; None when neither is known."""
    if measured is not None:
        return measured
    if graph.has_device_work() and device is not None and device.memory_bandwidth_gbs > 0:
        return CopySpeed(0.0, device.memory_bandwidth_gbs, f"the {device.name}'s memory bandwidth (the trace has no "
                                                           "elementwise op shapes)")
    return None


def scale_into_buckets(graph: Graph, events: list[tuple[int, int]], speed: CopySpeed) -> list[tuple[int, int]]:
    """After each gradient's ready task, its copy into the bucket on the same thread or stream; the events, now ready
    after their copies."""
    copies = splice(graph, [task for task, _ in events], [speed.time_ns(nbytes) for _, nbytes in events],
                    "ddp: gradient into bucket (mul_out)", after=True)
    return [(int(copy), nbytes) for copy, (_, nbytes) in zip(copies, events)]


def copy_back(graph: Graph, target: int, volume_bytes: int, gradients: int, speed: CopySpeed) -> int:
    """Before `target` (the optimizer's first work), the buckets' copy back into `gradients` gradients; returns it."""
    [copy] = splice(graph, [target], speed.time_ns(volume_bytes, gradients), "ddp: buckets into gradients "
                    "(copy_bucket_to_grad)", after=False)
    return int(copy)
