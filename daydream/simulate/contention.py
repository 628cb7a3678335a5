"""Contention: inserted communication and the rank's compute slow each other where they overlap.

The distributed what-ifs put collectives beside the rank's compute (a communication stream, or gloo's
threads), and the simulator would let them overlap for free. On a real machine they share it: NCCL's
kernels take SMs and memory bandwidth from the compute kernels, gloo's threads take cores from the
compute threads (the Daydream paper measured NCCL 34% slower than a contention-free estimate). With a
factor f (graph.data_parallel.contention, found by transforms/distributed/contention.py), processor
sharing: where both sides run, each progresses at 1/f of its own speed. A task of own duration d that
overlaps the other side for a share o of its (stretched) duration D does d of work in
D − o·D·(1 − 1/f), so D = d / (1 − o·(1 − 1/f)): a collective overlapped throughout takes f·d. Overlaps
depend on durations, so the job is simulated again with the stretched durations, ROUNDS times, each
round's shares averaged with the last (the fixed point, approached without oscillating).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from daydream.graph import Graph, TaskKind
from daydream.graph.model import HOST_WORK, KERNELS
from daydream.intervals import Coverage
from daydream.simulate.engine import Timeline

ROUNDS = 8


def communication_tasks(graph: Graph) -> np.ndarray:
    """The collectives a what-if inserted or kept: tasks on communication resources."""
    return np.flatnonzero(graph.tasks["kind"] == TaskKind.COLLECTIVE)


def compute_tasks(graph: Graph) -> np.ndarray:
    """What communication competes with: kernels in a GPU graph, host work in a CPU-only one."""
    kinds = KERNELS if graph.has_device_work() else HOST_WORK
    work = np.flatnonzero(np.isin(graph.tasks["kind"], [int(k) for k in kinds]))
    return work[graph.tasks["kind"][work] != TaskKind.COLLECTIVE]


def overlap_shares(timeline: Timeline, tasks: np.ndarray, others: np.ndarray) -> np.ndarray:
    """For each of `tasks`, the share of its simulated time during which any of `others` runs."""
    busy = Coverage(timeline.start_ns[others], timeline.end_ns[others])
    return busy.share_of_each(timeline.start_ns[tasks], timeline.end_ns[tasks])


def with_contention(graphs: list[Graph], timelines: list[Timeline],
                    simulate: Callable[[list[Graph]], list[Timeline]]) -> tuple[list[Timeline], list[list[str]]]:
    """The job's timelines with contention applied where a graph carries a factor above 1 (durations stretched in
    place); per graph, the note that says what it did."""
    factors = [g.data_parallel.contention for g in graphs]
    if all(f <= 1.0 for f in factors):
        return timelines, [[] for _ in graphs]
    sides = [(communication_tasks(g), compute_tasks(g)) for g in graphs]
    base = [g.tasks["duration_ns"].copy() for g in graphs]
    shares: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(graphs)
    for _ in range(ROUNDS):
        for index, (graph, timeline, factor) in enumerate(zip(graphs, timelines, factors)):
            comm, work = sides[index]
            if factor <= 1.0 or comm.size == 0 or work.size == 0:
                continue
            new = (overlap_shares(timeline, comm, work), overlap_shares(timeline, work, comm))
            old = shares[index]
            current = new if old is None else ((old[0] + new[0]) / 2, (old[1] + new[1]) / 2)
            shares[index] = current
            durations = graph.tasks["duration_ns"]
            for tasks, share in zip((comm, work), current):
                durations[tasks] = np.rint(base[index][tasks] / (1.0 - share * (1.0 - 1.0 / factor))).astype(np.int64)
        timelines = simulate(graphs)
    notes: list[list[str]] = []
    for index, (graph, factor) in enumerate(zip(graphs, factors)):
        found = shares[index]
        if factor <= 1.0 or found is None:
            notes.append([])
            continue
        comm, work = sides[index]
        comm_added = int((graph.tasks["duration_ns"][comm] - base[index][comm]).sum())
        work_added = int((graph.tasks["duration_ns"][work] - base[index][work]).sum())
        notes.append([f"contention: ×{factor:.2f} where communication and compute overlap "
                      f"({graph.data_parallel.contention_source}): {np.average(found[0]):.0%} of the collectives' time "
                      f"overlapped compute; collectives +{comm_added / 1e6:.2f} ms, compute +{work_added / 1e6:.2f} ms "
                      "over the trace (contention=1 turns it off)"])
    return timelines, notes
