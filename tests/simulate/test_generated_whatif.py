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
MEANINGFUL = {("host-bound", "host"), ("gpu-bound with a full launch queue", "gpu"), ("two streams with event waits", "gpu")}


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
