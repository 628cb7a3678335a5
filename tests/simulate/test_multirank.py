"""Multi-rank replay: collectives matched across ranks, simulated together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.api import open_job, replay_job
from daydream.graph import TaskKind
from daydream.mapping.collectives import match_collectives
from daydream.simulate.job import simulate_job
from daydream.trace import EventKind
from tests.transforms.graphs import call, graph, kernel, launch_chain

DLRM = "param/et_replay_inputs/dlrm_kineto.tar.gz"
SAMPLED = "hta/trace_filter"
BOUND = 0.03


def test_dlrm_collectives_match_by_order_and_end_together_in_the_recording(corpus: Path) -> None:
    traces = open_job(corpus / DLRM).traces
    matching = match_collectives(traces)
    per_rank = [np.flatnonzero(t.kind == EventKind.COMMUNICATION) for t in traces]
    assert [rows.size for rows in per_rank] == [8] * 8  # the corpus notes: 8 NCCL kernels on each rank
    assert matching.matched == 8 and not matching.notes
    for position in range(8):
        ids = {matching.ids[t][int(per_rank[t][position])] for t in range(8)}
        assert len(ids) == 1, "the k-th collective of every rank is one collective"
        # Independent evidence that the pairing is right: NCCL instances of one collective end together.
        ends = [int(traces[t].end_ns[per_rank[t][position]]) for t in range(8)]
        assert max(ends) - min(ends) < 100_000, ends


def test_dlrm_replays_within_three_percent_per_rank_with_collectives_tied(corpus: Path) -> None:
    replays = replay_job(corpus / DLRM)
    assert len(replays) == 8
    ends_by_collective: dict[int, set[int]] = {}
    for replay in replays:
        for iteration in replay.iterations:
            assert iteration.error <= BOUND, (replay.trace.meta.rank, iteration.simulated_ns, iteration.measured_ns)
        tasks = replay.graph.tasks
        collective = np.flatnonzero(tasks["kind"] == TaskKind.COLLECTIVE)
        assert np.all(tasks["collective"][collective] > 0)
        assert not replay.graph.pinned()[collective].any()
        for task in collective.tolist():
            ends_by_collective.setdefault(int(tasks["collective"][task]), set()).add(int(replay.timeline.end_ns[task]))
    assert len(ends_by_collective) == 8
    assert all(len(ends) == 1 for ends in ends_by_collective.values()), "a collective finishes on every rank together"


def test_sampled_ranks_of_a_larger_job_keep_their_collectives_as_recorded(corpus: Path) -> None:
    traces = open_job(corpus / SAMPLED).traces
    assert [t.meta.world_size for t in traces] == [128, 128]
    matching = match_collectives(traces)
    assert matching.matched == 0
    assert any("not in the job" in note for note in matching.notes)
    for replay in replay_job(corpus / SAMPLED):
        for iteration in replay.iterations:
            assert iteration.error <= BOUND


def _rank(before_collective_ns: int, transfer_ns: int) -> tuple[list, list]:
    """One rank: launch a compute kernel, then a collective, then a kernel that uses its result."""
    tasks, edges = launch_chain([call(), call(), call()], [kernel("compute", before_collective_ns),
                                                          {"kind": TaskKind.COLLECTIVE, "name": "ncclAllReduce",
                                                           "duration": transfer_ns}, kernel("use", 10)])
    return tasks, edges


def test_a_slow_rank_delays_the_collective_on_every_rank() -> None:
    fast = graph(*_rank(100, 50))
    slow = graph(*_rank(400, 50))
    for g in (fast, slow):
        g.tasks["collective"][g.tasks["kind"] == TaskKind.COLLECTIVE] = 1
    fast_alone = simulate_job([fast])[0]
    together = simulate_job([fast, slow])
    collective = int(np.flatnonzero(fast.tasks["kind"] == TaskKind.COLLECTIVE)[0])
    # By hand: launch chain of 3 calls of 5 ns, latency 4 from the call's start, kernel gap 1.
    # fast: compute 4..104, collective waits for slow's compute 4..404 (+1 stream gap) -> 405..455.
    assert int(fast_alone.start_ns[collective]) == 105
    assert int(together[0].start_ns[collective]) == 405
    assert int(together[1].start_ns[collective]) == 405
    assert int(together[0].end_ns[collective]) == int(together[1].end_ns[collective]) == 455
    assert int(together[0].end_ns[-1]) == 455 + 1 + 10


def test_ranks_without_matched_collectives_are_simulated_alone() -> None:
    a, b = graph(*_rank(100, 50)), graph(*_rank(400, 50))
    alone = simulate_job([a, b])
    assert int(alone[0].start_ns[4]) == 105 and int(alone[1].start_ns[4]) == 405


def test_inconsistent_collective_order_is_reported() -> None:
    # Rank 0 issues collective 1 then 2, rank 1 issues 2 then 1: a deadlock in NCCL, a cycle here.
    a, b = graph(*_two_collectives()), graph(*_two_collectives())
    first, second = np.flatnonzero(a.tasks["kind"] == TaskKind.COLLECTIVE)
    a.tasks["collective"][[first, second]] = [1, 2]
    b.tasks["collective"][[first, second]] = [2, 1]
    with pytest.raises(ValueError, match="cannot be ordered consistently"):
        simulate_job([a, b])


def _two_collectives() -> tuple[list, list]:
    return launch_chain([call(), call()], [{"kind": TaskKind.COLLECTIVE, "name": "c", "duration": 5},
                                           {"kind": TaskKind.COLLECTIVE, "name": "c", "duration": 5}])


def _rank_file(folder: Path, rank: int, elements: int) -> Path:
    from tests.builders import annotation, kernel, runtime, write_trace

    events = [annotation("ProfilerStep#1", 0, 100, tid=1),
              runtime("cudaLaunchKernel", 10, 2, correlation=5, ext=5),
              kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 20, 30 + 10 * rank, correlation=5, ext=5, stream=40,
                     **{"Collective name": "allreduce", "In msg nelems": elements, "Out msg nelems": elements,
                        "Group size": 2, "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1]"})]
    return write_trace(folder, events, name=f"rank{rank}.json", distributedInfo={"rank": rank, "world_size": 2})


def test_matching_uses_the_metadata_group_and_message_size(tmp_path: Path) -> None:
    from daydream.trace import read_job

    same, differ = tmp_path / "same", tmp_path / "differ"
    for folder, sizes in ((same, (1024, 1024)), (differ, (1024, 2048))):
        folder.mkdir()
        for rank, elements in enumerate(sizes):
            _rank_file(folder, rank, elements)
    matched = match_collectives(read_job(same, cache=False).traces)
    assert matched.matched == 1 and not matched.notes
    refused = match_collectives(read_job(differ, cache=False).traces)
    assert refused.matched == 0
    assert refused.notes == ["process group '0': collective #1 (allreduce) moves 4,096 bytes on rank 0 but 8,192 on rank 1 "
                             "— its collectives are replayed as recorded"]
