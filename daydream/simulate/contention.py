"""Contention: inserted communication and the rank's compute slow each other where they overlap.

The distributed what-ifs put collectives beside the rank's compute (a communication stream, or
gloo's threads), and the simulator would let them overlap for free. On a real machine they share it:
NCCL's kernels take SMs and memory bandwidth from the compute kernels, gloo's threads take cores
from the compute threads (the Daydream paper measured NCCL 34% slower than a contention-free
estimate). With a factor f (graph.data_parallel.contention, found by
transforms/distributed/contention.py), processor
sharing: where both sides run, each progresses at 1/f of its own speed. A task of own duration d
that overlaps the other side for a share o of its (stretched) duration D does d of work in D −
o·D·(1 − 1/f), so D = d / (1 − o·(1 − 1/f)): a collective overlapped throughout takes f·d. Overlaps
depend on durations, so the job is simulated again with the stretched durations, ROUNDS times, each
round's shares averaged with the last (the fixed point, approached without oscillating).

On a CPU host the sharing is even only on average: each time gloo's thread wakes it takes a core
from one compute thread, of whichever rank the scheduler picks. Where a data-parallel what-if waits
for the slowest rank (transforms/distributed/stragglers.py) from the trace's own spread, each
iteration's spread gains S·√((R − 1) / M): S the compute stretch contention gives the iteration, R
the ranks sharing the host's CPUs, M the scheduling events (the steps of the collectives that
overlapped compute); the wait follows, each round.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import HOST_WORK, KERNELS, Timeline
from daydream.intervals import Coverage
from daydream.transforms.distributed.stragglers import add_spread, contention_spread_ns

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


def collective_shares(graph: Graph, timeline: Timeline, comm: np.ndarray,
                      work: np.ndarray) -> np.ndarray:
    """For each of the collectives `comm`, the share of its time that compute runs beside it: this
    rank's compute, or for a rooted collective (graph.data_parallel.rooted: the graph is its
    receivers' view, which waits for it) the root's, which started its next work when it sent. The
    root's timeline is this one shifted by how long the rooted collectives of the iteration took
    from the first's start to the last's end: the root's compute during a rooted collective is this
    rank's compute that long after it."""
    busy = Coverage(timeline.start_ns[work], timeline.end_ns[work])
    shares = busy.share_of_each(timeline.start_ns[comm], timeline.end_ns[comm])
    rooted = graph.data_parallel.rooted
    marked = np.isin(graph.tasks["name"][comm], list(rooted)) if rooted else None
    if marked is None or not marked.any():
        return shares
    tasks = comm[marked]
    iteration = graph.tasks["iteration"][tasks]
    start, end = timeline.start_ns[tasks], timeline.end_ns[tasks]
    shift = np.zeros(tasks.size, dtype=np.int64)
    for value in np.unique(iteration):
        same = iteration == value
        shift[same] = end[same].max() - start[same].min()
    shares[marked] = busy.share_of_each(start + shift, end + shift)
    return shares


def with_contention(graphs: list[Graph], timelines: list[Timeline],
                    simulate: Callable[[
                        list[Graph]], list[Timeline]]) -> tuple[list[Timeline], list[list[str]]]:
    """The job's timelines with contention applied where a graph carries a factor above 1 (durations
    stretched in place); per graph, the note that says what it did."""
    factors = [g.data_parallel.contention for g in graphs]
    if all(f <= 1.0 for f in factors):
        return timelines, [[] for _ in graphs]
    sides = [(communication_tasks(g), compute_tasks(g)) for g in graphs]
    base = [g.tasks["duration_ns"].copy() for g in graphs]
    shares: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(graphs)
    # per graph: the waits with and without the uneven share
    uneven: list[tuple[int, int] | None] = [None] * len(graphs)
    for _ in range(ROUNDS):
        for index, (graph, timeline, factor) in enumerate(zip(graphs, timelines, factors)):
            comm, work = sides[index]
            if factor <= 1.0 or comm.size == 0 or work.size == 0:
                continue
            new = (collective_shares(graph, timeline, comm, work),
                   overlap_shares(timeline, work, comm))
            old = shares[index]
            current = new if old is None else ((old[0] + new[0]) / 2, (old[1] + new[1]) / 2)
            shares[index] = current
            durations = graph.tasks["duration_ns"]
            for tasks, share in zip((comm, work), current):
                durations[tasks] = np.rint(
                    base[index][tasks] / (1.0 - share * (1.0 - 1.0 / factor))).astype(np.int64)
            uneven[index] = uneven_share_waits(graph, base[index], comm, work, current[0])
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
        lines = [f"contention: ×{factor:.2f} where communication and compute overlap "
                 f"({graph.data_parallel.contention_source}): {np.average(found[0]):.0%} of the "
                 f"collectives' time overlapped compute; collectives +{comm_added / 1e6:.2f} ms, "
                 f"compute +{work_added / 1e6:.2f} ms over the trace (contention=1 turns it off)"]
        waits = uneven[index]
        if waits is not None and waits[0] > waits[1]:
            lines.append(f"contention: the {graph.data_parallel.host_ranks} ranks sharing a host's "
                         "CPUs do not share it evenly (gloo's threads take a core from one rank's "
                         "compute at a time, at random), so their steps vary more: the wait for "
                         f"the slowest rank grows to {waits[0] / 1e6:.3g} ms per iteration (from "
                         f"{waits[1] / 1e6:.3g} ms), the spread S·√((R − 1) / M) added to the "
                         "trace's own (S: the iteration's compute stretch, M: "
                         f"{graph.data_parallel.collective_steps} steps per collective that "
                         "overlapped compute)")
        notes.append(lines)
    return timelines, notes


def uneven_share_waits(graph: Graph, base_ns: np.ndarray, comm: np.ndarray, work: np.ndarray,
                       comm_shares: np.ndarray) -> tuple[int, int] | None:
    """Set each iteration's wait for the slowest rank (its SLOWEST_RANK edges' latency) from the
    trace's spread plus the spread contention's uneven share on a CPU host gives it; (mean wait per
    iteration with it, without it). None where that does not apply: a GPU graph, one rank per host,
    or no wait derived from the trace's spread."""
    parallel = graph.data_parallel
    if parallel.slowest_rank is None or parallel.host_ranks <= 1 or graph.has_device_work():
        return None
    edges = np.flatnonzero(graph.edges["kind"] == DepKind.SLOWEST_RANK)
    if edges.size == 0:
        return None
    spread, multiplier = parallel.slowest_rank
    iteration = graph.tasks["iteration"]
    # Per iteration (index + 1: tasks outside every iteration are -1), the compute stretch and the
    # overlapping collectives.
    size = int(iteration.max()) + 2
    stretch = np.bincount(iteration[work] + 1,
                          weights=graph.tasks["duration_ns"][work] - base_ns[work], minlength=size)
    overlapping = np.bincount(iteration[comm[comm_shares > 0]] + 1, minlength=size)
    with_it = []
    for edge in edges.tolist():
        owner = int(iteration[int(graph.edges["dst"][edge])]) + 1
        extra = contention_spread_ns(float(stretch[owner]),
                                     int(overlapping[owner]) * parallel.collective_steps,
                                     parallel.host_ranks)
        graph.edges["latency_ns"][edge] = int(round(multiplier * add_spread(spread, extra)))
        with_it.append(int(graph.edges["latency_ns"][edge]))
    return int(np.mean(with_it)), int(round(multiplier * spread))
