"""A kernel's time from its work: FLOPs and bytes against a device's peaks, at the efficiency the
trace's own kernels achieved, with wave quantization.

    roofline = Roofline(peak_tflops=989.0, bandwidth_gbs=4800.0, sm_count=132,
                        compute_efficiency=0.6, memory_efficiency=0.8, floor_ns=2_000)
    roofline.kernel_ns(flops=2 * 4096**3, moved_bytes=3 * 4096**2 * 2,
                       waves=gemm_waves(1, 4096, 4096, 132))

time = max(floor, flops × waves / (peak × compute efficiency), bytes / (bandwidth × memory
efficiency)): a kernel is compute- or memory-bound by whichever is longer, never faster than the
shortest kernel the trace ran (the fixed launch-and-drain part), and a GEMM whose tiles fill its
last wave of SMs only partly pays for the whole wave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The output tile a GEMM kernel computes per thread block (cuBLAS/CUTLASS's common 128 x 128).
GEMM_TILE = 128


@dataclass(slots=True, frozen=True)
class Roofline:
    peak_tflops: float  # dense peak of the kernel's precision
    bandwidth_gbs: float  # memory bandwidth
    sm_count: int | None = None
    compute_efficiency: float = 1.0  # achieved share of `peak_tflops`
    memory_efficiency: float = 1.0  # achieved share of `bandwidth_gbs`
    floor_ns: int = 0  # no kernel takes less (launch, ramp-up and drain)

    def compute_ns(self, flops: float, waves: float = 1.0) -> float:
        return (flops * waves / (self.peak_tflops * 1e3 * self.compute_efficiency)
                if self.peak_tflops > 0 else 0.0)

    def memory_ns(self, moved_bytes: float) -> float:
        return (moved_bytes / (self.bandwidth_gbs * self.memory_efficiency)
                if self.bandwidth_gbs > 0 else 0.0)

    def kernel_ns(self, flops: float, moved_bytes: float, waves: float = 1.0) -> int:
        """The kernel's time, ns (TFLOP/s × 1e3 is FLOP per ns; GB/s is bytes per ns)."""
        return int(round(max(float(self.floor_ns), self.compute_ns(flops, waves),
                             self.memory_ns(moved_bytes))))

    def bound(self, flops: float, moved_bytes: float, waves: float = 1.0) -> str:
        """Which limit sets the kernel's time: "compute", "memory" or "floor"."""
        compute, memory = self.compute_ns(flops, waves), self.memory_ns(moved_bytes)
        if max(compute, memory) <= self.floor_ns:
            return "floor"
        return "compute" if compute >= memory else "memory"


def gemm_waves(batch: int, m: int, n: int, sm_count: int | None, tile: int = GEMM_TILE) -> float:
    """How much longer than its FLOPs say a GEMM runs for filling its last wave of SMs only partly:
    (whole waves × SMs) / tiles, at least 1; 1 where the SM count is not known."""
    tiles = max(1, batch) * math.ceil(max(1, m) / tile) * math.ceil(max(1, n) / tile)
    if not sm_count:
        return 1.0
    waves = math.ceil(tiles / sm_count)
    return max(1.0, waves * sm_count / tiles)
