"""What-ifs whose truth is known: traces from a generator with exact semantics.

The replay of trace A, with the graph changed the way the machine changed
(GPU twice as fast, or host twice as fast), must land within 1% of trace B,
recorded on that machine, per iteration.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from daydream.graph import TaskKind, build_graph
from daydream.simulate import replay_trace
from daydream.trace import read_job
from tests.generator import Program, generate, step_times

GPU_KINDS = [int(TaskKind.KERNEL), int(TaskKind.MEMCPY), int(TaskKind.MEMSET), int(TaskKind.COLLECTIVE)]
HOST_KINDS = [int(TaskKind.HOST_CALL), int(TaskKind.HOST_OP)]


def _programs() -> dict[str, Program]:
    rng = np.random.default_rng(11)

    def launches(count: int, gap: tuple[int, int], kernel: tuple[int, int]) -> list[tuple[int, int]]:
        return [(int(rng.integers(*gap)), int(rng.integers(*kernel))) for _ in range(count)]

    return {
        # Host-bound: small kernels, much CPU work between launches.
        "host-bound": Program(forward=launches(40, (20_000, 60_000), (5_000, 30_000)),
                              backward=launches(60, (15_000, 40_000), (5_000, 30_000)),
                              optimizer=launches(20, (5_000, 10_000), (3_000, 8_000))),
        # GPU-bound: big kernels, the launch queue (depth 600) fills and blocks the host.
        "gpu-bound with a full launch queue": Program(forward=launches(700, (1_000, 3_000), (40_000, 90_000)),
                                                      backward=launches(500, (1_000, 3_000), (40_000, 90_000)),
                                                      optimizer=launches(100, (1_000, 2_000), (20_000, 30_000)),
                                                      queue_depth=600),
        # Two streams joined with events, and a GPU-bound tail the final sync waits for.
        "two streams with event waits": Program(forward=launches(60, (5_000, 10_000), (20_000, 60_000)),
                                                backward=launches(80, (3_000, 8_000), (20_000, 60_000)),
                                                optimizer=launches(30, (2_000, 4_000), (10_000, 20_000)),
                                                side_stream_kernel_ns=700_000),
        # One rank of a data-parallel job: an all-reduce whose recorded time includes waiting for the other ranks.
        "a single rank's collective with a peer delay": Program(forward=launches(60, (5_000, 10_000), (20_000, 60_000)),
                                                                backward=launches(80, (3_000, 8_000), (20_000, 60_000)),
                                                                optimizer=launches(30, (2_000, 4_000), (10_000, 20_000)),
                                                                collective_ns=300_000),
        # The 2021 format: the main thread records nothing while backward() waits for the autograd thread.
        "2021 format with a bare backward gap": Program(forward=launches(40, (20_000, 60_000), (5_000, 30_000)),
                                                        backward=launches(60, (15_000, 40_000), (20_000, 60_000)),
                                                        optimizer=launches(20, (5_000, 10_000), (3_000, 8_000)), legacy=True),
        # ROCm: HIP names, numbers written as strings, two streams joined with events.
        "HIP names and string args": Program(forward=launches(60, (5_000, 10_000), (20_000, 60_000)),
                                             backward=launches(80, (3_000, 8_000), (20_000, 60_000)),
                                             optimizer=launches(30, (2_000, 4_000), (10_000, 20_000)),
                                             side_stream_kernel_ns=700_000, vendor="hip"),
        # CUDA 13: an event recorded on a side stream (the record names no stream) and synchronized on later,
        # while the thread's current stream is still busy.
        "CUDA 13 event sync": Program(forward=launches(60, (2_000, 4_000), (40_000, 90_000)),
                                      backward=launches(80, (3_000, 8_000), (20_000, 60_000)),
                                      optimizer=launches(30, (2_000, 4_000), (10_000, 20_000)), event_sync=True),
    }


def _trace(tmp_path: Path, document: dict, name: str):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return read_job(path, cache=False).traces[0]


@pytest.mark.parametrize("label", list(_programs()))
def test_untouched_replay_matches_the_generated_trace(tmp_path: Path, label: str) -> None:
    document = generate(_programs()[label])
    replay = replay_trace(_trace(tmp_path, document, "a.json"))
    for replayed, truth in zip(replay.iterations, step_times(document)):
        assert replayed.measured_ns == truth
        assert abs(replayed.simulated_ns - truth) <= 0.01 * truth, (label, replayed.name)


#: (program, what is made twice as fast) pairs where the step time really changes.
MEANINGFUL = {("host-bound", "host"), ("gpu-bound with a full launch queue", "gpu"), ("two streams with event waits", "gpu"),
              ("a single rank's collective with a peer delay", "gpu"), ("2021 format with a bare backward gap", "host"),
              ("HIP names and string args", "gpu"), ("CUDA 13 event sync", "gpu")}


def _halved_replay(tmp_path: Path, program: Program, what: str):  # type: ignore[no-untyped-def]
    baseline = _trace(tmp_path, generate(program), "a.json")
    graph = build_graph(baseline)
    tasks = graph.tasks
    if what == "gpu":
        chosen = np.isin(tasks["kind"], GPU_KINDS)
        tasks["duration_ns"][chosen] //= 2
    else:
        chosen = np.isin(tasks["kind"], HOST_KINDS)
        tasks["duration_ns"][chosen] //= 2
        tasks["gap_ns"] //= 2
    return replay_trace(baseline, graph)


@pytest.mark.parametrize("label", list(_programs()))
@pytest.mark.parametrize("what", ["gpu", "host"])
def test_halving_durations_in_the_graph_predicts_the_faster_machine(tmp_path: Path, label: str, what: str) -> None:
    program = _programs()[label]
    truths = step_times(generate(program, gpu_scale=0.5) if what == "gpu" else generate(program, host_scale=0.5))
    originals = step_times(generate(program))
    changed = max(abs(a - b) / b for a, b in zip(truths, originals))
    if (label, what) in MEANINGFUL:
        assert changed > 0.10, "this what-if must change the step time for the check to mean anything"
    replay = _halved_replay(tmp_path, program, what)
    for replayed, truth in zip(replay.iterations, truths):
        assert abs(replayed.simulated_ns - truth) <= 0.01 * truth, (label, what, replayed.name, replayed.simulated_ns, truth)


def test_the_generated_patterns_are_there_and_read_as_their_kind(tmp_path: Path) -> None:
    programs = _programs()
    # A single rank's collective: transfer plus a relative delay for the peers, which lag in iterations 1-3.
    collective_doc = generate(programs["a single rank's collective with a peer delay"])
    nccl = [e for e in collective_doc["traceEvents"] if e["name"].startswith("ncclKernel")]
    assert len(nccl) == 4 and min(e["dur"] for e in nccl) < 0.5 * max(e["dur"] for e in nccl)
    graph = build_graph(_trace(tmp_path, collective_doc, "c.json"))
    collectives = np.flatnonzero(graph.tasks["kind"] == TaskKind.COLLECTIVE)
    assert graph.tasks["unexplained"][collectives].all()
    delayed = collectives[graph.tasks["delay_ns"][collectives] > 0]
    assert delayed.size == 3 and (graph.tasks["delay_span_ns"][delayed] > 0).all()
    # HIP: every event read (string args included), every kernel linked to its hipLaunchKernel.
    hip_doc = generate(programs["HIP names and string args"])
    assert any(e["name"] == "hipStreamWaitEvent" for e in hip_doc["traceEvents"])
    assert any(isinstance(e["args"].get("stream"), str) for e in hip_doc["traceEvents"] if e["cat"] == "cuda_runtime")
    hip = _trace(tmp_path, hip_doc, "h.json")
    assert hip.meta.skipped_total == 0
    hip_graph = build_graph(hip)
    assert hip_graph.calibration.event_waits_derived > 0 and hip_graph.calibration.pinned_unlinked == 0
    # 2021: the main thread records nothing during backward(); the autograd bursts are joined to it.
    legacy_graph = build_graph(_trace(tmp_path, generate(programs["2021 format with a bare backward gap"]), "l.json"))
    assert legacy_graph.calibration.cross_thread_bursts == 4
    # CUDA 13: the event's stream is not named, so the sync is an unexplained wait, not one on the busy stream.
    sync_graph = build_graph(_trace(tmp_path, generate(programs["CUDA 13 event sync"]), "e.json"))
    assert sync_graph.calibration.blocking_calls_pinned == 4
