"""DDP's bucket copies: each gradient scaled into its bucket as it becomes ready, the buckets copied
back after their all-reduces, both on the rank's own compute.

PyTorch's reducer does both on the thread or stream that runs backward: as a gradient becomes ready
its autograd hook writes it, times 1/world, into its bucket (`mul_out`); once backward has ended and
the buckets' all-reduces are done, `finalize_backward` copies each bucket back into the gradients
(`copy_bucket_to_grad`) before `optimizer.step()`. Each streams the gradient's bytes in and out
once: an op of t = overhead + 2 · bytes / speed.

The speed is the trace's own: its streaming elementwise ops (copy_, mul, add, ...), whose recorded
shapes and types give the bytes they read and wrote (the `elementwise` side table), timed on the CPU
for a CPU trace and by the kernels they launched for a GPU one: the overhead is the median time of
the small ones (under 16 KiB), the speed the median of bytes / (time − overhead) of the large ones
(64 KiB and more). Without such ops a GPU trace takes its device's memory bandwidth and no overhead;
a CPU trace without them gets no copies, and the note says so.
"""

from __future__ import annotations

from daydream.cost.elementwise import CopySpeed, elementwise_speed
from daydream.devices import Device
from daydream.graph import Graph
from daydream.transforms.primitives import splice

__all__ = ["CopySpeed", "copy_back", "copy_speed", "elementwise_speed", "scale_into_buckets"]


def copy_speed(graph: Graph, measured: CopySpeed | None, device: Device | None) -> CopySpeed | None:
    """The speed to copy gradients at: the trace's own, else a GPU's
    memory bandwidth; None when neither is known."""
    if measured is not None:
        return measured
    if graph.has_device_work() and device is not None and device.memory_bandwidth_gbs > 0:
        return CopySpeed(0.0, device.memory_bandwidth_gbs,
                         f"the {device.name}'s memory bandwidth (the trace has no "
                         "elementwise op shapes)")
    return None


def scale_into_buckets(graph: Graph, events: list[tuple[int, int]],
                       speed: CopySpeed) -> list[tuple[int, int]]:
    """After each gradient's ready task, its copy into the bucket on the same thread or stream; the
    events, now ready after their copies."""
    copies = splice(graph, [task for task, _ in events],
                    [speed.time_ns(nbytes) for _, nbytes in events],
                    "ddp: gradient into bucket (mul_out)", after=True)
    return [(int(copy), nbytes) for copy, (_, nbytes) in zip(copies, events)]


def copy_back(graph: Graph, target: int, volume_bytes: int, gradients: int,
              speed: CopySpeed) -> int:
    """Before `target` (the optimizer's first work), the buckets' copy back into `gradients`
    gradients; returns it."""
    [copy] = splice(graph, [target], speed.time_ns(volume_bytes, gradients),
                    "ddp: buckets into gradients (copy_bucket_to_grad)", after=False)
    return int(copy)
