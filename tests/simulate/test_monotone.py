"""Predictions that move the right way: a faster host, a faster GPU or removed host work never makes an iteration end
later than in its baseline.

Iterations run from one completion to the next (simulate/windows.py), so one iteration's period may grow when the one
before it ends earlier; what may not happen is any iteration *ending* later. Each iteration's end is compared on the
simulated clock of the baseline and of the prediction (both start from the same recorded origin), for every rank of
every corpus trace, every kept H200 trace, and generated programs of every shape the generator knows (host- or
GPU-bound, a full launch queue, side streams, a collective whose peers lag, CUDA 13 event syncs, HIP, the 2021 format).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from daydream.errors import InputError
from daydream.graph.windows import iteration_windows
from daydream.simulate.whatif import Prediction, predict_traces
from daydream.trace import Trace, read_job
from tests.conftest import CORPUS, REPO
from tests.generator import Program, generate

SPEEDUPS = ["faster-host:factor=2", "faster-host:factor=1000", "faster-gpu:factor=2", "faster-gpu:factor=1000",
            "no-host-overhead", "cuda-graphs"]
CORPUS_TRACES = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("**/*.gz")) if CORPUS.is_dir() else ["<missing>"]
H200 = sorted(p.name for p in (REPO / "examples" / "h200").glob("*.json.gz"))


def _ends(prediction: Prediction) -> np.ndarray:
    assert prediction.graph is not None and prediction.timeline is not None
    return np.array([w.end_ns for w in iteration_windows(prediction.graph, prediction.timeline)], dtype=np.int64)


def _later(traces: list[Trace]) -> list[str]:
    """Each what-if and rank whose prediction has an iteration ending later than in the baseline, with how much."""
    baselines = predict_traces(traces, [])
    found = []
    for spec in SPEEDUPS:
        try:
            predictions = predict_traces(traces, [spec])
        except InputError:  # refused with a reason (no-host-overhead of a CPU-only trace)
            continue
        for rank, (baseline, prediction) in enumerate(zip(baselines, predictions)):
            before, after = _ends(baseline), _ends(prediction)
            assert before.size == after.size, (spec, rank)
            if (after > before).any():
                at = int(np.argmax(after - before))
                found.append(f"{spec}: rank {rank}, iteration {at} ends {(after - before)[at] / 1e3:.1f} µs later")
    return found


@pytest.mark.parametrize("name", CORPUS_TRACES)
def test_no_iteration_of_a_corpus_trace_ends_later(corpus: Path, name: str) -> None:
    assert _later(read_job(corpus / name).traces) == []


@pytest.mark.parametrize("name", H200)
def test_no_iteration_of_an_h200_trace_ends_later(name: str) -> None:
    assert _later(read_job(REPO / "examples" / "h200" / name).traces) == []


def _programs() -> list[Program]:
    rng = np.random.default_rng(2026)

    def launches(count: int, host_bound: bool) -> list[tuple[int, int]]:
        gap, kernel = ((10_000, 60_000), (3_000, 30_000)) if host_bound else ((1_000, 5_000), (20_000, 90_000))
        return [(int(rng.integers(*gap)), int(rng.integers(*kernel))) for _ in range(count)]

    shapes = [{}, {"queue_depth": 30}, {"side_stream_kernel_ns": 300_000}, {"collective_ns": 200_000},
              {"collective_ns": 200_000, "peer_lag": (0.0, 1.0, 0.1, 0.5, 1.0, 0.0)}, {"event_sync": True},
              {"vendor": "hip", "side_stream_kernel_ns": 300_000}, {"legacy": True}]
    return [Program(iterations=5, forward=launches(30, host_bound), backward=launches(40, host_bound),
                    optimizer=launches(10, host_bound), **shape)  # type: ignore[arg-type]
            for shape in shapes for host_bound in (True, False)]


@pytest.mark.parametrize("index", range(len(_programs())))
def test_no_iteration_of_a_generated_trace_ends_later(tmp_path: Path, index: int) -> None:
    path = tmp_path / "generated.json"
    path.write_text(json.dumps(generate(_programs()[index])))
    assert _later(read_job(path, cache=False).traces) == []
