#!/usr/bin/env python3
"""How much of a CPU step is the allocator handing out fresh pages: the cnn example's forward and the rest of its
step, plain and with every block checkpointed, under the C library's default allocator and with it told to keep
freed memory (MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set high). No profiler; one intra-op thread.

    python scripts/allocator_effect.py            # 3 rounds, each configuration in its own process per round
    python scripts/allocator_effect.py --op       # one convolution alone, as the measured tier times it, at two batches

Each (allocator, checkpoint) pair runs in a fresh process per round, rounds interleaved; each process runs 30 steps
and reports the median of the last 25. Printed: the medians over the rounds, ms, and the whole step's fastest and
slowest process (under the default allocator the same script's step moves between processes with what the heap did
early on).

With --op: a 3x3 convolution of 32 channels on 32x32 images at batch 8 and 16, alone in a fresh process per allocator
and round (3 warm-up runs, the median of 11), under the default allocator and with it told to keep freed memory: how
far the time of one op run alone, as the measured tier runs it, depends on the state of the C library's heap.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_STEPS = """
import json, statistics, sys, time
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
sys.path.insert(0, sys.argv[1])
import cnn
torch.set_num_threads(1)
torch.manual_seed(0)
checkpointed = sys.argv[2] == "1"
model = cnn.SmallCNN()
x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
forward, rest = [], []
for _ in range(30):
    start = time.perf_counter()
    h = x
    for block in model.blocks:
        h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
    out = model.classifier(model.flatten(h))
    middle = time.perf_counter()
    F.cross_entropy(out, y).backward()
    optimizer.step()
    optimizer.zero_grad()
    forward.append(middle - start)
    rest.append(time.perf_counter() - middle)
print(json.dumps({"forward": statistics.median(forward[5:]), "rest": statistics.median(rest[5:])}))
"""

KEEP_FREED = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}

_OP = """
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
weight, bias = torch.randn(32, 32, 3, 3), torch.randn(32)
found = {}
for batch in (8, 16):
    x = torch.randn(batch, 32, 32, 32)
    for _ in range(3):
        torch.conv2d(x, weight, bias, padding=1)
    times = []
    for _ in range(11):
        start = time.perf_counter_ns()
        torch.conv2d(x, weight, bias, padding=1)
        times.append(time.perf_counter_ns() - start)
    found[batch] = statistics.median(times) / 1e9
print(json.dumps(found))
"""


def one_op(rounds: int) -> None:
    """The --op table: the convolution alone under each allocator, medians over the rounds."""
    allocators = {"default": {}, "keeps freed memory": KEEP_FREED}
    found: dict[str, list[dict[str, float]]] = {a: [] for a in allocators}
    for _ in range(rounds):
        for allocator, extra in allocators.items():
            env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
            done = subprocess.run([sys.executable, "-c", _OP], capture_output=True, text=True, env=env, check=True)
            found[allocator].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| allocator | batch 8 | batch 16 | ratio |")
    print("|---|---:|---:|---:|")
    for allocator, runs in found.items():
        small, large = (statistics.median(r[str(b)] for r in runs) * 1e3 for b in (8, 16))
        print(f"| {allocator} | {small:.2f} ms | {large:.2f} ms | {large / small:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--op", action="store_true", help="one convolution alone instead of the cnn's step")
    options = parser.parse_args()
    if options.op:
        one_op(options.rounds)
        return 0
    configurations = [(allocator, checkpointed) for allocator in ("default", "keeps freed memory")
                      for checkpointed in (False, True)]
    found: dict[tuple[str, bool], list[dict[str, float]]] = {c: [] for c in configurations}
    for _ in range(options.rounds):
        for allocator, checkpointed in configurations:
            env = {**os.environ, "OMP_NUM_THREADS": "1", **(KEEP_FREED if allocator != "default" else {})}
            done = subprocess.run([sys.executable, "-c", _STEPS, str(REPO / "examples"), str(int(checkpointed))],
                                  capture_output=True, text=True, env=env, check=True)
            found[(allocator, checkpointed)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| allocator | blocks | forward | rest of the step | step, fastest and slowest process |")
    print("|---|---|---:|---:|---:|")
    for (allocator, checkpointed), runs in found.items():
        forward = statistics.median(r["forward"] for r in runs) * 1e3
        rest = statistics.median(r["rest"] for r in runs) * 1e3
        steps = [(r["forward"] + r["rest"]) * 1e3 for r in runs]
        print(f"| {allocator} | {'checkpointed' if checkpointed else 'plain'} | {forward:.1f} ms | {rest:.1f} ms | "
              f"{min(steps):.1f}–{max(steps):.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
