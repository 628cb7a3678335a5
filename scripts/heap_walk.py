#!/usr/bin/env python3
"""The recording's walk through the C heap on a CPU trace, and what writing memory left idle costs on this machine.

    python scripts/heap_walk.py TRACE [TRACE ...]       # per trace: pages per iteration, the cost a page, the ops read
    OMP_NUM_THREADS=1 python scripts/heap_walk.py --idle  # this machine: a copy into memory written N seconds before

With traces: for each, the pages its recorded iterations (after the first) allocated on memory the recording had not
allocated before (daydream.cost.heap.heap_walk, from the addresses of the trace's `[memory]` events), and the op
signatures the cost of such a page is read from, each with its median time on such pages and on memory allocated
before (`page_cost_ns`).

With --idle: glibc is told to keep freed memory, 1 GiB of heap is written and freed, and after a wait of 0, 0.3, 1 and
5 s a [8, 32, 64, 64] fp32 tensor (4 MiB) is copied 60 times into that memory (each copy kept, so each lands on memory
not written since the wait began); printed: the median copy, µs, for each wait, for 5 s with the memory written again
right before the copies, and for the same copy into memory it has just used (the 1 GiB freed, one copy repeated).
Each case runs in a fresh process, cases in turns, `--rounds` times; the median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: One --idle case in a fresh process: argv: wait (s), "again" (write the memory again after the wait) or "reused"
IDLE = """
import ctypes, json, statistics, sys, time
import torch
sys.path.insert(0, sys.argv[3])
from daydream.trace.collect.heap import BLOCK, keep_freed
torch.set_num_threads(1)
libc = keep_freed()
wait, how = float(sys.argv[1]), sys.argv[2]
source = torch.randn(8, 32, 64, 64)
if how == "reused":
    kept = source.clone()
    times = []
    for _ in range(60):
        start = time.perf_counter_ns(); copy = source.clone(); times.append(time.perf_counter_ns() - start)
        del copy
    print(json.dumps(statistics.median(times) / 1e3)); sys.exit(0)
blocks = []
for _ in range(2**30 // BLOCK):
    block = libc.malloc(BLOCK - 64)
    ctypes.memset(block, 0, BLOCK - 64)
    blocks.append(block)
time.sleep(wait)
if how == "again":
    for block in blocks:
        ctypes.memset(block, 1, BLOCK - 64)
for block in reversed(blocks):
    libc.free(block)
kept, times = [], []
for _ in range(60):
    start = time.perf_counter_ns(); kept.append(source.clone()); times.append(time.perf_counter_ns() - start)
print(json.dumps(statistics.median(times) / 1e3))
"""

#: (label, wait s, how)
CASES = [("memory just used (one copy repeated)", 0.0, "reused"), ("written 0 s before", 0.0, "once"),
         ("written 0.3 s before", 0.3, "once"), ("written 1 s before", 1.0, "once"),
         ("written 5 s before", 5.0, "once"), ("written 5 s before, again right before", 5.0, "again")]


def idle(rounds: int) -> str:
    found: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
    for _ in range(rounds):
        for label, wait, how in CASES:
            done = subprocess.run([sys.executable, "-c", IDLE, str(wait), how, str(REPO)], capture_output=True,
                                  text=True, check=True)
            found[label].append(float(json.loads(done.stdout.strip().splitlines()[-1])))
    lines = ["| a 4 MiB copy into memory | median µs |", "|---|---:|"]
    lines += [f"| {label} | {statistics.median(times):,.0f} |" for label, times in found.items()]
    return "\n".join(lines)


def walk_of(path: Path) -> str:
    import numpy as np

    from daydream.cost.heap import calibration_groups, heap_walk
    from daydream.mapping import find_iterations
    from daydream.trace import read_job

    trace = read_job(path).traces[0]
    iterations = find_iterations(trace)
    walk = heap_walk(trace, iterations)
    if walk is None:
        return f"{path}: no CPU memory events (record with profile_memory)"
    lines = [f"{path}: {walk.per_iteration:,.0f} pages per iteration after the first on memory the recording had "
             f"not allocated before; {walk.page_ns:,.0f} ns a page"]
    groups = calibration_groups(trace, walk.pages, min(i.end_ns for i in iterations))
    for (name, dims, _), (without, walked) in sorted(groups.items(), key=lambda kv: -sum(p for p, _ in kv[1][1])):
        lines.append(f"  {trace.strings[name]} {trace.strings[dims]}: {len(walked)} on "
                     f"{np.median([p for p, _ in walked]):,.0f} new pages, median "
                     f"{np.median([d for _, d in walked]) / 1e3:,.0f} µs; {len(without)} without, "
                     f"median {np.median(without) / 1e3:,.0f} µs")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--idle", action="store_true", help="time copies into memory left idle on this machine")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    if not options.traces and not options.idle:
        parser.error("name a trace, or --idle")
    for path in options.traces:
        if not path.exists():
            parser.error(f"{path}: no such file")
        print(walk_of(path))
    if options.idle:
        print(idle(options.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
