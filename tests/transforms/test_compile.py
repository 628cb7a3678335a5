"""The compile what-if on CPU traces of examples/training.py, eager and compiled (examples/compile, torch 2.13 CPU),
checked against what the recorded runs themselves show."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from daydream.api import open_job
from daydream.cost import CostOptions
from daydream.cost.compiled import EXTERN_OPS, FUSED_SHARE, channels_last
from daydream.cost.host import HostCosts
from daydream.mapping.linking import innermost_enclosing
from daydream.simulate.whatif import predict
from daydream.trace import EventKind, Trace

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "examples" / "compile"
ROUNDS = sorted(RUNS.glob("round-*"))
GRAPH = "## Call CompiledFxGraph"


def _trace(path: Path) -> Trace:
    return open_job(path).traces[0]


def _rows(trace: Trace, name: str) -> np.ndarray:
    rows = np.flatnonzero(trace.name == trace.string_index(name)) if trace.string_index(name) >= 0 else np.zeros(0, int)
    return rows[np.argsort(trace.ts_ns[rows])]


def _steps(trace: Trace) -> list[tuple[int, int]]:
    annotations = trace.indices(EventKind.ANNOTATION)
    steps = [r for r in annotations.tolist() if trace.name_of(r).startswith("ProfilerStep#")]
    return sorted((int(trace.ts_ns[r]), int(trace.end_ns[r])) for r in steps)


@pytest.mark.parametrize("example", ["mlp", "cnn"])
def test_a_compiled_graph_calls_only_extern_ops(example: str) -> None:
    trace = _trace(ROUNDS[0] / f"{example}-compile.json.gz")
    annotations = trace.indices(EventKind.ANNOTATION)
    graphs = annotations[[trace.name_of(r).startswith(GRAPH) for r in annotations.tolist()]]
    ops = trace.indices(EventKind.CPU_OP)
    parent = innermost_enclosing(trace, np.concatenate([ops, graphs]), ops)
    called = {trace.name_of(r) for r, p in zip(ops.tolist(), parent.tolist()) if p in set(graphs.tolist())}
    assert graphs.size and called and called <= EXTERN_OPS


def test_a_compiled_run_lays_its_convolutions_out_channels_last() -> None:
    from daydream.cost.shapes import OpShapes

    for kind, expected in (("compile", (0, 2, 3, 1)), ("baseline", None)):
        trace = _trace(ROUNDS[0] / f"cnn-{kind}.json.gz")
        shapes = OpShapes(trace)
        rows = _rows(trace, "aten::convolution")
        orders = {a[3] for r in rows.tolist() for a in shapes.arguments(r) or [] if a[0] == "tensor" and len(a[1]) == 4}
        assert rows.size and orders == {expected}


def test_channels_last_lays_out_the_images_only() -> None:
    image, weight, bias = ("tensor", (8, 3, 32, 32), "float", None), ("tensor", (16, 3, 3, 3), "float"), ("tensor", (16,), "float")
    volume = ("tensor", (2, 4, 8, 8, 8), "float", None)
    laid = channels_last([image, weight, bias, ("value", [1, 1])])
    assert laid == [("tensor", (8, 3, 32, 32), "float", (0, 2, 3, 1)), ("tensor", (16, 3, 3, 3), "float", (0, 2, 3, 1)),
                    bias, ("value", [1, 1])]
    assert channels_last([volume])[0][3] == (0, 2, 3, 4, 1)
    assert channels_last([("tensor", (8, 3, 32, 32), "float", (0, 2, 3, 1))]) is None  # recorded channels-last already
    assert channels_last([bias, ("value", 1)]) is None  # no image
    assert channels_last(None) is None


def test_a_grouped_convolutions_backward_is_found_by_its_groups_and_laid_out_contiguous() -> None:
    from daydream.cost.compiled import contiguous, grouped_backward
    from daydream.transforms.compiler import _contiguous_extra_ns

    def backward(groups: int, order: tuple[int, ...] | None) -> list[tuple[object, ...]]:
        # as the profiler records a 7x7 depthwise convolution's backward: grad, input, weight, then its arguments
        image = ("tensor", (16, 48, 16, 16), "float", order)
        return [image, image, ("tensor", (48, groups and 48 // groups, 7, 7), "float", None), ("value", [48]),
                ("value", [1, 1]), ("value", [3, 3]), ("value", [1, 1]), ("value", False), ("value", [0, 0]),
                ("value", groups), ("value", [True, True, True])]

    depthwise = backward(48, (0, 2, 3, 1))
    assert grouped_backward("aten::convolution_backward", depthwise)
    assert not grouped_backward("aten::convolution_backward", backward(1, (0, 2, 3, 1)))
    assert not grouped_backward("aten::convolution", depthwise)
    plain = contiguous(depthwise)
    assert plain is not None and [a[3] for a in plain[:3]] == [None, None, None] and plain[3:] == depthwise[3:]
    assert contiguous(backward(48, None)) is None  # contiguous already

    asked: list[tuple[list[object], list[object]]] = []

    class Measurer:
        def call_ratio(self, name: str, new: list[object], old: list[object]) -> float:
            asked.append((new, old))
            return 3.0

    class Costs:
        measurer = Measurer()

    # timed at 1 ms as the prediction lays it out: contiguous, the measured tier's ratio says 3 ms, so 2 ms more
    assert _contiguous_extra_ns("aten::convolution_backward", depthwise, 1_000_000, Costs()) == 2_000_000  # type: ignore[arg-type]
    assert asked == [(plain, depthwise)]
    Costs.measurer = None  # type: ignore[assignment]
    assert _contiguous_extra_ns("aten::convolution_backward", depthwise, 1_000_000, Costs()) == 0  # type: ignore[arg-type]


def _predicted(path: Path, spec: str = "compile", measure: bool = False,  # type: ignore[no-untyped-def]
               compile_budget_s: float = 0.0):
    return predict(_trace(path), [spec], cost_options=CostOptions(measure=measure, compile_budget_s=compile_budget_s))


def test_each_call_of_the_model_becomes_one_task_and_the_rest_stays() -> None:
    path = ROUNDS[0] / "mlp-baseline.json.gz"
    trace = _trace(path)
    prediction = _predicted(path)
    graph = prediction.graph
    assert graph is not None
    calls = sum(1 for start, end in _steps(trace) for r in _rows(trace, "daydream.layer::MLP").tolist()
                if start <= trace.ts_ns[r] < end)
    iterations = len(np.unique(graph.tasks["iteration"][graph.tasks["iteration"] >= 0]))
    assert calls == iterations  # examples/training.py calls the model once per step
    tasks = graph.tasks
    in_model = np.array([layer >= 0 and graph.layers[layer].split(".")[0] == "MLP" for layer in tasks["layer"].tolist()])
    for phase in (0, 1):  # forward, backward: one task per call
        assert np.count_nonzero(in_model & (tasks["phase"] == phase) & (tasks["iteration"] >= 0)) == calls
    # the loss and the optimizer keep every op: as many as the trace records
    loss = np.array([layer >= 0 and graph.layers[layer] == "CrossEntropyLoss" for layer in tasks["layer"].tolist()])
    within = [(s, e) for s, e in _steps(trace)][-iterations:]
    recorded_loss = sum(1 for s, e in within for r in _rows(trace, "aten::cross_entropy_loss").tolist() if s <= trace.ts_ns[r] < e)
    assert np.count_nonzero(loss & (tasks["phase"] == 0) & (tasks["iteration"] >= 0)) == recorded_loss
    assert prediction.predicted_ns < prediction.simulated_ns
    assert any("compile: MLP compiled" in n for n in prediction.notes)


def test_a_forward_call_is_its_multiplies_the_rest_at_the_fused_share_and_the_wrapper() -> None:
    """By hand from the trace: in examples/mlp.py a block is linear (a free transpose and an addmm: extern), layer_norm
    and relu (fusible, whole); the compiled forward call is the addmms as recorded, FUSED_SHARE of layer_norm and relu,
    and the wrapper's host units."""
    path = ROUNDS[0] / "mlp-baseline.json.gz"
    trace = _trace(path)
    prediction = _predicted(path)
    graph = prediction.graph
    assert graph is not None
    unit = HostCosts.of(trace).unit_ns
    from daydream.cost.host import RECORDED_HOST_UNITS

    wrapper = round(RECORDED_HOST_UNITS["compile.forward.cpu"] * unit)
    forward = [r for r in trace.indices(EventKind.ANNOTATION).tolist() if trace.name_of(r) == "daydream.layer::MLP"]
    tasks = graph.tasks
    model = graph.layers.index("MLP")
    merged = np.flatnonzero((tasks["layer"] == model) & (tasks["phase"] == 0))
    merged = merged[np.argsort(tasks["measured_start_ns"][merged])]
    checked = 0
    for task in merged.tolist():
        call = [r for r in forward if trace.ts_ns[r] <= tasks["measured_start_ns"][task] <= trace.end_ns[r]]
        assert len(call) == 1
        start, end = int(trace.ts_ns[call[0]]), int(trace.end_ns[call[0]])

        def total(name: str, start: int = start, end: int = end) -> int:
            return int(sum(trace.dur_ns[r] for r in _rows(trace, name).tolist() if start <= trace.ts_ns[r] <= end))

        fusible = total("aten::layer_norm") + total("aten::relu")
        expected = total("aten::addmm") + round(FUSED_SHARE * fusible) + wrapper
        assert abs(int(tasks["duration_ns"][task]) - expected) <= 2  # rounding per fused run
        checked += 1
    assert checked == len(merged) > 0


def test_the_measured_tier_runs_each_convolution_channels_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("DAYDREAM_MEASURE", "1")
    path = ROUNDS[0] / "cnn-baseline.json.gz"
    prediction = _predicted(path, measure=True)
    notes = " ".join(prediction.notes)
    found = re.search(r"(\d+) convolutions re-timed channels-last", notes)
    trace = _trace(path)
    outermost = _rows(trace, "aten::convolution").size + _rows(trace, "aten::convolution_backward").size
    iterations = len(np.unique(prediction.graph.tasks["iteration"][prediction.graph.tasks["iteration"] >= 0]))
    assert found and int(found.group(1)) == outermost * iterations // len(_steps(trace))
    cached = [json.loads(p.read_text()) for p in Path(os.environ["DAYDREAM_CACHE_DIR"]).rglob("*.json")]
    keys = [k for c in cached for k in c.get("ns", {}) if k.startswith("pair|aten::convolution")]
    # each ratio is a pair's: the channels-last call and the call as recorded, both run here in turns
    assert keys and all("[0, 2, 3, 1]" in k.split("|call|")[1] for k in keys)


def test_each_fused_run_of_a_forward_call_takes_its_time_compiled_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """By hand from the trace: in examples/mlp.py each block is linear (an addmm: extern), layer_norm and relu (fusible);
    with the measured tier on, a compiled forward call is its addmms as recorded, the wrapper, and per run of
    layer_norm and relu the time cached for it cold, compiled with the addmm it feeds (cost/fused.py), less the cached
    cold cost of a compiled graph's own call, which the call pays once. The mlp calls its model once an iteration: each
    call finds the host cold."""
    pytest.importorskip("torch")
    from daydream.cost.fused import FLOOR_KEY, fused_key
    from daydream.cost.host import RECORDED_HOST_UNITS
    from daydream.cost.shapes import OpShapes

    monkeypatch.setenv("DAYDREAM_MEASURE", "1")
    path = ROUNDS[0] / "mlp-baseline.json.gz"
    trace = _trace(path)
    prediction = _predicted(path, measure=True, compile_budget_s=600.0)
    # each signature's time handed on: the median of the times its processes kept (cost/measure.py)
    cache = {k: max(1, round(statistics.median(v))) for f in Path(os.environ["DAYDREAM_CACHE_DIR"]).rglob("*.json")
             for k, v in json.loads(f.read_text())["ns"].items()}
    shapes = OpShapes(trace)
    wrapper = round(RECORDED_HOST_UNITS["compile.forward.cpu"] * HostCosts.of(trace).unit_ns)
    tasks = prediction.graph.tasks
    model = prediction.graph.layers.index("MLP")
    merged = np.flatnonzero((tasks["layer"] == model) & (tasks["phase"] == 0))
    forward = [r for r in trace.indices(EventKind.ANNOTATION).tolist() if trace.name_of(r) == "daydream.layer::MLP"]
    checked = 0
    for task in merged.tolist():
        call = next(r for r in forward if trace.ts_ns[r] <= tasks["measured_start_ns"][task] <= trace.end_ns[r])
        start, end = int(trace.ts_ns[call]), int(trace.end_ns[call])
        named = {n: [r for r in _rows(trace, n).tolist() if start <= trace.ts_ns[r] <= end]
                 for n in ("aten::addmm", "aten::layer_norm", "aten::relu")}
        floor = cache[FLOOR_KEY]
        expected = sum(int(trace.dur_ns[r]) for r in named["aten::addmm"]) + wrapper + floor
        for norm, relu in zip(named["aten::layer_norm"], named["aten::relu"]):
            feeds = next(r for r in named["aten::addmm"] if trace.ts_ns[r] > trace.ts_ns[relu])
            key = fused_key([("aten::layer_norm", shapes.arguments(norm)), ("aten::relu", shapes.arguments(relu)),
                             ("aten::addmm", shapes.arguments(feeds))], False, True)
            assert f"{key}|warm" in cache  # timed warm too, for calls that follow their module's last closely
            expected += max(0, cache[key] - floor)
        assert int(tasks["duration_ns"][task]) == expected
        checked += 1
    assert checked == len(merged) > 0
    assert any(re.search(r"\d+ compiled here with inductor and timed", n) for n in prediction.notes)


def test_a_gpu_trace_is_left_as_recorded() -> None:
    path = REPO / "examples" / "traces" / "cnn_v100.json.gz"
    prediction = _predicted(path)
    assert prediction.predicted_ns == prediction.simulated_ns
    assert any("not modelled yet" in n for n in prediction.notes)


def _refused(spec: str) -> str:
    """The one line of stderr of a whatif that refuses `spec` (a non-zero exit)."""
    done = subprocess.run([sys.executable, "-m", "daydream", "whatif", str(ROUNDS[0] / "mlp-baseline.json.gz"), "--opt",
                           spec], capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1
    return lines[0]


@pytest.mark.parametrize(("spec", "words"), [("compile:modules=Nothing", ("compile:modules=Nothing", "inspect")),
                                              ("compile:modules=(MLP", ("compile:modules", "not a regular expression"))])
def test_modules_that_match_nothing_or_are_no_regex_are_one_line(spec: str, words: tuple[str, ...]) -> None:
    line = _refused(spec)
    assert all(word in line for word in words)


def test_a_trace_without_modules_is_left_as_recorded(tmp_path: Path) -> None:
    import gzip

    document = json.loads(gzip.decompress((ROUNDS[0] / "mlp-baseline.json.gz").read_bytes()))
    document["traceEvents"] = [e for e in document["traceEvents"] if not str(e.get("name", "")).startswith("daydream.layer::")]
    stripped = tmp_path / "no-modules.json"
    stripped.write_text(json.dumps(document))
    prediction = _predicted(stripped)
    assert prediction.predicted_ns == prediction.simulated_ns
    assert any("no module structure" in n for n in prediction.notes)



def test_the_pages_calibration_rows_of_the_kept_pairs_are_what_the_script_gives() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    import compile_costs

    rows = [line for line in compile_costs.report(RUNS).splitlines() if line.startswith("| round-")]
    warm = [line for line in compile_costs.report(RUNS / "warm").splitlines() if line.startswith("| warm |")]
    page = (REPO / "docs" / "validation-compile-cpu.md").read_text()
    assert len(rows) == 2 * len(ROUNDS)  # mlp and cnn in each kept round
    assert len(warm) == 1 and "| — |" not in warm[0]  # a2c: its warm calls, forward and backward
    assert all(row in page for row in rows + warm)


def test_a_model_called_back_to_back_is_one_compiled_call_per_call() -> None:
    """examples/own/triplet.py's encoder runs on the anchors, the positives and the negatives with nothing between the
    calls. Its real compiled run (examples/compile/triplet, the same round) ran one compiled forward graph per call;
    the prediction from the eager run makes as many forward calls per iteration, and as many backward nodes."""
    base, compiled = _trace(RUNS / "triplet" / "triplet-baseline.json.gz"), _trace(RUNS / "triplet" / "triplet-compile.json.gz")
    real = [sum(1 for r in _rows(compiled, "CompiledFunction").tolist() if start <= compiled.ts_ns[r] < end)
            for start, end in _steps(compiled)]
    calls = [sum(1 for r in _rows(base, "daydream.layer::Encoder").tolist() if start <= base.ts_ns[r] < end)
             for start, end in _steps(base)]
    assert set(real) == set(calls) == {3}
    prediction = _predicted(RUNS / "triplet" / "triplet-baseline.json.gz")
    graph = prediction.graph
    assert graph is not None
    tasks = graph.tasks
    iterations = len(np.unique(tasks["iteration"][tasks["iteration"] >= 0]))
    in_model = np.array([layer >= 0 and graph.layers[layer].split(".")[0] == "Encoder" for layer in tasks["layer"].tolist()])
    assert np.count_nonzero(in_model & (tasks["phase"] == 0) & (tasks["iteration"] >= 0)) == 3 * iterations
    assert any(f"{3 * iterations} forward and" in n and f"({3 * iterations} nodes" in n for n in prediction.notes), \
        prediction.notes


def test_consecutive_calls_are_told_apart_by_their_recorded_starts() -> None:
    """Three forward calls of one module with nothing between them, then one backward pass: one forward region without
    the calls' starts, three with them; the backward stays one."""
    from daydream.graph import TaskKind
    from daydream.transforms.compiler import BACKWARD, FORWARD, regions
    from tests.transforms.graphs import graph as hand_made

    tasks = [{"kind": TaskKind.HOST_OP, "name": "op", "duration": 1, "phase": phase, "layer": layer, "iteration": 0}
             for phase, layer in [("forward", "Encoder.a"), ("forward", "Encoder.b")] * 3
             + [("backward", "Encoder.b"), ("backward", "Encoder.a")] * 3]
    built = hand_made(tasks, [], ["Encoder", "Encoder.a", "Encoder.b"])
    built.tasks["measured_start_ns"][:] = np.arange(len(tasks)) * 1000 + 10
    built.tasks["event"][:] = np.arange(len(tasks))
    assert [(c.phase, len(c.tasks)) for c in regions(built, {"Encoder"})] == [(FORWARD, 6), (BACKWARD, 6)]
    starts = np.array([0, 2000, 4000])  # each call's range begins just before its first op
    assert [(c.phase, len(c.tasks)) for c in regions(built, {"Encoder"}, starts)] == [(FORWARD, 2)] * 3 + [(BACKWARD, 6)]


def test_the_wrapper_is_warm_for_a_close_call_of_the_same_module_and_backward_pays_one_per_recorded_call() -> None:
    """A hand-made iteration, as a2c's rollout runs it: the policy called at 0, 1 ms after its last call ended (warm),
    15 ms after (cold again), once under no_grad 1 ms later (warm, but it makes no backward node); another module
    called once (cold); one backward pass holding the policy's three nodes (one cold, two warm back to back) and the
    other module's one. The next iteration starts cold."""
    from daydream.graph import TaskKind
    from daydream.transforms.compiler import BACKWARD, FORWARD, Wrapper, _Tally, regions
    from tests.transforms.graphs import graph as hand_made

    layers = ["Policy", "Policy.fc", "Critic.fc"]
    spans = [  # (layer, phase, iteration, start µs, end µs)
        ("Policy.fc", "forward", 0, 0, 100), ("Policy.fc", "forward", 0, 1100, 1200),
        ("Policy.fc", "forward", 0, 16200, 16300), ("Policy.fc", "forward", 0, 17300, 17400),
        ("Critic.fc", "forward", 0, 17500, 17600),
        ("Policy.fc", "backward", 0, 20000, 20300), ("Critic.fc", "backward", 0, 20300, 20400),
        ("Policy.fc", "forward", 1, 50000, 50100), ("Policy.fc", "backward", 1, 60000, 60100),
    ]
    between = {"kind": TaskKind.HOST_OP, "name": "env", "duration": 1, "phase": "forward"}  # no layer: ends a call
    tasks = []
    for layer, phase, iteration, _, _ in spans:
        tasks += [{"kind": TaskKind.HOST_OP, "name": "op", "duration": 1, "phase": phase, "layer": layer,
                   "iteration": iteration}, {**between, "iteration": iteration}]
    built = hand_made(tasks, [], layers)
    starts = [s for *_, s, _ in spans for _ in (0, 1)]
    ends = [e for *_, e in spans for _ in (0, 1)]
    built.tasks["measured_start_ns"][:] = np.array(starts) * 1000 + np.tile([0, 1], len(spans))
    built.tasks["measured_end_ns"][:] = np.array(ends) * 1000
    built.tasks["event"][:] = np.arange(len(tasks))
    calls = regions(built, {"Policy", "Critic"})
    assert [(c.phase, len(c.tasks)) for c in calls] == [(FORWARD, 1)] * 5 + [(BACKWARD, 1)] * 2 + [(FORWARD, 1), (BACKWARD, 1)]
    graded = [True, True, True, False, True, True, True, True, True]
    cold, warm = {FORWARD: 1000, BACKWARD: 300}, {FORWARD: 100, BACKWARD: 30}
    tally = _Tally()
    nodes = Wrapper(cold, warm).per_call(built, calls, graded, tally)
    assert [n.wrapper_ns for n in nodes] == [1000, 100, 1000, 100, 1000, 300 + 2 * 30, 300, 1000, 300]
    assert [(n.cold, n.warm) for n in nodes] == [(1, 0), (0, 1), (1, 0), (0, 1), (1, 0), (1, 2), (1, 0), (1, 0), (1, 0)]
    assert tally.nodes == 3 + 1 + 1 and tally.warm == {FORWARD: 2, BACKWARD: 2}


def test_the_script_finds_a2cs_calls_warm_after_the_first_of_each_step() -> None:
    """examples/suite/a2c.py calls its policy 17 times a step (a rollout of 16, then the bootstrap value under no_grad),
    with only the environment's step between calls; its one backward pass runs the rollout's 16 nodes back to back.
    So per recorded step the script finds one first call and 16 warm ones forward, one and 15 backward."""
    sys.path.insert(0, str(REPO / "scripts"))
    import compile_costs

    path = RUNS / "warm" / "a2c-compile.json.gz"
    trace = _trace(path)
    nodes = _rows(trace, "CompiledFunctionBackward")
    steps = _steps(trace)
    per_step = [sum(1 for r in nodes.tolist() if start <= trace.ts_ns[r] < end) for start, end in steps]
    calls, _ = compile_costs.compiled_calls(path, HostCosts.of(trace).unit_ns)
    recorded = [n for n in per_step if n]
    assert set(recorded) == {16}
    assert (len(calls[(0, False)]), len(calls[(0, True)])) == (len(recorded), 16 * len(recorded))
    assert (len(calls[(1, False)]), len(calls[(1, True)])) == (len(recorded), 15 * len(recorded))


def test_a_calls_fused_runs_are_cold_and_warm_in_the_shares_of_its_graphs() -> None:
    """A backward call of four nodes, the first cold: each run timed here is a quarter cold and three quarters warm, less
    a graph's own call (each run was its own graph); the call pays that once per graph. A run not timed here takes
    FUSED_SHARE of its recorded time."""
    from daydream.cost.fused import FusedTimes
    from daydream.transforms.compiler import _fused_ns, _Nodes, _Run, _Tally

    tally = _Tally()
    tally.floor = FusedTimes(cold=10, warm=4)
    runs = [_Run(1000, "timed", FusedTimes(cold=50, warm=20)), _Run(1000, "", None)]
    ns = _fused_ns(runs, _Nodes(cold=1, warm=3, wrapper_ns=0), tally)
    assert ns == round(0.25 * (50 - 10) + 0.75 * (20 - 4)) + round(FUSED_SHARE * 1000) + (1 * 10 + 3 * 4)
    assert (tally.fused_runs, tally.measured_runs) == (2, 1)


ROUTED_SCRIPT = '''
import argparse, torch, torch.nn as nn
parser = argparse.ArgumentParser(); parser.add_argument("--steps", type=int, default=6)
options = parser.parse_args()
torch.manual_seed(0)

class Routed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        rows = (x[:, 0] > 0).nonzero(as_tuple=True)[0]
        y = torch.zeros_like(x).index_add(0, rows, self.a(x[rows]))
        rows = (x[:, 1] > 0).nonzero(as_tuple=True)[0]
        return y.index_add(0, rows, self.b(x[rows]))

model = Routed()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(options.steps):
    model(torch.randn(32, 8)).square().mean().backward()
    opt.step(); opt.zero_grad()
'''


def test_ops_that_break_the_graph_are_counted_and_the_prediction_called_a_bound(tmp_path: Path) -> None:
    # a module that gathers rows by aten::nonzero twice a call: under torch.compile's defaults each breaks the graph,
    # which the prediction (one graph per call) leaves out; the note says how many, per iteration, as the trace has them
    if os.environ.get("CI") != "true":
        pytest.importorskip("torch")
    from daydream.cli import main

    script, out = tmp_path / "routed.py", tmp_path / "routed.json.gz"
    script.write_text(ROUTED_SCRIPT)
    assert main(["trace", "--backend", "torch", "-o", str(out), str(script), "--", "--steps", "8"]) == 0
    trace = _trace(out)
    nonzero = _rows(trace, "aten::nonzero")
    per_step = {sum(1 for r in nonzero.tolist() if start <= trace.ts_ns[r] < end) for start, end in _steps(trace)}
    assert per_step == {2}  # by hand: two gathers a call, one call a step
    note = next(n for n in _predicted(out).notes if n.startswith("compile: not seen in an eager trace"))
    assert "holds 2 ops per iteration whose output's shape or value depends on the data (aten::nonzero ×2)" in note
    assert "bound from below" in note
    # a model without such ops: the note says nothing of them
    plain = next(n for n in _predicted(ROUNDS[0] / "mlp-baseline.json.gz").notes
                 if n.startswith("compile: not seen in an eager trace"))
    assert "depends on the data" not in plain
