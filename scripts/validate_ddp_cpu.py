#!/usr/bin/env python3
"""Check the `ddp` what-if against real 2-process DistributedDataParallel runs (gloo) on this CPU.

    python scripts/validate_ddp_cpu.py                      # 3 examples, 6 rounds: about 8 minutes on 2 cores
    python scripts/validate_ddp_cpu.py --examples mlp --rounds 3 --out -

Each round (rounds interleave, so that slow phases of a shared machine hit every configuration):

1. gloo's all-reduce between 2 processes on loopback, timed over a few message sizes;
2. then, in an order that rotates from round to round, each traced with `daydream trace` and the same
   script flags (`--threads T`): the example alone (the baseline); two independent copies of it at
   once (the compute of a rank that shares the CPU with another); the real 2-process DDP run (`--ddp`,
   ranks started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, each traced to its own file).

Then the all-reduce times of all rounds (the mean per size per round, as nccl-tests reports a collective's time;
the median of the rounds) are fitted to the cost model of
daydream.interconnect (for 2 ranks, ring and tree alike: t = 2·latency + bytes/bandwidth),
and `daydream whatif BASELINE --opt ddp:world=2,bandwidth=B,latency=L --json` predicts each
round's DDP iteration from that round's baselines. An iteration time is the median over the
recorded iterations (ProfilerStep spans) of one trace; the DDP run's is rank 0's.
Writes docs/validation-ddp-cpu.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _generated import publish  # noqa: E402

from daydream.interconnect import Interconnect, collective_time_ns  # noqa: E402
from daydream.transforms.distributed.contention import cpu_factor  # noqa: E402

WORLD = 2
MESSAGE_BYTES = [2**12, 2**16, 2**18, 2**20, 2**22, 2**24]  # float32 buffers, 4 KiB .. 16 MiB
ALLREDUCE_REPEATS = 30  # timed all-reduces per size per round
WARMUP, ITERATIONS, STEPS = 3, 6, 12  # as scripts/validate.py: DDP rebuilds its buckets in the first iteration
TRACE_TIMEOUT_S = 600
PHASES = ("forward", "backward", "optimizer")
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::mkldnn_convolution", "aten::convolution_backward")


@dataclass(slots=True, frozen=True)
class Link:
    """A fitted link: bus bandwidth (GB/s, 1e9 bytes/s) and per-step latency (µs)."""

    bandwidth_gbs: float
    latency_us: float

    def allreduce_ns(self, message_bytes: int) -> int:
        return self.time_ns("allreduce", message_bytes)

    def time_ns(self, operation: str, message_bytes: int, algorithm: str = "auto") -> int:
        """One `operation` of `message_bytes` among WORLD ranks over this link, ns."""
        return collective_time_ns(operation, message_bytes, WORLD, Interconnect("fitted", self.bandwidth_gbs, self.latency_us),
                                  algorithm)


@dataclass(slots=True)
class RunTimes:
    """One traced run: median iteration (ns) and median wall time per phase span (ns)."""

    iteration_ns: int
    phase_ns: dict[str, int]
    matmul_ns: int  # matrix multiplies and convolutions (the ops in MATMULS) per iteration: how fast compute ran
    reducer_ns: int  # the DDP reducer's CPU ops per iteration (gradients into buckets and back): DDP's own work
    gloo_span_ns: tuple[int, int]  # median and longest span of one gloo all-reduce on gloo's thread ((0, 0) without DDP)


@dataclass(slots=True, frozen=True)
class Prediction:
    """The `ddp` what-if of one trace (ns): its baseline (the replayed trace), the predicted iteration, the
    modelled communication and copies per iteration (backward's growth: all buckets, the gradients' copies into
    them and back; how much of it backward hides is the simulation's business), and the what-if's note."""

    baseline_ns: int
    iteration_ns: int
    allreduce_ns: int
    notes: tuple[str, ...] = ()


NO_PREDICTION = Prediction(0, 0, 0)


@dataclass(slots=True, frozen=True)
class Sensitivity:
    """One baseline predicted over the per-run link fits with the cheapest and the dearest all-reduce of its gradients."""

    round_index: int
    cheap: tuple[Link, int]  # link, predicted iteration ns
    dear: tuple[Link, int]
    medians: tuple[Link, int]  # the link fitted to the benchmark's medians instead of its means


@dataclass(slots=True)
class Round:
    """The measurements of one round of one example, and the predictions made from its baselines."""

    allreduce_s: dict[int, float]  # message bytes -> mean seconds of one gloo all-reduce (what the link is fitted to)
    allreduce_median_s: dict[int, float]  # message bytes -> median seconds of one gloo all-reduce
    busy_s: dict[int, float]  # message bytes -> mean seconds of one with the calling thread busy until it ends
    busy_median_s: dict[int, float]
    solo: RunTimes  # the example alone
    twins: RunTimes  # one of two independent copies running at once (no communication)
    ddp: RunTimes  # rank 0 of the 2-rank DDP run
    ddp_rank1_ns: int
    skew_ns: int  # median over steps of how far apart the two DDP ranks ended backward's compute
    before_forward_ns: tuple[int, int]  # per DDP rank: mean time from DDP's forward to its module's forward
    joined_ns: int  # median time of one gloo all-reduce once both ranks had started it (rank 0's end)
    solo_trace: Path
    twins_trace: Path
    from_solo: Prediction = NO_PREDICTION
    from_twins: Prediction = NO_PREDICTION


# ------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rank_environment(rank: int, port: int, threads: int) -> dict[str, str]:
    """torch.distributed's environment variables for rank `rank` of WORLD on loopback."""
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": str(threads)}


# ------------------------------------------------------------------ (a) gloo all-reduce on loopback


def _allreduce_worker(rank: int, port: int, threads: int, sizes: list[int], results: Any) -> None:
    """One rank of the micro-benchmark; rank 0 puts {bytes: [seconds per all-reduce]} on `results`, twice: with the
    calling thread waiting (as the link is fitted), then with it busy until the all-reduce ends (as a rank's compute
    is while backward's all-reduces run)."""
    os.environ.update(rank_environment(rank, port, threads))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    buffers = {size: torch.ones(size // 4, dtype=torch.float32) for size in sizes}
    timings = []
    for busy in (False, True):
        times: dict[int, list[float]] = {size: [] for size in sizes}
        for repeat in range(3 + ALLREDUCE_REPEATS):  # sizes interleaved: a busy stretch of the machine hits them all
            for size, buffer in buffers.items():
                dist.barrier()  # both ranks start together: the time is the collective's, not the wait for the peer
                start = time.perf_counter()
                work = dist.all_reduce(buffer, async_op=True)
                if busy:
                    while not work.is_completed():  # the caller keeps its CPU, as compute does
                        pass
                work.wait()
                if repeat >= 3:
                    times[size].append(time.perf_counter() - start)
        timings.append(times)
    dist.destroy_process_group()
    if rank == 0:
        results.put(timings)


def benchmark_allreduce(threads: int, sizes: list[int] = MESSAGE_BYTES) -> list[dict[int, float]]:
    """Mean and median seconds of one gloo all-reduce of each size (bytes), between WORLD processes, with the caller
    waiting, then mean and median with the caller busy."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    workers = [context.Process(target=_allreduce_worker, args=(rank, port, threads, sizes, results)) for rank in range(WORLD)]
    for worker in workers:
        worker.start()
    timings = results.get(timeout=TRACE_TIMEOUT_S)
    for worker in workers:
        worker.join(timeout=60)
        if worker.exitcode != 0:
            raise RuntimeError(f"all-reduce benchmark: rank process exited with {worker.exitcode}")
    return [{size: summary(samples) for size, samples in times.items()} for times in timings
            for summary in (statistics.fmean, statistics.median)]


def fit_link(seconds_by_size: dict[int, float]) -> Link:
    """Least squares in relative error of t = 2(n-1)·latency + 2(n-1)/n · bytes/bandwidth (ring all-reduce)."""
    sizes = np.array(sorted(seconds_by_size), dtype=np.float64)
    seconds = np.array([seconds_by_size[int(s)] for s in sizes])
    steps, share = 2 * (WORLD - 1), 2 * (WORLD - 1) / WORLD
    design = np.column_stack([np.full_like(sizes, steps), share * sizes]) / seconds[:, None]
    (latency_s, inverse_bandwidth), *_ = np.linalg.lstsq(design, np.ones_like(sizes), rcond=None)
    if latency_s < 0:  # no fixed cost visible: a pure bandwidth fit
        latency_s = 0.0
        inverse_bandwidth = float(np.sum(design[:, 1]) / np.sum(design[:, 1] ** 2))
    return Link(bandwidth_gbs=1 / inverse_bandwidth / 1e9, latency_us=latency_s * 1e6)


# ------------------------------------------------------------------ (b, d) traced runs


def trace_command(example: str, out: Path, threads: int, *script_args: str) -> list[str]:
    return [sys.executable, "-m", "daydream", "trace", "--backend", "torch", "--warmup", str(WARMUP),
            "--iterations", str(ITERATIONS), "-o", str(out), str(REPO / "examples" / f"{example}.py"), "--",
            "--steps", str(STEPS), "--threads", str(threads), *script_args]


def trace_processes(example: str, outs: list[Path], threads: int, ddp: bool) -> list[Path]:
    """Trace len(outs) processes of `example` started together: DDP ranks when `ddp`, else independent copies."""
    port = free_port()
    environments = [rank_environment(rank, port, threads) if ddp else {**os.environ, "OMP_NUM_THREADS": str(threads)}
                    for rank in range(len(outs))]
    extra = ("--ddp",) if ddp else ()
    # A DDP rank names its own file: `{rank}` in -o (daydream trace appends -rankN to a name without it).
    targets = [out.parent / out.name.replace(f"rank{k}", "rank{rank}") if ddp else out for k, out in enumerate(outs)]
    run_together([(trace_command(example, target, threads, *extra), env) for target, env in zip(targets, environments)],
                 [f"trace {out.name}" for out in outs])
    return outs


def run_together(commands: list[tuple[list[str], dict[str, str]]], labels: list[str]) -> None:
    """Start every (command, environment) at once and wait for all; a failure names its label and stderr's end."""
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for command, env in commands]
    try:
        finished = [process.communicate(timeout=TRACE_TIMEOUT_S) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for label, process, (_, stderr) in zip(labels, processes, finished):
        if process.returncode != 0:
            raise RuntimeError(f"{label} failed: {stderr.strip().splitlines()[-3:]}")


def _spans(raw: dict[str, Any], wanted: Callable[[str], bool]) -> list[tuple[float, float]]:
    """(start, end) in µs of the complete events whose name is `wanted`."""
    return [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in raw["traceEvents"]
            if e.get("ph") == "X" and wanted(str(e.get("name", "")))]


def _median_per_step(steps: list[tuple[float, float]], spans: list[tuple[float, float]]) -> int:
    """Median over steps of the summed duration (µs in, ns out) of `spans` that start in each step."""
    totals = [sum(end - start for start, end in spans if lo <= start < hi) for lo, hi in steps]
    return int(statistics.median(totals) * 1e3) if totals else 0


def _compute_ends(path: Path) -> list[float]:
    """Per recorded step (ProfilerStep span), when its last autograd function ended on the step's thread (µs)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: float(e["ts"]))
    ends = []
    for step in steps:
        start, end = float(step["ts"]), float(step["ts"]) + float(step.get("dur", 0))
        inside = [float(e["ts"]) + float(e.get("dur", 0)) for e in events if e.get("tid") == step.get("tid")
                  and start <= float(e["ts"]) < end and str(e.get("name", "")).startswith("autograd::engine::evaluate_function")]
        ends.append(max(inside) if inside else end)
    return ends


def rank_skew_ns(rank0: Path, rank1: Path) -> int:
    """Median over steps of how far apart the two ranks ended backward's compute (the same clock: one machine): what
    the first to end waits for the other before their last all-reduce can run."""
    gaps = [abs(a - b) for a, b in zip(_compute_ends(rank0), _compute_ends(rank1))]
    return int(statistics.median(gaps) * 1e3) if gaps else 0


def before_forward_ns(path: Path) -> int:
    """Mean over recorded steps of DDP's work before its module's forward (from `DistributedDataParallel.forward`'s start
    to the wrapped module's): with buffers, their broadcast — rank 0 sends it, the others wait for it."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    steps = sorted(_spans(raw, lambda name: name.startswith("ProfilerStep#")))
    wrappers = sorted(start for start, _ in _spans(raw, "DistributedDataParallel.forward".__eq__))
    modules = sorted(start for start, _ in _spans(raw, "daydream.layer::DistributedDataParallel.module".__eq__))
    gaps = [module - wrapper for wrapper, module in zip(wrappers, modules) if steps and steps[0][0] <= wrapper < steps[-1][1]]
    return int(statistics.mean(gaps) * 1e3) if gaps else 0


def joined_allreduce_ns(rank0: Path, rank1: Path) -> int:
    """Median over rank 0's gloo all-reduces of how long each took once both ranks had started it (the k-th on each
    rank's gloo threads: from the later start to rank 0's end): the collective's own time, without the wait for the
    other rank."""
    spans = []
    for path in (rank0, rank1):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            spans.append(sorted(_spans(json.load(handle), "gloo:all_reduce".__eq__)))
    joined = [max(end - max(start, other), 0.0) for (start, end), (other, _) in zip(*spans)]
    return int(statistics.median(joined) * 1e3) if joined else 0


def run_times(path: Path) -> RunTimes:
    """Iteration and phase wall times of one trace (medians over its ProfilerStep spans), plus DDP's own work."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    steps = sorted(_spans(raw, lambda name: name.startswith("ProfilerStep#")))
    phases = {phase: _median_per_step(steps, _spans(raw, f"daydream.phase::{phase}".__eq__)) for phase in PHASES}
    gloo = [end - start for start, end in _spans(raw, "gloo:all_reduce".__eq__) if steps[0][0] <= start < steps[-1][1]]
    return RunTimes(iteration_ns=int(statistics.median(end - start for start, end in steps) * 1e3), phase_ns=phases,
                    matmul_ns=_median_per_step(steps, _spans(raw, MATMULS.__contains__)),
                    reducer_ns=_median_per_step(steps, _spans(raw, lambda name: "distributed" in name and "reducer" in name)),
                    gloo_span_ns=(int(statistics.median(gloo) * 1e3), int(max(gloo) * 1e3)) if gloo else (0, 0))


# ------------------------------------------------------------------ (c) the prediction


def ddp_spec(link: Link) -> str:
    return f"ddp:world={WORLD},bandwidth={link.bandwidth_gbs:.4g},latency={link.latency_us:.4g}"


def predict(baseline: Path, link: Link) -> Prediction:
    """The `ddp` what-if of `baseline` over `link`, from `daydream whatif --json`."""
    command = [sys.executable, "-m", "daydream", "whatif", str(baseline), "--opt", ddp_spec(link), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TRACE_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-3:]}")
    report = json.loads(done.stdout)
    backward = report["ranks"][0]["phases"]["backward"]
    # The inserted all-reduces and copies are backward work: the phase's work grows by exactly their modelled time.
    return Prediction(int(report["iteration_ns"]["simulated"]), int(report["iteration_ns"]["predicted"]),
                      int(backward["predicted_ns"]) - int(backward["baseline_ns"]), tuple(report["ranks"][0]["notes"]))


def predict_rounds(results: dict[str, list[Round]], link: Link) -> None:
    """Fill in every round's predictions, from its 1-process and its 2-process baseline."""
    for rounds in results.values():
        for r in rounds:
            r.from_solo, r.from_twins = predict(r.solo_trace, link), predict(r.twins_trace, link)


def sensitivity(rounds: list[Round], every_round: list[Round], volume_bytes: int, by_medians: Link) -> Sensitivity:
    """The median-baseline round of `rounds`, predicted over the extreme per-run link fits of `every_round` and over
    the link fitted to the benchmark's medians."""
    fits = sorted((fit_link(r.allreduce_s) for r in every_round), key=lambda fit: fit.allreduce_ns(volume_bytes))
    index = sorted(range(len(rounds)), key=lambda i: rounds[i].solo.iteration_ns)[len(rounds) // 2]
    trace = rounds[index].solo_trace
    return Sensitivity(index, (fits[0], predict(trace, fits[0]).iteration_ns), (fits[-1], predict(trace, fits[-1]).iteration_ns),
                       (by_medians, predict(trace, by_medians).iteration_ns))


# ------------------------------------------------------------------ rounds


def run_round(example: str, work: Path, index: int, threads: int) -> Round:
    """The all-reduce benchmark, then the three configurations in an order that rotates with `index`."""
    mean, median, busy, busy_median = benchmark_allreduce(threads)
    name = f"{example}-{index}"
    configurations = {
        "solo": lambda: trace_processes(example, [work / f"{name}-solo.json.gz"], threads, ddp=False),
        "twins": lambda: trace_processes(example, [work / f"{name}-twin{k}.json.gz" for k in range(WORLD)], threads, ddp=False),
        "ddp": lambda: trace_processes(example, [work / f"{name}-ddp-rank{k}.json.gz" for k in range(WORLD)], threads, ddp=True),
    }
    order = list(configurations)[index % 3:] + list(configurations)[:index % 3]
    traces = {key: configurations[key]() for key in order}
    return Round(allreduce_s=mean, allreduce_median_s=median, busy_s=busy, busy_median_s=busy_median,
                 solo=run_times(traces["solo"][0]), twins=run_times(traces["twins"][0]),
                 ddp=run_times(traces["ddp"][0]), ddp_rank1_ns=run_times(traces["ddp"][1]).iteration_ns,
                 skew_ns=rank_skew_ns(*traces["ddp"]), joined_ns=joined_allreduce_ns(*traces["ddp"]),
                 before_forward_ns=(before_forward_ns(traces["ddp"][0]), before_forward_ns(traces["ddp"][1])),
                 solo_trace=traces["solo"][0], twins_trace=traces["twins"][0])


def pooled_allreduce(rounds: list[Round], statistic: str = "mean", busy: bool = False) -> dict[int, float]:
    """Per message size, the median over rounds of each round's mean (or, statistic="median", median) time, with the
    caller waiting (or, busy=True, busy)."""
    def pick(r: Round) -> dict[int, float]:
        if busy:
            return r.busy_s if statistic == "mean" else r.busy_median_s
        return r.allreduce_s if statistic == "mean" else r.allreduce_median_s

    return {size: statistics.median(pick(r)[size] for r in rounds) for size in MESSAGE_BYTES}


def gradient_bytes(trace: Path) -> int:
    """Bytes of trainable parameters the trace's layer list records (what DDP all-reduces per step)."""
    with gzip.open(trace, "rt", encoding="utf-8") as handle:
        layers = json.load(handle)["daydream"]["layers"]
    return sum(int(info.get("gradient_bytes", 0)) for info in layers.values())


# ------------------------------------------------------------------ the page


NOTES = """## What the what-if misses here, and why

Of what DDP adds to an iteration ("measured DDP − 1 process"), the what-if models the collectives and their
contention with compute, and hides part of them behind backward:

- **What the model covers.** The all-reduces (the fitted link), their contention with compute (`contention`,
  simulate/contention.py: gloo on loopback is CPU work on gloo's threads, which compete with the two ranks'
  compute threads for the two cores; from the CPUs and threads the trace records, 2 ranks × (1 compute + 1 gloo
  thread) on 2 CPUs, the factor is 2: where an all-reduce overlaps backward both take up to twice as long), the
  gradients' copies into the buckets and back (`copies`: at the speed of the trace's own elementwise ops; the
  "DDP reducer ops" column is what they stand for), and, for the CNN, the buffers' broadcasts before each forward
  (`broadcast_buffers`: one per dtype, as DDP coalesces them: BatchNorm's float32 statistics and its int64
  counter, 2 per step, as the DDP traces show). The note above shows the contention and copies lines.
- **The buffers' broadcast is rank 0's to send and rank 1's to wait for.** Over gloo a broadcast is done for its
  root once sent: rank 0 starts its forward while rank 1 still waits for the buffers (the "DDP before the
  module's forward" column: rank 1's wait is the longer, and rank 0 then waits for rank 1 at the last bucket). So
  the broadcast competes with rank 0's forward for the cores: the what-if stretches it by contention for the share
  of rank 0's forward it overlaps (the broadcast_buffers line of the CNN's note); unstretched, the CNN came out
  8% short on average over seven runs of the check.
- **Measured in the DDP traces, not modelled.** DDP's own work around the module's forward (0.1 ms before it
  without buffers, the column above, and about 0.1 ms after it); the bucket copies run at about half the speed of
  the trace's own elementwise ops (the "DDP reducer ops" column against the copies line: the buckets were last
  written by gloo's thread on the other core); the optimizer runs slower after the wait (the transformer's, about
  0.7 ms per step).
- **gloo's collectives here end late at times, and not on both ranks at once.** Once both ranks are in it, an
  all-reduce of a small message usually ends within half a millisecond, but one in several takes 3-6 ms (the
  benchmark's median against its mean, and the "once both ranks are in it" column): the link fitted to the means
  carries the expected cost of that tail (fitted to the medians, the prediction is far shorter: see each
  example's "link fit's spread" line).
- **The ranks drift apart more than one process's steps vary.** Each step, the rank that reaches the last bucket
  first waits for the other (the "rank skew" column: how far apart the two ranks end backward's compute). The
  what-if's `stragglers` wait is the expected lateness of the slower rank if each varied independently, as the
  1-process trace's iterations do plus what contention's uneven share adds (which rank's compute gloo's threads
  preempt is random; the "predicted wait" column). Under DDP with no spare core the ranks' steps vary more than
  alone, and a collective does not release both ranks at once (gloo's times are skewed: the tail lands on one
  rank), which the model leaves out. The benchmark, which synchronises the ranks with a barrier before each timed
  all-reduce, leaves that wait out too. It weighs most where steps are short (the MLP's).
- **With both cores computing, a gloo collective waits for the scheduler.** With the calling thread kept busy
  until it ends (the link table's "caller busy" columns), a small all-reduce's median is many times its median
  with the caller waiting: gloo's threads get a core when the kernel next takes one from a busy thread, a delay of
  milliseconds that does not grow with the message. In the means, which is what an iteration adds up, the
  processor sharing of `contention` (a collective overlapped throughout takes ×2 here) reproduces it on average
  (the link table's last column); what it does not reproduce is which rank pays: one rank's compute is preempted,
  not both evenly, and the ranks drift apart (above).
- **The fitted link depends on the load.** Small messages are the most affected, so the fitted per-step latency
  moves between benchmark runs; the bandwidth term moves less. The per-example "link fit's spread" line shows what
  that does to a prediction.
- **Noise.** Runs of the same configuration differ by tens of percent here, the 1-process baseline included (a
  slow baseline can even predict a DDP step longer than the measured one). The 2-process baseline (each copy
  sharing the CPU with another) does not predict consistently better: with one thread per process on two cores
  the sharing itself costs little, and it adds its own noise.
- **Not a source of error here:** DDP rebuilds its buckets in the backward order after the first iteration, the
  order the what-if assumes (2 all-reduces per step for the MLP: 1.03 MiB, then 2.51 MiB, in the traces and in the
  what-if alike); the three warm-up iterations keep the first iteration out of the comparison.
- **Tracing DDP ranks.** `daydream trace` works under `torchrun` (and with the environment variables set by
  hand); each rank writes its own file (`{rank}` in `-o`, else NAME-rankN, by default
  `daydream-traces/SCRIPT-ranks/rankN.json.gz`, a folder `daydream replay` reads as one job). gloo's collectives
  (`gloo:all_reduce` annotations on gloo's threads) are read as host communication: replayed as recorded and
  matched across ranks, and `ddp` refuses a traced DDP rank; `no-comm` cannot shorten its step, because the
  host's wait for them is inside its recorded ops.""".splitlines()


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _error(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured * 100:+.1f}%"


def contention_factor(threads: int) -> float:
    """The factor the what-if's CPU contention model gives the benchmark's busy callers: WORLD ranks × (threads
    computing + 1 gloo thread) on this machine's CPUs."""
    return cpu_factor(len(os.sched_getaffinity(0)), threads, WORLD)


def link_table(rounds: list[Round], link: Link, factor: float) -> list[str]:
    pooled, medians = pooled_allreduce(rounds), pooled_allreduce(rounds, "median")
    busy, busy_medians = pooled_allreduce(rounds, busy=True), pooled_allreduce(rounds, "median", busy=True)
    lines = ["| message | measured (mean) | fitted model | difference | measured (median) | caller busy: mean / median "
             f"| model × contention ({factor:g}) | difference (busy mean) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in MESSAGE_BYTES:
        model_s = link.allreduce_ns(size) / 1e9
        lines.append(f"| {size / 2**10:,.0f} KiB | {pooled[size] * 1e6:,.0f} µs | {model_s * 1e6:,.0f} µs | "
                     f"{(model_s - pooled[size]) / pooled[size] * 100:+.0f}% | {medians[size] * 1e6:,.0f} µs | "
                     f"{busy[size] * 1e6:,.0f} / {busy_medians[size] * 1e6:,.0f} µs | {factor * model_s * 1e6:,.0f} µs | "
                     f"{(factor * model_s - busy[size]) / busy[size] * 100:+.0f}% |")
    return lines


def round_table(rounds: list[Round]) -> list[str]:
    lines = ["| round | 1 process | 2 processes | predicted from 1 process | predicted from 2 processes | DDP rank 0 "
             "| DDP rank 1 | error (from 1) | error (from 2) |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for index, r in enumerate(rounds):
        measured = r.ddp.iteration_ns
        lines.append(f"| {index + 1} | {_ms(r.solo.iteration_ns)} | {_ms(r.twins.iteration_ns)} | {_ms(r.from_solo.iteration_ns)} | "
                     f"{_ms(r.from_twins.iteration_ns)} | {_ms(measured)} | {_ms(r.ddp_rank1_ns)} | "
                     f"{_error(r.from_solo.iteration_ns, measured)} | {_error(r.from_twins.iteration_ns, measured)} |")
    return lines


def added_table(rounds: list[Round]) -> list[str]:
    """What DDP adds to an iteration, modelled and measured, against the 1-process run of the same round."""
    lines = ["| round | modelled all-reduces and copies | predicted − 1 process | measured DDP − 1 process | matmul ops, "
             "1 process → DDP | DDP reducer ops | one gloo all-reduce, median / longest | once both ranks are in it | "
             "rank skew at backward's end | predicted wait for the slower rank | DDP before the module's forward, "
             "rank 0 / rank 1 |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for index, r in enumerate(rounds):
        lines.append(f"| {index + 1} | {_ms(r.from_solo.allreduce_ns)} | {_ms(r.from_solo.iteration_ns - r.from_solo.baseline_ns)} | "
                     f"{_ms(r.ddp.iteration_ns - r.solo.iteration_ns)} | {_ms(r.solo.matmul_ns)} → {_ms(r.ddp.matmul_ns)} | "
                     f"{_ms(r.ddp.reducer_ns)} | {_ms(r.ddp.gloo_span_ns[0])} / {_ms(r.ddp.gloo_span_ns[1])} | {_ms(r.joined_ns)} | "
                     f"{_ms(r.skew_ns)} | {_ms(straggler_wait_ns(r.from_solo))} | "
                     f"{_ms(r.before_forward_ns[0])} / {_ms(r.before_forward_ns[1])} |")
    return lines


def straggler_wait_ns(prediction: Prediction) -> float:
    """The wait for the slowest rank the what-if's notes give: as contention's uneven share grew it, else from the
    trace's spread alone (0 when they have none)."""
    for pattern in (r"wait for the slowest rank grows to ([0-9.e+-]+) ms", r"waits \+([0-9.e+-]+) ms for the slowest"):
        for note in prediction.notes:
            found = re.search(pattern, note)
            if found:
                return float(found.group(1)) * 1e6
    return 0.0


def _row(example: str, label: str, comparison: str, baseline_ns: float, predicted_ns: float, measured_ns: float) -> str:
    return (f"| {example} | {label} | {comparison} | {_ms(baseline_ns)} | {_ms(predicted_ns)} | {_ms(measured_ns)} | "
            f"{_error(predicted_ns, measured_ns)} |")


def summary_rows(example: str, rounds: list[Round]) -> list[str]:
    """Per baseline: the medians of the rounds, and the fastest baseline's prediction against the fastest DDP run."""
    measured = statistics.median(r.ddp.iteration_ns for r in rounds)
    fastest_ddp = min(r.ddp.iteration_ns for r in rounds)
    rows = []
    for label, pick in (("1 process", lambda r: (r.solo, r.from_solo)), ("2 processes", lambda r: (r.twins, r.from_twins))):
        pairs = [pick(r) for r in rounds]
        base = statistics.median(run.iteration_ns for run, _ in pairs)
        predicted = statistics.median(prediction.iteration_ns for _, prediction in pairs)
        fastest, its_prediction = min(pairs, key=lambda pair: pair[0].iteration_ns)
        rows += [_row(example, label, "median of rounds", base, predicted, measured),
                 _row(example, label, "fastest run", fastest.iteration_ns, its_prediction.iteration_ns, fastest_ddp)]
    return rows


def phase_table(example: str, rounds: list[Round]) -> list[str]:
    lines = []
    for phase in PHASES:
        values = [statistics.median(run.phase_ns[phase] for run in runs)
                  for runs in ([r.solo for r in rounds], [r.twins for r in rounds], [r.ddp for r in rounds])]
        lines.append(f"| {example} | {phase} | {' | '.join(_ms(v) for v in values)} |")
    return lines


def header(rounds_count: int, threads: int) -> list[str]:
    return [
        "# Data parallelism on the CPU (gloo)",
        "",
        f"Generated by `python scripts/validate_ddp_cpu.py` on {date.today().isoformat()}: the `ddp` what-if, predicted",
        "from a one-process trace, against real 2-process `DistributedDataParallel` runs over gloo on loopback, on",
        f"this shared 2-core machine. {rounds_count} rounds, interleaved (configurations in rotating order); every run",
        f"traced by `daydream trace` (torch.profiler, `--warmup {WARMUP} --iterations {ITERATIONS}`, script flags",
        f"`--steps {STEPS} --threads {threads}`, the same for every process); an iteration time is the median of one trace's",
        "recorded iterations. Three configurations per round:",
        "",
        "- **1 process**: the example alone, the trace the what-if is meant to start from;",
        "- **2 processes**: two independent copies at once, no communication (the trace of one of them): the compute",
        "  of a rank when another rank shares the CPU;",
        "- **DDP**: the 2-rank `--ddp` run (ranks started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, each traced",
        "  to its own file); the measured time is rank 0's.",
        "",
    ]


def link_section(rounds: list[Round], link: Link, threads: int) -> list[str]:
    per_round = [fit_link(r.allreduce_s) for r in rounds]
    return [
        "## The link, fitted",
        "",
        f"gloo all-reduce between 2 processes ({ALLREDUCE_REPEATS} timed per size per round after a barrier, sizes interleaved;",
        "the mean per round, as nccl-tests reports a collective's time, then the median of the rounds), fitted in",
        "relative error to daydream's ring model for 2 ranks,",
        f"t = 2·latency + bytes/bandwidth: **bandwidth {link.bandwidth_gbs:.3g} GB/s, latency {link.latency_us:.3g} µs per step**",
        f"→ `{ddp_spec(link)}`. Fitted to each benchmark run alone: "
        + ", ".join(f"{f.bandwidth_gbs:.2g} GB/s & {f.latency_us:.0f} µs" for f in per_round) + ".",
        "",
        *link_table(rounds, link, contention_factor(threads)),
        "",
        "The mean, not the median: an iteration's time adds up its collectives' expected times, and here gloo's times",
        "are skewed — most all-reduces of a small message end within half a millisecond, some take several (the",
        "medians leave that out; the summary below gives the prediction from a fit to them too). Caller busy: the same",
        "all-reduces with the calling thread kept busy until each ends, as each rank's compute is while backward's",
        "all-reduces run; not used by the fit. The what-if's contention model stretches a collective that overlaps",
        "compute throughout by its factor (here the ranks' compute and gloo threads against the CPUs, as the traces",
        "record them): the last two columns hold it against the busy means, which the processor sharing reproduces on",
        "average, tail included (the medians with a busy caller are many times the idle medians: what the busy",
        "caller costs is mostly a longer wait for a core, which the means of both carry).",
        "",
    ]


def _span(values: list[float]) -> str:
    low, high = min(values) * 100, max(values) * 100
    return f"{low:+.0f}%" if round(low) == round(high) else f"{low:+.0f}% to {high:+.0f}%"


def summary_section(results: dict[str, list[Round]]) -> list[str]:
    medians = [(statistics.median(r.from_solo.iteration_ns for r in rounds) - statistics.median(r.ddp.iteration_ns for r in rounds))
               / statistics.median(r.ddp.iteration_ns for r in rounds) for rounds in results.values()]
    each = [(r.from_solo.iteration_ns - r.ddp.iteration_ns) / r.ddp.iteration_ns for rounds in results.values() for r in rounds]
    lines = [
        "## Predicted vs measured",
        "",
        "Each round's baseline predicts that round's DDP run. Median of rounds: the medians of the columns. Fastest",
        "run: the prediction from the fastest baseline against the fastest DDP run.",
        f"**From the 1-process trace, the prediction is off the measured DDP step by {_span(medians)} (medians of rounds,",
        f"per example); round by round by {_span(each)}.**",
        "",
        "| example | baseline | comparison | baseline time | predicted DDP | measured DDP | error |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for example, rounds in results.items():
        lines += summary_rows(example, rounds)
    return [*lines, ""]


def sensitivity_line(rounds: list[Round], spread: Sensitivity) -> str:
    (cheap, cheap_ns), (dear, dear_ns) = spread.cheap, spread.dear
    chosen = rounds[spread.round_index]
    return (f"The link fit's spread: round {spread.round_index + 1}'s prediction is {_ms(chosen.from_solo.iteration_ns)} with the "
            f"pooled fit, {_ms(cheap_ns)} with the cheapest per-run fit ({cheap.bandwidth_gbs:.2g} GB/s, {cheap.latency_us:.0f} µs) "
            f"and {_ms(dear_ns)} with the dearest ({dear.bandwidth_gbs:.2g} GB/s, {dear.latency_us:.0f} µs); "
            f"with the link fitted to the medians ({spread.medians[0].bandwidth_gbs:.2g} GB/s, "
            f"{spread.medians[0].latency_us:.0f} µs): {_ms(spread.medians[1])}; measured: {_ms(chosen.ddp.iteration_ns)}.")


def example_section(example: str, rounds: list[Round], volume_bytes: int, spread: Sensitivity) -> list[str]:
    return [f"### {example} ({volume_bytes / 2**20:.2f} MiB of gradients per step), round by round", "",
            *round_table(rounds), "", sensitivity_line(rounds, spread), "",
            "What DDP adds per iteration. Modelled all-reduces and copies: how much the what-if's backward work grows",
            "(all buckets' all-reduces with contention, the gradients' copies into the buckets and back; from the",
            "1-process trace). Predicted − 1 process: what the what-if adds to its replay of that trace (what backward",
            "does not hide). Matmul ops: rank 0's time in matrix multiplies and convolutions, a measure of how fast",
            "compute ran. DDP reducer ops: rank 0's reducer CPU ops on the main thread (gradients scaled into buckets,",
            "results copied back), what the copies model. One gloo all-reduce: the span of one bucket's all-reduce on",
            "gloo's thread (rank 0), from its start to its end; once both ranks are in it: from the later rank's start",
            "to rank 0's end (median), the collective's own time without the wait for the other. Rank skew: how far",
            "apart the two ranks end backward's compute (median over steps), what the first waits for the other at the",
            "last bucket. Predicted wait: the what-if's wait for the slower of the two ranks (`stragglers`: the spread",
            "of the 1-process trace's iterations and the one contention's uneven share adds); for two ranks the later",
            "is on average half the skew behind the mean. DDP before the module's forward: rank 0's and rank 1's time",
            "from `DistributedDataParallel.forward` to the wrapped module's forward (mean over steps): DDP's own work,",
            "and with buffers their broadcast, which rank 0 sends and runs on while rank 1 waits for it (the what-if's",
            "broadcasts are the note's figure, stretched by contention for the share of rank 0's forward they overlap).", "",
            *added_table(rounds), "",
            f"The what-if's note (round {spread.round_index + 1}, from the 1-process trace):", "", "```",
            *rounds[spread.round_index].from_solo.notes, "```", ""]


def markdown(results: dict[str, list[Round]], link: Link, threads: int,
             volumes: dict[str, int], spreads: dict[str, Sensitivity]) -> str:
    every_round = [r for rounds in results.values() for r in rounds]
    lines = [*header(len(every_round) // len(results), threads), *link_section(every_round, link, threads),
             *summary_section(results)]
    for example, rounds in results.items():
        lines += example_section(example, rounds, volumes[example], spreads[example])
    lines += ["### Where the time goes, by phase (medians of rounds; wall time of the phase spans)", "",
              "| example | phase | 1 process | 2 processes | DDP rank 0 |", "|---|---|---:|---:|---:|"]
    for example, rounds in results.items():
        lines += phase_table(example, rounds)
    lines += ["", *NOTES]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default="mlp,cnn,transformer", help="comma-separated: mlp, cnn, transformer")
    parser.add_argument("--rounds", type=int, default=6, help="a multiple of 3 runs the configurations in each order equally")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process (2 ranks on 2 cores: 1)")
    parser.add_argument("--out", default=str(REPO / "docs" / "validation-ddp-cpu.md"), help="markdown file to write, or -")
    parser.add_argument("--keep", type=Path, default=None, help="keep the traces in this folder")
    options = parser.parse_args()
    examples = [e.strip() for e in options.examples.split(",") if e.strip()]
    with tempfile.TemporaryDirectory() as scratch:
        work = options.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("DAYDREAM_CACHE_DIR", str(Path(scratch) / "cache"))
        results: dict[str, list[Round]] = {example: [] for example in examples}
        for index in range(options.rounds):
            for example in examples:
                results[example].append(run_round(example, work, index, options.threads))
                print(f"round {index + 1}/{options.rounds} {example}: done", file=sys.stderr)
        every_round = [r for rounds in results.values() for r in rounds]
        link = fit_link(pooled_allreduce(every_round))
        predict_rounds(results, link)
        volumes = {example: gradient_bytes(rounds[0].solo_trace) for example, rounds in results.items()}
        by_medians = fit_link(pooled_allreduce(every_round, "median"))
        spreads = {example: sensitivity(rounds, every_round, volumes[example], by_medians)
                   for example, rounds in results.items()}
    publish(markdown(results, link, options.threads, volumes, spreads), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
