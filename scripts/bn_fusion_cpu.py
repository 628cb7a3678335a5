"""What a real fused BatchNorm + ReLU does on this CPU: eager against torch.compile (inductor fuses the two), training.

    OMP_NUM_THREADS=1 python scripts/bn_fusion_cpu.py [--rounds 5] [--batch 16]

For each BatchNorm input of `examples/cnn.py` (16 channels of 32x32, 32 of 16x16, 64 of 8x8) in both memory layouts,
forward + backward of BatchNorm2d followed by ReLU, eager and compiled in turns (one intra-op thread, warmed up, the
median of each round's median, over `--rounds` rounds); prints one line per shape and the ratio compiled / eager.
This is the truth `bn-restructure` would be held to on a CPU; it needs torch (and a C++ compiler for inductor).
"""

from __future__ import annotations

import argparse
import statistics
import time

SHAPES = ((16, 32, 32), (32, 16, 16), (64, 8, 8))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round and variant")
    options = parser.parse_args()
    try:
        import torch
        from torch import nn
    except ImportError:
        print("bn_fusion_cpu: needs torch (pip install torch==2.13.0)")
        return 2
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, one thread, "
          f"batch {options.batch}, {options.rounds} rounds of {options.steps} steps")
    print("| input | layout | eager fwd+bwd | compiled fwd+bwd | compiled / eager |")
    print("|---|---|---:|---:|---:|")
    for channels, height, width in SHAPES:
        for layout in ("contiguous", "channels_last"):
            x = torch.randn(options.batch, channels, height, width)
            if layout == "channels_last":
                x = x.to(memory_format=torch.channels_last)
            x.requires_grad_()
            eager = nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU())
            compiled = torch.compile(nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU()), dynamic=False)
            times: dict[str, list[float]] = {"eager": [], "compiled": []}
            for model in (eager, compiled):
                for _ in range(3):  # compile and warm up
                    model(x).sum().backward()
            for _ in range(options.rounds):
                for name, model in (("eager", eager), ("compiled", compiled)):
                    steps = []
                    for _ in range(options.steps):
                        start = time.perf_counter()
                        model(x).sum().backward()
                        steps.append(time.perf_counter() - start)
                    times[name].append(statistics.median(steps))
            eager_us, compiled_us = (statistics.median(times[n]) * 1e6 for n in ("eager", "compiled"))
            print(f"| {channels}x{height}x{width} | {layout} | {eager_us:,.0f} µs | {compiled_us:,.0f} µs | "
                  f"{compiled_us / eager_us:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
