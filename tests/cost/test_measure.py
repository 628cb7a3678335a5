"""The measured tier: what it runs (the recorded shapes and dtypes), its cache (reused, validated) and its budget.
Nothing here asserts on a time: only on what ran and what was kept."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daydream.cost import measure
from daydream.cost.measure import CACHE_VERSION, Measurer, measuring_enabled
from tests.builders import bf16_lstm_runs_here

if os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch")

MM = [((8, 16), "float"), ((16, 4), "float")]


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[tuple[int, ...], Any]]]:
    """Wrap the runner so that every call records the shapes and dtypes of the tensors it got."""
    seen: list[list[tuple[tuple[int, ...], Any]]] = []
    real = measure._runner

    def runner(name: str) -> Any:
        inner = real(name)
        if inner is None:
            return None

        def run(t: Any, xs: list[Any]) -> Any:
            seen.append([(tuple(x.shape), x.dtype) for x in xs])
            return inner(t, xs)

        return run

    monkeypatch.setattr(measure, "_runner", runner)
    return seen


def _one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's time of a signature taken from one process alone, as it is handed on once `measure.SAMPLES` have
    measured it: tests of what is reused, not of how often."""
    monkeypatch.setattr(measure, "SAMPLES", 1)


def _made_tensors(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every tensor the measured tier makes from here on."""
    made: list[Any] = []
    real = measure.make_tensor

    def recording(*a: Any) -> Any:
        made.append(real(*a))
        return made[-1]

    monkeypatch.setattr(measure, "make_tensor", recording)
    return made


def test_it_runs_the_op_at_the_recorded_shapes_in_the_asked_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recording(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.op_ns("aten::mm", MM, as_type="c10::BFloat16") > 0
    assert seen and all(call == [((8, 16), torch.bfloat16), ((16, 4), torch.bfloat16)] for call in seen)
    assert len(seen) == measure.WARMUP + measure.REPETITIONS
    seen.clear()
    assert measurer.op_ns("aten::mm", MM) > 0
    assert seen[0] == [((8, 16), torch.float32), ((16, 4), torch.float32)]


def test_the_cache_is_reused_by_the_next_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_process(monkeypatch)
    first = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    value = first.op_ns("aten::mm", MM)
    first.save()
    seen = _recording(monkeypatch)
    again = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert again.op_ns("aten::mm", MM) == value
    assert seen == [] and again.ran == []  # from the cache, nothing run
    # Another thread count is another machine configuration: its own file.
    assert Measurer(threads=2, budget_s=30.0, folder=tmp_path).path != again.path


@pytest.mark.parametrize("content", ["not json", json.dumps({"version": CACHE_VERSION + 1, "ns": {}}),
                                     json.dumps({"version": CACHE_VERSION, "ns": {"x": [-5], "y": ["fast"], "z": [], "w": 5}}),
                                     json.dumps([1, 2, 3])])
def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path: Path, content: str) -> None:
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    measurer.path.write_text(content)
    fresh = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert fresh.cache == {}
    assert fresh.op_ns("aten::mm", MM) > 0 and fresh.ran
    fresh.save()
    stored = json.loads(fresh.path.read_text())
    assert stored["version"] == CACHE_VERSION and stored["ns"] and all(
        len(v) == 1 and isinstance(v[0], int) and v[0] > 0 for v in stored["ns"].values())


def test_a_cache_entry_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    os.mkfifo(measurer.path)
    assert Measurer(threads=1, budget_s=30.0, folder=tmp_path).cache == {}  # returns at once: never opened


def test_past_the_budget_and_for_unknown_ops_it_answers_none(tmp_path: Path) -> None:
    spent = Measurer(threads=1, budget_s=0.0, folder=tmp_path)
    assert spent.op_ns("aten::mm", MM) is None
    assert "budget" in next(iter(spent.failed.values()))
    unknown = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert unknown.op_ns("aten::frobnicate", MM) is None
    assert unknown.op_ns("aten::mm", [((8, 16), "float"), ((5, 4), "float")]) is None  # shapes that do not multiply
    assert "RuntimeError" in unknown.failed.values()


def test_measuring_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYDREAM_MEASURE", raising=False)
    assert measuring_enabled(None) and not measuring_enabled(False)
    monkeypatch.setenv("DAYDREAM_MEASURE", "0")
    assert not measuring_enabled(None) and measuring_enabled(True)


CONV = [("tensor", (2, 3, 8, 8), "float"), ("tensor", (4, 3, 3, 3), "float"), ("none",), ("value", [1, 1]),
        ("value", [1, 1]), ("value", [1, 1]), ("value", 1)]


def test_a_convolution_is_called_again_with_its_recorded_arguments(tmp_path: Path) -> None:
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.call_ns("aten::conv2d", CONV, as_type="c10::BFloat16") > 0
    strided = [*CONV[:3], ("value", [2, 2]), *CONV[4:]]
    assert measurer.call_ns("aten::conv2d", strided) > 0
    assert len(measurer.ran) == 2 and measurer.ran[0] != measurer.ran[1]  # the arguments are part of the signature
    assert '"c10::BFloat16"' in measurer.ran[0] and "[2, 2]" in measurer.ran[1]
    # A transposed convolution (a generator's upsampling) too: its weight is (in, out, kh, kw), its arguments end with
    # output_padding, groups and dilation.
    transposed = [("tensor", (2, 4, 4, 4), "float"), ("tensor", (4, 3, 4, 4), "float"), ("none",), ("value", [2, 2]),
                  ("value", [1, 1]), ("value", [0, 0]), ("value", 1), ("value", [1, 1])]
    assert measurer.call_ns("aten::conv_transpose2d", transposed, as_type="c10::BFloat16") > 0
    assert measurer.ran[2].startswith("aten::conv_transpose2d|call|") and '"c10::BFloat16"' in measurer.ran[2]
    # Ops outside CALLED_AGAIN are never called from their recorded arguments (a size list could ask for anything).
    assert measurer.call_ns("aten::empty", [("value", [2**40])]) is None


def test_recorded_arguments_are_read_from_the_trace(tmp_path: Path) -> None:
    from daydream.api import open_trace
    from daydream.cli import main
    from daydream.cost.shapes import OpShapes
    from daydream.trace import EventKind, discover
    from tests.builders import load_raw
    from tests.conftest import REPO

    out = tmp_path / "cnn.json.gz"
    assert main(["trace", "--warmup", "1", "--iterations", "1", "-o", str(out), str(REPO / "examples" / "cnn.py"), "--",
                 "--steps", "3", "--batch-size", "2"]) == 0
    convs = [e for e in load_raw(out)["traceEvents"] if e.get("name") == "aten::conv2d"]
    trace = open_trace(discover(out)[0])
    rows = [r for r in trace.indices(EventKind.CPU_OP) if trace.name_of(r) == "aten::conv2d"]
    assert len(rows) == len(convs) > 0
    shapes = OpShapes(trace)
    for row, event in zip(rows, convs):
        arguments = shapes.arguments(row)
        assert arguments is not None
        assert [a[1] for a in arguments if a[0] == "tensor"] == [tuple(d) for d in event["args"]["Input Dims"] if d]
        assert [json.dumps(a[1]) for a in arguments if a[0] == "value"] == [c for c in event["args"]["Concrete Inputs"] if c]


def test_a_ratio_runs_both_signatures_in_turns_and_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_process(monkeypatch)
    seen = _recording(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    bigger = [((16, 16), "float"), ((16, 4), "float")]
    ratio = measurer.op_ratio("aten::mm", bigger, MM)
    assert ratio is not None and ratio > 0
    shapes = [tuple(shape for shape, _ in call) for call in seen]
    timed = shapes[2 * measure.WARMUP:]
    # warm-ups of each, then the two alternate, new first
    assert shapes[:measure.WARMUP] == [((16, 16), (16, 4))] * measure.WARMUP
    assert timed == [((16, 16), (16, 4)), ((8, 16), (16, 4))] * measure.REPETITIONS
    measurer.save()
    seen.clear()
    again = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert again.op_ratio("aten::mm", bigger, MM) == pytest.approx(ratio, abs=1e-6) and seen == []


def test_a_hot_ratio_is_the_hot_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # batch-size's ratio: the two signatures timed in turns with the caches as the previous run left them
    seen = _recording(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    bigger = [((16, 16), "float"), ((16, 4), "float")]
    ratio = measurer.op_ratio("aten::mm", bigger, MM, hot=True)
    assert ratio is not None and len(seen) == 2 * (measure.WARMUP + 2 * measure.REPETITIONS)
    # primed: each timed run follows an untimed one of its own signature, not the other's
    shapes = [tuple(shape for shape, _ in call) for call in seen][2 * measure.WARMUP:]
    assert shapes == [((16, 16), (16, 4))] * 2 + [((8, 16), (16, 4))] * 2 + \
        ([((16, 16), (16, 4))] * 2 + [((8, 16), (16, 4))] * 2) * (measure.REPETITIONS - 1)
    assert measurer.ran == [next(k for k in measurer.cache if k.startswith("pair-primed|"))]
    hot = measurer.op_pair_ns("aten::mm", bigger, MM, hot=True)
    assert hot is not None and ratio == pytest.approx(hot[0] / hot[1], rel=1e-5) and len(measurer.ran) == 1
    assert all(k.startswith("pair-primed|") for k in measurer.cache)  # a ratio is its pair's: not kept apart
    # the emptied-caches ratio is another measurement
    assert measurer.op_ratio("aten::mm", bigger, MM) is not None and len(measurer.ran) == 2
    assert measurer.ran[1].startswith("pair|")


def test_a_tensor_is_made_in_its_recorded_memory_order() -> None:
    from daydream.cost.shapes import memory_order

    assert memory_order((16, 128, 8, 8), (8192, 1, 1024, 128)) == (0, 2, 3, 1)  # channels-last, from a real trace
    assert memory_order((16, 128, 8, 8), (8192, 64, 8, 1)) is None  # contiguous
    assert memory_order((512, 64), (1, 512)) == (1, 0)  # a transposed weight
    assert memory_order((1, 3, 1, 1), (3, 1, 3, 3)) is None  # only size-1 dims differ: nothing to say
    made = measure.make_tensor(torch, (2, 3, 4, 5), "float", (0, 2, 3, 1))
    assert tuple(made.shape) == (2, 3, 4, 5) and made.is_contiguous(memory_format=torch.channels_last)
    assert not made.is_contiguous()
    assert measure.make_tensor(torch, (2, 3), "float", None).is_contiguous()


def test_floating_inputs_require_grad_as_in_a_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A training step's weights and activations require grad, and ATen picks its path by it: torch.matmul folds a
    # transposed 3D input (nn.MultiheadAttention's with batch_first=True) into one matrix multiply where the weight
    # requires grad, and runs batched multiplies of the broadcast weight where it does not.
    made = _made_tensors(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    linear = [((65, 4, 8), "c10::BFloat16", (1, 0, 2)), ((12, 8), "c10::BFloat16"), ((12,), "c10::BFloat16")]
    assert measurer.op_pair_ns("aten::linear", linear, [(t[0], "float", *t[2:]) for t in linear], hot=True) is not None
    assert made and all(t.requires_grad and t.is_leaf for t in made)
    transposed = [t for t in made if tuple(t.shape) == (65, 4, 8)]
    assert transposed and all(t.stride() == (8, 65 * 8, 1) for t in transposed)  # still laid out as recorded
    assert not measure.make_tensor(torch, (3, 4), "long int").requires_grad
    with torch.profiler.profile() as profile, torch.no_grad():
        measure._runner("aten::linear")(torch, [measure.make_tensor(torch, *t) for t in linear])
    ran = {event.name for event in profile.events()}
    assert "aten::bmm" not in ran and ran & {"aten::mm", "aten::addmm"}


def test_a_channels_last_convolution_is_measured_channels_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The order read from the trace's "Input Strides" reaches the tensors the measured tier runs on, and is part of
    # the signature (a channels-last convolution is not timed as a contiguous one).
    from daydream.api import open_trace
    from daydream.cost.shapes import OpShapes
    from daydream.trace import EventKind, discover
    from tests.builders import op, write_trace

    args = {"Input Dims": [[2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []],
            "Input type": ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
            "Input Strides": [[192, 1, 24, 3], [27, 1, 9, 3], [], [], [], [], []],
            "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]}
    path = write_trace(tmp_path, [op("aten::conv2d", 10.0, 5.0, ext=1, **args)], "t.json")
    trace = open_trace(discover(path)[0], cache=False)
    row = int(trace.indices(EventKind.CPU_OP)[0])
    arguments = OpShapes(trace).arguments(row)
    assert arguments is not None and arguments[0] == ("tensor", (2, 3, 8, 8), "float", (0, 2, 3, 1))
    made = _made_tensors(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.call_ns("aten::conv2d", arguments) > 0
    image = next(t for t in made if tuple(t.shape) == (2, 3, 8, 8))
    assert image.is_contiguous(memory_format=torch.channels_last) and not image.is_contiguous()
    assert "[0, 2, 3, 1]" in measurer.ran[0]
    contiguous = [("tensor", a[1], a[2]) if a[0] == "tensor" else a for a in arguments]
    assert measurer.call_ns("aten::conv2d", contiguous) > 0 and measurer.ran[1] != measurer.ran[0]


def test_attention_is_called_again_with_its_keyword_only_arguments_in_schema_order(tmp_path: Path) -> None:
    # As the profiler records them: every argument in schema order, attn_mask and scale (keyword-only) last; the
    # backward in bf16 keeps its log-sum-exp in fp32 (its accumulation type).
    from daydream.cost.shapes import _value
    from daydream.transforms.amp import _retyped_arguments

    assert _value("0.") == 0.0 and _value("1e-05") == 1e-05 and _value("[1, 1]") == [1, 1]
    q = ("tensor", (2, 3, 8, 4), "float", (0, 2, 1, 3))  # heads transposed out of a (batch, length, heads, dim) tensor
    forward = [q, q, q, ("value", 0.0), ("value", False), ("none",), ("none",)]
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.call_ns("aten::_scaled_dot_product_flash_attention_for_cpu", forward) > 0
    backward = [q, q, q, q, q, ("tensor", (2, 3, 8), "float", (0, 2, 1)), ("value", 0.0), ("value", False), ("none",),
                ("none",)]
    name = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
    low = _retyped_arguments(backward, "c10::BFloat16", name)
    assert [a[2] for a in low if a[0] == "tensor"] == ["c10::BFloat16"] * 5 + ["float"]
    assert measurer.call_ratio(name, low, _retyped_arguments(backward, "float", name)) is not None, measurer.failed


def test_a_pair_keeps_both_times_and_gives_the_same_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_process(monkeypatch)
    seen = _recording(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    bigger = [((16, 16), "float"), ((16, 4), "float")]
    pair = measurer.op_pair_ns("aten::mm", bigger, MM)
    assert pair is not None and min(pair) > 0
    assert len(seen) == 2 * (measure.WARMUP + measure.REPETITIONS) and len(measurer.ran) == 1
    # the ratio of the same two signatures comes from the pair, nothing run again
    ratio = measurer.op_ratio("aten::mm", bigger, MM)
    assert ratio == pytest.approx(pair[0] / pair[1], rel=1e-5) and len(seen) == 2 * (measure.WARMUP + measure.REPETITIONS)
    measurer.save()
    seen.clear()
    again = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert again.op_pair_ns("aten::mm", bigger, MM) == pair and seen == []
    # hot (caches not emptied between repetitions) is another measurement, cached apart
    assert again.op_pair_ns("aten::mm", bigger, MM, hot=True) is not None and len(seen) == 2 * (measure.WARMUP + 2 * measure.REPETITIONS)
    assert again.ran[0].startswith("pair-primed|") and not next(iter(measurer.cache)).startswith("pair-primed|")
    # cold: the caches emptied before each repetition and a view's time (run in turns with the two) taken off
    seen.clear()
    cold = again.op_pair_ns("aten::mm", bigger, MM, cold=True)
    assert cold is not None and min(cold) >= 1 and len(seen) == 2 * (measure.WARMUP + measure.REPETITIONS)
    assert again.ran[1].startswith("pair-cold-net|") and len(again.ran) == 2
    assert again.op_pair_ns("aten::mm", bigger, MM, cold=True) == cold and len(again.ran) == 2  # cached
    assert again.op_pair_ns("aten::mm", [((8, 16), "float"), ((5, 4), "float")], MM) is None  # cannot run
    assert again.call_pair_ns("aten::empty", [("value", [2**40])], [("value", [1])]) is None


def test_a_multiply_of_a_transposed_operand_is_measured_transposed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # attention's scores, q @ k.transpose(-2, -1): the second operand recorded with strides (.., 1, 16)
    from daydream.transforms.amp import _ordered, _retyped

    arguments = [("tensor", (2, 8, 16), "float", None), ("tensor", (2, 16, 8), "float", (0, 2, 1))]
    operands = _ordered(arguments)
    assert operands == [((2, 8, 16), "float"), ((2, 16, 8), "float", (0, 2, 1))]
    made = _made_tensors(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.op_pair_ns("aten::bmm", _retyped(operands, "c10::BFloat16"), _retyped(operands, "float")) is not None
    transposed = [t for t in made if tuple(t.shape) == (2, 16, 8)]
    assert len(transposed) == 2 and not any(t.is_contiguous() for t in transposed)
    assert {t.dtype for t in transposed} == {torch.bfloat16, torch.float32}
    assert all(t.is_contiguous() for t in made if tuple(t.shape) == (2, 8, 16))
    # the order is part of the signature; a contiguous one keeps the key it had
    assert "[0, 2, 1]" in measurer.ran[0]
    assert measurer._op("aten::bmm", [((2, 8, 16), "float")], None)[0] == 'aten::bmm|[[[2, 8, 16], "float"]]'


def test_a_slow_signature_is_warmed_up_once_and_timed_fewer_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def runner(_torch: object, made: list[object]) -> None:
        calls.append(len(made))

    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert len(measurer._median_ns([(runner, [((2, 2), "float")])], flush=False)) == 1
    assert len(calls) == measure.WARMUP + measure.REPETITIONS  # a fast op: 3 warm-ups, 7 timed runs
    calls.clear()
    monkeypatch.setattr(measure, "SLOW_NS", -1)  # every first run counts as slow
    measurer._median_ns([(runner, [((2, 2), "float")]), (runner, [((3, 3), "float")])], flush=False)
    assert len(calls) == 2 * (1 + measure.SLOW_REPETITIONS)  # each warmed up once, then 3 turns


def test_a_cast_is_timed_net_of_what_emptying_the_caches_costs_an_op_that_touches_no_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cast and a view of the same tensor run in turns, each after the caches were emptied; the cast keeps the
    # difference (emptying the caches evicts code and address translations a training step's ops find warm).
    calls: list[tuple[list[Any], bool]] = []

    def fake(self: Measurer, runs: list[Any], flush: bool = True) -> list[int]:
        import torch as t

        made = [measure.make_tensor(t, *tensors[0]) for _, tensors in runs]
        calls.append(([runner(t, [x]) for (runner, _), x in zip(runs, made)], flush))
        return [50_000, 41_000]

    monkeypatch.setattr(Measurer, "_median_ns", fake)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.cast_ns((4, 6), "c10::BFloat16") == 9_000
    (cast, view), flush = calls[0]
    assert flush and cast.dtype == torch.bfloat16 and tuple(cast.shape) == (4, 6)
    assert view.dtype == torch.float32 and view._base is not None  # a view: no data touched
    # cached: asked again, nothing runs
    assert measurer.cast_ns((4, 6), "c10::BFloat16") == 9_000 and len(calls) == 1
    assert measurer.cast_ns((4, 6), "mystery") is None and len(calls) == 1
    # a gradient's cast back, in backward: from its bf16 source, a signature of its own
    assert measurer.cast_ns((4, 6), "float", "c10::BFloat16") == 9_000 and len(calls) == 2
    (back, view), _ = calls[1]
    assert back.dtype == torch.float32 and view.dtype == torch.bfloat16



def test_measuring_keeps_freed_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The heap is set to keep freed memory before anything is timed (what that does to a process: tests/trace/test_heap.py)
    events: list[str] = []
    monkeypatch.setattr(measure, "keep_freed", lambda: events.append("kept"))
    real = measure.make_tensor
    monkeypatch.setattr(measure, "make_tensor", lambda *a: events.append("made") or real(*a))
    assert Measurer(threads=1, budget_s=30.0, folder=tmp_path).op_ns("aten::mm", MM) > 0
    assert events[0] == "kept" and events.count("made") == 2


def test_an_lstm_layer_backward_runs_on_the_state_its_forward_makes_in_the_asked_type(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As the profiler records nn.LSTM(200, 200) on a [35, 20, 200] input: the backward's outputs and workspace are fp32
    # ones; oneDNN lays the workspace out per type, so a bf16 run gets the bf16 forward's (smaller) one.
    from daydream.transforms.amp import _retyped_arguments

    def tensor(*shape: int, kind: str = "float") -> tuple[Any, ...]:
        return ("tensor", shape, kind, None)

    weights = [tensor(800, 200), tensor(800, 200), tensor(800), tensor(800)]
    state = [tensor(20, 200), tensor(20, 200)]
    forward = [tensor(35, 20, 200), *weights, *state, ("value", False), ("value", []), ("value", 2), ("value", 200),
               ("value", 1), ("value", True), ("value", False), ("value", False), ("value", True)]
    backward = [tensor(35, 20, 200), *weights, *state, tensor(35, 20, 200), *state, tensor(35, 20, 200), ("none",),
                ("none",), ("value", False), ("value", 2), ("value", 200), ("value", 1), ("value", True), ("value", True),
                ("value", False), ("value", []), ("value", False), tensor(8736768, kind="unsigned char")]
    if not bf16_lstm_runs_here():
        pytest.skip("this CPU runs no bf16 LSTM (oneDNN builds none without AVX-512): no bf16 workspace to check")
    workspaces: list[tuple[int, Any]] = []
    real = measure._rnn_forward_state

    def recording(values: list[Any]) -> list[Any]:
        ready = real(values)
        workspaces.append((ready[22].numel(), ready[0].dtype))
        return ready

    monkeypatch.setitem(measure.PREPARED, "aten::mkldnn_rnn_layer_backward", recording)
    measurer = Measurer(threads=1, budget_s=60.0, folder=tmp_path)
    name = "aten::mkldnn_rnn_layer_backward"
    pair = measurer.call_pair_ns(name, _retyped_arguments(backward, "c10::BFloat16", name),
                                 _retyped_arguments(backward, "float", name), hot=True)
    assert pair is not None, measurer.failed
    low = torch.ops.aten.mkldnn_rnn_layer(
        *[torch.zeros(t[1], dtype=torch.bfloat16) for t in forward[:7]], *[a[1] for a in forward[7:]])
    assert sorted(set(workspaces), key=str) == sorted({(low[3].numel(), torch.bfloat16), (8736768, torch.float32)}, key=str)
    assert len(workspaces) == 2     # the forward ran once per signature, not once per repetition
    assert measurer.call_pair_ns("aten::mkldnn_rnn_layer", _retyped_arguments(forward, "c10::BFloat16"),
                                 _retyped_arguments(forward, "float"), hot=True) is not None, measurer.failed


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's heap")
def test_an_op_whose_output_glibc_would_map_afresh_is_timed_on_memory_the_heap_keeps(tmp_path: Path) -> None:
    # A [5000, 1] x [1, 2000] multiply makes a 40 MB output: past glibc's largest mmap threshold (32 MiB), so in a fresh
    # process each call can map it anew and fault in its 9,766 pages (whether it does depends on what the heap's top
    # holds by then). In a step traced under the heap reserve the heap's
    # top holds it; the measured tier grows its own heap so (`_heap_room`). In a process of its own: it changes the
    # heap for good.
    code = f"""
import resource, torch
from pathlib import Path
from daydream.cost import measure
from daydream.cost.measure import Measurer
faults = []
real = measure._runner
def runner(name):
    inner = real(name)
    def run(t, xs):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        inner(t, xs)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return run
measure._runner = runner
grown = []
real_room = measure._heap_room
measure._heap_room = lambda fresh: grown.append(real_room(fresh)) or grown[-1]
warmed = []
real_warmed = measure._warmed_up
measure._warmed_up = lambda *a: warmed.append(real_warmed(*a)) or warmed[-1]
assert Measurer(threads=1, budget_s=60.0, folder=Path({str(tmp_path)!r})).op_ns(
    "aten::mm", [((5000, 1), "float"), ((1, 2000), "float")])
print(grown[0], warmed[0][0], *faults)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    grown, first_ns, *faults = (int(v) for v in done.stdout.split())
    pages = 5000 * 2000 * 4 // 4096
    assert faults[0] >= 0.9 * pages                             # the first call faulted the output's pages in
    # a first call slower than SLOW_NS (a loaded machine) is the only warm-up, and fewer repetitions follow
    slow = first_ns > measure.SLOW_NS
    last = faults[0 if slow else measure.WARMUP - 1]
    assert grown == 0 if last < measure.FRESH_PAGES_LEAST else grown >= 4 * last * 4096   # the heap grew where warmed up
    timed = faults[-(measure.SLOW_REPETITIONS if slow else measure.REPETITIONS):]  # calls still faulted, by four
    assert max(timed) < 0.01 * pages                            # times their pages, and no timed call faulted


def _cpu(folder: Path, model: str, flags: str, l2: str) -> tuple[Path, Path]:
    """A /proc/cpuinfo of two logical CPUs and a cache listing with one level 2 of `l2`."""
    folder.mkdir()
    info = folder / "cpuinfo"
    entry = f"processor\t: {{}}\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    info.write_text(entry.format(0) + entry.format(1))
    index = folder / "cache" / "index2"
    index.mkdir(parents=True)
    (index / "level").write_text("2\n")
    (index / "size").write_text(f"{l2}\n")
    return info, folder / "cache"


def test_cached_times_are_kept_apart_per_cpu_even_where_the_model_names_agree(tmp_path: Path) -> None:
    name = "Intel(R) Xeon(R) Processor"  # what many virtual machines call any Xeon
    avx2 = measure.cpu_identity(*_cpu(tmp_path / "a", name, "fpu sse2 avx2 fma", "1024K"))
    amx = measure.cpu_identity(*_cpu(tmp_path / "b", name, "fpu sse2 avx2 fma avx512f amx_bf16", "2048K"))
    again = measure.cpu_identity(*_cpu(tmp_path / "c", name, "fma avx2 sse2 fpu", "1024K"))  # flags in another order
    larger = measure.cpu_identity(*_cpu(tmp_path / "d", name, "fpu sse2 avx2 fma", "2048K"))
    assert avx2 == again
    assert len({avx2, amx, larger}) == 3
    # Without /proc/cpuinfo or a cache listing (another system): still a name, the same each time.
    assert measure.cpu_identity(tmp_path / "none", tmp_path / "none") == measure.cpu_identity(tmp_path / "none", tmp_path / "none")
    assert measure.cpu_identity() in Measurer(threads=1, budget_s=30.0, folder=tmp_path).path.name


def test_with_one_thread_a_run_is_timed_by_the_threads_own_cpu_time(tmp_path: Path) -> None:
    """A run that waits (as one does whose core another process holds) is not counted for its wait: a 20 ms sleep
    uses next to no CPU. With two threads the wall clock times it, sleep included."""
    import time

    def sleeping(_t: Any, _xs: list[Any]) -> None:
        time.sleep(0.02)

    one = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert one._median_ns([(sleeping, [((4,), "float")])], flush=False, repetitions=3)[0] < 10_000_000
    two = Measurer(threads=2, budget_s=30.0, folder=tmp_path)
    assert two._median_ns([(sleeping, [((4,), "float")])], flush=False, repetitions=3)[0] >= 20_000_000


def _stored(measurer: Measurer, times: dict[str, list[int]], probes: dict[str, list[int]]) -> None:
    measurer.path.parent.mkdir(parents=True, exist_ok=True)
    measurer.path.write_text(json.dumps({"version": CACHE_VERSION, "ns": times, "probes": probes}))


@pytest.mark.parametrize(("trace_probe", "carried"), [
    (1_000_000, 800_000 * 1.3 / 2),  # the trace's probe half the kept one's: half, less the spread (x 1/2 x 1.3)
    (5_200_000, 800_000 * 2.6 / 1.3),  # 2.6 times: 2.6 / 1.3 = twice
    (1_600_000, 800_000),  # within the spread on either side: as kept
    (2_500_000, 800_000),
])
def test_a_cached_time_is_carried_to_the_speed_the_trace_ran_at_beyond_the_probes_spread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trace_probe: int, carried: float) -> None:
    """Kept at a probe of 2.0 ms: carried by the ratio of the trace's probe to it, beyond the factor of 1.3 two probes
    fall apart by without drift. Without the trace's probe, or without the entry's, as kept."""
    monkeypatch.setattr(measure, "speed_probe_ns", lambda threads: pytest.fail("nothing is measured here"))
    _one_process(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    key = measure.Measurer._op(measurer, "aten::mm", MM, None)[0]
    _stored(measurer, {key: [800_000], "old-entry": [400_000]}, {key: [2_000_000]})
    kept = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert kept.op_ns("aten::mm", MM) == 800_000  # no trace probe: as kept
    kept.speed_at = trace_probe
    assert kept.op_ns("aten::mm", MM) == round(carried)
    assert kept.cached("old-entry") == 400_000  # kept without a probe: as kept
    assert kept.ran == []


def test_a_pair_is_carried_alike_and_its_ratio_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "speed_probe_ns", lambda threads: pytest.fail("nothing is measured here"))
    _one_process(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    new, old = [((16, 16), "float"), ((16, 4), "float")], MM
    signature = f"{measurer._op('aten::mm', new, None)[0]}|{measurer._op('aten::mm', old, None)[0]}"
    times = {f"pair|{signature}|new": [900_000], f"pair|{signature}|old": [300_000]}
    _stored(measurer, times, {key: [1_000_000] for key in times})
    kept = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    kept.speed_at = 2_600_000  # the trace ran 2.6 times as slow: twice the time beyond the spread of 1.3
    assert kept.op_pair_ns("aten::mm", new, old) == (1_800_000, 600_000)
    assert kept.op_ratio("aten::mm", new, old) == 3.0


def test_what_is_measured_is_kept_with_this_processs_probe_measured_once(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[int] = []

    def probe(threads: int) -> int:
        probes.append(threads)
        return 1_250_000

    monkeypatch.setattr(measure, "speed_probe_ns", probe)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert measurer.op_ns("aten::mm", MM) > 0
    assert measurer.op_pair_ns("aten::mm", [((16, 16), "float"), ((16, 4), "float")], MM) is not None
    measurer.save()
    stored = json.loads(measurer.path.read_text())
    assert probes == [1] and len(stored["ns"]) == 3 and stored["probes"] == {key: [1_250_000] for key in stored["ns"]}
    # Measured now for a trace recorded at 2.6 times this probe: the time handed back is twice the kept one (2.6 / 1.3,
    # the ratio beyond the probes' spread).
    later = Measurer(threads=1, budget_s=30.0, folder=tmp_path / "other")
    later.speed_at = 3_250_000
    got = later.op_ns("aten::mm", MM)
    kept = later.cache[next(iter(later.cache))]
    assert got == 2 * kept


def test_the_speed_probe_runs_here_on_the_threads_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from daydream.trace.collect import speed

    seen: list[tuple[tuple[int, ...], ...]] = []
    real = torch.addmm

    def addmm(*tensors: Any) -> Any:
        seen.append(tuple(tuple(t.shape) for t in tensors))
        assert torch.get_num_threads() == 1
        return real(*tensors)

    monkeypatch.setattr(torch, "addmm", addmm)
    before = torch.get_num_threads()
    assert speed.speed_probe_ns(1) > 0
    assert torch.get_num_threads() == before
    assert seen == [speed.PROBE_SHAPES] * (speed.PROBE_WARMUP + speed.PROBE_REPETITIONS)


def test_an_optimizers_elementwise_update_is_called_again_with_its_recorded_arguments(tmp_path: Path) -> None:
    """What ran, read from a profile of the measurement: lerp_ at the new and the recorded shapes, with the recorded
    weight; an elementwise op outside the measured tier's lists is not run; a square root's operand is made
    non-negative, as an optimizer's second moment is."""
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    old = [("tensor", (32, 16), "float"), ("tensor", (32, 16), "float"), ("value", 0.25)]
    new = [("tensor", (64, 32), "float"), ("tensor", (64, 32), "float"), ("value", 0.25)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        pair = measurer.call_pair_ns("aten::lerp_", new, old)
    assert pair is not None and min(pair) > 0
    shapes = {tuple(tuple(s) for s in e.input_shapes) for e in profile.events() if e.name == "aten::lerp_"}
    assert shapes == {((64, 32), (64, 32), ()), ((32, 16), (32, 16), ())}
    assert "0.25" in measurer.ran[0]
    assert measurer.call_pair_ns("aten::exp_", new[:1], old[:1]) is None
    made = measure.PREPARED["aten::sqrt"]([torch.randn(64, 64)])
    assert bool((made[0] >= 0).all())


def test_batch_norm_is_called_again_in_bf16_with_its_own_parameters_and_statistics_in_fp32(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As autocast runs it on a CPU (and as a real bf16 step of examples/cnn.py recorded it): a bf16 activation, the
    # module's weight, bias and running statistics in fp32; its backward's saved statistics in fp32 as well.
    import torch

    from daydream.transforms.amp import _measured_pair

    x = ("tensor", (4, 8, 6, 6), "float", None)
    c = ("tensor", (8,), "float", None)
    forward = [x, c, c, c, c, ("value", True), ("value", 0.1), ("value", 1e-05), ("value", True)]
    backward = [x, x, c, c, c, c, c, ("value", True), ("value", 1e-05), ("value", [True, True, True])]
    made = _made_tensors(monkeypatch)
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    for name, arguments in (("aten::batch_norm", forward), ("aten::native_batch_norm_backward", backward)):
        made.clear()
        pair = _measured_pair(measurer, name, [], "c10::BFloat16", arguments)
        assert pair is not None and min(pair) > 0, measurer.failed
        kinds = {(tuple(t.shape), t.dtype) for t in made}
        # the activation (and its gradient) in both types, the per-channel tensors only ever in fp32
        assert kinds == {((4, 8, 6, 6), torch.bfloat16), ((4, 8, 6, 6), torch.float32), ((8,), torch.float32)}


@pytest.mark.parametrize(("host", "carried_from"), [({"speed_probe_hot_ns": 2_000_000}, 2_000_000),
                                                    ({"speed_probe_ns": 2_000_000}, 0)])
def test_a_prediction_carries_cached_times_from_the_hot_probe_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: dict[str, int], carried_from: int) -> None:
    """A trace's cached times are carried from the probe it recorded hot; one that recorded only the probe with the
    caches emptied (before 2026-12-07) gets them as measured (no probe to carry from: 0)."""
    import gzip

    from daydream.api import predict_job
    from daydream.cost import CostModel, CostOptions
    from tests.conftest import REPO

    document = json.loads(gzip.decompress((REPO / "examples/cpu-avx2/round-1/mlp-baseline.json.gz").read_bytes()))
    document["daydream"]["host"] = {**document["daydream"]["host"], **host}
    path = tmp_path / "mlp.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    seen: list[int] = []
    made = CostModel.of.__func__  # type: ignore[attr-defined]

    def of(cls: Any, *arguments: Any, speed_at: int = 0, **keywords: Any) -> Any:
        seen.append(speed_at)
        return made(cls, *arguments, speed_at=speed_at, **keywords)

    monkeypatch.setattr(CostModel, "of", classmethod(of))
    predict_job(path, ["fused-optimizer"], cache=False, cost_options=CostOptions(measure=False))
    assert seen == [carried_from]


def _timing(monkeypatch: pytest.MonkeyPatch, times: list[int]) -> list[int]:
    """Each signature timed from here on takes the next of `times` (ns), at a probe of 1.0 ms; the times handed out."""
    given: list[int] = []

    def timed(*_: Any, **__: Any) -> int:
        given.append(times[len(given)])
        return given[-1]

    monkeypatch.setattr(Measurer, "_time", timed)
    monkeypatch.setattr(measure, "speed_probe_ns", lambda threads: 1_000_000)
    return given


def test_a_signature_is_measured_in_as_many_processes_as_samples_and_their_median_handed_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = _timing(monkeypatch, [300_000, 100_000, 200_000])
    handed = []
    for _ in range(measure.SAMPLES + 1):
        process = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
        handed.append(process.op_ns("aten::mm", MM))
        assert process.op_ns("aten::mm", MM) == handed[-1]  # asked again in one process: not measured again
        process.save()
    assert measure.SAMPLES == 3 and given == [300_000, 100_000, 200_000]  # three processes measured it, the fourth not
    assert handed == [300_000, 200_000, 200_000, 200_000]  # 300; the median of 300 and 100; of all three
    assert list(json.loads(process.path.read_text())["ns"].values()) == [[300_000, 100_000, 200_000]]


def test_measuring_again_stops_at_its_share_of_the_budget_and_a_failure_hands_on_the_kept_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = _timing(monkeypatch, [300_000, 500_000])
    first = Measurer(threads=1, budget_s=10.0, folder=tmp_path)
    assert first.op_ns("aten::mm", MM) == 300_000
    first.save()
    spent = Measurer(threads=1, budget_s=10.0, folder=tmp_path)
    spent.spent_s = 10.0 * measure.RESAMPLE_SHARE  # the share spent: the one process's time handed on
    assert spent.op_ns("aten::mm", MM) == 300_000 and spent.ran == []
    assert spent.op_ns("aten::mm", [((4, 16), "float"), ((16, 4), "float")]) == 500_000  # one never measured still is
    assert given == [300_000, 500_000]

    def failing(*_: Any, **__: Any) -> int:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(Measurer, "_time", failing)
    failed = Measurer(threads=1, budget_s=10.0, folder=tmp_path)
    assert failed.op_ns("aten::mm", MM) == 300_000 and failed.failed and failed.ran == []


def test_each_process_time_is_carried_by_its_own_probe_before_the_median(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept at probes of 1, 2 and 4 ms, asked for a trace at 2 ms: 1,000 µs x 2 / 1.3, 600 µs as kept, 800 µs x 0.5 x
    1.3; the median of 1,538, 600 and 520 µs is 600 µs (the raw median, 800 µs at 4 ms, would give 520)."""
    monkeypatch.setattr(measure, "speed_probe_ns", lambda threads: pytest.fail("nothing is measured here"))
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    key = measurer._op("aten::mm", MM, None)[0]
    _stored(measurer, {key: [1_000_000, 600_000, 800_000]}, {key: [1_000_000, 2_000_000, 4_000_000]})
    kept = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    kept.speed_at = 2_000_000
    assert kept.op_ns("aten::mm", MM) == 600_000 and kept.ran == []


def test_a_version_7_cache_is_read_as_one_process_times(tmp_path: Path) -> None:
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    measurer.path.write_text(json.dumps({"version": 7, "ns": {"a": 800_000, "b": 5}, "probes": {"a": 2_000_000}}))
    kept = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert kept.samples == {"a": [(800_000, 2_000_000)], "b": [(5, 0)]} and kept.cache == {"a": 800_000, "b": 5}
