"""batch-size on the cost stage: which inputs carry the batch, how an op's shapes scale, and what a real run at twice
the batch did on the H200 (examples/h200 keeps each example's fp32 baseline and its run at twice the batch)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from daydream.cost import CostOptions
from daydream.cost.elementwise import elementwise_speed
from daydream.cost.host import HostCosts
from daydream.graph import build_graph
from daydream.mapping import PHASES, attribute
from daydream.simulate.whatif import transform, update_loop_of
from daydream.trace import read_job
from daydream.transforms.batch import BatchShape, batch_ops, scale_inputs
from tests.builders import annotation, op, write_trace
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import batch_gpu_time  # noqa: E402

H200 = REPO / "examples" / "h200"


def test_a_sequence_first_input_carries_its_batch_in_dim_1() -> None:
    # nn.LSTM's default layout: (length 35, batch 20, features 200); flattened for the decoder: 35 x 20 = 700 rows.
    shape = BatchShape(20, tokens=frozenset({700}), parameters=frozenset({(800, 200), (200, 800)}))
    assert shape.axis((35, 20, 200)) == 1
    assert shape.axis((700, 200)) == 0
    assert shape.scaled(((35, 20, 200), "float"), 2.0) == ((35, 40, 200), "float")
    # The LSTM's input weight: 800 and 200 are multiples of 20, but it is a parameter's shape.
    assert shape.axis((200, 800)) is None
    assert BatchShape(20).axis((200, 800)) == 0  # without the optimizer's shapes it could not be told apart


def test_weights_are_told_apart_by_the_shapes_the_optimizer_touches() -> None:
    # batch 64, width 512: the weight's 512 is a multiple of 64, so only its being a parameter's shape says no.
    shape = BatchShape(64, parameters=frozenset({(512, 512), (512,)}))
    assert shape.axis((512, 512)) is None and shape.axis((512,)) is None
    assert shape.axis((64, 512)) == 0
    assert shape.axis((64 * 8, 16, 32)) == 0  # heads folded into the batch
    # A weight as wide as the tokens are many (4 samples x 64 positions = 256 = the width) is taken as activation.
    tokens = BatchShape(4, tokens=frozenset({256}), parameters=frozenset({(256, 256)}))
    assert tokens.axis((256, 256)) == 0


def test_a_batch_of_one_is_only_a_leading_one() -> None:
    shape = BatchShape(1, tokens=frozenset({77}))
    assert shape.axis((1, 77, 768)) == 0
    assert shape.axis((768, 1)) is None and shape.axis((3072, 768)) is None  # every size is a multiple of 1
    assert shape.axis((77, 768)) == 0


def test_a_multiply_scales_the_operand_that_carries_the_batch() -> None:
    shape = BatchShape(64, parameters=frozenset({(512, 256), (256, 512), (512,)}))
    # forward x W^T + b: only x grows
    assert scale_inputs("aten::addmm", [((512,), "float"), ((64, 256), "float"), ((256, 512), "float")], shape, 2.0) == \
        [((512,), "float"), ((128, 256), "float"), ((256, 512), "float")]
    # the weight's gradient grad^T x: the inner dimension is the batch, both operands grow along it
    assert scale_inputs("aten::mm", [((512, 64), "float"), ((64, 256), "float")], shape, 2.0) == \
        [((512, 128), "float"), ((128, 256), "float")]
    # nothing carries the batch: a weight's own multiply
    assert scale_inputs("aten::mm", [((512, 256), "float"), ((256, 512), "float")], shape, 2.0) is None


def test_a_multiply_whose_operands_would_no_longer_fit_scales_its_first_one() -> None:
    # 256 tokens and width 256: both operands of x W^T have an axis of 256; growing both would not multiply.
    shape = BatchShape(4, tokens=frozenset({256}), parameters=frozenset({(768, 256), (256, 768)}))
    assert scale_inputs("aten::addmm", [((768,), "float"), ((256, 256), "float"), ((256, 768), "float")], shape, 2.0) == \
        [((768,), "float"), ((512, 256), "float"), ((256, 768), "float")]


def test_a_convolution_scales_its_input_never_its_weight() -> None:
    # batch 16 and 16 output channels: the weight's leading 16 is not the batch
    shape = BatchShape(16)
    assert scale_inputs("aten::mkldnn_convolution", [((16, 3, 32, 32), "float"), ((16, 3, 3, 3), "float"), None],
                        shape, 2.0) == [((32, 3, 32, 32), "float"), ((16, 3, 3, 3), "float"), None]


@pytest.fixture(scope="module")
def h200() -> dict[str, tuple[object, object]]:
    return {name: (read_job(H200 / f"{name}-baseline.json.gz").traces[0], read_job(H200 / f"{name}-batch-x2.json.gz").traces[0])
            for name in ("mlp", "cnn", "transformer")}


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_gpu_time_at_twice_the_batch_is_within_ten_percent_of_the_real_run(name: str) -> None:
    # The kernels' time per iteration, summed: what the GPU did, whatever the host's speed in either run.
    _, predicted, measured = batch_gpu_time.gpu_time(H200, name)
    assert abs(predicted / measured - 1) <= 0.10, (predicted, measured)


def test_the_page_shows_what_the_script_gives() -> None:
    page = (REPO / "docs" / "gpu-validation.md").read_text()
    for name in ("mlp", "cnn", "transformer"):
        before, predicted, measured = batch_gpu_time.gpu_time(H200, name)
        assert f"| {name} | {before / 1e6:.3f} ms | {predicted / 1e6:.3f} ms | {measured / 1e6:.3f} ms |" in page


def test_the_note_names_the_batch_and_where_it_came_from(h200: dict) -> None:
    baseline, _ = h200["transformer"]
    notes = transform(build_graph(baseline), baseline, ["batch-size:factor=2"])
    assert any(note.startswith("batch-size: batch 32 (recorded, tokens 8192) ×2") for note in notes)  # 32 x 256 positions


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_the_optimizers_work_keeps_its_time(h200: dict, name: str) -> None:
    # The optimizer's step touches parameters only: none of its GPU or host work moves.
    baseline, _ = h200[name]
    graph = build_graph(baseline)
    kept = graph.tasks["phase"] == PHASES.index("optimizer")
    assert kept.sum() > 0
    before = graph.tasks["duration_ns"].copy()
    transform(graph, baseline, ["batch-size:factor=2"])
    assert (graph.tasks["duration_ns"][:before.size][kept] == before[kept]).all()


def test_the_batch_is_inferred_from_the_forwards_inputs_when_not_recorded(h200: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    baseline, _ = h200["cnn"]
    monkeypatch.setitem(baseline.meta.collector, "batch_size", None)
    attribution = attribute(baseline)
    found = batch_ops(baseline, attribution.phase, update_loop_of(baseline, attribution))
    assert (found.batch, found.source) == (256, "inferred")  # examples/cnn.py at --batch-size 256
    given = batch_ops(baseline, attribution.phase, update_loop_of(baseline, attribution), batch=128)
    assert (given.batch, given.source) == (128, "given")


def test_a_recorded_batch_that_no_input_carries_gives_way_to_the_inferred_one(h200: dict,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # `daydream trace --batch-size 4096` counting samples that are no axis of any input (an RL rollout's environment
    # steps): the batch that grows is the one the forward's inputs lead with.
    baseline, _ = h200["cnn"]
    monkeypatch.setitem(baseline.meta.collector, "batch_size", 4099)
    attribution = attribute(baseline)
    found = batch_ops(baseline, attribution.phase, update_loop_of(baseline, attribution))
    assert found.batch == 256 and found.source.startswith("inferred: the recorded 4099 is in no op's inputs")
    assert found.ops
    monkeypatch.setitem(baseline.meta.collector, "batch_size", 256)
    recorded = batch_ops(baseline, attribution.phase, update_loop_of(baseline, attribution))
    assert (recorded.batch, recorded.source) == (256, "recorded") and len(recorded.ops) == len(found.ops)


def test_without_shapes_it_says_it_is_by_ratio(corpus: Path) -> None:
    trace = read_job(REPO / "examples" / "traces" / "cnn_v100.json.gz").traces[0]
    graph = build_graph(trace)
    notes = transform(graph, trace, ["batch-size:factor=2"])
    assert any("no op shapes" in n and "by ratio" in n for n in notes)


def test_a_weight_as_wide_as_the_tokens_does_not_grow_with_them() -> None:
    # 4 x 64 = 256 tokens; the MLP's second linear maps 1024 -> 256: its transposed weight (1024, 256) and bias (256)
    # have an axis of 256 too. Only the activation grows: the multiply's FLOPs double, not quadruple.
    shape = BatchShape(4, tokens=frozenset({256}), parameters=frozenset({(256, 1024), (1024, 256), (256,)}))
    inputs = [((256,), "float"), ((256, 1024), "float"), ((1024, 256), "float")]
    assert scale_inputs("aten::addmm", inputs, shape, 2.0) == [((256,), "float"), ((512, 1024), "float"),
                                                               ((1024, 256), "float")]
    # the head's input gradient: grad (256 tokens, 1000) x W (1000, 256): m grows, not n
    assert scale_inputs("aten::mm", [((256, 1000), "float"), ((1000, 256), "float")], shape, 2.0) == \
        [((512, 1000), "float"), ((1000, 256), "float")]


def _mul(ts: float, dur: float, ext: int, width: int) -> dict:
    return op("aten::mul", ts, dur, ext=ext, **{"Input Dims": [[16, width], [16, width]], "Input type": ["float", "float"]})


def test_a_cpu_op_no_longer_than_the_smallest_elementwise_ops_keeps_its_time(tmp_path: Path) -> None:
    # Three iterations of a made-up CPU forward at batch 16: per iteration 20 small multiplies of 4 KB operands (each 3 us: what the
    # trace's smallest elementwise ops take whole, the part of an op's time its bytes do not grow), 4 of them 2 us,
    # and 4 large ones of 4 MiB operands (400 us). At twice the batch a small one keeps its time (its 4 KB more move in no
    # time the trace can see), where keeping one host unit of dispatch would have doubled its 2-3 us past the unit;
    # a large one grows by its time past the 3 us, doubled. The cheap ops give the host unit.
    events, ext = [], 0
    for iteration in range(3):
        base = iteration * 3000.0
        events += [annotation(f"ProfilerStep#{iteration + 1}", base, 2900), annotation("daydream.phase::forward", base, 2800)]
        at = base + 1
        for k in range(24):
            ext += 1
            events.append(_mul(at, 2.0 if k % 6 == 5 else 3.0, ext, 64))
            at += 5
        for _ in range(4):
            ext += 1
            events.append(_mul(at, 400.0, ext, 65536))
            at += 405
        for k in range(30):
            ext += 1
            events.append(op("aten::empty" if k % 2 else "aten::view", at, 1.0, ext=ext))
            at += 2
    trace = read_job(write_trace(tmp_path, events, batch_size=16), cache=False).traces[0]
    assert elementwise_speed(trace, on_gpu=False).overhead_ns == 3000
    unit = HostCosts.of(trace).unit_ns
    assert unit < 2000
    graph = build_graph(trace)
    before = graph.tasks["duration_ns"].copy()
    transform(graph, trace, ["batch-size:factor=2,batch=16"], cost_options=CostOptions(measure=False))
    after = graph.tasks["duration_ns"]
    names = [trace.name_of(int(e)) if e >= 0 else "" for e in graph.tasks["event"].tolist()]
    muls = [t for t, n in enumerate(names) if n == "aten::mul"]
    small = [t for t in muls if before[t] <= 3000]
    large = [t for t in muls if before[t] == 400_000]
    assert len(small) == 72 and len(large) == 12
    assert all(after[t] == before[t] for t in small)
    assert all(after[t] == 400_000 + (400_000 - 3000) for t in large)


def _linear(ts: float, dur: float, ext: int, rows: int) -> dict:
    return op("aten::linear", ts, dur, ext=ext, **{"Input Dims": [[rows, 12], [8, 12], [8]],
                                                     "Input type": ["float", "float", "float"]})


def test_sizes_that_vary_with_the_data_grow_with_the_batch(tmp_path: Path) -> None:
    # Three iterations of a made-up CPU forward at batch 16, as a mixture of experts runs it: a linear of the batch, two
    # experts' linears of the rows routed to each (of 16 x 4: 20 and 44, then 26 and 38, then 30 and 34), and a linear
    # of 24 rows every iteration (a size of the model, not of the data). At twice the batch the routed rows grow with
    # it; the 24 rows do not.
    routed = [(20, 44), (26, 38), (30, 34)]
    events, ext = [], 0
    for iteration, counts in enumerate(routed):
        base = iteration * 3000.0
        events += [annotation(f"ProfilerStep#{iteration + 1}", base, 2900), annotation("daydream.phase::forward", base, 2800)]
        at = base + 1
        for rows in (16, *counts, 24):
            ext += 1
            events.append(_linear(at, 400.0, ext, rows))
            at += 405
    path = write_trace(tmp_path, events, batch_size=16)
    trace = read_job(path, cache=False).traces[0]
    attribution = attribute(trace)
    iteration = np.full(len(trace), -1)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    for number, (start, end) in enumerate(steps):  # by hand: the rows inside each step's annotation
        iteration[(trace.ts_ns >= start * 1000) & (trace.ts_ns < end * 1000)] = number
    found = batch_ops(trace, attribution.phase, None, 16, iteration)
    assert found.shape is not None and found.shape.ragged == {20, 44, 26, 38, 30, 34}
    alone = batch_ops(trace, attribution.phase, None, 16).shape
    assert alone is not None and alone.ragged == frozenset()  # without the iterations nothing is told
    graph = build_graph(trace)
    before = graph.tasks["duration_ns"].copy()
    transform(graph, trace, ["batch-size:factor=2,batch=16"], cost_options=CostOptions(measure=False))
    after = graph.tasks["duration_ns"]
    linears = [t for t, e in enumerate(graph.tasks["event"].tolist()) if e >= 0 and trace.name_of(int(e)) == "aten::linear"]
    assert len(linears) == 12
    grown = [after[t] > before[t] for t in linears]
    # per iteration, in order: the batch's linear and the two experts' grow, the 24 rows' keep their time
    assert grown == [True, True, True, False] * 3


def _multiply(name: str, ts: float, ext: int, first: list[int], second: list[int]) -> dict:
    return op(name, ts, 400.0, ext=ext, **{"Input Dims": [first, second], "Input type": ["float", "float"]})


def test_a_product_of_every_sample_with_every_other_holds_the_batch_twice(tmp_path: Path) -> None:
    # A made-up CPU forward at batch 32 with three multiplies of two activations: a contrastive loss's similarity
    # z z^T (32 x 24 by 24 x 32: every sample against every other), attention's scores over 8 heads of 32 positions
    # (256 x 32 x 16 by 256 x 16 x 32: the batch is in the leading dim, the 32 positions only look like it), and a
    # product with an untrained table (32 x 100 by 100 x 64: 64 columns, a multiple of the batch but not the rows').
    events = [annotation("ProfilerStep#1", 0, 2900), annotation("daydream.phase::forward", 0, 2800),
              _multiply("aten::mm", 1, 1, [32, 24], [24, 32]),
              _multiply("aten::bmm", 500, 2, [256, 32, 16], [256, 16, 32]),
              _multiply("aten::mm", 1000, 3, [32, 100], [100, 64])]
    trace = read_job(write_trace(tmp_path, events, batch_size=32), cache=False).traces[0]
    found = batch_ops(trace, attribute(trace).phase, None, 32)
    shape = found.shape
    assert shape is not None and shape.pairs == {((32, 32), (0, 1))}
    # the similarity: both operands grow along their batch, the product four times over (64 x 24 x 64)
    assert scale_inputs("aten::mm", [((32, 24), "float"), ((24, 32), "float")], shape, 2.0) == \
        [((64, 24), "float"), ((24, 64), "float")]
    # its gradient d(sim) z: the 32 x 32 input grows along both axes, z along its rows (64 x 64 x 24)
    assert scale_inputs("aten::mm", [((32, 32), "float"), ((32, 24), "float")], shape, 2.0) == \
        [((64, 64), "float"), ((64, 24), "float")]
    # what reads the similarity (the mask, the softmax) grows along both axes
    assert shape.scaled(((32, 32), "bool"), 2.0) == ((64, 64), "bool")
    # attention's scores and the table's product grow twice over, as before: one operand (of the scores, its first
    # axis of 32, which doubles the FLOPs as the batch's would)
    assert scale_inputs("aten::bmm", [((256, 32, 16), "float"), ((256, 16, 32), "float")], shape, 2.0) == \
        [((256, 64, 16), "float"), ((256, 16, 32), "float")]
    assert scale_inputs("aten::mm", [((32, 100), "float"), ((100, 64), "float")], shape, 2.0) == \
        [((64, 100), "float"), ((100, 64), "float")]


def test_without_such_a_product_nothing_holds_the_batch_twice(tmp_path: Path) -> None:
    events = [annotation("ProfilerStep#1", 0, 2900), annotation("daydream.phase::forward", 0, 2800),
              _multiply("aten::bmm", 500, 2, [256, 32, 16], [256, 16, 32])]
    trace = read_job(write_trace(tmp_path, events, batch_size=32), cache=False).traces[0]
    shape = batch_ops(trace, attribute(trace).phase, None, 32).shape
    assert shape is not None and shape.pairs == frozenset()
    assert shape.scaled(((32, 32), "float"), 2.0) == ((64, 32), "float")  # the first axis of the batch, as before


def test_a_recorded_contrastive_loss_grows_with_the_square_of_its_batch(tmp_path: Path) -> None:
    """SimCLR's loss recorded for real: 16 samples, two views each (32 rows), a linear encoder to 24 features, the
    32 x 32 similarities over a temperature, the self-pairs masked out, cross entropy against the other view; then
    AdamW's step. At twice the batch the similarity's multiplies do four times the FLOPs, and every op that reads a
    32 x 32 tensor (the mask, the softmax, their backward) reads a 64 x 64 one; the encoder's linear only doubles."""
    torch = pytest.importorskip("torch")
    from daydream.api import open_trace
    from daydream.cost.shapes import gemm_dims, gemm_flops
    from daydream.trace import discover

    encoder = torch.nn.Linear(8, 24)
    optimizer = torch.optim.AdamW(encoder.parameters(), foreach=False)
    x = torch.randn(16, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        z = torch.nn.functional.normalize(encoder(torch.cat([x + 0.1, x - 0.1])), dim=-1)
        similarity = (z @ z.t() / 0.2).masked_fill(torch.eye(32, dtype=torch.bool), float("-inf"))
        targets = torch.cat([torch.arange(16, 32), torch.arange(0, 16)])
        torch.nn.functional.cross_entropy(similarity, targets).backward()
        optimizer.step()
    path = tmp_path / "simclr.json"
    profile.export_chrome_trace(str(path))
    trace = open_trace(discover(path)[0])
    found = batch_ops(trace, attribute(trace).phase, None, 32)
    assert found.shape is not None and found.shape.pairs == {((32, 32), (0, 1))}
    # the similarity's floats; the self-pairs' bool mask takes 1 KiB, as the 32 x 8 float input does: left out
    assert found.pair_bytes() == {32 * 32 * 4}
    products = [o for o in found.ops if o.name in ("aten::mm", "aten::matmul") and not o.wrapper
                and (32, 32) in [t[0] for t in o.tensors if t is not None]
                or o.name == "aten::mm" and [t[0] for t in o.tensors if t is not None] == [(32, 24), (24, 32)]]
    # by hand: z z^T forward, and d(sim) z and d(sim)^T z backward
    assert len(products) == 3
    for product in products:
        scaled = scale_inputs(product.name, product.tensors, found.shape, 2.0)
        assert scaled is not None
        ratio = gemm_flops(gemm_dims(product.name, scaled)) / gemm_flops(gemm_dims(product.name, product.tensors))
        assert ratio == 4.0
    readers = [o for o in found.ops if o.name in ("aten::masked_fill", "aten::_log_softmax",
                                                 "aten::_log_softmax_backward_data")]
    assert {o.name for o in readers} == {"aten::masked_fill", "aten::_log_softmax", "aten::_log_softmax_backward_data"}
    for reader in readers:
        scaled = scale_inputs(reader.name, reader.tensors, found.shape, 2.0)
        assert scaled is not None and all(s[0] == (64, 64) for s, t in zip(scaled, reader.tensors)
                                          if t is not None and t[0] == (32, 32))
    linear = next(o for o in found.ops if o.name == "aten::addmm")
    scaled = scale_inputs(linear.name, linear.tensors, found.shape, 2.0)
    assert scaled is not None and gemm_flops(gemm_dims("aten::addmm", scaled)) == 2 * gemm_flops(gemm_dims("aten::addmm", linear.tensors))


def _forward_steps(tmp_path: Path, shapes: list[list[list[int]]], batch: int):  # type: ignore[no-untyped-def]
    """A made-up CPU trace of one step per entry of `shapes`, each a forward of one linear per input shape (12 features
    to 8), recorded with `batch` as its batch; and each row's step, by hand from the steps' annotations."""
    events, ext = [], 0
    for step, inputs in enumerate(shapes):
        base = step * 3000.0
        events += [annotation(f"ProfilerStep#{step + 1}", base, 2900), annotation("daydream.phase::forward", base, 2800)]
        for index, dims in enumerate(inputs):
            ext += 1
            events.append(op("aten::linear", base + 1 + 405 * index, 400.0, ext=ext,
                             **{"Input Dims": [dims, [8, 12], [8]], "Input type": ["float", "float", "float"]}))
    trace = read_job(write_trace(tmp_path, events, batch_size=batch), cache=False).traces[0]
    iteration = np.full(len(trace), -1)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    for number, (start, end) in enumerate(steps):
        iteration[(trace.ts_ns >= start * 1000) & (trace.ts_ns < end * 1000)] = number
    return trace, iteration


def test_a_batch_whose_size_varies_is_the_models_input_in_each_step(tmp_path: Path) -> None:
    # Graphs of varying size packed into one: the model's input leads with the step's node count (20, 28, 24), and the
    # batch recorded is a warm-up step's (26), in none of them. Each step's node count is its batch: 20 and 24 grow
    # though they are below 26.
    trace, iteration = _forward_steps(tmp_path, [[[20, 12], [20, 12]], [[28, 12], [28, 12]], [[24, 12], [24, 12]]], 26)
    shape = batch_ops(trace, attribute(trace).phase, None, 26, iteration).shape
    assert shape is not None and shape.ragged == {20, 24, 28}


def test_a_sequence_whose_length_varies_is_not_its_batch(tmp_path: Path) -> None:
    # A sequence-first input (length, batch 16, 12 features) whose length changes from step to step (10, 14, 12): every
    # step's input shows the batch, so the lengths it leads with are not batches.
    trace, iteration = _forward_steps(tmp_path, [[[10, 16, 12]], [[14, 16, 12]], [[12, 16, 12]]], 16)
    shape = batch_ops(trace, attribute(trace).phase, None, 16, iteration).shape
    assert shape is not None and shape.ragged == frozenset()


def test_a_list_of_tensors_carries_the_batch_by_its_elements(tmp_path: Path) -> None:
    # aten::cat records its list as one input ("TensorList") holding each element's dims.
    events = [annotation("ProfilerStep#1", 0, 2900), annotation("daydream.phase::forward", 0, 2800),
              op("aten::cat", 1, 400.0, ext=1, **{"Input Dims": [[[16, 8], [16, 24]], []],
                                                  "Input type": ["TensorList", "Scalar"]})]
    trace = read_job(write_trace(tmp_path, events, batch_size=16), cache=False).traces[0]
    found = batch_ops(trace, attribute(trace).phase, None, 16)
    (cat,) = found.ops
    assert cat.name == "aten::cat" and cat.tensors == [((16, 8), "float"), ((16, 24), "float"), None]
    assert found.shape is not None
    assert scale_inputs("aten::cat", cat.tensors, found.shape, 2.0) == [((32, 8), "float"), ((32, 24), "float"), None]


def test_a_weights_transpose_is_a_weight_only_as_a_multiplys_operand() -> None:
    """A batch of 512 beside a [256, 512] weight: the [512, 256] activation after the layer has the weight's transposed
    shape. It carries the batch wherever it is not a multiply's operand (the weight enters its multiply transposed)."""
    shape = BatchShape(512, parameters=frozenset({(256, 512), (512, 256)}), transposed=frozenset({(512, 256)}))
    assert shape.axis((512, 256)) == 0
    assert shape.axis((512, 256), operand=True) is None
    assert shape.axis((256, 512)) is None  # the weight itself
    assert scale_inputs("aten::threshold_backward", [((512, 256), "float"), ((512, 256), "float"), None], shape,
                        2.0) == [((1024, 256), "float"), ((1024, 256), "float"), None]


def test_a_linear_layers_backward_at_a_batch_as_wide_as_the_layer_grows_with_it() -> None:
    """By hand, the backward of a 512 -> 256 linear at a batch of 512: the input's gradient d(out) [512, 256] x W
    [256, 512], both shaped like the weight; the weight's gradient d(out)^T [256, 512] x input [512, 512], which
    contracts the batch. At twice the batch: [1024, 256] x [256, 512], and [256, 1024] x [1024, 512]."""
    from daydream.cost.shapes import gemm_dims, gemm_flops

    shape = BatchShape(512, parameters=frozenset({(256, 512), (512, 256), (256,)}), transposed=frozenset({(512, 256)}))
    grad_input = [((512, 256), "float"), ((256, 512), "float")]
    assert scale_inputs("aten::mm", grad_input, shape, 2.0) == [((1024, 256), "float"), ((256, 512), "float")]
    grad_weight = [((256, 512), "float"), ((512, 512), "float")]
    assert scale_inputs("aten::mm", grad_weight, shape, 2.0) == [((256, 1024), "float"), ((1024, 512), "float")]
    # the forward is as before: its input is no weight's shape
    forward = [((256,), "float"), ((512, 512), "float"), ((512, 256), "float")]
    scaled = scale_inputs("aten::addmm", forward, shape, 2.0)
    assert scaled == [((256,), "float"), ((1024, 512), "float"), ((512, 256), "float")]
    assert gemm_flops(gemm_dims("aten::addmm", scaled)) == 2 * gemm_flops(gemm_dims("aten::addmm", forward))
    # weights only, none with an axis of the batch's size: nothing grows
    assert scale_inputs("aten::mm", [((256, 128), "float"), ((128, 256), "float")], shape, 2.0) is None
    assert scale_inputs("aten::mm", [((256, 512), "float"), ((512, 256), "float")], shape, 2.0) == [
        ((256, 1024), "float"), ((1024, 256), "float")]  # as a 256 -> 256 layer's weight gradient would be


def test_a_recorded_mlp_as_wide_as_its_batch_grows_every_multiply_as_the_real_run_at_twice_the_batch(
        tmp_path: Path) -> None:
    """Recorded for real at a batch of 32 and of 64, an MLP 8 -> 32 -> 16 -> 4 whose hidden width is the batch: every
    multiply of the batch-32 step, scaled by two, does the FLOPs the batch-64 step's multiply at the same place did."""
    torch = pytest.importorskip("torch")
    from daydream.api import open_trace
    from daydream.cost.shapes import OpShapes, gemm_dims, gemm_flops
    from daydream.trace import EventKind, discover

    def record(batch: int) -> object:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
        x, y = torch.randn(batch, 8), torch.randn(batch, 4)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        path = tmp_path / f"mlp{batch}.json"
        profile.export_chrome_trace(str(path))
        return open_trace(discover(path)[0])

    def multiplies(trace: object) -> list[tuple[int, str, list]]:
        shapes = OpShapes(trace)  # type: ignore[arg-type]
        rows = [r for r in trace.indices(EventKind.CPU_OP).tolist()  # type: ignore[attr-defined]
                if trace.name_of(r) in ("aten::mm", "aten::addmm")]  # type: ignore[attr-defined]
        rows.sort(key=lambda r: trace.ts_ns[r])  # type: ignore[attr-defined]
        return [(r, trace.name_of(r), shapes.tensors(r)) for r in rows]  # type: ignore[attr-defined]

    small, large = record(32), record(64)
    found = batch_ops(small, attribute(small).phase, None, 32)  # type: ignore[arg-type]
    assert found.shape is not None
    mine, theirs = multiplies(small), multiplies(large)
    assert len(mine) == len(theirs) == 8  # three forward, five backward (the first layer's input needs no gradient)
    carried = {o.row for o in found.ops}
    for (row, name, tensors), (_, _, real) in zip(mine, theirs):
        assert row in carried, (name, tensors)
        scaled = scale_inputs(name, tensors, found.shape, 2.0)
        assert scaled is not None, (name, tensors)
        assert gemm_flops(gemm_dims(name, scaled)) == gemm_flops(gemm_dims(name, real)), (name, tensors, real)


def test_a_lookup_reads_only_the_rows_its_indices_name() -> None:
    from daydream.cost.shapes import read_bytes

    table, ids, offsets = ((20000, 64), "float"), ((5000,), "long int"), ((512,), "long int")
    # by hand: 5,000 rows of 64 floats, 5,000 ids and 512 offsets of 8 bytes
    assert read_bytes("aten::embedding_bag", [table, ids, offsets]) == 5000 * 64 * 4 + 5000 * 8 + 512 * 8
    # never more than the table
    assert read_bytes("aten::embedding", [table, ((90000,), "long int")]) == 20000 * 64 * 4 + 90000 * 8
    # any other op reads all of each input
    assert read_bytes("aten::index_select", [table, None, ids]) == 20000 * 64 * 4 + 5000 * 8


def test_a_bias_is_never_what_grows() -> None:
    """addmm(bias [32], input [32, 8], weight^T [8, 32]) of a batch of 32 beside a Linear(8, 32), whose weight is [32, 8]
    as the input is: the input grows, the bias cannot (it would no longer add to the product)."""
    shape = BatchShape(32, parameters=frozenset({(32, 8), (8, 32), (32,)}), transposed=frozenset({(8, 32)}))
    assert scale_inputs("aten::addmm", [((32,), "float"), ((32, 8), "float"), ((8, 32), "float")], shape, 2.0) == [
        ((32,), "float"), ((64, 8), "float"), ((8, 32), "float")]
    assert scale_inputs("aten::linear", [((32, 8), "float"), ((32, 8), "float"), ((32,), "float")], shape, 2.0) == [
        ((64, 8), "float"), ((32, 8), "float"), ((32,), "float")]
