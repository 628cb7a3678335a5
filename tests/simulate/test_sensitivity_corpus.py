"""Predictions that move, on every rank of every corpus trace (docs/accuracy.md, "Sensitivity").

With the host 1000x faster, no mean iteration may exceed 1.05 x (its GPU work + baseline/1000) + 1 ms,
where the GPU work is summed straight from the JSON (tests/corpus_facts.py), not by daydream. With the
GPU twice as fast, the prediction must change, or the output must say the step is host-bound and show
the breakdown. A prediction may miss the limit only where the trace cannot explain the waiting (a rank
whose peers are not in the trace) and the output says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.api import open_job
from daydream.mapping import find_iterations
from daydream.simulate.bound import UNEXPLAINED_WARNING_SHARE
from daydream.simulate.whatif import predict_traces
from tests.conftest import CORPUS
from tests.corpus_facts import documents, gpu_work_ns

TRACES = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("**/*.gz")) if CORPUS.is_dir() else ["<corpus missing>"]


def _peers_missing(traces: list, trace) -> bool:  # type: ignore[no-untyped-def]
    world = trace.meta.world_size or 0
    return world > len(traces)


@pytest.mark.parametrize("name", TRACES)
def test_a_host_1000x_faster_leaves_the_gpu_work(corpus: Path, name: str) -> None:
    traces = open_job(corpus / name).traces
    docs = [document for _, document in documents(corpus / name)]
    assert len(docs) == len(traces)
    for trace, document, prediction in zip(traces, docs, predict_traces(traces, ["faster-host:factor=1000"])):
        # The iteration spans are the trace's own annotations (ProfilerStep#N, optimizer steps), as recorded.
        iterations = [(it.start_ns, it.end_ns) for it in find_iterations(trace)]
        assert len(iterations) == len(prediction.per_iteration), name
        work = float(np.mean(gpu_work_ns(document, iterations)))
        limit = 1.05 * (work + prediction.simulated_ns / 1000) + 1e6
        if prediction.predicted_ns <= limit:
            continue
        # Only a rank whose peers are missing may stay above the limit, and it must say why.
        assert _peers_missing(traces, trace), (name, trace.meta.rank, prediction.predicted_ns, limit)
        assert prediction.bound is not None and prediction.bound.unexplained_share > UNEXPLAINED_WARNING_SHARE
        assert any("cannot explain" in warning for warning in prediction.warnings)


@pytest.mark.parametrize("name", TRACES)
def test_a_gpu_twice_as_fast_moves_the_step_or_the_output_says_why(corpus: Path, name: str) -> None:
    traces = open_job(corpus / name).traces
    for trace, prediction in zip(traces, predict_traces(traces, ["faster-gpu:factor=2"])):
        if abs(prediction.speedup - 1) > 0.005:
            continue
        assert prediction.baseline_bound is not None
        assert prediction.baseline_bound.bound == "host", (name, trace.meta.rank, prediction.baseline_bound.as_dict())
        assert any("did not move" in warning and "host-bound" in warning for warning in prediction.warnings)


@pytest.mark.parametrize("name", TRACES)
def test_the_critical_path_is_explained(corpus: Path, name: str) -> None:
    """At most 5% of each replayed iteration's critical path is waiting the trace cannot explain,
    except on a rank whose peers are missing, which says so."""
    traces = open_job(corpus / name).traces
    for trace, prediction in zip(traces, predict_traces(traces, [])):
        for iteration in prediction.per_iteration:
            share = 1 - sum(v for k, v in iteration["bound_by"]["shares"].items() if k not in ("unexplained", "pinned"))
            if share <= UNEXPLAINED_WARNING_SHARE:
                continue
            assert _peers_missing(traces, trace), (name, trace.meta.rank, iteration["name"], share)
            assert any("cannot explain" in warning for warning in prediction.warnings)
