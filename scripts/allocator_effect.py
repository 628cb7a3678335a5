#!/usr/bin/env python3
"""How much of a CPU step is the allocator handing out fresh pages: the cnn example's forward and the rest of its
step, plain and with every block checkpointed, under the C library's default allocator and with it told to keep
freed memory (MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set high). No profiler; one intra-op thread.

    python scripts/allocator_effect.py            # 3 rounds, each configuration in its own process per round

Each (allocator, checkpoint) pair runs in a fresh process per round, rounds interleaved; each process runs 30 steps
and reports the median of the last 25. Printed: the medians over the rounds, ms.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    configurations = [(allocator, checkpointed) for allocator in ("default", "keeps freed memory")
                      for checkpointed in (False, True)]
    found: dict[tuple[str, bool], list[dict[str, float]]] = {c: [] for c in configurations}
    for _ in range(options.rounds):
        for allocator, checkpointed in configurations:
            env = {**os.environ, "OMP_NUM_THREADS": "1", **(KEEP_FREED if allocator != "default" else {})}
            done = subprocess.run([sys.executable, "-c", _STEPS, str(REPO / "examples"), str(int(checkpointed))],
                                  capture_output=True, text=True, env=env, check=True)
            found[(allocator, checkpointed)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| allocator | blocks | forward | rest of the step |")
    print("|---|---|---:|---:|")
    for (allocator, checkpointed), runs in found.items():
        forward = statistics.median(r["forward"] for r in runs) * 1e3
        rest = statistics.median(r["rest"] for r in runs) * 1e3
        print(f"| {allocator} | {'checkpointed' if checkpointed else 'plain'} | {forward:.1f} ms | {rest:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
