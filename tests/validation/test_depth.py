"""depth: predicted from a 2-block transformer, against the same transformer built with 4 blocks (traced on the CPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from daydream.api import open_job, predict_job
from daydream.cli import main
from daydream.cost.shapes import OpShapes, gemm_dims, gemm_flops
from daydream.graph import TaskKind, build_graph
from daydream.mapping import PHASES, attribute
from daydream.simulate.whatif import batch_ops_of, step_ops_of, update_loop_of
from daydream.trace import EventKind
from daydream.transforms.width import WidthShape
from tests.builders import load_raw
from tests.conftest import REPO

if os.environ.get("CI") == "true":
    import torch  # noqa: F401
else:
    pytest.importorskip("torch")


def _transformers(folder: Path, flag: str, values: tuple[int, ...]) -> dict[int, Path]:
    """examples/transformer.py traced once per value of `flag` (--depth, --width)."""
    traces = {}
    for value in values:
        out = folder / f"transformer{flag}-{value}.json.gz"
        assert main(["trace", "--backend", "torch", "--warmup", "2", "--iterations", "3", "-o", str(out),
                     str(REPO / "examples" / "transformer.py"), "--", "--steps", "8", flag, str(value)]) == 0
        traces[value] = out
    return traces


@pytest.fixture(scope="module")
def depths(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return _transformers(tmp_path_factory.mktemp("depth"), "--depth", (2, 4))


def _forward_ops(graph_tasks: dict[str, np.ndarray], iteration: int) -> int:
    return int(((graph_tasks["phase"] == PHASES.index("forward")) & (graph_tasks["kind"] == TaskKind.HOST_OP)
                & (graph_tasks["iteration"] == iteration)).sum())


def test_twice_as_deep_runs_the_deeper_models_forward(depths: dict[int, Path]) -> None:
    [prediction] = predict_job(depths[2], ["depth:factor=2"])
    deeper = build_graph(open_job(depths[4]).traces[0])
    assert prediction.graph is not None
    for iteration in range(3):
        assert _forward_ops(prediction.graph.tasks, iteration) == _forward_ops(deeper.tasks, iteration)
    # The optimizer's work grows as the parameters do: the 4-block model's own count over the 2-block one's.
    sizes = [sum(info["gradient_bytes"] for info in load_raw(depths[d])["daydream"]["layers"].values()) for d in (2, 4)]
    assert any("optimizer's" in note and f"×{sizes[1] / sizes[0]:.2f}" in note for note in prediction.notes)


def test_twice_as_deep_fits_the_deeper_models_memory(depths: dict[int, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "--json", str(depths[4])]) == 0
    measured = json.loads(capsys.readouterr().out)["devices"][0]["peak_allocated_bytes"]
    assert main(["whatif", str(depths[2]), "--opt", "depth:factor=2", "--memory", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["memory"][0]["predicted_peak_bytes"]
    assert abs(predicted - measured) <= 0.05 * measured


@pytest.fixture(scope="module")
def widths(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return _transformers(tmp_path_factory.mktemp("width"), "--width", (256, 512))


def test_twice_as_wide_blocks(widths: dict[int, Path], capsys: pytest.CaptureFixture[str]) -> None:
    [prediction] = predict_job(widths[256], [r"width:layers=blocks\.\d+$,factor=2"])
    # The blocks make 256 (the residual stream, the projections), 768 (q, k and v packed) and 1024 (the MLP's inside).
    assert any("hidden sizes 256/768/1024" in note for note in prediction.notes)
    # Every multiply of the narrow step, widened, does the FLOPs of the wide step's multiply at the same place: the
    # embedding's output and the head's input grow with the blocks (the tokens, 8 x 64 here, never).
    narrow, wide = (open_job(widths[w]).traces[0] for w in (256, 512))
    attribution = attribute(narrow)
    update = update_loop_of(narrow, attribution)
    step, batch = step_ops_of(narrow, attribution, update), batch_ops_of(narrow, attribution, update)
    shape = WidthShape(frozenset({256, 768, 1024}), 2.0, step.parameters, batch.shape)
    mine, theirs = _multiplies(narrow), _multiplies(wide)
    assert len(mine) == len(theirs) > 0
    for (name, tensors), (_, real) in zip(mine, theirs):
        widened = shape.inputs(name, tensors)
        assert widened is not None, (name, tensors)
        assert gemm_flops(gemm_dims(name, widened)) == gemm_flops(gemm_dims(name, real)), (name, tensors, real)
    # The wider model's real peak: the blocks' activations and every parameter grow, the embedding's and the head's
    # too (their tables and weights, the embedding's output, the gradient of the head's input): within 2%. Before the
    # layers outside the blocks grew, the prediction was about 5% short.
    assert main(["memory", "--json", str(widths[512])]) == 0
    measured = json.loads(capsys.readouterr().out)["devices"][0]["peak_allocated_bytes"]
    assert main(["whatif", str(widths[256]), "--opt", r"width:layers=blocks\.\d+$,factor=2", "--memory", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["memory"][0]["predicted_peak_bytes"]
    assert abs(predicted - measured) <= 0.02 * measured, (predicted, measured)


def _multiplies(trace) -> list[tuple[str, list]]:  # type: ignore[no-untyped-def]
    """The trace's matrix multiplies in the order they ran (a linear's and a matmul's inner ones: they do its work)."""
    shapes = OpShapes(trace)
    names = ("aten::addmm", "aten::mm", "aten::bmm")
    rows = sorted((r for r in trace.indices(EventKind.CPU_OP).tolist() if trace.name_of(r) in names),
                  key=lambda r: trace.ts_ns[r])
    return [(trace.name_of(r), shapes.tensors(r)) for r in rows]
