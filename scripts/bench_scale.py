"""Benchmark at scale: synthetic traces of millions of events, whole `daydream` commands, time and peak memory.

    python scripts/bench_scale.py                       # 1M and 3M events
    python scripts/bench_scale.py --events 1e6,3e6,1e7  # and 10M (about 4 GB of RAM)
    python scripts/bench_scale.py --events none --ranks 64 --workers 1,2 [--ray]
                                                        # a 64-rank job, ranks read by 1 and 2 processes (and Ray)

A synthetic trace is a real one tiled: the bundled V100 CNN trace (5 training iterations,
GPU-bound, launch queue full) repeated with its timestamps shifted by its span and its
correlation, external and flow ids offset each time, so that every copy is a new stretch of
iterations with the same dependency structure. Each command (`inspect --json`, `replay
--json`, `whatif --opt amp --json`) runs cold (`--no-cache`) as its own process; the figures
are wall and CPU seconds and the peak RSS of that process, and events per second of CPU.
Numba's compiled code is cached on disk once per machine: a first run of each command on the
seed warms it, so that the figures are of reading, building and simulating, not compiling.

`--ranks N` writes a job of N rank files of about `--rank-events` events each (the seed tiled,
each file with its own distributedInfo rank) and times `replay --json --no-cache` of the whole
job with its ranks read by each `--workers` count of processes (wall seconds and ranks per
second; CPU seconds of all processes), and with `--ray` as Ray tasks on a local Ray.
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


#: What this run printed, per block of docs/performance.md ("events", "ranks"), for --doc.
OUTPUT: dict[str, list[str]] = {"events": [], "ranks": []}
SECTION = ["events"]
DOC = REPO / "docs" / "performance.md"


def emit(text: str = "", flush: bool = True) -> None:
    print(text, flush=flush)
    OUTPUT[SECTION[0]].extend(text.split("\n"))


def write_doc(command: str) -> None:
    """Each block this run printed into its place in docs/performance.md, between its bench_scale markers."""
    text = DOC.read_text()
    for block, lines in OUTPUT.items():
        if not lines:
            continue
        start, end = f"<!-- bench_scale {block}: start -->", f"<!-- bench_scale {block}: end -->"
        if start not in text or end not in text:
            raise SystemExit(f"bench_scale: {DOC} has no {start} ... {end} block to write into")
        body = (f"{start}\n`{command}` ({time.strftime('%Y-%m-%d')}; {os.cpu_count()} CPUs):\n\n"
                + "\n".join(lines).strip() + f"\n{end}")
        text = text[:text.index(start)] + body + text[text.index(end) + len(end):]
    DOC.write_text(text)


def tiled(seed: Path, events: int, out: Path, rank: tuple[int, int] | None = None) -> int:
    """Write a trace of about `events` events by repeating `seed`; returns the events written. `rank`: (rank, world
    size) to write as its distributedInfo."""
    document = json.loads(gzip.decompress(seed.read_bytes()))
    original = document["traceEvents"]
    timed = [e for e in original if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0
    largest_id = max([int(e.get("args", {}).get(k, 0)) for e in original for k in _ID_ARGS
                      if isinstance(e.get("args", {}).get(k), int)] + [int(e["id"]) for e in original if isinstance(e.get("id"), int)])
    copies = max(1, round(events / len(original)) if rank is None else -(-events // len(original)))  # a rank: at least
    step_names = 0
    with gzip.open(out, "wt", compresslevel=1) as handle:
        envelope = {k: v for k, v in document.items() if k != "traceEvents"}
        if rank is not None:
            envelope["distributedInfo"] = {"rank": rank[0], "world_size": rank[1], "backend": "nccl"}
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


def measure(arguments: list[str], trace: Path, cache: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run one daydream command in a child process; wall s, CPU s (user + sys) and peak RSS MB of that child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "daydream", *arguments, str(trace)], capture_output=True, text=True,
                          env={**os.environ, "DAYDREAM_CACHE_DIR": str(cache), **(env or {})}, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"bench_scale: daydream {' '.join(arguments)} failed: {done.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "rss_mb": after.ru_maxrss / 1024}


def measured(arguments: list[str], trace: Path, scratch: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """`measure` in a fresh helper process: RUSAGE_CHILDREN's peak is the largest child so far."""
    helper = [sys.executable, __file__, "--one", json.dumps([arguments, str(trace), scratch, env or {}])]
    return json.loads(subprocess.run(helper, capture_output=True, text=True, check=True).stdout)


def bench_events(counts: list[int], seed: Path, scratch: str) -> None:
    emit("| events | decompressed MB | command | wall s | CPU s | events/s (CPU) | peak RSS MB | MB per M events | "
         "peak / decompressed input |")
    emit("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for wanted in counts:
        trace = Path(scratch) / f"tiled-{wanted}.json.gz"
        count = tiled(seed, wanted, trace)
        text_mb = _decompressed_bytes(trace) / 2**20
        for label, arguments in COMMANDS.items():
            figures = measured(arguments, trace, scratch)
            emit(f"| {count:,} | {text_mb:,.0f} | {label} | {figures['wall']:.1f} | {figures['cpu']:.1f} | "
                 f"{count / figures['cpu']:,.0f} | {figures['rss_mb']:,.0f} | {figures['rss_mb'] / (count / 1e6):,.0f} | "
                 f"{figures['rss_mb'] / text_mb:.2f}x |", flush=True)
        trace.unlink()


def _decompressed_bytes(path: Path) -> int:
    """The size of the JSON text in the gzip file at `path`, read through once."""
    total = 0
    with gzip.open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            total += len(chunk)
    return total


def bench_ranks(ranks: int, rank_events: int, workers: list[int], ray: bool, seed: Path, scratch: str) -> None:
    SECTION[0] = "ranks"
    folder = Path(scratch) / f"job-{ranks}"
    folder.mkdir()
    total = sum(tiled(seed, rank_events, folder / f"rank{r:04d}.json.gz", (r, ranks)) for r in range(ranks))
    emit(f"\n{ranks} ranks, {total:,} events ({total // ranks:,} per rank), `replay --json --no-cache`:\n")
    emit("| ranks read by | wall s | ranks/s | CPU s (daydream and its workers; not Ray's) | peak RSS MB (largest process) |")
    emit("|---|---:|---:|---:|---:|")
    runs = [(f"{n} process{'es' if n > 1 else ''}", ["--workers", str(n)], {}) for n in workers]
    if ray:
        runs.append((f"Ray tasks, local Ray of {max(workers)} CPUs", ["--ray", "local", "--workers", str(max(workers))], {}))
    for label, options, env in runs:
        figures = measured(["replay", "--json", "--no-cache", *options], folder, scratch, env)
        emit(f"| {label} | {figures['wall']:.1f} | {ranks / figures['wall']:.2f} | {figures['cpu']:.1f} | "
              f"{figures['rss_mb']:,.0f} |", flush=True)
    joint_model(folder, ranks)


def joint_model(folder: Path, ranks: int, target: int = 1024) -> None:
    """Per-rank read + build and the joint simulation's cost per task, measured here in one process, and what they
    give for a `target`-rank job on paper."""
    from daydream import ranks as rank_settings
    from daydream._heap import give_back
    from daydream.api import open_job
    from daydream.simulate.replay import replay_traces

    def rss_mb() -> float:
        with open("/proc/self/status") as status:
            return int(status.read().split("VmRSS:")[1].split()[0]) / 1024

    rank_settings.SETTINGS.workers = 1
    give_back()
    before = rss_mb()
    started = time.perf_counter()
    job = open_job(folder, cache=False, build=True)
    per_rank = (time.perf_counter() - started) / ranks
    held = (rss_mb() - before) / ranks
    tasks = sum(graph.task_count for graph in job.graphs or [])
    started = time.perf_counter()
    replay_traces(job.traces, job.graphs)
    joint = time.perf_counter() - started
    per_task = joint / tasks
    emit(f"\nMeasured in one process: read + link + build {per_rank:.2f} s per rank ({tasks // ranks:,} tasks), "
          f"{held:.1f} MB held per rank (trace and graph); the joint replay of all {ranks} ranks {joint:.1f} s, "
          f"{per_task * 1e9:.0f} ns per task.\n")
    emit(f"A {target:,}-rank job of such ranks, on paper (read + build spread over W workers, then the joint replay in "
          f"one process, which holds every rank's trace and graph):\n")
    emit("| workers W | read + build | joint replay | total | memory of the joint process |")
    emit("|---:|---:|---:|---:|---:|")
    for workers in (1, 2, 16, 64, 256):
        spread = target * per_rank / workers
        simulate = target * (tasks // ranks) * per_task
        emit(f"| {workers} | {spread:,.0f} s | {simulate:,.0f} s | {spread + simulate:,.0f} s | "
              f"{target * held / 1024:,.1f} GB |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1e6,3e6", help="comma-separated event counts, or none")
    parser.add_argument("--seed", type=Path, default=SEED, help="the trace to tile (default: the bundled V100 CNN trace)")
    parser.add_argument("--ranks", type=int, default=0, help="also time a job of this many ranks")
    parser.add_argument("--rank-events", type=int, default=100_000, help="events per rank of that job")
    parser.add_argument("--workers", default="1,2", help="comma-separated process counts that read the job's ranks")
    parser.add_argument("--ray", action="store_true", help="also read the job's ranks as Ray tasks on a local Ray")
    parser.add_argument("--doc", action="store_true", help=f"write the tables into {DOC.relative_to(REPO)} (between "
                                                             f"its bench_scale markers)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="daydream-scale-") as scratch:
        for arguments in COMMANDS.values():  # numba's compiled code cached once, as on a machine used before
            measured(arguments, options.seed, scratch)
        if options.events != "none":
            bench_events([int(float(v)) for v in options.events.split(",")], options.seed, scratch)
        if options.ranks:
            bench_ranks(options.ranks, options.rank_events, [int(n) for n in options.workers.split(",")], options.ray,
                        options.seed, scratch)
    if options.doc:
        write_doc("python scripts/bench_scale.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        arguments, trace, scratch, env = json.loads(sys.argv[2])
        print(json.dumps(measure(arguments, Path(trace), Path(scratch) / "cache", env)))
        sys.exit(0)
    sys.exit(main())
