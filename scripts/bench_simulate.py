#!/usr/bin/env python3
"""Benchmark: graph build and simulation speed, in tasks per second.

    python scripts/bench_simulate.py                 # the largest corpus trace and a 1M-task generated graph
    python scripts/bench_simulate.py --tasks 2000000

(a) builds the graph of the largest trace in ../shared/traces and simulates it;
(b) generates a graph of about --tasks tasks shaped like a training loop (a host
thread launching kernels on two streams, event waits between the streams, a
blocking sync every iteration) and simulates it. Simulation time includes the
topological ordering. The first run of a process also compiles the numba
kernels; that one-off cost is reported separately and excluded from the rates.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind, build_graph
from daydream.graph.model import EDGE_COLUMNS, TASK_COLUMNS, empty_columns
from daydream.simulate import simulate

REPO = Path(__file__).resolve().parents[1]


def training_loop_graph(target_tasks: int, launches_per_iteration: int = 1000, seed: int = 0) -> Graph:
    """~target_tasks tasks: per launch one host call and one kernel; a sync per iteration."""
    rng = np.random.default_rng(seed)
    per_iteration = 2 * launches_per_iteration + 2
    iterations = max(1, target_tasks // per_iteration)
    launches = iterations * launches_per_iteration
    calls = np.arange(launches)
    kernels = launches + np.arange(launches)
    stream = np.where(rng.random(launches) < 0.9, 1, 2)  # 10% of kernels on a second stream
    sync_calls = 2 * launches + np.arange(iterations)
    completions = 2 * launches + iterations + np.arange(iterations)
    n = 2 * launches + 2 * iterations
    graph = Graph(tasks=empty_columns(TASK_COLUMNS), edges=empty_columns(EDGE_COLUMNS),
                  resources=[Resource(ResourceKind.HOST_THREAD, "main"), Resource(ResourceKind.GPU_STREAM, "s7", 0, 7),
                             Resource(ResourceKind.GPU_STREAM, "s8", 0, 8)], strings=["task"])
    kind = np.concatenate([np.full(launches, TaskKind.HOST_CALL), np.full(launches, TaskKind.KERNEL),
                           np.full(iterations, TaskKind.HOST_CALL), np.full(iterations, TaskKind.COMPLETION)])
    resource = np.concatenate([np.zeros(launches), stream, np.zeros(2 * iterations)]).astype(np.int32)
    duration = np.concatenate([rng.integers(3_000, 8_000, launches), rng.integers(2_000, 40_000, launches),
                               np.full(iterations, 4_000), np.zeros(iterations)])
    gap = np.concatenate([rng.integers(1_000, 20_000, launches), np.zeros(launches), np.full(iterations, 5_000),
                          np.zeros(iterations)])
    graph.add_tasks(kind=kind, resource=resource, duration_ns=duration, gap_ns=gap, measured_start_ns=np.arange(n))
    # Host program order: launches of iteration i, then its sync call, then its completion.
    host_sequence = np.concatenate([
        np.concatenate([calls[i * launches_per_iteration:(i + 1) * launches_per_iteration], [sync_calls[i]]])
        for i in range(iterations)
    ])
    sources = np.where(np.isin(host_sequence[:-1], sync_calls), completions[np.searchsorted(sync_calls, host_sequence[:-1])],
                       host_sequence[:-1])
    graph.add_edges(sources, host_sequence[1:], DepKind.HOST_ORDER)
    graph.add_edges(sync_calls, completions, DepKind.SYNC)
    last_kernel = kernels[(np.arange(iterations) + 1) * launches_per_iteration - 1]
    graph.add_edges(last_kernel, completions, DepKind.SYNC, latency_ns=2_000)
    graph.add_edges(calls, kernels, DepKind.LAUNCH, latency_ns=5_000, from_start=True)
    for s in (1, 2):
        on = kernels[stream == s]
        graph.add_edges(on[:-1], on[1:], DepKind.STREAM_ORDER, latency_ns=1_000)
    second = np.flatnonzero(stream == 2)
    waits = second[second > 0]
    graph.add_edges(kernels[waits - 1], kernels[waits], DepKind.EVENT_WAIT, latency_ns=1_000)
    return graph


def timed(function, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "traces")
    options = parser.parse_args()

    warm = training_loop_graph(10_000)
    _, compile_s = timed(simulate, warm)
    print(f"numba compile + first run (one-off)       {compile_s:.2f} s")

    largest = max(options.corpus.glob("**/*.gz"), key=lambda p: p.stat().st_size, default=None)
    if largest is not None:
        from daydream.api import open_job

        trace = open_job(largest).traces[0]
        graph, build_s = timed(build_graph, trace)
        _, simulate_s = timed(simulate, graph)
        print(f"corpus: {largest.name}")
        print(f"  build     {graph.task_count:,} tasks, {graph.edge_count:,} edges in {build_s:.3f} s "
              f"= {graph.task_count / build_s:,.0f} tasks/s")
        print(f"  simulate  {simulate_s:.4f} s = {graph.task_count / simulate_s:,.0f} tasks/s")
    graph, build_s = timed(training_loop_graph, options.tasks)
    runs = [timed(simulate, graph)[1] for _ in range(3)]
    simulate_s = float(np.median(runs))
    print(f"generated training loop: {graph.task_count:,} tasks, {graph.edge_count:,} edges")
    print(f"  generate  {build_s:.3f} s = {graph.task_count / build_s:,.0f} tasks/s")
    print(f"  simulate  {simulate_s:.3f} s (median of 3) = {graph.task_count / simulate_s:,.0f} tasks/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
