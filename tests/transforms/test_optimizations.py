"""Each optimization on a small hand-built graph (times computed by hand) and on a real trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.api import open_job, predict_job
from daydream.devices import find_device
from daydream.errors import InputError
from daydream.graph import DepKind, TaskKind
from daydream.simulate import simulate
from daydream.simulate.whatif import predict
from daydream.transforms import OPTIMIZATIONS, Context, apply_spec, load_pipeline, parse_spec
from tests.transforms.graphs import call, graph, kernel, launch_chain, op

V100 = Context(device=find_device("V100"))


def _apply(g, text: str, context: Context | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    return apply_spec(g, parse_spec(text), context or Context())


def test_amp_speeds_up_fp32_kernels_by_the_device_table() -> None:
    tasks, edges = launch_chain(
        [call(phase="forward"), call(phase="forward"), call(phase="optimizer")],
        [kernel("volta_sgemm_128x64_nn", 796, phase="forward"), kernel("vectorized_elementwise_kernel", 20, phase="forward"),
         kernel("multi_tensor_apply_kernel", 10, phase="optimizer")],
    )
    g = graph(tasks, edges)
    notes = _apply(g, "amp", V100)
    ratio = find_device("V100").fp16_tflops / find_device("V100").fp32_tflops  # 7.96
    assert g.tasks["duration_ns"][3] == round(796 / ratio)
    assert g.tasks["duration_ns"][4] == 10  # memory-bound: half the bytes
    assert g.tasks["duration_ns"][5] == 10  # the optimizer keeps fp32 master weights
    assert any("casts are not modelled" in note for note in notes)  # no recorded ops to plan casts from
    unknown = graph(*launch_chain([call(phase="forward")], [kernel("sgemm", 300, phase="forward")]))
    _apply(unknown, "amp")  # no device: Daydream's ÷3
    assert unknown.tasks["duration_ns"][1] == 100


def test_amp_inserts_autocasts_casts_timed_by_the_cost_stage() -> None:
    from daydream.cost import CostModel, HostCosts
    from daydream.cost.elementwise import CopySpeed
    from daydream.transforms.autocast import ForwardOp

    tasks, edges = launch_chain([call(phase="forward", layer="fc"), call(phase="optimizer")],
                                [kernel("volta_sgemm_128x64_nn", 796, phase="forward", layer="fc"),
                                 kernel("multi_tensor_apply_kernel", 10, phase="optimizer")])
    g = graph(tasks, edges, layers=["fc"])
    g.tasks["event"][:] = np.arange(g.task_count)  # tasks read from a trace: each has its row
    linear = ForwardOp(100, "aten::linear", 0, [((64, 256), "float"), ((512, 256), "float"), ((512,), "float")])
    costs = CostModel(host=HostCosts(unit_ns=1000, launch_ns=5), on_gpu=True, device=find_device("V100"),
                      elementwise=CopySpeed(100.0, 100.0, "by hand"))
    context = Context(device=find_device("V100"), derive={"costs": lambda: costs,
                                                          "autocast_ops": lambda: ({0: [linear]}, {100: (0, 9, -1)})})
    _apply(g, "amp", context)
    names = [g.task_name(t) for t in range(g.task_count)]
    casts = [t for t, n in enumerate(names) if n == "autocast: cast (host)"]
    kernels = [t for t, n in enumerate(names) if n == "autocast: cast kernel"]
    dispatch = [t for t, n in enumerate(names) if n == "autocast: dispatch (host)"]
    # x, W and b of the linear, each cast once: 13.5 host units of 1000 ns and a 5 ns launch; on the device, 4 + 2
    # bytes per element at 100 bytes/ns after 100 ns: x 64 x 256 -> 1083 ns, W 512 x 256 -> 7964 ns, b 512 -> 131 ns.
    assert [int(g.tasks["duration_ns"][t]) for t in casts] == [13_505] * 3
    assert sorted(int(g.tasks["duration_ns"][t]) for t in kernels) == [131, 1083, 7964]
    assert [int(g.tasks["duration_ns"][t]) for t in dispatch] == [6_300]  # the wrapper's dispatch: 6.3 units
    launch = g.edges_of_kind(DepKind.LAUNCH)
    assert sorted(zip(g.edges["src"][launch].tolist(), g.edges["dst"][launch].tolist()))[-3:] == sorted(zip(casts, kernels))
    # Host order: dispatch, the three casts, then the linear's launch; on the stream the casts come before its GEMM.
    end = simulate(g).end_ns
    assert end[0] - 5 >= 6_300 + 3 * 13_505
    assert simulate(g).start_ns[3] >= max(end[k] for k in kernels)


def test_fused_optimizer_keeps_the_bytes_and_drops_fixed_costs() -> None:
    durations = [10, 10, 10, 10, 30, 50]
    tasks, edges = launch_chain([call(phase="optimizer", gap=8) for _ in durations],
                                [kernel("adam_kernel", d, phase="optimizer") for d in durations])
    g = graph(tasks, edges)
    _apply(g, "fused-optimizer:kernels=2")
    # fixed cost = 10th percentile = 10 ns; total 120 - 4 * 10 = 80 ns over 2 kernels
    kernels = g.tasks["kind"] == TaskKind.KERNEL
    assert g.tasks["duration_ns"][kernels].tolist() == [40, 40]
    assert (g.tasks["kind"] == TaskKind.HOST_CALL).sum() == 2
    # calls at 0 and 5+8 = 13; kernels at 4 and max(13+4, 44+1) = 45 -> end 85
    assert simulate(g).end_ns.max() == 85


def _fused_step_context(optimizer: Any) -> tuple[Context, Any]:
    from daydream.cost import CostModel, HostCosts
    from daydream.cost.elementwise import CopySpeed

    costs = CostModel(host=HostCosts(unit_ns=1000, launch_ns=5), on_gpu=True, device=find_device("H100"),
                      elementwise=CopySpeed(3.0, 100.0, "by hand"))
    return Context(derive={"costs": lambda: costs, "stepped_optimizer": lambda: optimizer}), costs


def _loop_step() -> Any:
    durations = [100, 100, 100, 100, 300, 500]
    tasks, edges = launch_chain([call(phase="optimizer", gap=8) for _ in durations],
                                [kernel("adam_kernel", d, phase="optimizer") for d in durations])
    return graph(tasks, edges)


def test_a_fused_step_on_a_gpu_is_timed_by_the_bytes_it_moves() -> None:
    from daydream.cost import Tier
    from daydream.cost.optimizer import SteppedOptimizer

    adamw = SteppedOptimizer("AdamW", (((100, 10), "float"), ((10,), "float")), state_tensors=2)
    context, costs = _fused_step_context(adamw)
    g = _loop_step()
    notes = _apply(g, "fused-optimizer:kernels=2", context)  # auto: fused on a GPU trace
    # 1,010 elements x 4 bytes x (gradient read; parameter and 2 state tensors read and written: 7) = 28,280 bytes, over
    # 2 kernels: each 3 ns + 14,140 / 100 ns = 144 ns; less than the loop's 1,200 ns less 4 x 100 ns fixed
    kernels = g.tasks["kind"] == TaskKind.KERNEL
    assert g.tasks["duration_ns"][kernels].tolist() == [144, 144]
    assert costs.tally[Tier.MODELLED] == 2
    assert any("AdamW(fused=True)" in n and "2 parameters" in n for n in notes)
    foreach = _loop_step()
    _apply(foreach, "fused-optimizer:kernels=2,implementation=foreach", _fused_step_context(adamw)[0])
    assert foreach.tasks["duration_ns"][foreach.tasks["kind"] == TaskKind.KERNEL].tolist() == [400, 400]


@pytest.mark.parametrize(("name", "state", "why"), [
    ("RMSprop", 1, "torch.optim.RMSprop has no fused step on a GPU"),
    ("SGD", None, "its state tensors per parameter"),
])
def test_a_fused_step_that_cannot_be_timed_by_its_bytes_says_why(name: str, state: int | None, why: str) -> None:
    from daydream.cost.optimizer import SteppedOptimizer

    g = _loop_step()
    notes = _apply(g, "fused-optimizer:kernels=2", _fused_step_context(SteppedOptimizer(name, (((8,), "float"),),
                                                                                        state))[0])
    assert g.tasks["duration_ns"][g.tasks["kind"] == TaskKind.KERNEL].tolist() == [400, 400]  # the fixed costs' rule
    assert any(why in n for n in notes)


def test_the_state_tensors_a_recording_lists() -> None:
    from types import SimpleNamespace

    from daydream.cost.optimizer import SteppedOptimizer, fused_step_bytes, recorded_state_tensors

    def recorded(before: Any) -> Any:
        return SimpleNamespace(meta=SimpleNamespace(collector={"memory_before": before}))

    # AdamW's two moments beside a step counter per parameter (the CPU entry holds no weights)
    assert recorded_state_tensors(recorded({"cuda:0": {"weights": 4000, "optimizer state": 8004},
                                            "cpu": {"weights": 0, "optimizer state": 596}})) == 2
    assert recorded_state_tensors(recorded({"cuda:0": {"weights": 4000, "optimizer state": 0}})) is None
    assert recorded_state_tensors(recorded(None)) is None
    # SGD with momentum: one buffer; 10 x 3 elements of bf16: (3 + 2) x 2 bytes each
    assert fused_step_bytes(SteppedOptimizer("SGD", (((10, 3), "c10::BFloat16"),), 1)) == 30 * 2 * 5
    assert fused_step_bytes(SteppedOptimizer("SGD", (((10, 3), "float"),))) is None


def test_cuda_graphs_keeps_one_launch_and_every_kernel() -> None:
    tasks, edges = launch_chain([call(gap=20, phase="forward") for _ in range(3)],
                                [kernel("k", 10, phase="forward") for _ in range(3)])
    g = graph(tasks, edges)
    assert simulate(g).end_ns.max() == 50 + 4 + 10  # third call at 50, its kernel 54..64
    _apply(g, "cuda-graphs")
    assert (g.tasks["kind"] == TaskKind.HOST_CALL).sum() == 1 and (g.tasks["kind"] == TaskKind.KERNEL).sum() == 3
    # one launch at 0; kernels back to back: 4..14, 15..25, 26..36
    assert simulate(g).end_ns.max() == 36


def test_cuda_graphs_removes_every_call_a_replay_skips_and_keeps_the_syncs() -> None:
    host = [call(gap=20, phase="forward"), call("cudaDeviceGetAttribute", gap=20, phase="forward"),
            call("cudaMemsetAsync", gap=20, phase="forward"), call("cudaStreamSynchronize", gap=30, phase="forward"),
            call(gap=20, phase="forward")]
    device = [kernel("k", 10, phase="forward"), {"kind": TaskKind.MEMSET, "name": "memset", "duration": 10},
              kernel("k", 10, phase="forward")]
    edges = [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(4)]
    edges += [(0, 5, DepKind.LAUNCH, 4, True), (2, 6, DepKind.LAUNCH, 4, True), (4, 7, DepKind.LAUNCH, 4, True)]
    edges += [(5, 6, DepKind.STREAM_ORDER, 1, False), (6, 7, DepKind.STREAM_ORDER, 1, False)]
    g = graph(host + device, edges)
    # calls at 0..5 (a thread's first task starts at 0), 25..30, 50..55, 85..90, 110..115; the last kernel 114..124
    assert simulate(g).end_ns.max() == 124
    notes = _apply(g, "cuda-graphs")
    host_calls = np.flatnonzero(g.tasks["kind"] == TaskKind.HOST_CALL)
    assert [g.task_name(int(t)) for t in host_calls] == ["cudaLaunchKernel", "cudaStreamSynchronize"]
    assert (np.isin(g.tasks["kind"], [TaskKind.KERNEL, TaskKind.MEMSET])).sum() == 3
    # the graph launch 0..5 and the sync after its own CPU work 35..40; kernel 4..14, the memset
    # 15..25 and the last kernel, launched from the sync's place, 44..54
    assert simulate(g).end_ns.max() == 54
    assert "1 kernel launches and 2 other API calls" in notes[0] and "1 calls" in notes[1]


def test_fuse_elementwise_chains_within_a_layer() -> None:
    tasks, edges = launch_chain([call(layer="l"), call(layer="l"), call(layer="l"), call(layer="m")],
                                [kernel("vectorized_elementwise_kernel", d, layer="l") for d in (10, 20, 30)]
                                + [kernel("sgemm", 5, layer="m")])
    g = graph(tasks, edges, layers=["l", "m"])
    _apply(g, "fuse-elementwise")
    kernels = np.flatnonzero(g.tasks["kind"] == TaskKind.KERNEL)
    # longest (30) + (1 - 0.8) * (10 + 20) = 36; the GEMM of another layer stays
    assert g.tasks["duration_ns"][kernels].tolist() == [36, 5]
    assert (g.tasks["kind"] == TaskKind.HOST_CALL).sum() == 2


def test_batch_size_scales_above_a_fixed_cost() -> None:
    tasks, edges = launch_chain([call(phase="forward")] * 3 + [call(phase="optimizer")],
                                [kernel("k", d, phase="forward") for d in (1, 10, 100)] + [kernel("k", 7, phase="optimizer")])
    g = graph(tasks, edges)
    _apply(g, "batch-size:factor=2")
    # fixed = 10th percentile of (1, 10, 100) = 2 (int); t -> min(t, 2) + (t - min(t, 2)) * 2
    assert g.tasks["duration_ns"][4:].tolist() == [1, 18, 198, 7]
    with pytest.raises(InputError):
        _apply(g, "batch-size:factor=0")


def test_checkpoint_recomputes_the_layer_forward_before_its_backward() -> None:
    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("other", 5, phase="forward", layer="net.head"),
               op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False)],
              layers=["net.blocks.0", "net.head"])
    assert simulate(g).end_ns.max() == 35
    _apply(g, r"checkpoint:layers=blocks\.\d+$")
    assert g.task_count == 4 and g.validate() == []
    assert simulate(g).end_ns.max() == 45  # 10 + 5 + 10 (recomputed) + 20
    with pytest.raises(InputError, match="no layer matches"):
        _apply(g, "checkpoint:layers=nothing_like_this")


def test_checkpoint_by_default_recomputes_the_repeated_blocks_whatever_their_parent_is_called() -> None:
    # nn.TransformerEncoder numbers its blocks under `encoder.layers`; the head is no block
    layers = ["vit.encoder.layers.0", "vit.encoder.layers.1", "vit.head"]
    g = graph([op("fwd0", 10, phase="forward", layer=layers[0]), op("fwd1", 11, phase="forward", layer=layers[1]),
               op("head", 5, phase="forward", layer=layers[2]), op("bwd1", 20, phase="backward", layer=layers[1]),
               op("bwd0", 21, phase="backward", layer=layers[0])],
              [(k, k + 1, DepKind.HOST_ORDER, 0, False) for k in range(4)], layers=layers)
    assert simulate(g).end_ns.max() == 67
    notes = _apply(g, "checkpoint")
    assert g.task_count == 7 and g.validate() == []
    assert simulate(g).end_ns.max() == 67 + 10 + 11  # each block's forward once more before its backward
    assert "2 layer(s) of the repeated blocks (vit.encoder.layers.0, vit.encoder.layers.1)" in notes[0]


def test_a_layer_called_twice_an_iteration_is_two_checkpointed_calls() -> None:
    # blocks.0 runs twice in the forward (a policy in two steps of a rollout), net.head between: both calls are
    # recomputed before the backward, and each pays the checkpoint wrapper (7 ns forward, 3 ns backward here).
    from daydream.transforms.checkpoint import Wrapper, _previous_host_task, _recompute_before

    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("other", 5, phase="forward", layer="net.head"),
               op("fwd", 10, phase="forward", layer="net.blocks.0"), op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.HOST_ORDER, 0, False)],
              layers=["net.blocks.0", "net.head"])
    assert simulate(g).end_ns.max() == 45
    found = _recompute_before(g, np.array([0, 2]), np.array([3]), Wrapper(7, 3), _previous_host_task(g))
    assert (found.added, found.calls, found.ungraded) == (2, 2, 0) and g.validate() == []
    assert simulate(g).end_ns.max() == 10 + 5 + 10 + 2 * 7 + 2 * (10 + 3) + 20


def test_a_checkpointed_call_under_no_grad_is_not_recomputed() -> None:
    # blocks.0 runs twice, the second time under no_grad (autograd records none of its ops): torch.utils.checkpoint runs
    # it once and returns; only the first call is recomputed, both pay the wrapper's forward part (7 ns), only the first
    # its backward part (3 ns).
    from daydream.transforms.checkpoint import Wrapper, _previous_host_task, _recompute_before

    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("other", 5, phase="forward", layer="net.head"),
               op("fwd", 10, phase="forward", layer="net.blocks.0"), op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.HOST_ORDER, 0, False)],
              layers=["net.blocks.0", "net.head"])
    recorded = np.array([True, True, False, True])
    found = _recompute_before(g, np.array([0, 2]), np.array([3]), Wrapper(7, 3), _previous_host_task(g),
                              recorded=recorded)
    assert (found.added, found.calls, found.ungraded) == (1, 2, 1) and g.validate() == []
    assert simulate(g).end_ns.max() == 10 + 5 + 10 + 2 * 7 + (10 + 3) + 20
    # none recorded: nothing recomputed, the forward parts still paid
    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False)], layers=["net.blocks.0"])
    found = _recompute_before(g, np.array([0]), np.array([1]), Wrapper(7, 3), _previous_host_task(g),
                              recorded=np.array([False, True]))
    assert (found.added, found.calls, found.ungraded) == (0, 1, 1)
    assert simulate(g).end_ns.max() == 10 + 7 + 20


def test_a_checkpointed_call_is_recomputed_up_to_its_last_pack() -> None:
    # one call of blocks.0: three ops recorded at 0, 10 and 20 (10, 10 and 5 ns); the last tensor it saves is packed at
    # 15, inside the second: the first is recomputed whole, the second up to 15 (5 ns), the third not at all
    from daydream.transforms.checkpoint import _previous_host_task, _recompute_before

    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("fwd", 10, phase="forward", layer="net.blocks.0"),
               op("add", 5, phase="forward", layer="net.blocks.0"), op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.HOST_ORDER, 0, False)],
              layers=["net.blocks.0"])
    assert g.tasks["measured_start_ns"].tolist() == [0, 10, 20, 30]
    last_pack = np.array([5, 15, -1, -1])
    found = _recompute_before(g, np.array([0, 1, 2]), np.array([3]), previous=_previous_host_task(g), last_pack=last_pack)
    assert (found.added, found.calls, found.skipped_ns) == (2, 1, 5 + 5) and g.validate() == []
    assert g.tasks["duration_ns"][4:].tolist() == [10, 5]
    assert simulate(g).end_ns.max() == 25 + 10 + 5 + 20
    # the whole forward again without it (early_stop=0)
    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("fwd", 10, phase="forward", layer="net.blocks.0"),
               op("add", 5, phase="forward", layer="net.blocks.0"), op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.HOST_ORDER, 0, False)],
              layers=["net.blocks.0"])
    found = _recompute_before(g, np.array([0, 1, 2]), np.array([3]), previous=_previous_host_task(g))
    assert (found.added, found.skipped_ns) == (3, 0) and simulate(g).end_ns.max() == 25 + 25 + 20


def test_the_checkpoint_wrapper_pays_for_each_tensor_its_call_saves() -> None:
    # Two calls of blocks.0 whose ops save 2 and then 3 tensors for backward; the wrapper costs 7 ns forward and 3 ns
    # backward per call, and 1 ns forward and 4 ns backward per saved tensor.
    from daydream.transforms.checkpoint import Wrapper, _previous_host_task, _recompute_before

    g = graph([op("fwd", 10, phase="forward", layer="net.blocks.0"), op("other", 5, phase="forward", layer="net.head"),
               op("fwd", 10, phase="forward", layer="net.blocks.0"), op("bwd", 20, phase="backward", layer="net.blocks.0")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.HOST_ORDER, 0, False)],
              layers=["net.blocks.0", "net.head"])
    saved = np.array([2, 0, 3, 0])
    _recompute_before(g, np.array([0, 2]), np.array([3]), Wrapper(7, 3, 1, 4), _previous_host_task(g), saved)
    forward_wrappers = (7 + 2 * 1) + (7 + 3 * 1)
    backward_wrappers = (3 + 2 * 4) + (3 + 3 * 4)
    assert simulate(g).end_ns.max() == 10 + 5 + 10 + forward_wrappers + 2 * 10 + backward_wrappers + 20


def test_host_and_gpu_speed() -> None:
    tasks, edges = launch_chain([call(gap=10), call(gap=10)], [kernel("a", 40), kernel("b", 40)])
    g = graph(tasks, edges)
    _apply(g, "faster-host:factor=2")
    assert g.tasks["duration_ns"][:2].tolist() == [2, 2] and g.tasks["gap_ns"][:2].tolist() == [5, 5]
    _apply(g, "faster-gpu:factor=4,kernels=^a$")
    assert g.tasks["duration_ns"][2:].tolist() == [10, 40]
    _apply(g, "no-host-overhead")
    assert g.tasks["duration_ns"][:2].tolist() == [0, 0] and g.tasks["gap_ns"][:2].tolist() == [0, 0]


def test_spec_parsing_errors_name_the_problem() -> None:
    assert parse_spec("fused-adam") == ("fused-optimizer", {"kernels": 4, "implementation": "auto"})
    for bad, message in (("warp-speed", "unknown optimization"), ("amp:speed=3", "no parameter"),
                         ("batch-size:factor=two", "not a float")):
        with pytest.raises(InputError, match=message):
            parse_spec(bad)
    assert all(o.describe().startswith(o.name) for o in OPTIMIZATIONS.values())


def test_yaml_pipeline(tmp_path: Path) -> None:
    good = tmp_path / "opt.yaml"
    good.write_text("version: 1\nname: halve-gemm\nsteps:\n  - select: {kind: kernel, name: gemm}\n    scale: {factor: 0.5}\n")
    pipeline = load_pipeline(good)
    assert pipeline.name == "halve-gemm" and len(pipeline.steps) == 1
    good.write_text("version: 1\nsteps:\n  - select: {kind: kernel}\n    scale: {factor: 5e-1, gaps: true}\n")
    assert load_pipeline(good).steps[0]["scale"] == {"factor": 0.5, "gaps": True}  # 5e-1 a number, as in YAML 1.2
    for text, message in (("version: 2\nsteps: []\n", "version"), ("version: 1\nsteps: []\n", "non-empty"),
                          ("version: 1\nsteps:\n  - select: {kind: warp}\n    scale: {factor: 1}\n", "unknown kind"),
                          ("version: 1\nsteps:\n  - select: {}\n    frobnicate: {}\n", "unknown key"),
                          ("[: not yaml", "not valid YAML"),
                          ("version: 1\nsteps:\n  - select: {}\n    scale: {factor: '2'}\n", "factor must be a finite number"),
                          ("version: 1\nsteps:\n  - select: {}\n    scale: {factor: -0.0}\n", "factor must be a finite number"),
                          ("version: 1\nsteps:\n  - select: {}\n    scale: {factor: true}\n", "factor must be a finite number"),
                          ("version: 1\nsteps:\n  - select: {}\n    scale: {}\n", "scale needs a factor"),
                          ("version: 1\nsteps:\n  - select: {}\n    scale: {factor: 1, speed: 2}\n", "no argument 'speed'"),
                          ("version: 1\nsteps:\n  - select: {}\n    remove: [1]\n", "takes a mapping of keep_gaps"),
                          ("version: 1\nsteps:\n  - select: {}\n    reschedule: {resource: -1}\n", "resource must be")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(InputError, match=message):
            load_pipeline(bad)


def test_shipped_yaml_examples_run_on_a_real_trace() -> None:
    from tests.conftest import REPO

    trace = open_job(REPO / "examples" / "traces" / "cnn_v100.json.gz").traces[0]
    shipped = sorted((REPO / "examples" / "optimizations").glob("*.yaml"))
    assert shipped
    for path in shipped:
        assert load_pipeline(path).steps
        prediction = predict(trace, [str(path)])
        assert prediction.predicted_ns != prediction.simulated_ns, path.name  # it selected something and moved


@pytest.mark.parametrize("spec", ["amp", "fused-optimizer", "cuda-graphs", "fuse-elementwise", "batch-size:factor=2",
                                  "faster-host:factor=2", "no-host-overhead", "faster-gpu:factor=2"])
def test_every_optimization_on_a_real_trace(corpus: Path, spec: str) -> None:
    trace = open_job(corpus / "kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz").traces[0]
    prediction = predict(trace, [spec])
    assert prediction.graph is not None and prediction.graph.validate() == []
    assert len(prediction.per_iteration) == 6
    assert prediction.predicted_ns > 0 and prediction.notes


def test_real_trace_predictions_are_bounded_by_their_model(corpus: Path) -> None:
    gpu_bound = open_job(corpus / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz").traces[0]
    ratio = find_device("Tesla V100-SXM2-32GB").amp_compute_factor_from_fp32  # type: ignore[union-attr]
    assert 1.0 < predict(gpu_bound, ["amp"]).speedup < ratio
    faster = predict(gpu_bound, ["faster-gpu:factor=2"])
    assert 1.5 < faster.speedup <= 2.0  # GPU-bound, but the first iteration is not
    assert predict(gpu_bound, ["no-host-overhead"]).speedup < 1.05  # the host is not the bottleneck
    # resnet_kineto: 21 steady iterations and 6 of over twice their median, whose extra time is host work.
    host_bound = open_job(corpus / "param/et_replay_inputs/resnet_kineto.json.gz").traces[0]
    assert predict(host_bound, ["faster-gpu:factor=2"]).speedup < 1.02
    unbound = predict(host_bound, ["no-host-overhead"])
    middle = sorted(it["measured_ns"] for it in unbound.per_iteration)[len(unbound.per_iteration) // 2]
    slow = [it for it in unbound.per_iteration if it["measured_ns"] > 2 * middle]
    assert len(slow) >= 3 and any("left out of the headline" in w for w in unbound.warnings)
    assert sum(it["simulated_ns"] for it in slow) > 1.5 * sum(it["predicted_ns"] for it in slow)


#: Set 2 traces whose kernel names say bf16/fp16 (counted from their JSON: Cijk_..._BBS_, bf16, c10::BFloat16 kernels).
REDUCED_PRECISION_TRACES = [
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz",
    "tracelens/inference/flux_256/split_iteration_1_aiter_fmha.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/semantic_purity/semantic_purity_qwen3_30b_a3b.tar.gz",
]


@pytest.mark.parametrize("name", REDUCED_PRECISION_TRACES)
def test_amp_leaves_work_that_already_runs_in_reduced_precision(corpus: Path, name: str) -> None:
    for prediction in predict_job(corpus / name, ["amp"]):
        assert prediction.speedup <= 1.05, (name, prediction.speedup)
        assert any("already runs in bf16/fp16/fp8" in note for note in prediction.notes)


def test_amp_on_the_fp32_v100_cnn_is_unchanged_by_the_precision_rule(corpus: Path) -> None:
    # Every kernel of this V100 trace is fp32 (volta_sgemm, scudnn, float), so the precision rule converts all of them:
    # 2.41x between the host's markers before precision was read, 2.87x to each iteration's completion (its host runs
    # ~90 ms ahead of its GPU, so the measured iterations between markers include the queue filling up).
    prediction = predict_job(corpus / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", ["amp"])[0]
    assert abs(prediction.speedup - 2.87) <= 0.05 * 2.87
    assert any("0% of the GPU time" in note for note in prediction.notes)


def test_amp_holds_a_small_gemm_at_the_time_its_bf16_operands_take_to_move() -> None:
    from daydream.cost import CostModel, HostCosts
    from daydream.cost.elementwise import CopySpeed

    tasks, edges = launch_chain([call(phase="forward"), call(phase="forward")],
                                [kernel("volta_sgemm_128x64_nn", 796, phase="forward"),
                                 kernel("volta_sgemm_128x64_nn", 796, phase="forward")])
    g = graph(tasks, edges)
    g.tasks["event"][:] = np.arange(g.task_count)
    # The first GEMM's op moved 1e6 elements (2 MB in bf16), the second's 1e3; the trace streams at 450 bytes/ns on a
    # 900 GB/s V100: half its bandwidth. 2e6 / 450 = 4,444 ns holds the first; the second runs at 796 / 7.96 = 100 ns.
    elements = np.array([np.nan, np.nan, 1e6, 1e3])
    costs = CostModel(host=HostCosts(unit_ns=1000, launch_ns=5), on_gpu=True, device=find_device("V100"),
                      elementwise=CopySpeed(0.0, 450.0, "by hand"))
    context = Context(device=find_device("V100"), derive={"costs": lambda: costs,
                                                          "gemm_shapes": lambda: (elements * 0, elements)})
    _apply(g, "amp", context)
    assert g.tasks["duration_ns"][2:4].tolist() == [4_444, 100]


def test_amp_without_recorded_shapes_takes_its_casts_by_ratio() -> None:
    from daydream.cost import CostModel, HostCosts
    from daydream.transforms.autocast import ForwardOp

    tasks, edges = launch_chain([call(phase="forward"), call(phase="forward")],
                                [kernel("volta_sgemm_128x64_nn", 796, phase="forward"),
                                 kernel("vectorized_elementwise_kernel", 40, phase="forward")])
    g = graph(tasks, edges)
    costs = CostModel(host=HostCosts(unit_ns=1000, launch_ns=5), on_gpu=True, device=find_device("V100"))
    shapeless = ForwardOp(100, "aten::linear", -1, [])
    context = Context(device=find_device("V100"), derive={"costs": lambda: costs,
                                                          "autocast_ops": lambda: ({0: [shapeless]}, {100: (0, 9, -1)})})
    notes = _apply(g, "amp", context)
    ratio = find_device("V100").fp16_tflops / find_device("V100").fp32_tflops
    # The GEMM: 796 / 7.96 = 100 ns, plus a weight cast of half the median elementwise kernel (40 ns): 20 ns; its
    # launch call gains the trace's median launch (5 ns) of host time.
    assert g.tasks["duration_ns"][2] == round(796 / ratio) + 20
    assert g.tasks["gap_ns"][0] == 5
    assert any("taken by ratio" in note for note in notes)


def test_the_amp_note_says_what_the_measured_tier_found_and_when_the_reduced_type_is_slower() -> None:
    from daydream.transforms.amp import measured_ratios

    assert measured_ratios([], "bf16") == ""
    faster = measured_ratios([0.5, 0.8, 1.2], "bf16")
    assert "0.50x to 1.20x, median 0.80x" in faster and "slower" not in faster
    # an AVX2-only CPU runs bf16 convolutions on a slow path: most ops slower, said plainly
    slower = measured_ratios([0.99, 4.5, 20.04], "bf16")
    assert "0.99x to 20.04x, median 4.50x" in slower
    assert "most of these ops run slower in bf16 than in fp32 on this CPU" in slower
    assert "by the time it measured beyond fp32, added to its recorded time" in slower


def test_amp_on_a_cpu_adds_the_time_a_slower_reduced_type_measured_beyond_fp32() -> None:
    from daydream.transforms.amp import reduced_ns

    # In the run 600 µs; alone 1000 µs in fp32 (400 µs more than in the run), 12,000 µs in bf16: 11,600.
    assert reduced_ns(600_000, 12_000_000, 1_000_000) == 11_600_000
    # Faster in bf16: scaled with the measured ratio, 600 x 0.5.
    assert reduced_ns(600_000, 500_000, 1_000_000) == 300_000
    # The run slower than alone: the slow path's own time added all the same; scaled where faster.
    assert reduced_ns(2_000_000, 12_000_000, 1_000_000) == 13_000_000
    assert reduced_ns(2_000_000, 500_000, 1_000_000) == 1_000_000
    # Equal times measured: unchanged.
    assert reduced_ns(600_000, 1_000_000, 1_000_000) == 600_000


def test_amp_on_a_cpu_takes_both_types_at_the_warmth_the_op_ran_at_in_fp32() -> None:
    from daydream.transforms.amp import in_situ_ns

    hot, cold = (22_000, 5_000), (76_000, 31_000)
    # 18 µs in the run: (18 - 5) / (31 - 5) = half way from hot to cold; bf16 there 22 + 27 = 49 µs,
    # fp32 there 18 µs (the recorded time itself), so 18 + (49 - 18) = 49 µs
    assert in_situ_ns(18_000, hot, cold) == 49_000
    # as hot as measured hot, or hotter: the hot pair alone (18 + 17 = 35 µs at 18 µs recorded)
    assert in_situ_ns(5_000, hot, cold) == 5_000 + 17_000
    assert in_situ_ns(3_000, hot, cold) == 3_000 + 17_000
    assert in_situ_ns(18_000, hot, None) == 18_000 + 17_000
    # colder than measured cold: the cold pair, its difference added (40 + 45 = 85 µs)
    assert in_situ_ns(40_000, hot, cold) == 40_000 + 45_000
    # faster in bf16 at that warmth: scaled (w = 0.25: bf16 25 µs, fp32 50 µs there, so 50 x 25 / 50)
    assert in_situ_ns(50_000, (20_000, 40_000), (40_000, 80_000)) == 25_000
    # a cold fp32 time not above the hot one says nothing of warmth: the hot pair
    assert in_situ_ns(18_000, hot, (70_000, 4_000)) == 18_000 + 17_000


def test_amp_on_a_cpu_keeps_the_time_an_op_spent_on_memory_the_recording_had_not_used_as_recorded() -> None:
    # examples/mlp.py's weight-gradient multiply: 383 µs recorded, of which 130 µs on memory the recording had not
    # allocated before (cost/heap.HeapWalk); hot alone bf16 109 µs, fp32 262 µs; cold 309 and 319 µs.
    from types import SimpleNamespace

    from daydream.transforms.amp import _measure_most_first, _Retimed

    asked: list[bool] = []

    def pair(name: str, new: list[Any], old: list[Any], hot: bool, cold: bool) -> tuple[int, int]:
        asked.append(cold)
        return (309_000, 319_000) if cold else (109_000, 262_000)

    walked = _Retimed(0, 383_000, "aten::mm", inputs=[((512, 64), "float"), ((64, 512), "float")], walked_ns=130_000)
    _measure_most_first(SimpleNamespace(call_pair_ns=pair, op_pair_ns=pair), [walked], "c10::BFloat16")
    # its own 253 µs sit below its hot fp32 time: no cold pair asked for, the hot one scales them
    # (253 x 109 / 262 = 105.3 µs), and the 130 µs are kept
    assert asked == [False] and walked.cold is None
    assert walked.new_ns() == round(253_000 * 109_000 / 262_000) + 130_000
    # read whole as cold caches instead (w = 1): the cold pair scales all of it, 383 x 309 / 319 = 371 µs
    plain = _Retimed(0, 383_000, "aten::mm", pair=(109_000, 262_000), cold=(309_000, 319_000))
    assert plain.new_ns() == round(383_000 * 309_000 / 319_000)
    # more than it ran for: all of it kept
    assert _Retimed(0, 50_000, "aten::mm", pair=(10_000, 20_000), walked_ns=80_000).new_ns() == 50_000


def test_amp_casts_a_weight_down_cold_and_its_gradient_back_up_hot(monkeypatch: pytest.MonkeyPatch) -> None:
    # A weight was last written by the previous step's optimizer: its cast down finds it out of the caches. Its gradient,
    # which autocast casts back up in backward, the backward op before has just written: hot where it fits in a core's
    # cache (here 1 MiB), as an activation's cast and its gradient's are; a tensor too large for it is cold both ways.
    from types import SimpleNamespace

    import daydream.transforms.amp as amp
    from daydream.cost import Tier
    from daydream.cost.model import Timed
    from daydream.transforms.autocast import Cast

    asked: list[tuple[tuple[int, ...], str, bool]] = []

    def cast(shape: tuple[int, ...], from_type: str, to_type: str, hot: bool = False) -> Timed:
        asked.append((shape, to_type, hot))
        return Timed(1_000, 0, Tier.MEASURED)

    spliced: list[list[int]] = []
    monkeypatch.setattr(amp, "core_cache_bytes", lambda: 2**20)
    monkeypatch.setattr(amp, "splice", lambda graph, hosts, durations, name, after: spliced.append(list(hosts))
                        or np.arange(len(hosts)))
    low = "c10::BFloat16"
    weight = Cast(5, 1, (512, 512), "float", low, weight=True, backward=True)       # 1 MiB in fp32
    activation = Cast(5, 0, (64, 512), "float", low, weight=False, backward=True)
    large = Cast(6, 0, (1024, 1024), "float", low, weight=False, backward=True)     # 4 MiB
    costs = SimpleNamespace(cast=cast, cast_backward_host_ns=lambda: 0)
    graph = SimpleNamespace(has_device_work=lambda: False)
    added, weights = amp._insert_casts(graph, {0: [weight, activation, large]}, costs,  # type: ignore[arg-type]
                                       {5: 10, 6: 11}, {5: 20, 6: 21})
    assert asked == [((512, 512), low, False), ((512, 512), "float", True),
                     ((64, 512), low, True), ((64, 512), "float", True),
                     ((1024, 1024), low, False), ((1024, 1024), "float", False)]
    assert spliced == [[10, 20, 10, 20, 11, 21]] and added == 6
    assert weights == [(0, weight)]  # the weight's cast down: the first task spliced


def test_amp_on_a_cpu_times_a_weights_cast_down_at_the_warmth_of_the_op_that_reads_it() -> None:
    # Three weight casts, timed cold (with the caches emptied) at 200 µs: the first read by an op at warmth 0.25 (its
    # recorded fp32 time a quarter of the way from hot to cold), hot 60 µs: 60 + 0.25 x 140 = 95 µs. The second's op
    # was not measured (no warmth): cold kept. The third measures no faster hot: kept.
    from types import SimpleNamespace

    import daydream.transforms.amp as amp
    from daydream.transforms.autocast import Cast

    low = "c10::BFloat16"
    read, unmeasured, flat = (Cast(row, 1, shape, "float", low, weight=True, backward=True)
                              for row, shape in ((5, (512, 512)), (6, (256, 512)), (7, (10, 512))))
    hot_times = {(512, 512): 60_000, (256, 512): 30_000, (10, 512): 250_000}
    measurer = SimpleNamespace(cast_ns=lambda shape, to_type, from_type, hot: hot_times[shape])
    graph = SimpleNamespace(tasks={"duration_ns": np.array([200_000, 200_000, 200_000], dtype=np.int64)})
    op = amp._Retimed(0, 1_500, "aten::linear", pair=(900, 1_000), cold=(3_000, 3_000), row=5)
    assert op.warmth() == 0.25
    notes = amp._warm_weight_casts(graph, [(0, read), (1, unmeasured), (2, flat)],  # type: ignore[arg-type]
                                   {5: op.warmth(), 7: 0.5}, SimpleNamespace(measurer=measurer))  # type: ignore[arg-type]
    assert graph.tasks["duration_ns"].tolist() == [95_000, 200_000, 200_000]
    assert notes == ["amp: 1 weight casts per iteration timed at the warmth of the op that reads each (between hot "
                     "and caches emptied, as the op's recorded fp32 time sits between its own): 200 → 95 µs an "
                     "iteration"]
    # warmth: none without a cold pair, none where cold is no slower, clipped to [0, 1]
    assert amp._Retimed(0, 1_500, "aten::mm", pair=(900, 1_000)).warmth() == 0.0
    assert amp._Retimed(0, 1_500, "aten::mm", pair=(900, 1_000), cold=(2_000, 1_000)).warmth() == 0.0
    assert amp._Retimed(0, 9_000, "aten::mm", pair=(900, 1_000), cold=(3_000, 3_000)).warmth() == 1.0
    assert amp._Retimed(0, 900, "aten::mm", pair=(900, 1_000), cold=(3_000, 3_000)).warmth() == 0.0


def test_amp_on_a_cpu_gives_an_op_it_could_not_measure_the_median_change_of_its_name_or_class() -> None:
    from types import SimpleNamespace

    from daydream.transforms.amp import _apply_retimed, _Retimed

    graph = SimpleNamespace(tasks={"duration_ns": np.array([600, 1000, 2000, 800, 500, 3000, 400], dtype=np.int64)})
    found = [_Retimed(0, 600, "aten::conv2d", (12_000, 1_000)),  # slower: 600 + 11,000 = 11,600 (19.33x)
             _Retimed(1, 1000, "aten::conv2d", (5_000, 1_000)),  # 5,000 (5x)
             _Retimed(2, 2000, "aten::conv2d", (8_000, 2_500)),  # 2,000 + 5,500 = 7,500 (3.75x)
             _Retimed(3, 800, "aten::conv2d", None),  # not measured: its name's median, 5x
             _Retimed(4, 500, "aten::linear", None),  # none of its name measured: its class's (GEMMs: mm's 0.5x)
             _Retimed(5, 1000, "aten::mm", (500, 1_000)),  # a backward op inside a 3,000 ns node: -500
             _Retimed(6, 400, "aten::scaled_dot_product_attention", None)]  # no attention measured: all, 4.375x
    saved, by_kind = _apply_retimed(graph, found)  # type: ignore[arg-type]
    assert graph.tasks["duration_ns"].tolist() == [11_600, 5_000, 7_500, 4_000, 250, 2_500, 1_750]
    assert by_kind == 3
    assert saved == (600 - 11_600) + (1000 - 5_000) + (2000 - 7_500) + (800 - 4_000) + 250 + 500 + (400 - 1_750)
    # Nothing measured at all: every op keeps its time.
    graph = SimpleNamespace(tasks={"duration_ns": np.array([600, 500], dtype=np.int64)})
    assert _apply_retimed(graph, [_Retimed(0, 600, "aten::conv2d", None),  # type: ignore[arg-type]
                                  _Retimed(1, 500, "aten::mm", None)]) == (0, 0)
    assert graph.tasks["duration_ns"].tolist() == [600, 500]


def test_amp_on_a_cpu_halves_only_what_an_elementwise_op_spends_beyond_a_small_ones_time() -> None:
    # The trace's small elementwise ops take 2,000 ns: that part is not bytes, and stays. Forward, in bf16 in layer 0:
    # a relu of 10,000 ns -> 2,000 + 8,000 / 2 = 6,000; a sigmoid of 1,500 ns (a small gate: all overhead) keeps its
    # time; a linear is the measured tier's, not halved here. A batch norm left in fp32 (layer 1) keeps its time.
    # Backward: layer 0's threshold_backward (8,000 ns inside a 9,000 ns node) -> 9,000 - 6,000 / 2 = 6,000; layer 1's
    # (5,000 ns, its own node) keeps its time.
    from types import SimpleNamespace

    from daydream.transforms.amp import _halve_memory_bound
    from daydream.transforms.autocast import ForwardOp

    graph = SimpleNamespace(tasks={"duration_ns": np.array([10_000, 1_500, 4_000, 3_000, 9_000, 5_000],
                                                           dtype=np.int64)})
    ops = [ForwardOp(10, "aten::relu", 0, []), ForwardOp(11, "aten::sigmoid", 0, []),
           ForwardOp(12, "aten::linear", 0, []), ForwardOp(13, "aten::batch_norm", 1, [])]
    types = {10: "c10::BFloat16", 11: "c10::BFloat16", 12: "c10::BFloat16", 13: "float"}
    recorded = {10: (0, 10_000), 11: (1, 1_500), 12: (2, 4_000), 13: (3, 3_000)}
    nodes = {100: 4, 200: 5}  # the backward node holding each backward op, by its start
    held = SimpleNamespace(task=recorded.__getitem__,
                           enclosing=SimpleNamespace(holding=lambda start, track: nodes[start]))
    relu = ("aten::threshold_backward", None)
    context = SimpleNamespace(backward_memory_ops=[(20, 8_000, 100, 0, 0, 0, *relu), (21, 5_000, 200, 0, 1, 0, *relu)])
    done = _halve_memory_bound(graph, {0: ops}, types, "c10::BFloat16", held, context,  # type: ignore[arg-type]
                               fixed_ns=2_000.0, cache_bytes=1 << 20)
    assert graph.tasks["duration_ns"].tolist() == [6_000, 1_500, 4_000, 3_000, 6_000, 5_000]
    assert done.halved == 3 and done.cached == 0 and done.low_layers == {0}


def test_amp_on_a_cpu_keeps_the_time_of_an_elementwise_op_whose_tensors_fit_in_a_cores_cache() -> None:
    # A 1 MiB cache. Forward relus in bf16: on [32, 256] (32 KiB in, 32 KiB out: fits) it keeps its 10,000 ns; on
    # [256, 1024] (1 MiB in, 1 MiB out) 2,000 + 8,000 / 2. Backward: a node whose op touched 96 KiB keeps its time, one
    # whose op touched 3 MiB is halved beyond the 2,000 ns.
    from types import SimpleNamespace

    from daydream.transforms.amp import _halve_memory_bound
    from daydream.transforms.autocast import ForwardOp

    graph = SimpleNamespace(tasks={"duration_ns": np.array([10_000, 10_000, 9_000, 9_000], dtype=np.int64)})
    B = "c10::BFloat16"
    ops = [ForwardOp(10, "aten::relu", 0, [((32, 256), "float")]), ForwardOp(11, "aten::relu", 0, [((256, 1024), "float")])]
    held = SimpleNamespace(task={10: (0, 10_000), 11: (1, 10_000)}.__getitem__,
                           enclosing=SimpleNamespace(holding=lambda start, track: {100: 2, 200: 3}[start]))
    relu = ("aten::threshold_backward", None)
    context = SimpleNamespace(backward_memory_ops=[(20, 8_000, 100, 0, 0, 96 << 10, *relu),
                                                   (21, 8_000, 200, 0, 0, 3 << 20, *relu)])
    done = _halve_memory_bound(graph, {0: ops}, {10: B, 11: B}, B, held, context,  # type: ignore[arg-type]
                               fixed_ns=2_000.0, cache_bytes=1 << 20)
    assert graph.tasks["duration_ns"].tolist() == [10_000, 6_000, 9_000, 6_000]
    assert (done.halved, done.cached) == (2, 2)


def test_amp_on_a_cpu_measures_batch_norm_forward_and_backward_instead_of_halving_it() -> None:
    # A forward bf16 batch norm is left to the measured tier (RETIMED_ON_CPU); of the backward ops of its bf16 layer,
    # batch norm's backward with recorded arguments is handed to the measured tier (MEASURED_BACKWARD), one without them
    # and the relu's backward are halved beyond the 2,000 ns; a batch norm backward of an fp32 layer keeps its time.
    from types import SimpleNamespace

    from daydream.transforms.amp import MEASURED_BACKWARD, RETIMED_ON_CPU, _halve_memory_bound
    from daydream.transforms.autocast import ForwardOp

    assert "aten::batch_norm" in RETIMED_ON_CPU and "aten::native_batch_norm_backward" in MEASURED_BACKWARD
    B = "c10::BFloat16"
    graph = SimpleNamespace(tasks={"duration_ns": np.array([10_000, 9_000, 9_000, 9_000, 9_000], dtype=np.int64)})
    ops = [ForwardOp(10, "aten::batch_norm", 0, [((64, 64, 32, 32), "float")])]
    held = SimpleNamespace(task={10: (0, 10_000)}.__getitem__,
                           enclosing=SimpleNamespace(holding=lambda start, track: start // 100))
    arguments = [("tensor", (64, 64, 32, 32), "float", None)]
    big = 32 << 20
    context = SimpleNamespace(backward_memory_ops=[
        (20, 9_000, 100, 0, 0, big, "aten::native_batch_norm_backward", arguments),
        (21, 9_000, 200, 0, 0, big, "aten::native_batch_norm_backward", None),
        (22, 9_000, 300, 0, 0, big, "aten::threshold_backward", None),
        (23, 9_000, 400, 0, 1, big, "aten::native_batch_norm_backward", arguments)])
    done = _halve_memory_bound(graph, {0: ops}, {10: B}, B, held, context,  # type: ignore[arg-type]
                               fixed_ns=2_000.0, cache_bytes=1 << 20)
    assert graph.tasks["duration_ns"].tolist() == [10_000, 9_000, 5_500, 5_500, 9_000]
    assert done.halved == 2 and done.low_layers == {0}
    assert [(m.task, m.recorded_ns, m.name, m.arguments) for m in done.measured] == [
        (1, 9_000, "aten::native_batch_norm_backward", arguments)]


def test_a_cpus_core_cache_is_read_from_linux_and_falls_back_where_it_is_not_listed(tmp_path: Path) -> None:
    from daydream.cost.measure import CORE_CACHE_BYTES, core_cache_bytes

    for index, (level, kind, size) in enumerate([("1", "Data", "32K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"),
                                                 ("3", "Unified", "32768K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(text + "\n")
    assert core_cache_bytes(tmp_path) == 2 << 20
    assert core_cache_bytes(tmp_path / "absent") == CORE_CACHE_BYTES


def test_amp_on_a_cpu_measures_each_names_largest_signature_first() -> None:
    # Three signatures' worth of budget: each name's signature that holds the most recorded time comes first (names
    # by their time), so the one left out is conv2d's smaller one, which then takes conv2d's median.
    from types import SimpleNamespace

    from daydream.transforms.amp import _apply_retimed, _measure_most_first, _Retimed

    asked: list[tuple[str, Any]] = []

    def pair(name: str, new: list[Any], old: list[Any], hot: bool, cold: bool) -> tuple[int, int] | None:
        assert hot and not cold  # measured as autocast leaves the operands: just written
        asked.append((name, new[0][1] if new[0][0] == "tensor" else new[0][0]))  # an argument, or a (shape, type)
        return (3_000, 1_000) if len(asked) <= 3 else None

    measurer = SimpleNamespace(call_pair_ns=pair, op_pair_ns=pair)

    def conv(shape: tuple[int, ...]) -> list[Any]:
        return [("tensor", shape, "float"), ("tensor", (4, 3, 3, 3), "float"), ("none",), ("value", [1, 1])]

    found = [_Retimed(0, 100, "aten::conv2d", arguments=conv((8, 3, 8, 8)), inputs=[((8, 3, 8, 8), "float")]),
             _Retimed(1, 100, "aten::conv2d", arguments=conv((8, 3, 8, 8)), inputs=[((8, 3, 8, 8), "float")]),
             _Retimed(2, 150, "aten::conv2d", arguments=conv((2, 3, 8, 8)), inputs=[((2, 3, 8, 8), "float")]),
             _Retimed(3, 120, "aten::convolution_backward", arguments=conv((1, 3, 8, 8)), inputs=[((1, 3, 8, 8), "float")]),
             _Retimed(4, 10, "aten::mm", inputs=[((5, 6), "float"), ((6, 7), "float")])]
    _measure_most_first(measurer, found, "c10::BFloat16")
    assert asked == [("aten::conv2d", (8, 3, 8, 8)), ("aten::convolution_backward", (1, 3, 8, 8)), ("aten::mm", (5, 6)),
                     ("aten::conv2d", (2, 3, 8, 8))]
    assert [item.pair for item in found] == [(3_000, 1_000)] * 2 + [None] + [(3_000, 1_000)] * 2
    graph = SimpleNamespace(tasks={"duration_ns": np.array([100, 100, 150, 120, 10], dtype=np.int64)})
    _, by_kind = _apply_retimed(graph, found)  # type: ignore[arg-type]
    # slower in bf16: recorded + 2,000 each; the unmeasured conv2d takes conv2d's median, (100 + 2,000) / 100 = 21x
    assert graph.tasks["duration_ns"].tolist() == [2_100, 2_100, 3_150, 2_120, 2_010] and by_kind == 1


def test_amp_on_a_cpu_measures_cold_only_the_signatures_that_ran_well_above_their_hot_time() -> None:
    # Hot fp32 1,000 ns each. The mm that ran 2,000 ns in the trace (and its twin at 900) is measured cold too; the bmm
    # that ran 1,050 (within WARMER of its hot time) is not. The mm at 2,000: w = (2,000 - 1,000) / (5,000 - 1,000) =
    # 0.25, bf16 3,000 + 0.25 x 6,000 = 4,500 against fp32's 2,000 there: +2,500. The one at 900 sits below hot: +2,000.
    from types import SimpleNamespace

    from daydream.transforms.amp import _apply_retimed, _measure_most_first, _Retimed

    asked: list[tuple[str, bool]] = []

    def pair(name: str, new: list[Any], old: list[Any], hot: bool, cold: bool) -> tuple[int, int]:
        asked.append((name, cold))
        return (9_000, 5_000) if cold else (3_000, 1_000)

    measurer = SimpleNamespace(call_pair_ns=pair, op_pair_ns=pair)
    mm, bmm = [((5, 6), "float"), ((6, 7), "float")], [((2, 5, 6), "float"), ((2, 6, 7), "float")]
    found = [_Retimed(0, 2_000, "aten::mm", inputs=mm), _Retimed(1, 900, "aten::mm", inputs=mm),
             _Retimed(2, 1_050, "aten::bmm", inputs=bmm)]
    _measure_most_first(measurer, found, "c10::BFloat16")
    assert asked == [("aten::mm", False), ("aten::bmm", False), ("aten::mm", True)]  # the most recorded time first
    assert [item.cold for item in found] == [(9_000, 5_000), (9_000, 5_000), None]
    graph = SimpleNamespace(tasks={"duration_ns": np.array([2_000, 900, 1_050], dtype=np.int64)})
    _apply_retimed(graph, found)  # type: ignore[arg-type]
    assert graph.tasks["duration_ns"].tolist() == [4_500, 2_900, 3_050]
