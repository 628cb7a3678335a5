"""Contention between inserted communication and compute: processor sharing on hand-made graphs, and the factor
calibrated from a hand-made trace and from the host a recording names."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from daydream.api import open_job
from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import Timeline
from daydream.simulate import simulate
from daydream.simulate.contention import with_contention
from daydream.transforms.distributed.contention import calibrate, gpu_slowdown
from daydream.transforms.registry import Context
from tests.builders import kernel as trace_kernel
from tests.builders import runtime, write_trace
from tests.transforms.graphs import graph, op


def _side_by_side(compute_ns: int, collective_ns: int, factor: float) -> Graph:
    """A host op and a collective on a channel of its own, both ready at 0 (a marker before each)."""
    built = graph([op("start", 0), op("compute", compute_ns)], [(0, 1, DepKind.HOST_ORDER, 0, False)])
    built.resources.append(Resource(ResourceKind.COMM_CHANNEL, "comm"))
    [collective] = built.add_tasks(kind=TaskKind.COLLECTIVE, resource=len(built.resources) - 1, duration_ns=collective_ns,
                                   name=0, iteration=0, measured_start_ns=np.array([0]))
    built.add_edges([0], [int(collective)], DepKind.HOST_ORDER, latency_ns=0, from_start=False)
    built.data_parallel = replace(built.data_parallel, contention=factor, contention_source="by hand")
    return built


def _contended(built: Graph) -> Timeline:
    [timeline], _ = with_contention([built], [simulate(built)], lambda graphs: [simulate(g) for g in graphs])
    return timeline


def _ends(built: Graph) -> tuple[int, int]:
    timeline = _contended(built)
    return int(timeline.end_ns[1]), int(timeline.end_ns[2])


def test_processor_sharing_by_hand() -> None:
    # Both 100 µs, side by side, factor 2: each runs at half speed throughout, both end at 200 µs.
    assert _ends(_side_by_side(100_000, 100_000, 2.0)) == (200_000, 200_000)
    # A 50 µs collective beside 100 µs of compute: half speed while both run; the collective's 50 µs of work end at
    # 100 µs; the compute has done 50 of its 100 by then and ends 50 µs later, at 150 µs.
    compute_end, collective_end = _ends(_side_by_side(100_000, 50_000, 2.0))
    assert collective_end == pytest.approx(100_000, rel=0.01)
    assert compute_end == pytest.approx(150_000, rel=0.02)
    # Factor 1: nothing moves.
    assert _ends(_side_by_side(100_000, 50_000, 1.0)) == (100_000, 50_000)


def test_a_cpu_host_gives_the_factor_its_threads_ask_for() -> None:
    cpu_graph = graph([op("compute", 10)], [])
    two_ranks = Context(host={"cpus": 2, "intra_op_threads": 1})
    assert calibrate(cpu_graph, {"contention": "auto"}, two_ranks, 2)[0] == 2.0  # 2 × (1 + 1) threads on 2 CPUs
    assert calibrate(cpu_graph, {"contention": "auto"}, Context(host={"cpus": 16, "intra_op_threads": 4}), 2)[0] == 1.0
    assert calibrate(cpu_graph, {"contention": "1"}, two_ranks, 2) == (1.0, "off (contention=1)")
    factor, why = calibrate(cpu_graph, {"contention": "auto"}, Context(), 2)
    assert factor == 1.0 and "does not record the host" in why


def test_a_gpu_factor_from_kernels_beside_collectives(tmp_path: Path) -> None:
    # The same kernel four times alone (10 µs) and four times with an NCCL kernel running beside it (15 µs): ×1.5.
    events = []
    correlation = 1
    for i in range(4):
        for at, duration, beside in ((i * 100.0, 10.0, False), (i * 100.0 + 50.0, 15.0, True)):
            events.append(runtime("cudaLaunchKernel", at, 1.0, correlation, correlation))
            events.append(trace_kernel("gemm_k", at + 2.0, duration, correlation, correlation, stream=7))
            correlation += 1
            if beside:
                events.append(runtime("cudaLaunchKernel", at, 1.0, correlation, correlation))
                events.append(trace_kernel("ncclKernel_AllReduce_RING", at + 1.0, 20.0, correlation, correlation,
                                           stream=13))
                correlation += 1
    trace = open_job(write_trace(tmp_path, events, "t.json"), cache=False).traces[0]
    assert gpu_slowdown(trace) == (pytest.approx(1.5), 4)
    # Without a collective in the trace there is nothing to calibrate from.
    alone = [e for e in events if "nccl" not in e["name"]]
    assert gpu_slowdown(open_job(write_trace(tmp_path, alone, "alone.json"), cache=False).traces[0]) is None


def test_the_uneven_share_between_ranks_on_one_host_spreads_their_steps() -> None:
    import math

    from daydream.transforms.distributed.stragglers import contention_spread_ns

    # S·√((R − 1) / M): the stretch S taken from one of R ranks at a time, at random, in M equal pieces.
    assert contention_spread_ns(100.0, 2, 2) == pytest.approx(100 / math.sqrt(2))
    assert contention_spread_ns(100.0, 3, 4) == pytest.approx(100.0)
    assert contention_spread_ns(100.0, 2, 1) == contention_spread_ns(100.0, 0, 2) == 0.0


def _with_a_last_bucket(host_ranks: int) -> Graph:
    """_side_by_side's 100 µs of compute beside a 100 µs collective, then a last bucket of 10 µs on the same channel that
    waits for the slowest rank after the compute (a SLOWEST_RANK edge, no wait of its own yet)."""
    built = _side_by_side(100_000, 100_000, 2.0)
    [last] = built.add_tasks(kind=TaskKind.COLLECTIVE, resource=len(built.resources) - 1, duration_ns=10_000, name=0,
                             iteration=0, measured_start_ns=np.array([0]))
    built.add_edges([2], [int(last)], DepKind.STREAM_ORDER)
    built.add_edges([1], [int(last)], DepKind.SLOWEST_RANK)
    built.data_parallel = replace(built.data_parallel, slowest_rank=(0.0, 1 / np.sqrt(np.pi)), host_ranks=host_ranks,
                                  collective_steps=2)
    return built


def test_the_wait_for_the_slowest_rank_grows_with_contentions_uneven_share() -> None:
    # By hand: compute and the first collective both take 200 µs (processor sharing, ×2): the compute's stretch is
    # S = 100 µs. One collective overlapped it, of 2 steps: M = 2; 2 ranks on the host: its spread is
    # 100 µs·√(1/2) = 70.711 µs, and the wait for the slower of 2 ranks 1/√π of it: 39,894 ns. The last bucket
    # starts at 200,000 + 39,894 and ends 10 µs later.
    built = _with_a_last_bucket(host_ranks=2)
    [timeline], [notes] = with_contention([built], [simulate(built)], lambda graphs: [simulate(g) for g in graphs])
    assert int(timeline.start_ns[3]) == 239_894 and int(timeline.end_ns[3]) == 249_894
    assert any("grows to 0.0399 ms per iteration (from 0 ms)" in note for note in notes)
    # One rank per host shares nothing with another rank: no wait beyond the trace's own.
    alone = _with_a_last_bucket(host_ranks=1)
    [timeline], [notes] = with_contention([alone], [simulate(alone)], lambda graphs: [simulate(g) for g in graphs])
    assert int(timeline.start_ns[3]) == 200_000 and not any("grows to" in note for note in notes)


def _receiver_of_a_rooted_broadcast(gap_ns: int) -> Graph:
    """A receiver's view of one iteration: a start marker, a 1 µs broadcast from rank 0 (rooted) that the receiver
    waits for, then its compute: 500 ns, `gap_ns` of nothing (an edge latency), 4 µs."""
    built = graph([op("start", 0, iteration=0), op("compute a", 500, iteration=0), op("compute b", 4_000, iteration=0)],
                  [(1, 2, DepKind.HOST_ORDER, gap_ns, False)])
    built.resources.append(Resource(ResourceKind.COMM_CHANNEL, "comm"))
    [broadcast] = built.add_tasks(kind=TaskKind.COLLECTIVE, resource=len(built.resources) - 1, duration_ns=1_000,
                                  name=built.string_id("broadcast of the buffers"), iteration=0,
                                  measured_start_ns=np.array([0]))
    built.add_edges([0], [int(broadcast)], DepKind.COMMUNICATION)
    built.add_edges([int(broadcast)], [1], DepKind.COMMUNICATION)
    built.data_parallel = replace(built.data_parallel, contention=2.0, contention_source="by hand",
                                  rooted=frozenset({built.string_id("broadcast of the buffers")}))
    return built


def test_a_rooted_broadcast_is_stretched_by_the_roots_compute_not_the_receivers() -> None:
    # The receiver waits for the broadcast: on its own timeline nothing computes beside it. Rank 0 sent it and went
    # on: its compute during the broadcast is the receiver's compute that long later. With no gap, that window is
    # covered throughout: ×2, the broadcast ends at 2,000 ns and the compute (4.5 µs) at 6,500.
    built = _receiver_of_a_rooted_broadcast(gap_ns=0)
    timeline = _contended(built)
    assert (int(timeline.end_ns[3]), int(timeline.end_ns[2])) == (2_000, 6_500)
    # A 1 µs gap after 500 ns of compute: a broadcast of D ns overlaps 500 of them (D ≤ 1,500), so D = 1000 / (1 − 0.5 ·
    # 500 / D): D = 1,250 ns by hand (the fixed point the rounds approach).
    built = _receiver_of_a_rooted_broadcast(gap_ns=1_000)
    timeline = _contended(built)
    assert int(timeline.end_ns[3]) == pytest.approx(1_250, rel=0.01)
    # Not rooted (a collective every rank waits for): nothing runs beside it, it keeps its 1 µs.
    built = _receiver_of_a_rooted_broadcast(gap_ns=0)
    built.data_parallel = replace(built.data_parallel, rooted=frozenset())
    timeline = _contended(built)
    assert int(timeline.end_ns[3]) == 1_000
