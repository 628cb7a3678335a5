"""Benchmark at scale: synthetic traces of millions of events, whole `daydream` commands, time and peak memory.

    python scripts/bench_scale.py                       # 1M and 3M events
    python scripts/bench_scale.py --events 1e6,3e6,1e7  # and 10M (needs ~10 GB of RAM)

A synthetic trace is a real one tiled: the bundled V100 CNN trace (5 training iterations,
GPU-bound, launch queue full) repeated with its timestamps shifted by its span and its
correlation, external and flow ids offset each time, so that every copy is a new stretch of
iterations with the same dependency structure. Each command (`inspect --json`, `replay
--json`, `whatif --opt amp --json`) runs cold (`--no-cache`) as its own process; the figures
are wall and CPU seconds and the peak RSS of that process, and events per second of CPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "examples" / "traces" / "cnn_v100.json.gz"
COMMANDS = {
    "inspect": ["inspect", "--json", "--no-cache"],
    "replay": ["replay", "--json", "--no-cache"],
    "whatif amp": ["whatif", "--opt", "amp", "--json", "--no-cache"],
}
_ID_ARGS = ("correlation", "External id", "external id")


def tiled(seed: Path, events: int, out: Path) -> int:
    """Write a trace of about `events` events by repeating `seed`; returns the events written."""
    document = json.loads(gzip.decompress(seed.read_bytes()))
    original = document["traceEvents"]
    timed = [e for e in original if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0
    largest_id = max([int(e.get("args", {}).get(k, 0)) for e in original for k in _ID_ARGS
                      if isinstance(e.get("args", {}).get(k), int)] + [int(e["id"]) for e in original if isinstance(e.get("id"), int)])
    copies = max(1, round(events / len(original)))
    step_names = 0
    with gzip.open(out, "wt", compresslevel=1) as handle:
        envelope = {k: v for k, v in document.items() if k != "traceEvents"}
        handle.write(json.dumps(envelope)[:-1] + ', "traceEvents": [')
        first = True
        for copy in range(copies):
            shift, offset = copy * span, copy * (largest_id + 1)
            for event in original:
                moved = dict(event)
                if isinstance(moved.get("ts"), (int, float)):
                    moved["ts"] = moved["ts"] + shift
                if isinstance(moved.get("id"), int):
                    moved["id"] = moved["id"] + offset
                args = moved.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for key in _ID_ARGS:
                        if isinstance(args.get(key), int) and args[key] >= 0:
                            args[key] = args[key] + offset
                    moved["args"] = args
                if isinstance(moved.get("name"), str) and moved["name"].startswith("ProfilerStep#"):
                    moved["name"] = f"ProfilerStep#{step_names}"
                    step_names += 1
                handle.write(("" if first else ",") + json.dumps(moved))
                first = False
        handle.write("]}")
    return copies * len(original)


def measure(arguments: list[str], trace: Path, cache: Path) -> dict[str, float]:
    """Run one daydream command in a child process; wall s, CPU s (user + sys) and peak RSS MB of that child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "daydream", *arguments, str(trace)], capture_output=True, text=True,
                          env={**os.environ, "DAYDREAM_CACHE_DIR": str(cache)}, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"bench_scale: daydream {' '.join(arguments)} failed: {done.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "rss_mb": after.ru_maxrss / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1e6,3e6", help="comma-separated event counts")
    parser.add_argument("--seed", type=Path, default=SEED, help="the trace to tile (default: the bundled V100 CNN trace)")
    options = parser.parse_args()
    print("| events | command | wall s | CPU s | events/s (CPU) | peak RSS MB | MB per M events |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="daydream-scale-") as scratch:
        for wanted in (int(float(v)) for v in options.events.split(",")):
            trace = Path(scratch) / f"tiled-{wanted}.json.gz"
            count = tiled(options.seed, wanted, trace)
            for label, arguments in COMMANDS.items():
                # RUSAGE_CHILDREN's peak is the largest child so far: measure each in a fresh helper process
                helper = [sys.executable, __file__, "--one", json.dumps([arguments, str(trace), scratch])]
                figures = json.loads(subprocess.run(helper, capture_output=True, text=True, check=True).stdout)
                print(f"| {count:,} | {label} | {figures['wall']:.1f} | {figures['cpu']:.1f} | {count / figures['cpu']:,.0f} | "
                      f"{figures['rss_mb']:,.0f} | {figures['rss_mb'] / (count / 1e6):,.0f} |", flush=True)
            trace.unlink()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        arguments, trace, scratch = json.loads(sys.argv[2])
        print(json.dumps(measure(arguments, Path(trace), Path(scratch) / "cache")))
        sys.exit(0)
    sys.exit(main())
