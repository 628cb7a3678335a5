"""The measured tier for torch.compile's fused runs (daydream/cost/fused.py): which recorded ops a run
re-runs, how data flows between them, what the compiled program returns, and what it caches. Nothing
here asserts on a time: only on what ran and what was kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.api import open_job
from daydream.cost import fused, measure
from daydream.cost.compiled import FREE_OPS, compiler_view, fused_runs
from daydream.cost.fused import fused_key, fused_steps, fused_times
from daydream.cost.measure import Measurer
from daydream.mapping.linking import innermost_enclosing
from daydream.trace import EventKind

if os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
CNN = REPO / "examples" / "compile" / "round-1" / "cnn-baseline.json.gz"

IMAGE = ("tensor", (4, 3, 8, 8), "float", None)
CHANNEL = ("tensor", (3,), "float", None)
BATCH_NORM = ("aten::batch_norm", [IMAGE, CHANNEL, CHANNEL, CHANNEL, CHANNEL, ("value", True),
                                   ("value", 0.1), ("value", 1e-5), ("value", False)])
RELU = ("aten::relu", [IMAGE])
POOL = ("aten::max_pool2d", [IMAGE, ("value", [2, 2]), ("value", [2, 2]), ("value", [0, 0]),
                             ("value", [1, 1]), ("value", False)])
COUNTER = ("aten::add_", [("tensor", (), "long int", None), ("tensor", (), "long int", None),
                          ("value", 1)])


def _forward_block_ops(trace: Any) -> list[str]:
    """By hand from the trace: the ops the first recorded convolution's module calls after it, up
    to the next convolution, at the top level of its forward (views and the like left out)."""
    ops = trace.indices(EventKind.CPU_OP)
    parent = innermost_enclosing(trace, ops, ops)
    top = ops[parent < 0]
    top = top[np.argsort(trace.ts_ns[top])]
    names = [trace.name_of(r) for r in top.tolist()]
    first = names.index("aten::conv2d")
    after = names[first + 1:]
    return after[:after.index("aten::conv2d")]


def test_a_forward_run_of_the_cnn_is_its_recorded_ops_between_two_convolutions() -> None:
    trace = open_job(CNN).traces[0]
    ops = trace.indices(EventKind.CPU_OP)
    parent = innermost_enclosing(trace, ops, ops)
    top = ops[parent < 0]
    view = compiler_view(trace, top[np.argsort(trace.ts_ns[top])])
    units = [u for row in sorted(view.units, key=lambda r: trace.ts_ns[r]) for u in view.units[row]]
    first = next(i for i, u in enumerate(units) if u.convolution)
    run = fused_runs(units[first + 1:])[0]  # the run after the first convolution
    steps = fused_steps(run, view)
    assert steps is not None
    # what the trace shows between the first two convolutions, free ops left out
    expected = [n for n in _forward_block_ops(trace) if n not in FREE_OPS]
    assert [name for name, _ in steps] == expected
    assert {"aten::batch_norm", "aten::relu", "aten::max_pool2d"} <= set(expected)
    # each step carries its recorded arguments: the batch norm's input is the first convolution's
    # output, as recorded
    norm = next(arguments for name, arguments in steps if name == "aten::batch_norm")
    assert norm[0][0] == "tensor" and len(norm[0][1]) == 4 and norm[5] == ("value", True)


def test_a_backward_unit_runs_the_aten_ops_inside_its_autograd_node() -> None:
    trace = open_job(CNN).traces[0]
    ops = trace.indices(EventKind.CPU_OP)
    parent = innermost_enclosing(trace, ops, ops)
    top = ops[parent < 0]
    view = compiler_view(trace, top)
    nodes = [u for units in view.units.values() for u in units
             if view.name(u.row) == "autograd::engine::evaluate_function: ReluBackward0"]
    assert nodes
    for unit in nodes:
        # by hand: the ops nested in the node, the outermost aten op of them
        inside = [r for r in ops.tolist() if trace.ts_ns[unit.row] <= trace.ts_ns[r] < trace.end_ns[unit.row]
                  and trace.name_of(r).startswith("aten::")]
        outermost = [r for r in inside if not any(trace.ts_ns[o] <= trace.ts_ns[r] and trace.end_ns[r] <= trace.end_ns[o]
                                                  and o != r for o in inside)]
        assert [view.name(r) for r in unit.calls] == [trace.name_of(r) for r in outermost] == ["aten::threshold_backward"]


def test_data_flows_along_the_run_where_shapes_agree() -> None:
    with torch.no_grad():
        plan = fused._plan(torch, [COUNTER, BATCH_NORM, RELU, POOL])
    # the counter's output is a long scalar: the batch norm reads a tensor of its own; the ReLU reads
    # the batch norm's output, the pool the ReLU's
    assert plan.chained == [(-1, None), (-1, None), (0, None), (0, None)]
    # from outside: the counter's two scalars, the image and four per-channel tensors
    assert [tuple(t.shape) for t in plan.made] == [(), (), (4, 3, 8, 8), (3,), (3,), (3,), (3,)]


def test_the_program_returns_only_what_leaves_the_run() -> None:
    with torch.no_grad():
        plan = fused._plan(torch, [COUNTER, BATCH_NORM, RELU, POOL])
        outputs = fused._program(torch, plan)(*plan.made)
    # the counter (updated in place) and the pooled image; the normalized and rectified images stay
    # inside the fused loop
    assert [tuple(o.shape) for o in outputs] == [(), (4, 3, 4, 4)]
    image, weight, bias = plan.made[2], plan.made[3], plan.made[4]
    with torch.no_grad():
        expected = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.batch_norm(
            image, None, None, weight, bias, training=True, eps=1e-5)), 2)
    assert torch.allclose(outputs[1], expected, atol=1e-5)


def test_an_op_whose_scalar_is_passed_by_name_takes_the_overload_that_fits() -> None:
    overload, layout, keywords = fused._resolved(torch, *COUNTER)
    assert str(overload._schema).startswith("aten::add_.Tensor")
    assert keywords == {2: "alpha"} and [kind for kind, _ in layout] == ["tensor", "tensor", "value"]


def test_a_max_pool_backward_gets_the_indices_its_forward_finds() -> None:
    image = torch.randn(2, 3, 8, 8)
    values = [torch.randn(2, 3, 4, 4), image, torch.randint(0, 2, (2, 3, 4, 4))]
    arguments = [("tensor",), ("tensor",), ("value", [2, 2]), ("value", [2, 2]), ("value", [0, 0]),
                 ("value", [1, 1]), ("value", False), ("tensor",)]
    fused._realistic_indices(torch, "aten::max_pool2d_with_indices_backward", arguments, values)
    _, expected = torch.nn.functional.max_pool2d(image, 2, return_indices=True)
    assert torch.equal(values[2], expected)
    table = torch.randn(50, 4)
    lookups = [table, torch.zeros(1000, dtype=torch.long)]
    fused._realistic_indices(torch, "aten::embedding", [("tensor",), ("tensor",)], lookups)
    assert 0 <= int(lookups[1].min()) and int(lookups[1].max()) < 50 and lookups[1].unique().numel() > 2


def test_a_run_is_compiled_once_its_time_cached_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "SAMPLES", 1)  # one process's time is handed on (tests/cost/test_measure.py)
    compiled: list[Any] = []
    real = torch.compile

    def counting(function: Any, **options: Any) -> Any:
        compiled.append(options)
        return real(function, **options)

    monkeypatch.setattr(torch, "compile", counting)
    steps = [BATCH_NORM, RELU, POOL]
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    times = fused_times(measurer, steps, channels_last=True)
    assert times is not None and times.cold > 0 and times.warm > 0
    assert compiled == [{"backend": "inductor", "dynamic": False}]
    key = fused_key(steps, True)
    assert (measurer.cache[key], measurer.cache[f"{key}|warm"]) == (times.cold, times.warm)
    assert key in measurer.ran
    measurer.save()
    again = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    assert fused_times(again, steps, channels_last=True) == times
    assert len(compiled) == 1 and again.ran == []  # read from the cache, not compiled again


def test_a_forward_run_is_compiled_with_gradients_on_and_its_consumer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward run feeding a linear layer: compiled with the layer, which reads the run's output flattened to a
    matrix, gradients on (what ran is recorded around the plan and the timed call)."""
    plans: list[Any] = []
    real_plan = fused._plan
    monkeypatch.setattr(fused, "_plan", lambda t, steps, consumer=False: plans.append(real_plan(t, steps, consumer)) or plans[-1])
    graded: list[bool] = []
    real_graph = fused._graph_ns

    def graph_ns(t: Any, run: Any) -> int:
        graded.append(all(out.requires_grad for out in run() if out.is_floating_point()))
        return real_graph(t, run)

    monkeypatch.setattr(fused, "_graph_ns", graph_ns)
    relu = ("aten::relu", [("tensor", (4, 8, 16), "float", None)])
    # a linear layer of the flattened activation: addmm(bias, input, weight)
    linear = ("aten::addmm", [("tensor", (32,), "float", None), ("tensor", (32, 16), "float", None),
                              ("tensor", (16, 32), "float", None), ("value", 1), ("value", 1)])
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    assert fused_times(measurer, [relu], channels_last=False, training=True, consumer=linear) is not None
    (plan,) = plans
    assert [name for name, _ in plan.steps] == ["aten::relu", "aten::addmm"]
    # the layer reads the ReLU's output as its input matrix, reshaped; the rest comes from outside, all requiring
    # grad as a training step's activation, bias and weight do
    assert plan.chained == [(-1, None), (1, (32, 16))]
    assert [tuple(t.shape) for t in plan.made] == [(4, 8, 16), (32,), (16, 32)] and all(plan.trainable)
    assert graded == [True]
    assert fused_key([relu, linear], False, True) in measurer.cache
    # a backward run is compiled without its consumer and without gradients
    graded.clear()
    assert fused_times(measurer, [relu], channels_last=False, training=False, consumer=linear) is not None
    assert [name for name, _ in plans[-1].steps] == ["aten::relu"] and graded == [False]


def test_running_statistics_do_not_require_grad() -> None:
    assert fused._trainable(torch, *BATCH_NORM) == [True, True, True, False, False]
    assert fused._trainable(torch, *COUNTER) == [False, False]


def test_past_the_compile_budget_a_run_is_not_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled past the budget"))
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path, compile_budget_s=0.0)
    assert fused_times(measurer, [RELU], channels_last=False) is None
    assert measurer.failed[fused_key([RELU], False)] == "over the compiling budget"


def test_a_run_holding_an_op_sized_by_its_values_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nn.GRU over packed sequences: `_pad_packed_sequence` on made-up batch sizes writes past its output (on this
    # project's machine a process running it on [93, 128] data and random 0/1 sizes died of a segmentation fault),
    # so its run is neither run eagerly nor compiled, and falls to the ratio
    monkeypatch.setattr(fused, "_measure", lambda *a, **k: pytest.fail("ran"))
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    packed = [RELU, ("aten::_pad_packed_sequence", [("tensor", (93, 128), "float", None),
                                                    ("tensor", (40,), "long int", None), ("value", True),
                                                    ("value", 0.0), ("value", 40)])]
    assert fused_times(measurer, packed, channels_last=False) is None
    assert "aten::_pad_packed_sequence reads sizes" in measurer.failed[fused_key(packed, False)]


def test_a_run_that_cannot_be_built_falls_back_and_says_why(tmp_path: Path) -> None:
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    broken = [("aten::no_such_op_here", [IMAGE])]
    assert fused_times(measurer, broken, channels_last=False) is None
    assert measurer.failed[fused_key(broken, False)] == "AttributeError"


def test_a_string_argument_the_profiler_left_out_is_passed_its_default(tmp_path: Path) -> None:
    """The profiler records a string argument (gelu's `approximate`) as it records an absent tensor: no type, no
    value. Passed as None, the op failed ("Expected a value of type 'str'") and its run fell to the ratio; a
    transformer's feed-forward GELU and dropout run is timed now."""
    from daydream.api import open_trace
    from daydream.cost.measure import overload_of, unrecorded
    from daydream.cost.shapes import OpShapes
    from daydream.trace import discover

    x = torch.randn(4, 8, 16, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        torch.nn.functional.gelu(x).sum().backward()
    out = tmp_path / "gelu.json"
    profile.export_chrome_trace(str(out))
    trace = open_trace(discover(out)[0])
    shapes = OpShapes(trace)
    rows = {trace.name_of(r): r for r in trace.indices(EventKind.CPU_OP)}
    gelu = shapes.arguments(rows["aten::gelu"])
    backward = shapes.arguments(rows["aten::gelu_backward"])
    assert gelu == [("tensor", (4, 8, 16), "float", None), ("none",)]
    assert backward is not None and backward[-1] == ("none",)
    # the schema's default fills it; an optional argument (sum's dtype) keeps None
    assert unrecorded(torch.ops.aten.gelu.default) == {1: "none"}
    assert unrecorded(torch.ops.aten.sum.dim_IntList) == {2: False}
    assert overload_of(torch.ops.aten.sum, [("tensor",), ("value", [1]), ("value", True), ("none",)]) \
        is torch.ops.aten.sum.dim_IntList
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    assert fused_times(measurer, [("aten::gelu", gelu), ("aten::mul", [gelu[0], gelu[0]])],
                       channels_last=False, training=True) is not None, measurer.failed
    assert fused_times(measurer, [("aten::gelu_backward", backward)], channels_last=False) is not None, measurer.failed
    assert measurer.failed == {}


def test_a_list_of_tensors_is_read_with_its_recorded_shapes_and_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`aten::cat` records its list as "TensorList" with each element's dims (no element type): read as one
    ("tensors", shapes, type) argument where asked for, and a run holding it is compiled with the previous step's
    output as the list's first element."""
    from daydream.api import open_trace
    from daydream.cost.shapes import OpShapes
    from daydream.trace import discover

    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        torch.relu(torch.cat([torch.sigmoid(a), b], 1))
    out = tmp_path / "cat.json"
    profile.export_chrome_trace(str(out))
    trace = open_trace(discover(out)[0])
    shapes = OpShapes(trace)
    rows = {trace.name_of(r): r for r in trace.indices(EventKind.CPU_OP)}
    assert shapes.arguments(rows["aten::cat"]) is None  # callers that do not know lists get none
    cat = shapes.arguments(rows["aten::cat"], lists=True)
    assert cat == [("tensors", ((4, 3), (4, 5)), "float"), ("value", 1)]
    plans: list[Any] = []
    real_plan = fused._plan
    monkeypatch.setattr(fused, "_plan", lambda t, steps, consumer=False: plans.append(real_plan(t, steps, consumer)) or plans[-1])
    sigmoid = ("aten::sigmoid", [("tensor", (4, 3), "float", None)])
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    assert fused_times(measurer, [sigmoid, ("aten::cat", cat), ("aten::relu", [("tensor", (4, 8), "float", None)])],
                       channels_last=False, training=True) is not None, measurer.failed
    (plan,) = plans
    # the cat reads the sigmoid's output as its first element and b from outside; the relu reads the cat's output
    assert plan.chained == [(-1, None), (0, None), (0, None)]
    assert [tuple(t.shape) for t in plan.made] == [(4, 3), (4, 5)] and plan.trainable == [True, True]


def test_an_index_by_a_list_the_profiler_left_out_is_cut_out_of_its_run(tmp_path: Path) -> None:
    """`aten::index` takes its indices as a list of optional tensors, which the profiler records as nothing: the op
    cannot be called again, and a run holding it fell to the ratio whole (a mixture of experts' gather of each
    expert's tokens). Cut around it, the ops before and after it are compiled and timed on their own."""
    from daydream.cost.measure import lacks_argument

    x, keep = torch.randn(16, 8, requires_grad=True), torch.randn(16) > 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        rows = keep.nonzero(as_tuple=True)[0]
        torch.relu(torch.sigmoid(x)[rows] * 2)
    view, units = _recorded_units(profile, tmp_path / "index.json")
    # by hand from the trace: the extern nonzero, then sigmoid, index, mul and relu in one run
    assert [view.name(u.row) for u in units] == ["aten::nonzero", "aten::sigmoid", "aten::index", "aten::mul",
                                                "aten::relu"]
    (run,) = fused_runs(units)
    index = view.shapes.arguments(units[2].row, lists=True)
    assert index == [("tensor", (16, 8), "float", None), ("none",)]
    assert lacks_argument(torch.ops.aten.index, index)
    assert not lacks_argument(torch.ops.aten.gelu, [("tensor", (4,), "float", None), ("none",)])  # has a default
    cut = fused.pieces(run, view)
    assert [([view.name(u.row) for u in piece], steps is not None) for piece, steps in cut] == \
        [(["aten::sigmoid"], True), (["aten::index"], False), (["aten::mul", "aten::relu"], True)]
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    for piece, steps in (cut[0], cut[2]):
        assert steps == fused_steps(piece, view)  # a piece's steps, as its run's would be
        assert steps is not None and fused_times(measurer, steps, channels_last=False, training=True) is not None
    assert measurer.failed == {}


def test_a_packed_sequences_padding_is_cut_out_of_its_run_and_the_rest_is_timed(tmp_path: Path) -> None:
    """Packing and padding a sequence read the batch sizes from their values, so they are not run here (made-up
    sizes wrote past `_pad_packed_sequence`'s output and took the process down): the run holding them is cut around
    them, as around an op that cannot be called again, and the ops before and after are compiled and timed."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    x, lengths = torch.randn(6, 3, 4, requires_grad=True), torch.tensor([6, 4, 2])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        padded, _ = pad_packed_sequence(pack_padded_sequence(torch.sigmoid(x), lengths))
        torch.relu(padded * 2)
    view, units = _recorded_units(profile, tmp_path / "packed.json")
    # by hand from the trace: the sigmoid, the lengths' copy to int64, the two packing ops, the multiply and relu
    assert [view.name(u.row) for u in units] == ["aten::sigmoid", "aten::to", "aten::_pack_padded_sequence",
                                                "aten::_pad_packed_sequence", "aten::mul", "aten::relu"]
    (run,) = fused_runs(units)
    cut = fused.pieces(run, view)
    assert [([view.name(u.row) for u in piece], steps is not None) for piece, steps in cut] == [
        (["aten::sigmoid", "aten::to"], True), (["aten::_pack_padded_sequence"], False),
        (["aten::_pad_packed_sequence"], False), (["aten::mul", "aten::relu"], True)]
    measurer = Measurer(threads=1, budget_s=5.0, folder=tmp_path)
    for _, steps in (cut[0], cut[3]):
        assert steps is not None and fused_times(measurer, steps, channels_last=False, training=True) is not None
    assert measurer.failed == {}


def _recorded_units(profile: Any, out: Path) -> tuple[Any, list[Any]]:
    """A CPU profile exported to `out` and read back: its compiler view of the top-level ops and their units, in
    the order they ran."""
    from daydream.api import open_trace
    from daydream.trace import discover

    profile.export_chrome_trace(str(out))
    trace = open_trace(discover(out)[0])
    ops = trace.indices(EventKind.CPU_OP)
    top = ops[innermost_enclosing(trace, ops, ops) < 0]
    view = compiler_view(trace, top[np.argsort(trace.ts_ns[top])])
    return view, [u for row in sorted(view.units, key=lambda r: trace.ts_ns[r]) for u in view.units[row]]
