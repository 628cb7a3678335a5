"""width on the cost stage: which sizes are hidden, which axes of an op's inputs hold them, and what a real run of a
wider model did (recorded here at two widths)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.cost.shapes import Tensor, gemm_dims, gemm_flops, parameter_shapes
from daydream.graph import TaskKind, build_graph
from daydream.mapping import PHASES
from daydream.simulate.whatif import transform
from daydream.trace import read_job
from daydream.transforms.batch import BatchShape
from daydream.transforms.kernels import kernel_classes
from daydream.transforms.reshape import ShapedOp
from daydream.transforms.width import LAYER_PHASES, WidthShape, attention_scores, hidden_sizes
from tests.conftest import REPO

#: examples/transformer.py's block at width 256: q, k, v packed (768 x 256), the projection (256 x 256), the MLP's up
#: (1024 x 256) and down (256 x 1024), the layer norms' and biases' vectors.
BLOCK = frozenset({(768, 256), (256, 256), (1024, 256), (256, 1024), (768,), (256,), (1024,)})


def _f(*shape: int) -> Tensor:
    return (tuple(shape), "float")


def test_a_linear_at_as_many_tokens_as_its_width_grows_its_features_not_its_tokens() -> None:
    # 4 samples x 64 positions = 256 tokens through 256-wide layers: the size 256 is both.
    shape = WidthShape(frozenset({256, 768, 1024}), 2.0, BLOCK,
                       BatchShape(4, tokens=frozenset({256}), parameters=BLOCK))
    # q, k, v's forward: bias (768), x (256 tokens x 256), W^T (256 x 768): the features grow, the tokens do not
    assert shape.inputs("aten::addmm", [_f(768), _f(256, 256), _f(256, 768)]) == [_f(1536), _f(256, 512),
                                                                                  _f(512, 1536)]
    assert shape.target((1, 256, 768, 256)) == (1, 256, 1536, 512)
    # the up projection's weight gradient: grad^T (1024 x 256 tokens) x x (256 tokens x 256): the tokens are contracted
    assert shape.inputs("aten::mm", [_f(1024, 256), _f(256, 256)]) == [_f(2048, 256), _f(256, 512)]
    # the head's input gradient: grad (256 tokens x 1000 words) x W (1000 x 256): only the model's width grows
    assert shape.inputs("aten::mm", [_f(256, 1000), _f(1000, 256)]) == [_f(256, 1000), _f(1000, 512)]
    # a 3-D activation grows along its last axis, never its batch or positions
    assert shape.inputs("aten::gelu", [_f(4, 64, 1024)]) == [_f(4, 64, 2048)]
    # attention's heads x head width (4 x 64) holds no hidden size: it does not grow by its shapes
    assert shape.inputs("aten::_scaled_dot_product_flash_attention_for_cpu", [_f(4, 4, 64, 64)] * 3) is None


def test_a_convolutions_channels_grow_never_its_image_or_kernel() -> None:
    # 32 channels on 32 x 32 images: the image's extent is a hidden size too, but only axis 1 is its channels.
    parameters = frozenset({(32, 32, 3, 3), (32, 3, 3, 3), (32, 32, 3), (32,)})
    shape = WidthShape(frozenset({32}), 2.0, parameters, BatchShape(8, parameters=parameters))
    assert shape.inputs("aten::convolution", [_f(8, 32, 32, 32), _f(32, 32, 3, 3), _f(32)]) == [
        _f(8, 64, 32, 32), _f(64, 64, 3, 3), _f(64)]
    # the stem: the image's 3 channels are the data's; only the filters grow
    assert shape.inputs("aten::convolution", [_f(8, 3, 32, 32), _f(32, 3, 3, 3), None]) == [
        _f(8, 3, 32, 32), _f(64, 3, 3, 3), None]
    # a 1-D convolution's activation is channels-first too: (8 samples, 32 channels, 32 steps)
    assert shape.inputs("aten::conv1d", [_f(8, 32, 32), _f(32, 32, 3)]) == [_f(8, 64, 32), _f(64, 64, 3)]


def test_the_hidden_sizes_are_what_the_matching_layers_make() -> None:
    # The stem convolution (3 -> 32 channels) and a block's (32 -> 64) in the matching layers, the head (64 -> 10) not.
    parameters = frozenset({(32, 3, 3, 3), (64, 32, 3, 3), (64,), (10, 64)})
    ops = [ShapedOp(0, "aten::convolution", [_f(8, 3, 16, 16), _f(32, 3, 3, 3), None], None, 0, 0, 0, False, False),
           ShapedOp(1, "aten::convolution", [_f(8, 32, 16, 16), _f(64, 32, 3, 3), _f(64)], None, 0, 1, 0, False,
                    False),
           ShapedOp(2, "aten::addmm", [_f(10), _f(8, 64), _f(64, 10)], None, 0, 2, 0, False, False),
           ShapedOp(3, "aten::mm", [_f(64, 8), _f(8, 10)], None, 0, 3, 0, False, False)]
    forward, backward = PHASES.index("forward"), PHASES.index("backward")
    owner = np.array([0, 1, -1, -1])  # layers 0 and 1 match, layer 2 (the head) does not; the last slot: no layer
    sizes = hidden_sizes(ops, {0: forward, 1: forward, 2: forward, 3: backward}, {0: 0, 1: 1, 2: 2, 3: 1}, owner,
                         parameters)
    assert sizes == {32, 64}  # never the image's 3 channels, nor the head's 10 outputs, nor a backward op's sizes


def test_a_transposed_convolution_makes_its_weights_second_axis() -> None:
    # A generator's first layer, 100 latent channels -> 256 (a ConvTranspose2d's weight is in x out x kernel): 256 is
    # what it makes, the latent's 100 is the data's; as aten::conv_transpose2d and as aten::convolution(transposed=True).
    weight = _f(100, 256, 4, 4)
    arguments = [("tensor", (8, 100, 1, 1), "float", None), ("tensor", (100, 256, 4, 4), "float", None),
                 ("value", None), ("value", [1, 1]), ("value", [0, 0]), ("value", [1, 1]), ("value", True),
                 ("value", [0, 0]), ("value", 1)]
    ops = [ShapedOp(0, "aten::conv_transpose2d", [_f(8, 100, 1, 1), weight], None, 0, 0, 0, False, False),
           ShapedOp(1, "aten::convolution", [_f(8, 100, 1, 1), weight, None], arguments, 0, 1, 0, False, False)]
    forward = PHASES.index("forward")
    for op in ops:
        assert hidden_sizes([op], {op.row: forward}, {op.row: 0}, np.array([0, -1]), frozenset({(100, 256, 4, 4)})) \
            == {256}


def test_attentions_scores_keep_their_time_at_a_fixed_head_count() -> None:
    # 16 samples of 96 tokens through 128-wide blocks of 4 heads: the head width (32) is no hidden size, nor are the
    # scores' 96 x 96. At twice the width the head width grows (the multiplies and the ops on q, k, v: x2), the scores
    # do not (their softmax, dropout, masking: x1).
    parameters = frozenset({(384, 128), (384,), (128, 128), (128,)})
    shape = WidthShape(frozenset({128, 384}), 2.0, parameters,
                       BatchShape(16, tokens=frozenset({1536}), parameters=parameters))

    def ratio(name: str, *tensors: Tensor | None) -> float:
        op = ShapedOp(0, name, list(tensors), None, 0, 0, 0, False, False)
        assert shape.inputs(name, op.tensors) is None  # no hidden size: the op is timed by `unscaled`
        return shape.unscaled(op)[0]

    scores, heads = _f(16, 4, 96, 96), _f(16, 4, 96, 32)
    assert ratio("aten::_safe_softmax", scores, None, None) == 1.0
    assert ratio("aten::dropout", scores, None, None) == 1.0
    assert ratio("aten::where", _f(16, 4, 96, 1), None, scores, scores) == 1.0  # a padding mask over the scores
    assert ratio("aten::_softmax_backward_data", scores, scores, None, None) == 1.0
    assert ratio("aten::mul", heads, None) == 2.0  # q scaled by 1/sqrt(head width)
    assert ratio("aten::bmm", _f(64, 96, 32), _f(64, 32, 96)) == 2.0  # q k^T contracts the head width
    assert ratio("aten::bmm", _f(64, 96, 96), _f(64, 96, 32)) == 2.0  # the scores times v make it
    assert ratio("aten::_scaled_dot_product_flash_attention_for_cpu", heads, heads, heads) == 2.0
    # cross-attention of the 96 tokens over 40 others: scores only where both are known sequence lengths
    assert ratio("aten::_softmax", _f(16, 4, 96, 40), None, None) == 2.0
    crossing = WidthShape(shape.sizes, 2.0, parameters,
                          BatchShape(16, tokens=frozenset({1536, 640}), parameters=parameters))
    cross = _f(16, 4, 96, 40)
    assert crossing.unscaled(ShapedOp(0, "aten::_softmax", [cross, None, None], None, 0, 0, 0, False, False))[0] == 1.0
    assert not attention_scores([_f(16, 4, 96, 96), _f(16, 4, 96, 32)])  # one of its inputs holds the head width


def _record_attention(tmp_path: Path, width: int):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from daydream.api import open_trace
    from daydream.trace import discover

    torch.manual_seed(0)
    embedding = torch.nn.Embedding(50, width)
    layer = torch.nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.1, batch_first=True)
    optimizer = torch.optim.SGD([*embedding.parameters(), *layer.parameters()], lr=0.1, foreach=False)
    tokens = torch.randint(1, 50, (3, 10))
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[:, -2:] = True
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        for _ in range(2):
            layer(embedding(tokens), src_key_padding_mask=padding).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    path = tmp_path / f"attention-{width}.json"
    profile.export_chrome_trace(str(path))
    return open_trace(discover(path)[0])


def test_what_holds_no_hidden_size_grows_where_the_real_wider_attention_grew(tmp_path: Path) -> None:
    """nn.TransformerEncoderLayer (2 heads, a padding mask, dropout) recorded for real at width 16 and 32: of every op
    of the step whose inputs hold no hidden size (the head width, 8, is none; the scores are 10 x 10), `unscaled` keeps
    the time of exactly those whose inputs the wider run's op at the same place had at the same shapes (the scores,
    their softmax, dropout and masks, scalars), and grows the others (q, k, v per head, their multiplies)."""
    from daydream.cost.shapes import OpShapes
    from daydream.mapping import attribute
    from daydream.trace import EventKind
    from daydream.transforms.batch import batch_ops

    narrow, wide = _record_attention(tmp_path, 16), _record_attention(tmp_path, 32)
    phase = attribute(narrow).phase
    rows = narrow.indices(EventKind.CPU_OP)
    parameters = frozenset(parameter_shapes(OpShapes(narrow), rows[phase[rows] == PHASES.index("optimizer")],
                                            np.zeros(0, dtype=np.int64), transposed=False))
    shape = WidthShape(frozenset({16, 32, 48}), 2.0, parameters, batch_ops(narrow, phase, None, 3).shape)
    mine, theirs = _ops(narrow, None), _ops(wide, None)
    assert [n for _, n, _ in mine] == [n for _, n, _ in theirs]
    kept = grew = 0
    for (row, name, tensors), (_, _, real) in zip(mine, theirs):
        if tensors is None or phase[row] not in LAYER_PHASES or shape.inputs(name, tensors) is not None:
            continue
        same = [t[0] if t else None for t in tensors] == [t[0] if t else None for t in real]
        ratio = shape.unscaled(ShapedOp(row, name, tensors, None, 0, 0, 0, False, False))[0]
        assert ratio == (1.0 if same else 2.0), (name, tensors, real)
        kept, grew = kept + same, grew + (not same)
    assert kept > 0 and grew > 0


def _record_mlp(tmp_path: Path, batch: int, width: int):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from daydream.api import open_trace
    from daydream.trace import discover

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.LayerNorm(width), torch.nn.Linear(width, 6))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    x, y = torch.randn(batch, 12), torch.randn(batch, 6)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        for _ in range(2):
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    path = tmp_path / f"mlp-{batch}-{width}.json"
    profile.export_chrome_trace(str(path))
    return open_trace(discover(path)[0])


def _ops(trace, names: tuple[str, ...] | None) -> list[tuple[int, str, list]]:  # type: ignore[no-untyped-def]
    """The trace's CPU ops named `names` (all where None) in time order: (row, name, input tensors)."""
    from daydream.cost.shapes import OpShapes
    from daydream.trace import EventKind

    shapes = OpShapes(trace)
    rows = sorted((r for r in trace.indices(EventKind.CPU_OP).tolist() if names is None or trace.name_of(r) in names),
                  key=lambda r: trace.ts_ns[r])
    return [(r, trace.name_of(r), shapes.tensors(r)) for r in rows]


@pytest.mark.parametrize("batch", [8, 24])
def test_a_recorded_mlp_widened_runs_the_shapes_of_the_real_wider_one(tmp_path: Path, batch: int) -> None:
    """An MLP 12 -> 24 -> 24 -> 6 recorded for real at hidden width 24 and 48: every multiply, layer norm and optimizer
    update of the narrow steps, widened, has the shapes of the wide steps' op at the same place. At a batch of 24 the
    batch is as wide as the layers (the size is both): a multiply of which two dims are 24 (a weight's gradient
    contracts the batch, a layer's forward keeps it as rows) cannot be told apart by its shapes alone, and does the
    wide one's FLOPs."""
    from daydream.cost.shapes import OpShapes
    from daydream.mapping import attribute
    from daydream.trace import EventKind
    from daydream.transforms.batch import batch_ops

    narrow, wide = _record_mlp(tmp_path, batch, 24), _record_mlp(tmp_path, batch, 48)
    phase = attribute(narrow).phase
    rows = narrow.indices(EventKind.CPU_OP)
    parameters = frozenset(parameter_shapes(OpShapes(narrow), rows[phase[rows] == PHASES.index("optimizer")],
                                            np.zeros(0, dtype=np.int64), transposed=False))
    assert parameters == {(24, 12), (24,), (24, 24), (6, 24), (6,)}  # as the model has them
    shape = WidthShape(frozenset({24}), 2.0, parameters, batch_ops(narrow, phase, None, batch).shape)
    names = ("aten::addmm", "aten::mm", "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::add_",
             "aten::mul_")
    mine, theirs = _ops(narrow, names), _ops(wide, names)
    assert len(mine) == len(theirs) > 0 and [n for _, n, _ in mine] == [n for _, n, _ in theirs]
    for (_, name, tensors), (_, _, real) in zip(mine, theirs):
        widened = shape.inputs(name, tensors) or tensors
        if name in ("aten::addmm", "aten::mm") and list(gemm_dims(name, tensors)[1:]).count(24) >= 2 and batch == 24:
            assert gemm_flops(gemm_dims(name, widened)) == gemm_flops(gemm_dims(name, real)), (name, tensors, real)
        elif name in ("aten::addmm", "aten::mm"):
            assert gemm_dims(name, widened) == gemm_dims(name, real), (name, tensors, real)
        else:
            assert [t[0] if t else None for t in widened] == [t[0] if t else None for t in real], (name, tensors)


def test_without_shapes_the_layers_grow_by_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    # The H200 MLP as if it recorded no shapes: its blocks' GEMM kernels x4, their other forward and backward kernels
    # x2 (by hand from the untouched graph), the rest of the step's kernels as they were; the note says it is by ratio.
    import daydream.simulate.whatif as whatif
    from daydream.mapping.attribution import layer_owners
    from daydream.mapping.classes import CLASSES
    from daydream.transforms.width import StepOps

    monkeypatch.setattr(whatif, "step_ops_of", lambda *_: StepOps([], {}, frozenset()))
    trace = read_job(REPO / "examples" / "h200" / "mlp-baseline.json.gz").traces[0]
    graph = build_graph(trace)
    untouched = build_graph(trace)
    notes = transform(graph, trace, [r"width:layers=blocks\.\d+$,factor=2"])
    assert any("no op shapes" in n and "by ratio" in n for n in notes)
    _, owner = layer_owners(untouched.layers, r"blocks\.\d+$")
    tasks = untouched.tasks
    kernels = tasks["kind"] == TaskKind.KERNEL
    mine = kernels & (owner[tasks["layer"]] >= 0) & np.isin(tasks["phase"], [PHASES.index("forward"),
                                                                          PHASES.index("backward")])
    square = np.zeros(mine.size, dtype=bool)
    square[np.flatnonzero(mine)] = np.isin(kernel_classes(untouched, np.flatnonzero(mine)),
                                           [CLASSES.index("gemm"), CLASSES.index("convolution")])
    before, after = tasks["duration_ns"], graph.tasks["duration_ns"][: tasks["duration_ns"].size]
    assert square.sum() > 0 and (mine & ~square).sum() > 0
    assert np.array_equal(after[square], np.rint(before[square] * 4.0).astype(np.int64))
    assert np.array_equal(after[mine & ~square], np.rint(before[mine & ~square] * 2.0).astype(np.int64))
    rest = kernels & ~mine & (tasks["phase"] != PHASES.index("optimizer"))
    assert np.array_equal(after[rest], before[rest])
