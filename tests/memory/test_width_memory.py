"""`width`'s memory model on a hand-built trace: which allocations grow, and by how much the parameters do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daydream.mapping import attribute
from daydream.mapping.parameters import LayerParameters, hidden_sizes, reading_data, recorded_parameters, widened
from daydream.memory import analyze_memory
from daydream.memory.whatif import predict_memory
from daydream.trace import read_job
from daydream.transforms import parse_spec
from tests.builders import annotation, op, write_trace
from tests.memory.test_timeline import _totals, memory

#: A model of an embedding (10 words of 8 features), one block (an 8 → 8 linear) and a head (8 → 10 classes).
PARAMETERS = {"net.embed": LayerParameters("Embedding", ((10, 8),)),
              "net.blocks.0": LayerParameters("Linear", ((8, 8), (8,))),
              "net.head": LayerParameters("Linear", ((10, 8), (10,)))}
LAYER_BYTES = {path: 4 * sum(rows * (cols[0] if cols else 1) for rows, *cols in layer.shapes)
               for path, layer in PARAMETERS.items()}
WIDTH = r"width:layers=net\.blocks\.\d+$,factor=2"


def _step(base: float) -> list[dict[str, Any]]:
    """Forward: the embedding's output (1,000 bytes), the block's (2,000) and the head's logits (300), all
    freed in backward; backward: the head's gradient of its input (500 bytes, freed at once)."""
    events = [annotation("daydream.phase::forward", base + 10, 30)]
    for offset, (layer, size) in enumerate((("net.embed", 1000), ("net.blocks.0", 2000), ("net.head", 300))):
        start = base + 11 + 9 * offset
        events += [annotation(f"daydream.layer::{layer}", start, 8),
                   op("aten::addmm", start + 1, 6, ext=int(base) + 1 + offset,
                      **{"Sequence number": int(base) + 7 + offset}),
                   memory(start + 2, 7000 + 100 * offset, size, 0)]
    events += [annotation("daydream.phase::backward", base + 50, 30),
               op("autograd::engine::evaluate_function: TBackward0", base + 51, 10, ext=int(base) + 5,
                  **{"Sequence number": int(base) + 9}),
               memory(base + 52, 9000, 500, 0),
               memory(base + 58, 9000, -500, 0),
               op("aten::zero_", base + 69, 6, ext=int(base) + 6),
               *(memory(base + 70 + i, 7000 + 100 * i, -size, 0) for i, size in enumerate((1000, 2000, 300)))]
    return events


def _device(tmp_path: Path):  # type: ignore[no-untyped-def]
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100),
              *_step(0), *_step(100), memory(-5, 1, 5000, 0)]  # 5,000 bytes of weights from before the trace
    _totals(events, before=0)
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    (device,) = analyze_memory(trace)
    return device, attribute(trace).layers


def test_the_hidden_sizes_are_what_the_chosen_layers_write_and_every_parameter_grows_along_them() -> None:
    order = list(PARAMETERS)
    assert hidden_sizes(PARAMETERS, ["net.blocks.0"]) == {8}
    wider = widened(PARAMETERS, order, ["net.blocks.0"], 2.0)
    # The embedding's table grows along its features (its second axis), the head along what it reads: 10 words and 10
    # classes stay. Before: 80 + 72 + 90 = 242 elements; after: 160 + (256 + 16) + (160 + 10) = 602.
    assert wider.ratio == pytest.approx(602 / 242)
    assert wider.writes == {"net.embed", "net.blocks.0"} and wider.reads == {"net.blocks.0", "net.head"}
    assert widened({}, order, ["net.blocks.0"], 2.0).ratio is None


def test_a_first_layer_whose_data_is_as_wide_as_the_blocks_keeps_its_in_features() -> None:
    """An MLP of 256 input features into 256-wide blocks (examples/mlp.py --width 256): the first linear writes the
    blocks' width but reads the data, which no width changes; a norm after it normalizes what it wrote."""
    recorded = {"m.embed": LayerParameters("Linear", ((256, 256), (256,))),
                "m.norm": LayerParameters("LayerNorm", ((256,), (256,))),
                "m.blocks.0": LayerParameters("Linear", ((256, 256), (256,))),
                "m.head": LayerParameters("Linear", ((10, 256), (10,)))}
    wider = widened(recorded, list(recorded), ["m.blocks.0"], 2.0)
    assert "m.embed" in wider.writes and "m.embed" not in wider.reads and "m.norm" in wider.reads
    before = (256 * 256 + 256) + 512 + (256 * 256 + 256) + (10 * 256 + 10)
    after = (512 * 256 + 512) + 1024 + (512 * 512 + 512) + (10 * 512 + 10)
    assert wider.ratio == pytest.approx(after / before)


def test_width_grows_the_layers_that_write_or_read_the_blocks_width(tmp_path: Path) -> None:
    device, layers = _device(tmp_path)
    assert device.peak_allocated_bytes == 5000 + 1000 + 2000 + 300 + 500  # in backward, with the head's gradient

    prediction = predict_memory(device, [parse_spec(WIDTH)], layers, None, None, LAYER_BYTES,
                                layer_parameters=PARAMETERS)
    # The weights × 602/242; the embedding's and the block's activations ×2; the logits stay (10 classes); the head's
    # backward allocation (the gradient of its 8-wide input) ×2.
    assert prediction.predicted_peak_bytes == pytest.approx(5000 * 602 / 242 + 2000 + 4000 + 300 + 1000, abs=1)
    assert "×2.49" in prediction.notes[0] and "2 layer(s) outside them" in prediction.notes[0]


def test_without_recorded_shapes_width_grows_the_matching_layers_only(tmp_path: Path) -> None:
    device, layers = _device(tmp_path)
    prediction = predict_memory(device, [parse_spec(WIDTH)], layers, None, None, LAYER_BYTES)
    # The block's 288 parameter bytes ×4 of all 968: the weights × (968 + 3 × 288) / 968; its activation ×2.
    ratio = (968 + 3 * 288) / 968
    assert prediction.predicted_peak_bytes == pytest.approx(5000 * ratio + 1000 + 4000 + 300 + 500, abs=1)


def test_a_recorded_mlp_widened_holds_what_the_real_wider_one_held(tmp_path: Path) -> None:
    """examples/mlp.py traced at hidden width 256 and 512: `width` of its blocks from the narrow trace against the wide
    trace's own peak (its embedding and head grow with --width too, as do the optimizer's per-parameter temporaries)."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    def run(*arguments: str) -> str:
        done = subprocess.run([sys.executable, "-m", "daydream", *arguments], capture_output=True, text=True,
                              timeout=600, cwd=REPO)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    for width in (256, 512):
        run("trace", "--warmup", "2", "--iterations", "2", "-o", str(tmp_path / f"{width}.json.gz"),
            str(REPO / "examples" / "mlp.py"), "--", "--steps", "5", "--threads", "1", "--width", str(width))
    real = json.loads(run("memory", "--json", str(tmp_path / "512.json.gz")))["devices"][0]["peak_allocated_bytes"]
    narrow = json.loads(run("memory", "--json", str(tmp_path / "256.json.gz")))["devices"][0]["peak_allocated_bytes"]
    predicted = json.loads(run("whatif", str(tmp_path / "256.json.gz"), "--opt", WIDTH.replace("net\\.", ""),
                               "--memory", "--json"))["memory"][0]["predicted_peak_bytes"]
    assert real > 1.5 * narrow  # the wider run holds much more: the comparison can fail
    assert abs(predicted - real) / real < 0.02, (predicted, real, narrow)

    # Its first layer reads the data's 256 features into the 256-wide blocks: the real wider run's multiplies of that
    # layer do twice the FLOPs (its out features grow, its in features do not), and so does the what-if.
    recorded = {width: read_job(tmp_path / f"{width}.json.gz").traces[0] for width in (256, 512)}
    flops = {width: _layer_flops(trace, "MLP.embed") for width, trace in recorded.items()}
    assert flops[256] > 0 and flops[512] == 2 * flops[256]
    parameters = recorded_parameters(recorded[256])
    wider = widened(parameters, attribute(recorded[256]).layers, ["MLP.blocks.0", "MLP.blocks.1", "MLP.blocks.2"], 2.0)
    assert reading_data(parameters, wider, ["MLP.blocks.0", "MLP.blocks.1", "MLP.blocks.2"], 2.0) == {"MLP.embed": 2.0}
    note = json.loads(run("whatif", str(tmp_path / "256.json.gz"), "--opt", "width", "--json"))["ranks"][0]["notes"]
    assert any("MLP.embed: read(s) the data" in line for line in note), note


def _layer_flops(trace, layer: str) -> float:  # type: ignore[no-untyped-def]
    """The FLOPs of the multiplies a layer's forward and backward ran, from the trace's recorded shapes."""
    from daydream.cost.shapes import OpShapes, gemm_dims, gemm_flops
    from daydream.trace import EventKind

    attribution, shapes = attribute(trace), OpShapes(trace)
    index = attribution.layers.index(layer)
    total = 0.0
    for row in trace.indices(EventKind.CPU_OP).tolist():
        if attribution.layer[row] == index and trace.name_of(row) in ("aten::addmm", "aten::mm") and row in shapes:
            dims = gemm_dims(trace.name_of(row), shapes.tensors(row))
            total += gemm_flops(dims) if dims is not None else 0.0
    return total


def test_widths_optimizer_updates_are_measured_at_the_real_wider_models_shapes(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/mlp.py traced at hidden width 384 and 768. With measuring on, `width` of the narrow trace calls the
    optimizer's elementwise updates (Adam's lerp_, mul_, addcmul_, sqrt, div, addcdiv_, add_) again at their wider
    shapes, and each gains what its pair measured more: the (op, first input's shape) it asks for are exactly those the
    real wider run's optimizer ran on a widened parameter, read from that run's own trace (the first layer reads the
    data's 256 features: 768 x 256)."""
    import subprocess
    import sys

    from daydream.cost import CostOptions
    from daydream.cost.measure import POINTWISE_AGAIN, Measurer
    from daydream.cost.shapes import OpShapes
    from daydream.graph import build_graph
    from daydream.mapping import PHASES
    from daydream.simulate.whatif import transform
    from daydream.trace import EventKind
    from tests.conftest import REPO

    for width in (384, 768):
        done = subprocess.run([sys.executable, "-m", "daydream", "trace", "--warmup", "2", "--iterations", "2", "-o",
                               str(tmp_path / f"{width}.json.gz"), str(REPO / "examples" / "mlp.py"), "--", "--steps",
                               "5", "--threads", "1", "--width", str(width)], capture_output=True, text=True,
                              timeout=600, cwd=REPO)
        assert done.returncode == 0, done.stderr[-2000:]
    asked: set[tuple[str, tuple[int, ...]]] = set()

    def pair(_self: Any, name: str, new: list[Any], _old: list[Any], hot: bool = False,
             cold: bool = False) -> tuple[int, int]:
        if name in POINTWISE_AGAIN:
            asked.add((name, next(a[1] for a in new if a[0] == "tensor")))
        return 3_000, 1_000  # measured 2 us more: nothing is run

    monkeypatch.setattr(Measurer, "call_pair_ns", pair)
    monkeypatch.setattr(Measurer, "op_pair_ns", lambda *_a, **_k: (3_000, 1_000))
    narrow, wide = (read_job(tmp_path / f"{w}.json.gz").traces[0] for w in (384, 768))
    notes = transform(build_graph(narrow), narrow, ["width"], cost_options=CostOptions(measure=True))
    phase, shapes = attribute(wide).phase, OpShapes(wide)
    ran = {(wide.name_of(r), shapes.tensors(r)[0][0]) for r in wide.indices(EventKind.CPU_OP).tolist()
           if phase[r] == PHASES.index("optimizer") and wide.name_of(r) in POINTWISE_AGAIN and r in shapes
           and shapes.tensors(r) and shapes.tensors(r)[0] is not None and 768 in shapes.tensors(r)[0][0]}
    assert {name for name, _ in ran} >= {"aten::lerp_", "aten::addcmul_", "aten::addcdiv_", "aten::sqrt"}
    assert ((("aten::lerp_", (768, 256)) in ran) and (("aten::lerp_", (768, 768)) in ran)
            and (("aten::lerp_", (10, 768)) in ran))
    assert asked == ran
    assert "measured" in notes[-1]
