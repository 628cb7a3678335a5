"""Distributed what-ifs from the command line: the sweep table, its plot, and whole jobs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from daydream.api import predict_job
from daydream.cli import main
from daydream.graph import TaskKind
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"

REPO = Path(__file__).resolve().parents[2]


def test_sweep_prints_one_point_per_value_and_draws_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "scaling.png"
    code = main(["whatif", str(EXAMPLE), "--opt", "ddp:params=97MB,bandwidth=2", "--sweep", "world=1,2,8", "--plot", str(plot), "--json"])
    assert code == 0
    sweep = json.loads(capsys.readouterr().out)
    assert sweep["parameter"] == "world" and sweep["values"] == ["1", "2", "8"]
    times = [p["predicted_ns"] for p in sweep["points"]]
    assert times[0] == sweep["baseline_ns"]  # one rank: no communication, the baseline
    assert times[0] < times[1] < times[2]  # a 2 GB/s link cannot hide 97 MB behind this step's backward
    for point, ranks in zip(sweep["points"], (1, 2, 8)):
        assert point["scaling_efficiency"] == pytest.approx(sweep["baseline_ns"] / point["predicted_ns"])
        assert point["relative_throughput"] == pytest.approx(ranks * point["scaling_efficiency"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["whatif", str(EXAMPLE), "--opt", "amp", "--sweep", "world=1,2"]) == 2
    assert "has a parameter 'world'" in capsys.readouterr().err
    assert main(["whatif", str(EXAMPLE), "--opt", "amp", "--plot", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()
    assert main(["whatif", str(EXAMPLE), "--opt", "ddp:params=97MB", "--sweep", "world"]) == 2


def test_a_job_is_predicted_with_its_ranks_together(corpus: Path) -> None:
    predictions = predict_job(corpus / "param/et_replay_inputs/dlrm_kineto.tar.gz", ["comm:factor=0.25"])
    assert len(predictions) == 8
    ends: dict[int, set[int]] = {}
    for prediction in predictions:
        assert prediction.graph is not None and prediction.timeline is not None
        tasks = prediction.graph.tasks
        for task in np.flatnonzero(tasks["kind"] == TaskKind.COLLECTIVE).tolist():
            ends.setdefault(int(tasks["collective"][task]), set()).add(int(prediction.timeline.end_ns[task]))
        # Four times slower communication cannot make a step faster.
        assert prediction.predicted_ns >= prediction.simulated_ns
    assert len(ends) == 8 and all(len(e) == 1 for e in ends.values())


def test_a_slow_link_predicts_a_steady_loop_from_the_first_iteration_on() -> None:
    # The bundled DDP rank's host launches 222 ms of work per iteration without waiting for its GPU; under a 0.1 GB/s
    # link its 97.5 MiB all-reduce takes ~1.8 s, so each iteration's host work runs behind the previous one's
    # communication. The first recorded iteration has a warm-up iteration to run behind, as the real loop's unrecorded
    # ones; without it the first would be ~100 ms (5%) longer than the others.
    [prediction] = predict_job(REPO / "examples" / "traces" / "ddp_a100_rank0.json.gz",
                               ["no-comm", "ddp:world=8,bandwidth=0.1"])
    times = [it["predicted_ns"] for it in prediction.per_iteration]
    assert len(times) == 3 and min(times) > 1.5e9
    assert max(times) / min(times) - 1 < 0.02
