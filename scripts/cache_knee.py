#!/usr/bin/env python3
"""Where this CPU's cache stops holding a training step's data, for one thread: what docs/validation-whatif-cpu.md
reads when a wider model's step runs slower per byte than its narrow baseline did.

    OMP_NUM_THREADS=1 python scripts/cache_knee.py            # prints two tables (a minute or less)

- *A pass over a working set*: `buf.add_(1)` over a buffer of N MiB, passed over again and again: its time per byte,
  the median of ten passes after three. Where the buffer fits the part of the cache this process keeps, a pass runs
  at the cache's speed; past it, at memory's.
- *Adam's `lerp_` after the step's other data*: `exp_avg.lerp_(grad, 0.1)` on [W, W] fp32 tensors, each run after N
  MiB of other memory were written (N = 0: its operands as the previous run left them), the median of fifteen runs:
  what the optimizer's update of one parameter takes when the rest of the step has run since its previous one.

Timings move between runs on a shared machine; the knee (the working set where the per-byte time steps up) is what to
read, not the third digit.
"""

from __future__ import annotations

import argparse
import statistics
import time

#: working sets of the first table, MiB
PASSES = (8, 16, 32, 48, 64, 96, 128, 256)
#: memory written before each run of the second table, MiB
WRITTEN = (0, 16, 32, 64, 96, 128, 512)
#: the parameters' sides of the second table
SIDES = (512, 1024)


def pass_ps_per_byte(torch, mib: int) -> float:  # type: ignore[no-untyped-def]
    buffer = torch.zeros(mib << 18)
    for _ in range(3):
        buffer.add_(1.0)
    times = []
    for _ in range(10):
        start = time.perf_counter_ns()
        buffer.add_(1.0)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / (mib << 20) * 1e3


def lerp_us(torch, side: int, written_mib: int) -> float:  # type: ignore[no-untyped-def]
    average, grad = torch.randn(side, side), torch.randn(side, side)
    other = torch.empty(written_mib << 18) if written_mib else None
    for _ in range(3):
        average.lerp_(grad, 0.1)
    times = []
    for _ in range(15):
        if other is not None:
            other.zero_()
        start = time.perf_counter_ns()
        average.lerp_(grad, 0.1)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    import torch

    torch.set_num_threads(1)
    print("| working set | a pass, ps per byte |\n|---:|---:|")
    for mib in PASSES:
        print(f"| {mib} MiB | {pass_ps_per_byte(torch, mib):.1f} |")
    print()
    print("| written before | " + " | ".join(f"`lerp_` [{s}, {s}], µs" for s in SIDES) + " |")
    print("|---:|" + "---:|" * len(SIDES))
    for mib in WRITTEN:
        print(f"| {mib} MiB | " + " | ".join(f"{lerp_us(torch, s, mib):.0f}" for s in SIDES) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
