"""The measured tier for fused-optimizer (daydream/cost/optimizer.py): which optimizer and parameters a CPU trace's
steps name, what the tier steps (the forms asked for, at those shapes), what it caches, and how the what-if scales the
recorded step by the ratio. Nothing here asserts on a time: only on what ran, what was kept and hand-computed sums."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.api import open_trace
from daydream.cost import CostOptions, measure
from daydream.cost.measure import Measurer
from daydream.cost.optimizer import SteppedOptimizer, _stepper, step_ratio, stepped_optimizer
from daydream.errors import InputError
from daydream.graph import TaskKind, build_graph
from daydream.mapping import PHASES
from daydream.mapping.iterations import find_iterations
from daydream.simulate.whatif import iteration_of_row, transform
from daydream.trace import discover

if os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch")

#: The suite turns measuring off (tests/conftest.py); these tests ask for it.
MEASURE = CostOptions(measure=True)


def _record(tmp_path: Path, optimizer: str = "Adagrad", steps: int = 3, micro_batches: int = 1) -> tuple[Path, Any]:
    """A CPU trace (torch.profiler, shapes recorded) of `steps` training steps of a small model with one frozen
    parameter, each accumulating the gradients of `micro_batches` backward passes, stepped by torch.optim.<optimizer>
    as a loop over the parameters; the model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4),
                                torch.nn.LayerNorm(4))
    model[3].bias.requires_grad_(False)
    opt = getattr(torch.optim, optimizer)([p for p in model.parameters() if p.requires_grad], foreach=False)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            for _ in range(micro_batches):
                torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            profile.step()
    out = tmp_path / "trace.json"
    profile.export_chrome_trace(str(out))
    return out, model


def test_the_steps_name_the_optimizer_and_the_gradients_give_the_trainable_parameters(tmp_path: Path) -> None:
    out, model = _record(tmp_path)
    trace = open_trace(discover(out)[0])
    found = stepped_optimizer(trace, iteration_of_row(trace, find_iterations(trace)))
    assert found is not None
    assert found.name == "Adagrad"
    trainable = sorted((tuple(p.shape), "float") for p in model.parameters() if p.requires_grad)
    assert sorted(found.parameters) == trainable  # one iteration's, the frozen bias left out
    assert len(found.parameters) == 5


def test_gradients_accumulated_over_micro_batches_count_each_parameter_once(tmp_path: Path) -> None:
    from daydream.mapping import attribute

    out, model = _record(tmp_path, micro_batches=3)
    trace = open_trace(discover(out)[0])
    rows = iteration_of_row(trace, find_iterations(trace))
    # read from the trace: three accumulations of each of the five trainable parameters in every step
    accumulations = [r for r in range(len(trace)) if trace.name_of(r) == "torch::autograd::AccumulateGrad"]
    assert len(accumulations) == 3 * 5 * 3
    found = stepped_optimizer(trace, rows, attribute(trace).phase)
    assert found is not None
    assert sorted(found.parameters) == sorted((tuple(p.shape), "float") for p in model.parameters() if p.requires_grad)
    without_phases = stepped_optimizer(trace, rows)
    assert without_phases is not None and len(without_phases.parameters) == 3 * 5


def test_a_trace_without_an_optimizer_step_names_none(tmp_path: Path) -> None:
    x = torch.randn(4, 4, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as profile:
        for _ in range(2):
            (x * 2).sum().backward()
            profile.step()
    out = tmp_path / "plain.json"
    profile.export_chrome_trace(str(out))
    trace = open_trace(discover(out)[0])
    assert stepped_optimizer(trace, iteration_of_row(trace, find_iterations(trace))) is None


@pytest.mark.parametrize(("options", "multi_tensor"), [({"foreach": True}, True), ({"foreach": False}, False),
                                                       ({"fused": True}, False)])
def test_the_stepper_steps_the_form_asked_for(options: dict[str, bool], multi_tensor: bool) -> None:
    """What ran, read from a profile of the runner: foreach=True runs aten::_foreach_* ops, the loop and the fused
    step none; every parameter moves."""
    run = _stepper("SGD", options)()
    assert run is not None
    parameters = [torch.randn(8, 4, requires_grad=True), torch.randn(4, requires_grad=True)]
    before = [p.detach().clone() for p in parameters]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile, torch.no_grad():
        run(torch, parameters)
    names = {e.name for e in profile.events()}
    assert any(n.startswith("aten::_foreach_") for n in names) is multi_tensor
    assert ("aten::_fused_sgd_" in names) is ("fused" in options)
    assert all(not torch.equal(p.detach(), b) for p, b in zip(parameters, before))


def test_the_ratio_is_measured_once_and_reused_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "SAMPLES", 1)  # one process's time is handed on (tests/cost/test_measure.py)
    stepped = SteppedOptimizer("Adam", (((64, 32), "float"), ((32,), "float")))
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    ratio = step_ratio(measurer, stepped, "foreach")
    assert ratio is not None and ratio > 0, measurer.failed
    assert len(measurer.ran) == 1 and measurer.ran[0].startswith("optimizer-step|Adam|foreach|2|")
    measurer.save()
    again = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    assert step_ratio(again, stepped, "foreach") == ratio
    assert again.ran == []
    # another form is another entry
    assert step_ratio(again, stepped, "fused") is not None
    assert again.ran[0].startswith("optimizer-step|Adam|fused|2|")


def test_a_class_or_form_that_cannot_step_here_gives_none_and_why(tmp_path: Path) -> None:
    measurer = Measurer(threads=1, budget_s=30.0, folder=tmp_path)
    parameters = (((4, 4), "float"),)
    assert step_ratio(measurer, SteppedOptimizer("MyOwnOptimizer", parameters), "foreach") is None
    assert step_ratio(measurer, SteppedOptimizer("RMSprop", parameters), "fused") is None  # takes no fused=
    assert sorted(measurer.failed.values()) == ["TypeError", "not one the measured tier runs"]
    with pytest.raises(ValueError):
        step_ratio(measurer, SteppedOptimizer("Adam", parameters), "jit")


def test_the_recorded_step_is_scaled_by_the_measured_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a ratio of 1.5 standing in for the measurement: per iteration, the per-parameter ops kept take 1.5 times
    the recorded ops' durations and the host gaps between them (hand-summed from the graph before the change)."""
    import daydream.transforms.fusion as fusion

    out, _ = _record(tmp_path)
    trace = open_trace(discover(out)[0])
    asked: list[tuple[str, str]] = []

    def ratio(_measurer: Any, found: SteppedOptimizer, implementation: str) -> float:
        asked.append((found.name, implementation))
        return 1.5

    monkeypatch.setattr(fusion, "step_ratio", ratio)
    graph = build_graph(trace)
    optimizer = PHASES.index("optimizer")
    work = np.flatnonzero((graph.tasks["kind"] == int(TaskKind.HOST_OP)) & (graph.tasks["phase"] == optimizer)
                          & (graph.tasks["iteration"] >= 0))
    expected = {}
    for iteration in np.unique(graph.tasks["iteration"][work]).tolist():
        mine = work[graph.tasks["iteration"][work] == iteration]
        mine = mine[np.argsort(graph.tasks["measured_start_ns"][mine], kind="stable")]
        expected[iteration] = (graph.tasks["duration_ns"][mine].sum() + graph.tasks["gap_ns"][mine[1:]].sum()) * 1.5
    notes = transform(graph, trace, ["fused-optimizer"], cost_options=MEASURE)
    assert asked == [("Adagrad", "foreach")]
    kept = np.flatnonzero((graph.tasks["kind"] == int(TaskKind.HOST_OP)) & (graph.tasks["phase"] == optimizer)
                          & (graph.tasks["iteration"] >= 0))
    for iteration, total in expected.items():
        mine = kept[graph.tasks["iteration"][kept] == iteration]
        assert mine.size == 4  # the default four multi-tensor ones
        assert abs(int(graph.tasks["duration_ns"][mine].sum()) - total) <= mine.size  # integer division
        assert graph.tasks["gap_ns"][np.sort(mine)[1:]].sum() == 0
    assert any("torch.optim.Adagrad(foreach=True)" in n and "×1.50" in n for n in notes)
    assert f"cost stage: changed work timed {4 * len(expected)} measured" in notes


def test_an_unknown_form_is_a_clear_error(tmp_path: Path) -> None:
    out, _ = _record(tmp_path, steps=2)
    trace = open_trace(discover(out)[0])
    with pytest.raises(InputError, match="implementation=jit: the forms are foreach and fused"):
        transform(build_graph(trace), trace, ["fused-optimizer:implementation=jit"], cost_options=MEASURE)


def test_an_optimizer_the_tier_cannot_step_falls_back_to_the_fixed_cost_and_says_why(tmp_path: Path) -> None:
    out, _ = _record(tmp_path, optimizer="RMSprop", steps=2)
    trace = open_trace(discover(out)[0])
    graph = build_graph(trace)
    notes = transform(graph, trace, ["fused-optimizer:implementation=fused"], cost_options=MEASURE)
    assert any("fixed cost" in n and "torch.optim.RMSprop(fused=True) did not step here (TypeError)" in n
               for n in notes), notes
