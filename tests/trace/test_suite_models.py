"""examples/suite: each model trains under `daydream trace`, with layers, phases and a replay that holds.

Counts, not times: the share of forward CPU ops on a leaf module is the same on every run.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from daydream.cli import main
from daydream.mapping import PHASES, attribute, find_iterations
from daydream.simulate import replay_trace
from daydream.trace import EventKind, read_job
from daydream.trace.model import batch_size
from tests.builders import load_raw
from tests.conftest import REPO

if os.environ.get("CI") == "true":
    import torch  # noqa: F401  (in CI the test extras install torch; its absence is a failure)
else:
    pytest.importorskip("torch")

#: model -> the module types that must appear among its layers (what makes it that model)
MODELS = {
    "resnet": {"Conv2d", "BatchNorm2d", "BasicBlock"},
    "translation": {"EncoderLayer", "DecoderLayer", "Heads"},
    "speech": {"Conv2d", "GRU"},
    "detection": {"Conv2d", "PerAnchor"},
    "dcgan": {"ConvTranspose2d", "Conv2d"},
    "a2c": {"Linear"},
}


@pytest.fixture(scope="module")
def suite_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("suite")
    traces = {}
    for name in MODELS:
        out = folder / f"{name}.json.gz"
        assert main(["trace", "--backend", "torch", "--warmup", "1", "--iterations", "2", "-o", str(out),
                     str(REPO / "examples" / "suite" / f"{name}.py"), "--", "--steps", "4"]) == 0, name
        traces[name] = out
    return traces


@pytest.mark.parametrize("name", MODELS)
def test_each_suite_model_is_traced_with_layers_phases_and_a_replay(suite_traces: dict[str, Path], name: str) -> None:
    raw = load_raw(suite_traces[name])
    recorded = raw["daydream"]["layers"]
    assert MODELS[name] <= {info["type"] for info in recorded.values()}
    trace = read_job(suite_traces[name], cache=False).traces[0]
    assert len(find_iterations(trace)) == 2
    attribution = attribute(trace)
    assert attribution.source == "daydream markers"
    ops = trace.indices(EventKind.CPU_OP)
    phases = attribution.phase[ops]
    for phase in ("forward", "backward", "optimizer"):
        assert (phases == PHASES.index(phase)).any(), phase
    forward = ops[phases == PHASES.index("forward")]
    on_leaf = np.append(attribution.leaf, False)[attribution.layer[forward]]
    assert on_leaf.mean() >= 0.95, (name, on_leaf.mean())
    replay = replay_trace(trace)
    assert all(it.error <= 0.03 for it in replay.iterations), [it.error for it in replay.iterations]


@pytest.mark.parametrize("name, leading", [("resnet", 16), ("translation", 16), ("speech", 8), ("a2c", 64)])
def test_the_batch_size_is_the_leading_dimension_of_the_first_input(suite_traces: dict[str, Path], name: str,
                                                                    leading: int) -> None:
    # The scripts' default --batch-size: the first input of each model's forward has it as its first dimension.
    assert load_raw(suite_traces[name])["daydream"]["batch_size"] == leading
    assert batch_size(read_job(suite_traces[name], cache=False).traces[0]) == leading


def test_throughput_in_inspect_whatif_and_the_sweep(suite_traces: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tests.builders import ns

    path = suite_traces["resnet"]
    raw = load_raw(path)
    steps = [ns(e["dur"]) for e in raw["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    batch = raw["daydream"]["batch_size"]
    assert main(["inspect", "--json", str(path)]) == 0
    rank = json.loads(capsys.readouterr().out)["ranks"][0]
    assert rank["batch_size"] == batch
    assert rank["samples_per_s"] == pytest.approx(batch * 1e9 / (sum(steps) / len(steps)), rel=1e-9)
    assert main(["whatif", str(path), "--opt", "batch-size:factor=2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["batch_size"] == {"baseline": batch, "predicted": 2 * batch}
    assert summary["samples_per_s"]["predicted"] == pytest.approx(2 * batch * 1e9 / summary["iteration_ns"]["predicted"])
    assert main(["whatif", str(path), "--opt", "batch-size", "--sweep", "factor=1,3", "--json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    for point, factor in zip(points, (1, 3)):
        assert point["samples_per_s"] == pytest.approx(factor * batch * 1e9 / point["predicted_ns"])


def test_trace_batch_size_overrides_the_first_input(tmp_path: Path) -> None:
    out = tmp_path / "a2c.json.gz"
    assert main(["trace", "--batch-size", "1024", "--warmup", "1", "-n", "1", "-o", str(out),
                 str(REPO / "examples" / "suite" / "a2c.py"), "--", "--steps", "3"]) == 0
    assert load_raw(out)["daydream"]["batch_size"] == 1024
