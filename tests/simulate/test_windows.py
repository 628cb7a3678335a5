"""Iterations to their completion: a host that runs ahead of its GPU, by hand and on a real CUDA-graphs trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.api import open_job, predict_job
from daydream.cli import main
from daydream.mapping.iterations import settle
from daydream.simulate import replay_trace
from tests.builders import annotation, kernel, load_raw, ns, runtime, write_trace

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "examples" / "h200"


def test_the_rule_by_hand() -> None:
    # A host 100 µs per step, its GPU 400 µs per step: the steps complete every 400 µs.
    assert settle([0, 100, 200], [100, 200, 300], [415, 815, 1215]) == [(0, 415), (415, 815), (815, 1215)]
    # A loop that waits every step: unchanged, GPU work ending inside its step or none at all.
    assert settle([0, 10, 20], [8, 18, 28], [7, None, 28]) == [(0, 8), (10, 18), (20, 28)]


def _run_ahead(tmp_path: Path) -> Path:
    """Four 100 µs host steps, each one graph launch (at +10 µs) of two 200 µs kernels on one stream."""
    events = []
    gpu_free = 0.0
    for step in range(4):
        start = 100.0 * step
        events.append(annotation(f"ProfilerStep#{step}", start, 100.0))
        launch_at, correlation = start + 10, 100 + step
        events.append(runtime("cudaGraphLaunch", launch_at, 5.0, correlation, 0))
        for _ in range(2):
            begin = max(launch_at + 5, gpu_free)
            events.append(kernel("ampere_sgemm_128x64_nn", begin, 200.0, correlation, 0))
            gpu_free = begin + 200.0
    return write_trace(tmp_path, events, "ahead.json")


def test_a_host_that_runs_ahead_is_measured_at_the_gpus_pace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_ahead(tmp_path)
    # By hand: step 0's kernels run [15, 215) and [215, 415); every later step's two start when the GPU frees.
    expected = [415_000, 400_000, 400_000, 400_000]
    assert main(["inspect", "--json", str(path)]) == 0
    iterations = json.loads(capsys.readouterr().out)["ranks"][0]["iterations"]
    assert [it["measured_ns"] for it in iterations] == expected
    assert [it["host_ns"] for it in iterations] == [100_000] * 4
    replay = replay_trace(open_job(path, cache=False).traces[0])
    assert [it.measured_ns for it in replay.iterations] == expected
    assert all(it.error <= 0.01 for it in replay.iterations)


def test_a_faster_gpu_moves_a_run_ahead_loop(tmp_path: Path) -> None:
    # Twice as fast kernels: step 0 ends at 215 µs, then one step per 200 µs (the host still needs only 100).
    [prediction] = predict_job(_run_ahead(tmp_path), ["faster-gpu:factor=2"], cache=False)
    assert prediction.predicted_ns == pytest.approx((215_000 + 3 * 200_000) / 4, rel=0.02)


def _completions_by_hand(path: Path) -> list[int]:
    """Per cudaGraphLaunch inside a ProfilerStep, in order: the end of the last kernel it launched (ns)."""
    events = load_raw(path)["traceEvents"]
    steps = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"))
    launches = sorted((ns(e["ts"]), e["args"]["correlation"]) for e in events
                      if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch")
    ends: dict[int, int] = {}
    for e in events:
        if e.get("cat") == "kernel":
            correlation = e["args"]["correlation"]
            ends[correlation] = max(ends.get(correlation, 0), ns(e["ts"]) + ns(e["dur"]))
    inside = [c for t, c in launches if any(a <= t < b for a, b in steps)]
    return [ends[c] for c in inside]


@pytest.mark.parametrize("example", ["cnn", "transformer"])
def test_a_cuda_graphs_trace_replays_at_its_gpus_pace(example: str) -> None:
    path = H200 / f"{example}-cuda-graphs.json.gz"
    completions = _completions_by_hand(path)
    replay = replay_trace(open_job(path, cache=False).traces[0])  # built: a graph launch is one entry of the queue
    measured = [it.measured_ns for it in replay.iterations]
    assert len(measured) == len(completions)
    # After the first, each step lasts from the previous step's completion to its own.
    assert measured[1:] == [b - a for a, b in zip(completions, completions[1:])]
    assert all(it.error <= 0.05 for it in replay.iterations)
