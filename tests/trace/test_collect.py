"""`daydream trace` on real training scripts, run on the CPU with the torch.profiler backend."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.cli import main
from daydream.mapping import PHASES, attribute, find_iterations, phase_layer_times
from daydream.simulate import replay_trace, simulate
from daydream.trace import EventKind, read_job
from tests.builders import load_raw
from tests.conftest import REPO

if os.environ.get("CI") == "true":
    import torch  # noqa: F401  (in CI the test extras install torch; its absence is a failure)
else:
    pytest.importorskip("torch")

EXAMPLES = ["mlp", "cnn", "transformer"]


def _trace(tmp_path: Path, script: Path, *options: str, script_args: tuple[str, ...] = ()) -> tuple[int, Path]:
    out = tmp_path / f"{script.stem}.json.gz"
    code = main(["trace", "--backend", "torch", "-o", str(out), *options, str(script), "--", *script_args])
    return code, out


@pytest.fixture(scope="module")
def example_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("examples")
    traces = {}
    for name in EXAMPLES:
        code, out = _trace(folder, REPO / "examples" / f"{name}.py", "--warmup", "2", "--iterations", "5",
                           script_args=("--steps", "10"))
        assert code == 0, name
        traces[name] = out
    return traces


@pytest.mark.parametrize("name", EXAMPLES)
def test_captures_exactly_the_wanted_iterations(example_traces: dict[str, Path], name: str) -> None:
    raw = load_raw(example_traces[name])
    steps = [e["name"] for e in raw["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert steps == [f"ProfilerStep#{n}" for n in range(2, 7)]
    assert raw["daydream"]["backend"] == "torch" and raw["daydream"]["iterations"] == 5
    trace = read_job(example_traces[name], cache=False).traces[0]
    assert [it.name for it in find_iterations(trace)] == steps


@pytest.mark.parametrize("name", EXAMPLES)
def test_layers_and_phases_are_attributed(example_traces: dict[str, Path], name: str) -> None:
    trace = read_job(example_traces[name], cache=False).traces[0]
    attribution = attribute(trace)
    assert attribution.source == "daydream markers"
    # Counts of CPU ops, not their time: the program's structure is the same on every run, while
    # CPU time on a shared machine moves by tens of percent.
    ops = trace.indices(EventKind.CPU_OP)
    forward = ops[attribution.phase[ops] == PHASES.index("forward")]
    on_leaf = np.append(attribution.leaf, False)[attribution.layer[forward]]
    # Only glue between modules (residual adds, position ids) runs in a module that is not a leaf.
    assert on_leaf.mean() >= 0.95, on_leaf.mean()
    # Not all backward work has a forward op to follow: gradient accumulation into parameters
    # (AccumulateGrad) and the backward of functional code outside any module stay unattributed.
    backward_ops = ops[attribution.phase[ops] == PHASES.index("backward")]
    assert (attribution.layer[backward_ops] >= 0).mean() >= 0.65
    times = phase_layer_times(trace, attribution, [(it.start_ns, it.end_ns) for it in find_iterations(trace)])
    assert times.phases["optimizer"] > 0 and times.phases["forward"] > 0 and times.phases["backward"] > 0
    forward = {layer["name"] for layer in times.layers if layer["forward_ns"] > 0}
    backward = {layer["name"] for layer in times.layers if layer["backward_ns"] > 0}
    assert backward and backward <= forward
    # Every module with weights has backward work (its weight gradient) on itself.
    recorded = load_raw(example_traces[name])["daydream"]["layers"]
    weighted = {path for path, info in recorded.items() if info["type"] in ("Linear", "Conv2d")}
    assert weighted <= backward


@pytest.mark.parametrize("name", EXAMPLES)
def test_replay_of_a_recorded_trace_is_within_three_percent(example_traces: dict[str, Path], name: str) -> None:
    replay = replay_trace(read_job(example_traces[name], cache=False).traces[0])
    assert len(replay.iterations) == 5
    for iteration in replay.iterations:
        assert iteration.error <= 0.03, (name, iteration.name, iteration.simulated_ns, iteration.measured_ns)


def test_inspect_json_reports_phases_and_layers(example_traces: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(example_traces["transformer"])]) == 0
    rank = json.loads(capsys.readouterr().out)["ranks"][0]
    assert set(rank["phases"]) == {"forward", "backward", "optimizer", "other"}
    names = [layer["name"] for layer in rank["layers"]]
    assert "TinyTransformer.blocks.1.attn.qkv" in names and "TinyTransformer.head" in names
    assert all({"name", "forward_ns", "backward_ns"} <= layer.keys() for layer in rank["layers"])


TRAINING_LOOP = """
import sys
import torch
from torch import nn
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps = int(sys.argv[1])
for step in range(steps):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    {after_step}
open(sys.argv[2], "w").write("finished")
"""


def _script(tmp_path: Path, after_step: str = "pass") -> Path:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAINING_LOOP.format(after_step=after_step)))
    return script


def test_script_that_crashes_after_capture_leaves_a_readable_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script(tmp_path, after_step="if step == 4: raise RuntimeError('diverged at step 4')")
    code, out = _trace(tmp_path, script, "--warmup", "1", "--iterations", "2", "--finish",
                       script_args=("10", str(tmp_path / "done")))
    err = capsys.readouterr().err
    assert code == 1
    assert "RuntimeError: diverged at step 4" in err and "train.py" in err
    assert "daydream/" not in err.split("Traceback", 1)[-1].split("RuntimeError")[0]  # the script's frames only
    trace = read_job(out, cache=False).traces[0]
    assert [it.name for it in find_iterations(trace)] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert not (tmp_path / "done").exists()


def test_script_is_stopped_after_capture_by_default(tmp_path: Path) -> None:
    code, out = _trace(tmp_path, _script(tmp_path), "--warmup", "1", "--iterations", "2",
                       script_args=("50", str(tmp_path / "done")))
    assert code == 0 and out.exists()
    assert not (tmp_path / "done").exists()


def test_finish_lets_the_script_run_to_its_end(tmp_path: Path) -> None:
    code, out = _trace(tmp_path, _script(tmp_path), "--warmup", "0", "--iterations", "2", "--finish",
                       script_args=("6", str(tmp_path / "done")))
    assert code == 0 and out.exists()
    assert (tmp_path / "done").read_text() == "finished"


def test_script_ending_too_early_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    code, out = _trace(tmp_path, _script(tmp_path), "--warmup", "2", "--iterations", "3",
                       script_args=("3", str(tmp_path / "done")))
    assert not list(scratch.glob("daydream-capture-*"))  # the recorder's scratch folder is gone too
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()  # the user's to correct: more steps, or fewer iterations
    assert "saw 3 iteration(s) of the 5 needed" in err
    assert len([line for line in err.splitlines() if line.startswith("daydream: error")]) == 1


#: A training step without an optimizer, as a function that first recurses `depth` times (as the word language
#: model's repackage_hidden does over nested hidden states).
MANUAL_STEP = """
    import torch
    weight = torch.randn(8, 8, requires_grad=True)
    def train_step(depth={depth}):
        if depth:
            return train_step(depth - 1)
        loss = (torch.randn(4, 8) @ weight).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            weight.sub_(0.01 * weight.grad)
            weight.grad = None
    for _ in range(6):
        train_step()
"""


def _manual_step(tmp_path: Path, depth: int) -> Path:
    script = tmp_path / "manual.py"
    script.write_text(textwrap.dedent(MANUAL_STEP.format(depth=depth)))
    return script


def test_step_function_marks_iterations_without_an_optimizer(tmp_path: Path) -> None:
    code, out = _trace(tmp_path, _manual_step(tmp_path, 0), "--warmup", "1", "--iterations", "3", "--step-fn", "train_step")
    assert code == 0
    trace = read_job(out, cache=False).traces[0]
    assert len(find_iterations(trace)) == 3


SEQUENCE_FIRST = """
    import torch
    from torch import nn

    class LanguageModel(nn.Module):  # the PyTorch word_language_model's layout: inputs (length, batch)
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.rnn = nn.LSTM(16, 24)
            self.decode = nn.Linear(24, 100)

        def forward(self, tokens):
            out, _ = self.rnn(self.embed(tokens))
            return self.decode(out.reshape(-1, 24))

    model = LanguageModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        tokens = torch.randint(0, 100, (12, 3))  # 12 positions, 3 sequences
        loss = nn.functional.cross_entropy(model(tokens), torch.randint(0, 100, (36,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_the_batch_of_a_sequence_first_model_is_its_inputs_dim_1(tmp_path: Path) -> None:
    script = tmp_path / "lm.py"
    script.write_text(textwrap.dedent(SEQUENCE_FIRST))
    code, out = _trace(tmp_path, script, "--warmup", "1", "--iterations", "2")
    assert code == 0
    assert load_raw(out)["daydream"]["batch_size"] == 3  # not 12, the sequence length
    trace = read_job(out, cache=False).traces[0]
    from daydream.simulate.whatif import update_loop_of
    from daydream.transforms.batch import batch_ops

    attribution = attribute(trace)
    found = batch_ops(trace, attribution.phase, update_loop_of(trace, attribution))
    assert found.shape is not None and (found.batch, found.shape.tokens) == (3, frozenset({36}))
    # The LSTM runs on (12, 3, 16): its batch axis is 1; the decoder's rows are the 36 tokens.
    lstm = [op for op in found.ops if op.name == "aten::lstm"]
    assert lstm and found.shape.axis(lstm[0].tensors[0][0]) == 1
    decode = [op for op in found.ops if op.name == "aten::addmm"]
    assert decode and all(op.tensors[1][0][0] == 36 for op in decode)


COMPILED = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(8):
        loss = nn.functional.cross_entropy(compiled(torch.randn(16, 32)), torch.randint(0, 10, (16,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_compiled_model_is_recorded_without_breaking_its_compile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "compiled.py"
    script.write_text(textwrap.dedent(COMPILED))
    code, out = _trace(tmp_path, script, "--warmup", "3", "--iterations", "3")
    err = capsys.readouterr().err
    assert code == 0, err
    assert "global hooks" not in err  # torch.compile's warning about daydream's own hooks is not the script's business
    trace = read_job(out, cache=False).traces[0]
    assert len(find_iterations(trace)) == 3
    names = {trace.name_of(r) for r in range(len(trace))}
    # One compiled region, compiled once: the layer hooks neither broke the compile nor made it recompile (N/1, ...).
    # Its frame number N counts the frames dynamo compiled before in this process (other tests compile too).
    regions = sorted(n for n in names if n.startswith("Torch-Compiled Region"))
    assert len(regions) == 1 and re.fullmatch(r"Torch-Compiled Region: \d+/0", regions[0])
    assert "daydream.layer::OptimizedModule" in names and "daydream.phase::backward" in names


def test_a_recursive_step_function_ends_one_iteration_per_outermost_call(tmp_path: Path) -> None:
    code, out = _trace(tmp_path, _manual_step(tmp_path, 3), "--warmup", "1", "--iterations", "3", "--step-fn", "train_step")
    assert code == 0
    trace = read_job(out, cache=False).traces[0]
    iterations = find_iterations(trace)
    assert len(iterations) == 3
    # each iteration holds one whole step (its multiplies, forward and backward), none an empty slice of one
    mm = trace.indices(EventKind.CPU_OP)
    mm = mm[[trace.name_of(r) == "aten::mm" for r in mm.tolist()]]
    counts = [int(((trace.ts_ns[mm] >= it.start_ns) & (trace.ts_ns[mm] < it.end_ns)).sum()) for it in iterations]
    assert counts[0] >= 1 and counts == [counts[0]] * 3


def test_missing_script_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["trace", str(tmp_path / "nope.py")])
    assert code == 2 and "no such script" in capsys.readouterr().err


def test_layers_list_their_own_gradient_bytes(example_traces: dict[str, Path]) -> None:
    layers = load_raw(example_traces["mlp"])["daydream"]["layers"]
    # examples/mlp.py defaults: Linear(256, 512), 3 x [Linear(512, 512), LayerNorm(512)], Linear(512, 10); fp32.
    expected = {"MLP.embed": (256 * 512 + 512) * 4, "MLP.head": (512 * 10 + 10) * 4}
    for block in range(3):
        expected[f"MLP.blocks.{block}.linear"] = (512 * 512 + 512) * 4
        expected[f"MLP.blocks.{block}.norm"] = 2 * 512 * 4
    listed = {path: info["gradient_bytes"] for path, info in layers.items() if info["gradient_bytes"]}
    assert listed == expected


def test_layers_count_their_own_parameter_tensors(example_traces: dict[str, Path]) -> None:
    layers = load_raw(example_traces["mlp"])["daydream"]["layers"]
    # examples/mlp.py: every Linear and LayerNorm has a weight and a bias; the containers own none.
    expected = {path: 2 for path in ["MLP.embed", "MLP.head", *(f"MLP.blocks.{b}.{kind}" for b in range(3)
                                                                  for kind in ("linear", "norm"))]}
    assert {path: info["gradient_tensors"] for path, info in layers.items() if info["gradient_tensors"]} == expected


def test_layers_list_their_own_parameter_shapes(example_traces: dict[str, Path]) -> None:
    layers = load_raw(example_traces["mlp"])["daydream"]["layers"]
    # examples/mlp.py: a 256 -> 512 Linear, three blocks of a 512 -> 512 Linear and a LayerNorm, a 512 -> 10 head.
    expected = {"MLP.embed": [[512, 256], [512]], "MLP.head": [[10, 512], [10]]}
    for block in range(3):
        expected[f"MLP.blocks.{block}.linear"] = [[512, 512], [512]]
        expected[f"MLP.blocks.{block}.norm"] = [[512], [512]]
    assert {path: info["parameter_shapes"] for path, info in layers.items() if info["parameter_shapes"]} == expected


def test_a_trace_records_how_fast_its_cpu_ran(example_traces: dict[str, Path]) -> None:
    """The speed probe (trace/collect/speed.py) on the script's own intra-op threads, and the threads it ran on: the
    measured tier carries its cached times to this speed (cost/measure.py Measurer.cached)."""
    host = load_raw(example_traces["mlp"])["daydream"]["host"]
    assert isinstance(host["speed_probe_hot_ns"], int) and host["speed_probe_hot_ns"] > 0
    assert host["intra_op_threads"] >= 1


def _trace_ddp_ranks(tmp_path: Path, example: str, *script_args: str) -> Path:
    """Two real gloo ranks of `example`, each traced (two warm-up steps, two recorded); rank 0's file."""
    port = _free_port()
    ranks = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""}
        ranks.append(subprocess.Popen([sys.executable, "-m", "daydream", "trace", "--backend", "torch", "--warmup", "2",
                                       "--iterations", "2", "-o", str(tmp_path / f"{example}.json.gz"),
                                       str(REPO / "examples" / f"{example}.py"), "--", "--ddp", "--steps", "5",
                                       "--threads", "1", *script_args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for process in ranks:
        _, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr[-2000:]
    return tmp_path / f"{example}-rank0.json.gz"


def _per_step(path: Path, name: str) -> list[list[dict[str, Any]]]:
    """Per recorded step (ProfilerStep span) of a raw trace, its complete events called `name`, in time order."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    return [sorted((e for e in events if e["name"] == name and s["ts"] <= e["ts"] < s["ts"] + s["dur"]),
                   key=lambda e: e["ts"]) for s in steps]


def _predicted_collectives(trace_path: Path, spec: str) -> tuple[Any, list[int]]:
    return _predicted_collectives_and_notes(trace_path, spec)[0]


def _predicted_collectives_and_notes(trace_path: Path, spec: str) -> tuple[tuple[Any, list[int]], list[str]]:
    from daydream.graph import TaskKind, build_graph
    from daydream.simulate.whatif import transform

    trace = read_job(trace_path, cache=False).traces[0]
    graph = build_graph(trace)
    notes = transform(graph, trace, [spec])
    return (graph, np.flatnonzero(graph.tasks["kind"] == TaskKind.COLLECTIVE).tolist()), notes


def test_ddp_with_find_unused_parameters_all_reduces_the_used_map_as_a_real_run(example_traces: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    real = _per_step(_trace_ddp_ranks(tmp_path, "mlp", "--find-unused"), "c10d::allreduce_")
    # Each step: the buckets, then the used-parameter map: one int32 per parameter tensor (16 in examples/mlp.py).
    assert len(real) == 2 and len({len(step) for step in real}) == 1
    assert all(step[-1]["args"]["Input Dims"][0] == [[16]] for step in real)
    graph, collectives = _predicted_collectives(example_traces["mlp"], "ddp:world=2,bandwidth=2,find_unused=1")
    iterations = len(graph.iteration_markers)
    assert len(collectives) == len(real[0]) * iterations
    maps = [t for t in collectives if "used-parameter map" in graph.task_name(t)]
    assert len(maps) == iterations and all(int(graph.tasks["bytes"][t]) == 16 * 4 for t in maps)
    timed = simulate(graph)  # as in the real run, the map's all-reduce runs after its iteration's buckets
    for used in maps:
        buckets = [t for t in collectives if t not in maps and graph.tasks["iteration"][t] == graph.tasks["iteration"][used]]
        assert buckets and int(timed.start_ns[used]) >= max(int(timed.end_ns[t]) for t in buckets)


@pytest.mark.parametrize("script_args,copied_back", [((), 16), (("--bucket-view",), 0)])
def test_ddp_copies_the_buckets_back_unless_the_gradients_are_bucket_views(example_traces: dict[str, Path], tmp_path: Path,
                                                                           script_args: tuple[str, ...], copied_back: int) -> None:
    # A real 2-rank MLP run: the reducer scales each of the 16 parameter tensors into its bucket (mul_out) every step,
    # and copies the buckets back into them (copy_bucket_to_grad) unless DDP's gradient_as_bucket_view is on.
    rank0 = _trace_ddp_ranks(tmp_path, "mlp", *script_args)
    assert [len(step) for step in _per_step(rank0, "torch::distributed::reducer::mul_out")] == [16, 16]
    back = _per_step(rank0, "torch.distributed.ddp.reducer::copy_bucket_to_grad")
    assert [len(step) for step in back] == [copied_back, copied_back]
    graph, _ = _predicted_collectives(example_traces["mlp"], f"ddp:world=2,bandwidth=2,bucket_view={int(not copied_back)}")
    names = [graph.task_name(t) for t in range(graph.task_count)]
    iterations = len(graph.iteration_markers)
    assert sum(1 for n in names if "copy_bucket_to_grad" in n) == (iterations if copied_back else 0)
    assert sum(1 for n in names if "mul_out" in n) > 0


def test_ddp_waits_for_the_slowest_rank_by_the_spread_of_the_traces_own_iterations(example_traces: dict[str, Path]) -> None:
    from daydream.transforms.distributed.stragglers import expected_max_of_normals

    steps = np.array([e["dur"] for e in load_raw(example_traces["cnn"])["traceEvents"]
                      if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")], dtype=np.float64)
    spread_ms = 1.4826 * float(np.median(np.abs(steps - np.median(steps)))) / 1e3  # µs in the file
    waited, notes = _predicted_collectives_and_notes(example_traces["cnn"], "ddp:world=8,bandwidth=2")
    [note] = [n for n in notes if "slowest of 8" in n]
    assert f"the trace's {steps.size} iterations vary by {spread_ms:.3g} ms" in note
    wait_ms = spread_ms * expected_max_of_normals(8)
    assert f"waits +{wait_ms:.3g} ms for the slowest of 8 ranks" in note
    # The wait sits on an edge into each iteration's last bucket: one per iteration, of that length.
    graph, collectives = waited
    delayed = [int(e) for e in np.flatnonzero(graph.edges["latency_ns"] > 0) if int(graph.edges["dst"][e]) in collectives]
    assert len(delayed) == len(graph.iteration_markers)
    assert all(abs(int(graph.edges["latency_ns"][e]) / 1e6 - wait_ms) < 0.01 * wait_ms for e in delayed)
    (plain, plain_collectives), quiet = _predicted_collectives_and_notes(example_traces["cnn"],
                                                                         "ddp:world=8,bandwidth=2,stragglers=0")
    assert any("stragglers=0" in n for n in quiet)
    assert not any(int(plain.edges["dst"][e]) in plain_collectives for e in np.flatnonzero(plain.edges["latency_ns"] > 0))


def test_ddp_adds_no_straggler_wait_when_every_rank_is_simulated_from_its_own_recording(example_traces: dict[str, Path]) -> None:
    from daydream.simulate.whatif import predict_traces

    trace = read_job(example_traces["cnn"], cache=False).traces[0]
    alone = predict_traces([trace], ["ddp:world=2,bandwidth=2"])[0]
    both = predict_traces([trace, trace], ["ddp:world=2,bandwidth=2"])
    assert any("waits +" in note for note in alone.notes)
    for rank in both:
        assert any("all 2 ranks are simulated together" in note for note in rank.notes)
        assert not any("waits +" in note for note in rank.notes)
    # Two identical recordings, no wait: each rank's prediction is the one-rank prediction without it.
    quiet = predict_traces([trace], ["ddp:world=2,bandwidth=2,stragglers=0"])[0]
    assert [rank.predicted_ns for rank in both] == [quiet.predicted_ns, quiet.predicted_ns]



def test_layers_list_their_own_buffer_bytes_by_dtype(example_traces: dict[str, Path]) -> None:
    layers = load_raw(example_traces["cnn"])["daydream"]["layers"]
    # examples/cnn.py: three ConvBlocks of BatchNorm2d(16, 32, 64), each with running_mean and running_var (C float32
    # each) and num_batches_tracked (one int64); no other layer has buffers.
    expected = {f"SmallCNN.blocks.{block}.bn": {"float32": 2 * channels * 4, "int64": 8}
                for block, channels in enumerate((16, 32, 64))}
    listed = {path: info["buffer_dtypes"] for path, info in layers.items() if info["buffer_bytes"]}
    assert listed == expected
    assert all(info["buffer_bytes"] == sum(info["buffer_dtypes"].values()) for info in layers.values())


def test_ddp_broadcasts_the_buffers_as_often_as_a_real_ddp_run(example_traces: dict[str, Path], tmp_path: Path) -> None:
    # DDP's own broadcast calls per recorded step of a real 2-rank CNN run (two warm-up steps: the second forward also
    # broadcasts the buckets DDP rebuilt in the first backward, twice).
    per_step = [len(step) for step in _per_step(_trace_ddp_ranks(tmp_path, "cnn"), "c10d::broadcast_")]
    assert per_step == [2, 2]  # float32 statistics and the int64 counter: one coalesced broadcast per dtype
    graph, collectives = _predicted_collectives(example_traces["cnn"], "ddp:world=2,bandwidth=2")
    inserted = [t for t in collectives if "broadcast" in graph.task_name(t)]
    assert len(inserted) == per_step[0] * len(graph.iteration_markers)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_ddp_on_one_rank_predicts_the_baseline_and_more_ranks_cost_time(example_traces: dict[str, Path],
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # A slow link (0.05 GB/s) so that the 3.3 MB of gradients cannot hide behind this small model's backward.
    assert main(["whatif", str(example_traces["mlp"]), "--opt", "ddp:bandwidth=0.05", "--sweep", "world=1,2,4", "--json"]) == 0
    sweep = json.loads(capsys.readouterr().out)
    times = [point["predicted_ns"] for point in sweep["points"]]
    assert times[0] == sweep["baseline_ns"]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize("out,expected", [("run.json.gz", "run-rank1.json.gz"), ("job/{rank}.json.gz", "job/1.json.gz"),
                                          ("run.trace", "run-rank1.trace")])
def test_each_rank_of_a_launch_writes_its_own_file(out: str, expected: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from daydream.trace.collect import CaptureOptions, output_path

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    path, notice = output_path(CaptureOptions(script="train.py", args=[], out=str(tmp_path / out)))
    assert path == tmp_path / expected
    assert (notice is None) == ("{rank}" in out)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert output_path(CaptureOptions(script="train.py", args=[], out=str(tmp_path / "run.json.gz")))[0] == tmp_path / "run.json.gz"


MLP_PARAMETER_BYTES = (256 * 512 + 512 + 3 * (512 * 512 + 512 + 2 * 512) + 512 * 10 + 10) * 4  # examples/mlp.py, fp32


def test_memory_before_the_trace_is_recorded(example_traces: dict[str, Path]) -> None:
    before = load_raw(example_traces["mlp"])["daydream"]["memory_before"]["cpu"]
    # What the first recorded iteration began with and did not free: the weights, Adam's two moments and a 4-byte step
    # per tensor; not the gradients (zero_grad(set_to_none=True) frees them in that iteration).
    assert before["weights"] == MLP_PARAMETER_BYTES
    assert before["gradients"] == 0
    assert before["optimizer state"] == 2 * MLP_PARAMETER_BYTES + 16 * 4


def test_the_recorded_block_is_read_as_written_and_malformed_parts_are_left_out(example_traces: dict[str, Path]) -> None:
    from types import SimpleNamespace

    from daydream.trace.model import memory_before, recorded_fact

    raw = load_raw(example_traces["mlp"])["daydream"]
    trace = read_job(example_traces["mlp"]).traces[0]
    assert memory_before(trace) == raw["memory_before"]
    assert recorded_fact(trace, "host") == raw["host"]
    assert recorded_fact(trace, "no such fact") is None

    def written(block: Any) -> Any:
        return SimpleNamespace(meta=SimpleNamespace(collector=block))

    assert recorded_fact(written(["not", "a", "table"]), "host") is None
    assert memory_before(written({"memory_before": [1, 2]})) == {}
    assert memory_before(written({"memory_before": {"cpu": 5, "cuda:0": {"weights": 8}}})) == {"cuda:0": {"weights": 8}}


sys.path.insert(0, str(REPO / "scripts"))
from validate_memory import WHOLE_RUN  # noqa: E402  (the same independent measurement the script reports)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_memory_peak_is_the_whole_runs(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Independently: the same run profiled from its first line in a fresh process, every CPU allocation counted.
    # The trace is recorded in a fresh process too, as the command does: caches this test process filled earlier
    # (oneDNN's scratch, say) would otherwise be missing from it.
    script, out, trace = str(REPO / "examples" / f"{name}.py"), tmp_path / "whole.json", tmp_path / "trace.json.gz"
    subprocess.run([sys.executable, "-c", WHOLE_RUN, script, str(out), "--steps", "10"], check=True, capture_output=True,
                   timeout=600)
    subprocess.run([sys.executable, "-m", "daydream", "trace", "--warmup", "2", "--iterations", "5", "-o", str(trace),
                    script, "--", "--steps", "10"], check=True, capture_output=True, timeout=600)
    whole = max(e["args"]["Total Allocated"] for e in json.loads(out.read_text())["traceEvents"]
                if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0)
    assert main(["memory", "--json", str(trace)]) == 0
    [cpu] = json.loads(capsys.readouterr().out)["devices"]
    assert abs(cpu["peak_allocated_bytes"] - whole) <= 0.02 * whole
    assert "recorded by daydream trace" in cpu["before_trace"]
    if name == "mlp":
        assert cpu["categories"]["weights"] == MLP_PARAMETER_BYTES
        assert cpu["categories"]["optimizer state"] >= 2 * MLP_PARAMETER_BYTES


def test_an_earlier_recordings_blocks_freed_inside_a_later_one_leave_its_peak_alone(tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # A module both scripts import (it stays loaded between the recordings in this process) keeps what the first script
    # allocates while recorded; the second empties it right after its warm-up step, inside its own recording. The CPU's
    # totals count every block allocated while memory was profiled, in any session, so they drop by those blocks there.
    (tmp_path / "store.py").write_text("kept = []\n")
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text(textwrap.dedent(TRAINING_LOOP.format(after_step="store.kept.append(torch.ones(777_777))"))
                     .replace("import sys\n", "import sys\nimport store\n"))
    second.write_text(textwrap.dedent(TRAINING_LOOP.format(after_step="store.kept.clear()"))
                      .replace("import sys\n", "import sys\nimport store\n"))
    peaks = []
    try:
        for script in (second, first, second):  # the second alone (nothing kept yet), then after the first
            code, out = _trace(tmp_path, script, "--warmup", "1", "--iterations", "2", script_args=("8", str(tmp_path / "done")))
            assert code == 0
            if script is second:
                frees = [e["args"]["Bytes"] for e in load_raw(out)["traceEvents"] if e.get("name") == "[memory]"]
                assert main(["memory", "--json", str(out)]) == 0
                peaks.append((json.loads(capsys.readouterr().out)["devices"][0]["peak_allocated_bytes"], frees.count(-777_777 * 4)))
    finally:
        sys.modules.pop("store", None)
    (alone, freed_alone), (after, freed_after) = peaks
    assert freed_alone == 0 and freed_after == 2  # the first script's two recorded steps' blocks, freed in the second's
    assert abs(after - alone) < 777_777 * 4


def test_a_memory_snapshot_counts_each_storage_once() -> None:
    import torch
    from torch import nn

    from daydream.trace.collect.hooks import memory_snapshot

    model = nn.Sequential(nn.Linear(10, 20), nn.BatchNorm1d(20), nn.Linear(20, 10, bias=False))
    tied = nn.Linear(20, 10, bias=False)
    tied.weight = model[2].weight  # the same parameter in a second model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 10)).sum().backward()
    optimizer.step()
    snapshot = memory_snapshot([model, tied], [optimizer])["cpu"]
    parameters = (10 * 20 + 20 + 2 * 20 + 20 * 10) * 4
    buffers = (20 + 20) * 4 + 8  # running mean and variance, num_batches_tracked (int64)
    # (its "other tensors" are whatever else this test process holds)
    assert {k: snapshot[k] for k in ("weights", "gradients", "optimizer state")} == \
        {"weights": parameters + buffers, "gradients": parameters, "optimizer state": parameters}


def test_on_the_cpu_ddps_buffer_broadcasts_compete_with_rank_0s_forward(example_traces: dict[str, Path]) -> None:
    # The CNN's BatchNorm buffers are broadcast before each forward. On the CPU rank 0 sends them and runs its forward,
    # so with contention 2 each broadcast takes between its own time (nothing beside it) and twice it (rank 0's
    # forward beside it throughout); without contention, its own time. How much of each overlaps compute depends on
    # the recorded times (a loaded machine records iterations whose forward starts late, and then none does), so: none
    # shrinks and none more than doubles. That a broadcast beside the root's compute does grow is
    # tests/transforms/test_contention.py's hand-built rooted broadcast.
    from daydream.simulate.whatif import predict

    trace = read_job(example_traces["cnn"], cache=False).traces[0]
    durations, on_gpu = {}, False
    for factor in (1, 2):
        prediction = predict(trace, [f"ddp:world=2,bandwidth=2,latency=100,contention={factor}"])
        graph = prediction.graph
        assert graph is not None
        broadcasts = [t for t in range(graph.task_count) if graph.task_name(t).startswith("ddp broadcast of")]
        assert len(broadcasts) == 2 * len(graph.iteration_markers)  # float32 statistics and the int64 counter
        durations[factor] = np.array([int(graph.tasks["duration_ns"][t]) for t in broadcasts])
        on_gpu = graph.has_device_work()
    assert (durations[1] >= 100_000).all()  # one step of 100 µs and the bytes over 2 GB/s
    if on_gpu:  # (recorded where CUDA is available) every rank's compute stream waits for the broadcast: no stretch
        assert (durations[2] == durations[1]).all()
        return
    assert (durations[2] >= durations[1]).all() and (durations[2] <= 2 * durations[1] + 1).all()


def test_a_script_that_never_steps_is_told_what_ends_an_iteration(capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from daydream.trace.collect.hooks import _NoStepNotice

    silent = _NoStepNotice(None, after_s=0.05)
    time.sleep(0.3)
    said = capsys.readouterr().err
    assert said.count("daydream: no iteration has ended") == 1 and "--step-fn FUNCTION" in said
    stepped = _NoStepNotice(None, after_s=0.2)
    stepped.cancel()  # an iteration ended in time: nothing said
    time.sleep(0.3)
    assert capsys.readouterr().err == ""
    silent.cancel()


def test_the_notice_says_what_the_script_has_done(capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from daydream.trace.collect.hooks import NO_STEP_NOTICE_S, _NoStepNotice

    assert NO_STEP_NOTICE_S <= 10
    seen = {"forward": 3, "backward": 3, "optimizer": 0}
    notice = _NoStepNotice(None, after_s=0.05, seen=seen)
    time.sleep(0.3)
    said = capsys.readouterr().err
    assert "3 forward passes, 3 backward passes, 0 optimizer steps" in said
    assert "backward passes without optimizer.step()" in said and said.count("\n") == 1
    notice.cancel()


@pytest.mark.parametrize(("durations", "warned"), [([225.0, 82.0, 1_670_000.0], True), ([100.0, 120.0, 900.0], False)])
def test_iterations_that_differ_tenfold_are_said(durations: list[float], warned: bool) -> None:
    from daydream.trace.collect import CaptureOptions, uneven_iterations

    document = {"traceEvents": [{"ph": "X", "name": f"ProfilerStep#{n}", "ts": 0, "dur": d}
                                for n, d in enumerate(durations)]}
    said = uneven_iterations(document, CaptureOptions(script="train.py", step_fn="repackage_hidden"))
    assert (said is not None) == warned
    if said:
        assert "82 µs to 1.67 s" in said and "--step-fn repackage_hidden" in said


def test_a_loop_without_optimizer_steps_is_counted_by_the_hooks() -> None:
    torch = pytest.importorskip("torch")
    from daydream.trace.collect.hooks import install

    hooks = install(lambda: None)
    try:
        model = torch.nn.Linear(4, 2)
        for _ in range(3):
            loss = model(torch.randn(5, 4)).sum()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
    finally:
        hooks.remove()
    assert hooks.seen == {"forward": 3, "backward": 3, "optimizer": 0}


BY_HAND = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    for step in range(8):
        model.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        for p in model.parameters():  # the PyTorch word_language_model's update
            p.data.add_(p.grad, alpha=-0.01)
"""

ACCUMULATING = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(5):
        for micro in range(4):  # gradients of four micro-batches, then one step: no weight written between them
            model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
"""


def _forward_phases_per_iteration(out: Path) -> list[int]:
    trace = read_job(out, cache=False).traces[0]
    rows = trace.indices(EventKind.ANNOTATION)
    forwards = [trace.ts_ns[r] for r in rows if trace.name_of(r) == "daydream.phase::forward"]
    return [sum(it.start_ns <= ts < it.end_ns for ts in forwards) for it in find_iterations(trace)]


def test_weights_updated_by_hand_end_iterations_at_the_next_forward(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "by_hand.py"
    script.write_text(textwrap.dedent(BY_HAND))
    code, out = _trace(tmp_path, script, "--warmup", "1", "--iterations", "3")
    assert code == 0
    assert _forward_phases_per_iteration(out) == [1, 1, 1]
    assert "updates its weights by hand" in capsys.readouterr().err


def test_gradient_accumulation_is_one_iteration_per_optimizer_step(tmp_path: Path) -> None:
    script = tmp_path / "accumulating.py"
    script.write_text(textwrap.dedent(ACCUMULATING))
    code, out = _trace(tmp_path, script, "--warmup", "1", "--iterations", "2")
    assert code == 0
    assert _forward_phases_per_iteration(out) == [4, 4]


def test_gist_example_keeps_a_bit_per_relu_output_and_its_memory_is_predicted(
        example_traces: dict[str, Path], tmp_path: Path) -> None:
    import torch

    sys.path.insert(0, str(REPO / "examples"))
    import cnn  # the example's Gist ReLU-pool, held to torch's own ReLU and pool

    x = torch.randn(4, 16, 8, 8, dtype=torch.double, requires_grad=True)
    reference = torch.nn.functional.max_pool2d(torch.relu(x), 2)
    encoded = cnn.GistReLUPool.apply(x)
    gradient = torch.randn_like(reference)
    assert torch.equal(encoded, reference)
    bits, argmax = encoded.grad_fn.saved_tensors
    assert bits.numel() == x.numel() // 8 and bits.dtype == torch.uint8 and argmax.shape == reference.shape
    assert torch.allclose(torch.autograd.grad(encoded, x, gradient)[0], torch.autograd.grad(reference, x, gradient)[0])

    from daydream.api import predict_memory_for
    from daydream.memory import analyze_memory

    code, real = _trace(tmp_path, REPO / "examples" / "cnn.py", "--warmup", "2", "--iterations", "5",
                        script_args=("--steps", "10", "--gist"))
    assert code == 0
    measured = analyze_memory(read_job(real, cache=False).traces[0])[0].peak_allocated_bytes
    baseline = read_job(example_traces["cnn"], cache=False).traces
    (predicted,) = predict_memory_for(baseline, ["gist"])
    assert abs(int(predicted["predicted_peak_bytes"]) - measured) / measured < 0.05  # type: ignore[call-overload]


def test_the_recorded_iterations_kernel_time_is_counted(example_traces: dict[str, Path], tmp_path: Path) -> None:
    raw = load_raw(example_traces["mlp"])["daydream"]
    usage = raw["host_usage"]
    # one entry per recorded iteration (5), each spanning about the iteration the trace marks
    assert len(usage["iterations"]) == 5
    marked = sorted(e["dur"] * 1000 for e in load_raw(example_traces["mlp"])["traceEvents"]
                    if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    walls = sorted(it["wall_ns"] for it in usage["iterations"])
    assert 0.5 < walls[2] / marked[2] < 2.0
    assert all(it["minor_faults"] >= 0 and it["system_ns"] >= 0 for it in usage["iterations"])
    # the reserve was made, in whole blocks, and at least the least
    assert usage["heap_reserve_bytes"] >= 256 * 2**20 and usage["heap_reserve_bytes"] % (8 * 2**20) == 0
    code, out = _trace(tmp_path, REPO / "examples" / "mlp.py", "--no-heap-reserve", "--warmup", "1", "--iterations", "2",
                       script_args=("--steps", "5"))
    assert code == 0 and load_raw(out)["daydream"]["host_usage"]["heap_reserve_bytes"] == 0
