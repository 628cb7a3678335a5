"""The roofline kernel model, against hand-computed times on a made-up device row."""

from __future__ import annotations

import math

from daydream.cost.roofline import Roofline, gemm_waves

#: A made-up device: 100 TFLOP/s, 1000 GB/s, 10 SMs.
DEVICE = Roofline(peak_tflops=100.0, bandwidth_gbs=1000.0, sm_count=10, compute_efficiency=0.5, memory_efficiency=0.8,
                  floor_ns=2_000)


def test_a_large_gemm_is_compute_bound_and_fills_its_waves() -> None:
    # 1280 x 1280 x 4096: 10 x 10 tiles of 128 = 100 tiles on 10 SMs, exactly 10 waves.
    m = n = 1280
    k = 4096
    flops = 2.0 * m * n * k
    moved = (m * k + k * n + m * n) * 2.0
    assert gemm_waves(1, m, n, 10) == 1.0
    # 13.4 GFLOP at 50 TFLOP/s (half of the peak): 268,435 ns; the bytes take 7.4 MB / 800 GB/s = 9,420 ns.
    expected = flops / (100e12 * 0.5) * 1e9
    assert DEVICE.kernel_ns(flops, moved) == round(expected)
    assert DEVICE.bound(flops, moved) == "compute"


def test_a_skinny_gemm_is_memory_bound() -> None:
    # 16 x 4096 x 4096: 2 x 16 x 4096 x 4096 = 537 MFLOP (10.7 µs at 50 TFLOP/s); bf16 bytes 33.7 MB / 800 GB/s = 42 µs.
    m, n, k = 16, 4096, 4096
    flops = 2.0 * m * n * k
    moved = (m * k + k * n + m * n) * 2.0
    assert DEVICE.bound(flops, moved) == "memory"
    assert DEVICE.kernel_ns(flops, moved) == round(moved / 800.0)


def test_a_partial_last_wave_costs_a_whole_wave() -> None:
    # 11 tiles on 10 SMs: two waves of 10, so the GEMM runs as if it had 20 tiles: 20 / 11 of its FLOPs' time.
    assert math.isclose(gemm_waves(1, 128 * 11, 128, 10), 20 / 11)
    # One tile on 10 SMs keeps 9 idle: ten times the time of its FLOPs at the whole device's peak.
    assert gemm_waves(1, 100, 100, 10) == 10.0
    # Unknown SM count: no quantization.
    assert gemm_waves(1, 100, 100, None) == 1.0


def test_no_kernel_is_shorter_than_the_floor() -> None:
    assert DEVICE.kernel_ns(1e3, 1e3) == 2_000
    assert DEVICE.bound(1e3, 1e3) == "floor"
