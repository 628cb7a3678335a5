"""offload and gist: hand-built graphs and allocations with times and peaks computed by hand, and a real trace."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

from daydream.api import predict_job
from daydream.cost import CostModel, HostCosts
from daydream.cost.elementwise import CopySpeed
from daydream.errors import InputError
from daydream.graph import DepKind
from daydream.memory.timeline import CATEGORIES, NEVER
from daydream.memory.whatif import (
    Allocations,
    ModelFacts,
    bn_restructure_memory,
    checkpoint_memory,
    encoded_ratio,
    gist_memory,
    offload_memory,
    peak_bytes,
)
from daydream.simulate import simulate
from daydream.transforms import Context, apply_spec, parse_spec
from daydream.transforms.activations import COPY_SETUP_NS, pool_output
from daydream.transforms.autocast import ForwardOp
from tests.transforms.graphs import call, graph, kernel, launch_chain, op

REPO = Path(__file__).resolve().parents[2]
LAYERS = ["blocks.0", "blocks.1"]
KERNEL_NS = 10_000


def _gpu_step():  # type: ignore[no-untyped-def]
    """blocks.0 then blocks.1 forward, their backward in reverse: one 10 µs kernel each, launched 4 ns after its call;
    each block's forward op saves a 1000-element fp32 activation (4000 bytes) and a 10x100 fp32 weight (4000 bytes,
    copied by save_on_cpu only)."""
    tasks, edges = launch_chain(
        [call(phase=p, layer=layer) for p, layer in (("forward", "blocks.0"), ("forward", "blocks.1"),
                                                     ("backward", "blocks.1"), ("backward", "blocks.0"))],
        [kernel("k", KERNEL_NS, phase=p, layer=layer) for p, layer in (("forward", "blocks.0"), ("forward", "blocks.1"),
                                                                       ("backward", "blocks.1"), ("backward", "blocks.0"))])
    g = graph(tasks, edges, layers=LAYERS)
    g.tasks["event"][:] = np.arange(g.task_count)  # read from a trace
    ops = [ForwardOp(100 + i, "aten::linear", i, [((1000,), "float"), ((10, 100), "float"), ((10,), "float")])
           for i in range(2)]
    costs = CostModel(host=HostCosts(unit_ns=0, launch_ns=0), on_gpu=True)
    context = Context(derive={"costs": lambda: costs, "forward_ops": lambda: ({0: ops}, {})})
    return g, context


def test_offload_on_copy_streams_stalls_only_where_the_copies_cannot_overlap() -> None:
    g, context = _gpu_step()
    # k0 4..10004, k1 10005..20005, k2 20006..30006, k3 30007..40007
    assert simulate(g).end_ns.max() == 40_007
    apply_spec(g, parse_spec("offload:link=4GB/s"), context)  # 4000 bytes at 4 bytes/ns: 1000 ns, plus the set-up
    copy = COPY_SETUP_NS + 1000
    assert g.validate() == []
    # blocks.1's copy out starts when k1 ends (20005) and its copy back follows at once; k2 waits for it: 20005 + 2 copies.
    # blocks.0's copy back is prefetched while k2 runs (k2 takes longer than a copy), so k3 follows k2 by its gap.
    assert simulate(g).end_ns.max() == 20_005 + 2 * copy + KERNEL_NS + 1 + KERNEL_NS


def test_offload_on_the_compute_stream_adds_every_copy() -> None:
    g, context = _gpu_step()
    apply_spec(g, parse_spec("offload:link=4GB/s,stream=compute"), context)
    assert g.validate() == []
    copy = COPY_SETUP_NS + 2000  # the activation's 4000 bytes and the weight's, at 4 bytes per ns; not the 1-D bias
    timeline = simulate(g)
    # save_on_cpu's copy out blocks the host: blocks.1's forward call starts when blocks.0's copy out ends (k0 ends at
    # 10004, its copy 3000 ns later), so its kernel starts its launch's 4 ns after that, not the stream's 1 ns gap: every
    # copy back to back on the stream, plus those 3 ns.
    assert timeline.start_ns[1] == 10_004 + copy
    assert timeline.end_ns.max() == 40_007 + 4 * copy + 3


def test_offload_on_the_compute_stream_packs_each_tensor_when_its_op_has_run() -> None:
    # blocks.0 runs two ops, each one call launching a 10 µs kernel and saving a 4000-byte activation; blocks.0's
    # backward one call and kernel. Each task's recorded start is 10 ns after the one before (tests/transforms/graphs.py).
    tasks, edges = launch_chain(
        [call(phase="forward", layer="blocks.0"), call(phase="forward", layer="blocks.0"),
         call(phase="backward", layer="blocks.0")],
        [kernel("k", KERNEL_NS, phase=p, layer="blocks.0") for p in ("forward", "forward", "backward")])
    g = graph(tasks, edges, layers=LAYERS)
    g.tasks["event"][:] = np.arange(g.task_count)
    g.tasks["measured_end_ns"][:] = g.tasks["measured_start_ns"] + 5
    ops = [ForwardOp(100 + i, "aten::linear", 0, [((1000,), "float"), ((1000,), "float")]) for i in range(2)]
    spans = {100: (0, 6, -1), 101: (10, 16, -1)}  # each op's span holds its own call, on the host's track
    costs = CostModel(host=HostCosts(unit_ns=0, launch_ns=0), on_gpu=True)
    context = Context(derive={"costs": lambda: costs, "forward_ops": lambda: ({0: ops}, spans)})
    apply_spec(g, parse_spec("offload:link=4GB/s,stream=compute"), context)
    assert g.validate() == []
    copy = COPY_SETUP_NS + 1000
    timeline = simulate(g)
    # The first op's tensor is copied out after its kernel (4..10004), and the host waits for that copy before it
    # calls the second op: the second call starts at 10004 + copy, its kernel its launch's 4 ns later.
    assert timeline.start_ns[1] == 10_004 + copy
    assert timeline.start_ns[4] == 10_004 + copy + 4
    # Then its copy out; the backward call waits for it, its two copies back follow on the stream, then its kernel.
    second_out = 10_004 + copy + 4 + KERNEL_NS + copy
    assert timeline.end_ns.max() == second_out + 1 + 2 * copy + KERNEL_NS


def test_offload_a_slower_link_costs_more_and_a_cpu_trace_is_left_alone() -> None:
    times = {}
    for link in ("pcie3", "pcie5"):
        g, context = _gpu_step()
        apply_spec(g, parse_spec(f"offload:link={link}"), context)
        times[link] = int(simulate(g).end_ns.max())
    assert times["pcie3"] > times["pcie5"] > 40_007
    cpu = graph([op("fwd", 10, phase="forward", layer="blocks.0"), op("bwd", 10, phase="backward", layer="blocks.0")],
                [], layers=LAYERS)
    assert "nothing changed" in apply_spec(cpu, parse_spec("offload"), Context())[0]
    for bad, message in (("offload:stream=side", "stream=copy"), ("offload:link=warp", "not a host link"),
                         ("offload:layers=nothing", "no layer matches")):
        g, context = _gpu_step()
        with pytest.raises(InputError, match=message):
            apply_spec(g, parse_spec(bad), context)


def test_gist_encodes_after_the_relu_and_decodes_before_its_backward() -> None:
    g = graph([op("aten::relu", 100, phase="forward", layer="blocks.0.relu"),
               op("aten::linear", 100, phase="forward", layer="blocks.0.fc"),
               op("ReluBackward0", 50, phase="backward", layer="blocks.0.relu")],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False)],
              layers=["blocks.0.relu", "blocks.0.fc"])
    g.tasks["event"][:] = np.arange(g.task_count)
    relu = ForwardOp(0, "aten::relu", 0, [((1000,), "float")])
    linear = ForwardOp(1, "aten::linear", 1, [((1000,), "float"), ((10, 1000), "float")])
    costs = CostModel(host=HostCosts(unit_ns=0), on_gpu=False, elementwise=CopySpeed(10.0, 4.0, "by hand"))
    spans = {0: (0, 1, -1), 1: (10, 11, -1)}
    context = Context(derive={"costs": lambda: costs, "forward_ops": lambda: ({0: [relu, linear]}, spans)})
    assert simulate(g).end_ns.max() == 250
    apply_spec(g, parse_spec("gist"), context)
    # Each pass reads or writes the 4000-byte activation and its 1-bit form (125 bytes): 10 + 4125 / 4 = 1041 ns.
    assert sorted(g.task_name(t) for t in range(3, g.task_count)) == ["gist: decode", "gist: encode"]
    assert simulate(g).end_ns.max() == 250 + 2 * 1041
    assert encoded_ratio("fp8", 4, 0.5) == 0.25 and encoded_ratio("csr", 4, 0.5) == pytest.approx(0.625)
    with pytest.raises(InputError, match="formats"):
        apply_spec(g, parse_spec("gist:format=zip"), context)


def _allocations() -> tuple[Allocations, ModelFacts]:
    """blocks.0's activation (100 bytes) made at 0, blocks.1's (200) at 10; blocks.1's backward allocates at 60 (1
    byte, freed at 61) and frees its activation at 80; blocks.0's backward allocates at 90 (1 byte) and frees its
    activation at 100. Peak as recorded: 100 + 200 + 1 = 301 at 60."""
    act, tmp = CATEGORIES.index("activations"), CATEGORIES.index("temporaries")
    forward, backward = 0, 1
    a = Allocations(size=np.array([100.0, 200.0, 1.0, 1.0]), start=np.array([0, 10, 60, 90]),
                    end=np.array([100, 80, 61, 91]), category=np.array([act, act, tmp, tmp], dtype=np.int8),
                    layer=np.array([0, 1, 1, 0]), phase=np.array([forward, forward, backward, backward]),
                    iteration=np.zeros(4, dtype=np.int64), baseline_times=np.zeros(1, dtype=np.int64),
                    baseline_bytes=np.zeros(1))
    assert NEVER not in a.end.tolist()
    return a, ModelFacts(LAYERS, None, {}, "cuda:0")


def test_parked_activations_at_the_peak() -> None:
    a, facts = _allocations()
    assert peak_bytes(a) == 301
    # Freed after their forward, back when their backward begins: at 60 only blocks.1's 200 and the 1-byte temporary.
    a, facts = _allocations()
    checkpoint_memory(a, {"layers": r"blocks\.\d+$"}, facts)
    assert peak_bytes(a) == 201
    a, facts = _allocations()
    offload_memory(a, {"layers": r"blocks\.\d+$", "prefetch": 0}, facts)
    assert peak_bytes(a) == 201
    # Prefetched one layer ahead: blocks.0's 100 bytes are back when blocks.1's backward begins, at 60.
    a, facts = _allocations()
    offload_memory(a, {"layers": r"blocks\.\d+$", "prefetch": 1}, facts)
    assert peak_bytes(a) == 301
    # Binarized: blocks.0's stash of 100 / 32 bytes is still held at 60, beside blocks.1's 200 and the temporary.
    a, facts = _allocations()
    gist_memory(a, {"layers": r"blocks\.\d+$", "format": "binarize", "sparsity": 0.5}, facts)
    assert peak_bytes(a) == int(200 + 1 + 100 / 32)
    a, _ = _allocations()
    assert "unchanged" in offload_memory(a, {"layers": r"blocks\.\d+$"}, ModelFacts(LAYERS, None, {}, "cpu"))
    assert peak_bytes(a) == 301


def test_offload_as_save_on_cpu_holds_each_tensor_only_while_its_ops_run() -> None:
    # stem's output (100 bytes, made at 0) is the block's input; blocks.0 makes A (200) at 10 and B (400) at 20, the
    # loss (1) at 30. Backward allocations of blocks.0 (1 byte each) at 70, 80 and 90; B is freed at 75, A at 85 and
    # stem's output at 95, each after the last of them before its free: the op that read it. Recorded peak: 701 at 30.
    act, tmp = CATEGORIES.index("activations"), CATEGORIES.index("temporaries")

    def allocations() -> Allocations:
        return Allocations(size=np.array([100.0, 200.0, 400.0, 1.0, 1.0, 1.0, 1.0]),
                           start=np.array([0, 10, 20, 30, 70, 80, 90]), end=np.array([95, 85, 75, 31, 71, 81, 91]),
                           category=np.array([act, act, act, tmp, tmp, tmp, tmp], dtype=np.int8),
                           layer=np.array([0, 1, 1, 1, 1, 1, 1]), phase=np.array([0, 0, 0, 0, 1, 1, 1]),
                           iteration=np.zeros(7, dtype=np.int64), baseline_times=np.zeros(1, dtype=np.int64),
                           baseline_bytes=np.zeros(1))

    facts = ModelFacts(["stem", "blocks.0"], None, {}, "cuda:0")
    a = allocations()
    assert peak_bytes(a) == 701
    # As save_on_cpu: each leaves when the forward allocation after the next one is made (stem's output at 20, A at
    # 30, B at the forward's last, 30) and comes back from its reader's allocation to its free (B 70-75, A 80-85,
    # stem's output, which the block's first op saved, 90-95). Peak: A and B at 20, 600.
    note = offload_memory(a, {"layers": r"blocks\.\d+$", "prefetch": 0, "stream": "compute"}, facts)
    assert "3 activation allocations" in note and "save_on_cpu" in note
    assert peak_bytes(a) == 600
    assert sorted(zip(a.start[7:].tolist(), a.end[7:].tolist())) == [(70, 75), (80, 85), (90, 95)]
    # On copy streams the whole layer comes back when its backward begins (70), beside stem's output, kept: 701.
    a = allocations()
    offload_memory(a, {"layers": r"blocks\.\d+$", "prefetch": 0, "stream": "copy"}, facts)
    assert peak_bytes(a) == 701
    # An iteration without forward allocations (no phase annotations) says nothing of when a tensor's readers are
    # done: its allocations stay as recorded.
    a = allocations()
    a.phase[:4] = -1
    offload_memory(a, {"layers": r"blocks\.\d+$", "prefetch": 0, "stream": "compute"}, facts)
    assert a.size.size == 7 and peak_bytes(a) == 701


def test_offload_on_a_real_gpu_trace() -> None:
    # examples/cnn.py at batch 256 on 32x32 images: three blocks of conv, bn, relu, pool, each op saving its input.
    # Block 0: the image (3 channels, 32x32) and three 16-channel 32x32 maps; block 1: 16 then three 32-channel 16x16;
    # block 2: 32 then three 64-channel 8x8; fp32.
    path = REPO / "examples" / "h200" / "cnn-baseline.json.gz"
    image = 256 * 4
    saved = image * (3 * 32 * 32 + 3 * 16 * 32 * 32 + 16 * 16 * 16 + 3 * 32 * 16 * 16 + 32 * 8 * 8 + 3 * 64 * 8 * 8)
    fast, slow = (predict_job(path, [f"offload:link={link}"], cache=False)[0] for link in ("pcie5", "pcie3"))
    note = next(n for n in fast.notes if n.startswith("offload:"))
    assert f"12 saved activations ({saved / 2**20:.1f} MiB)" in note
    assert fast.simulated_ns < fast.predicted_ns < slow.predicted_ns





def test_bn_restructure_on_a_conv_bn_relu_chain() -> None:
    names = [("aten::conv2d", "forward", "b.conv", 1000), ("aten::batch_norm", "forward", "b.bn", 500),
             ("aten::relu", "forward", "b.relu", 300), ("ReluBackward0", "backward", "b.relu", 200),
             ("NativeBatchNormBackward0", "backward", "b.bn", 600), ("ConvolutionBackward0", "backward", "b.conv", 1500)]
    g = graph([op(name, ns, phase=phase, layer=layer) for name, phase, layer, ns in names],
              [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(5)], layers=["b.conv", "b.bn", "b.relu"])
    g.tasks["event"][:] = np.arange(g.task_count)
    activation = ((1000,), "float")  # 4000 bytes
    ops = [ForwardOp(0, "aten::conv2d", 0, [activation, ((8, 8), "float")]),
           ForwardOp(1, "aten::batch_norm", 1, [activation, ((8,), "float")]), ForwardOp(2, "aten::relu", 2, [activation])]
    costs = CostModel(host=HostCosts(unit_ns=0), on_gpu=False, elementwise=CopySpeed(10.0, 80.0, "by hand"))
    context = Context(derive={"costs": lambda: costs, "forward_ops": lambda: ({0: ops}, {})})
    assert simulate(g).end_ns.max() == 4100
    apply_spec(g, parse_spec("bn-restructure"), context)
    # BatchNorm forward: 2 passes over its input instead of 3 at its own speed, 500 x 2/3 = 333 ns; backward: 3
    # instead of 5, 600 x 3/5 = 360 ns; the ReLU gone both ways.
    assert g.validate() == []
    assert simulate(g).end_ns.max() == 1000 + 333 + 360 + 1500
    unmatched = graph([op("aten::relu", 5, phase="forward", layer="b.relu")], [], layers=["b.relu"])
    assert "nothing changed" in apply_spec(unmatched, parse_spec("bn-restructure"), context)[0]


def test_bn_restructure_memory_drops_the_normalized_output() -> None:
    act, other = CATEGORIES.index("activations"), CATEGORIES.index("other")
    # b.conv's output (100) saved until backward; b.bn's output (100, read only by the ReLU) freed at 20, in forward;
    # b.relu's output (100) saved; the backward allocates 1 byte at 50. Peak 300 at 15..20, without bn's output 200.
    a = Allocations(size=np.array([100.0, 100.0, 100.0, 1.0]), start=np.array([0, 10, 15, 50]),
                    end=np.array([90, 20, 80, 51]), category=np.array([act, other, act, other], dtype=np.int8),
                    layer=np.array([0, 1, 2, 1]), phase=np.array([0, 0, 0, 1]), iteration=np.zeros(4, dtype=np.int64),
                    baseline_times=np.zeros(1, dtype=np.int64), baseline_bytes=np.zeros(1))
    assert peak_bytes(a) == 300
    note = bn_restructure_memory(a, {"layers": r"bn\d*$"}, ModelFacts(["b.conv", "b.bn", "b.relu"], None, {}, "cuda:0"))
    assert peak_bytes(a) == 201 and note.startswith("bn-restructure: 1 ")


def test_bn_restructure_on_a_real_gpu_trace() -> None:
    # examples/cnn.py: three blocks of conv, BatchNorm, ReLU, pool.
    path = REPO / "examples" / "h200" / "cnn-baseline.json.gz"
    (prediction,) = predict_job(path, ["bn-restructure"], cache=False)
    note = next(n for n in prediction.notes if n.startswith("bn-restructure:"))
    # Their inputs, batch 256 in fp32: 16 channels of 32x32, 32 of 16x16, 64 of 8x8.
    inputs = 256 * 4 * (16 * 32 * 32 + 32 * 16 * 16 + 64 * 8 * 8) / 2**20
    assert note.startswith(f"bn-restructure: 3 BatchNorms per iteration (3 with the ReLU after them fused in; inputs of "
                           f"{inputs:.1f} MiB)")
    assert prediction.predicted_ns < prediction.simulated_ns


def test_offload_as_save_on_cpu_copies_every_tensor_the_real_run_copied() -> None:
    # The real save_on_cpu run of the cnn at batch 256 on the H200 (examples/h200/realistic, recorded with --iterations
    # 5) copied 165 tensors device to host: 33 per iteration, weights and statistics beside the activations.
    folder = REPO / "examples" / "h200" / "realistic" / "round-1"
    with lzma.open(folder / "cnn-offload.json.xz") as handle:
        events = json.load(handle)["traceEvents"]
    copied = sum(1 for e in events if str(e.get("name", "")).startswith("Memcpy DtoH"))
    assert copied == 165
    found = predict_job(folder / "cnn-baseline.json.xz", [r"offload:layers=blocks\.\d+$,prefetch=0,stream=compute"],
                        cache=False)[0]
    note = next(n for n in found.notes if n.startswith("offload:"))
    assert f"{copied // 5} tensors saved for backward (" in note and "12 activations" in note


def test_a_max_pool_saves_indices_of_its_output_shape() -> None:
    # PyTorch's formula by hand: floor((L + 2 pad - dil (k - 1) - 1) / stride) + 1, ceil with ceil_mode.
    image = ("tensor", (256, 16, 32, 32), "float", None)
    assert pool_output([image, ("value", [2, 2]), ("value", []), ("value", [0, 0]), ("value", [1, 1]),
                        ("value", False)]) == (256, 16, 16, 16)
    assert pool_output([image, ("value", [3, 3]), ("value", [2, 2]), ("value", [1, 1]), ("value", [1, 1]),
                        ("value", False)]) == (256, 16, 16, 16)  # (32 + 2 - 2 - 1) // 2 + 1
    odd = ("tensor", (1, 1, 7), "float", None)
    assert pool_output([odd, ("value", [2]), ("value", [2]), ("value", [0]), ("value", [1]), ("value", True)]) == (1, 1, 4)
    assert pool_output([odd, ("value", [2]), ("value", [2]), ("value", [0]), ("value", [1]), ("value", False)]) == (1, 1, 3)
    assert pool_output(None) is None and pool_output([image]) is None


@pytest.mark.parametrize("example", ["cnn", "transformer"])
def test_offload_as_save_on_cpu_copies_the_bytes_the_real_run_copied(example: str) -> None:
    # The real save_on_cpu runs of the cnn (batch 256) and the BERT-base-sized transformer: the bytes of their
    # device-to-host copies per iteration, read from the trace (its host ProfilerStep ranges), against the note's:
    # activations, the GEMMs' and convolutions' weights, attention's key, value and output, the max pools' indices. Left
    # out: the norms' weights and statistics (the transformer's 48 of 3 KiB, 48 of 16 KiB, 12 of 64 KiB; the cnn's
    # 15 of 64 to 256 bytes, under 0.1%).
    folder = REPO / "examples" / "h200" / "realistic" / "round-1"
    with lzma.open(folder / f"{example}-offload.json.xz") as handle:
        events = json.load(handle)["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    begin, end = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    copied = sum(e["args"]["bytes"] for e in events
                 if str(e.get("name", "")).startswith("Memcpy DtoH") and begin <= e["ts"] < end) / len(steps)
    found = predict_job(folder / f"{example}-baseline.json.xz",
                        [r"offload:layers=blocks\.\d+$,prefetch=0,stream=compute"], cache=False)[0]
    note = next(n for n in found.notes if n.startswith("offload:"))
    predicted = float(note.split(" tensors saved for backward (")[1].split(" MiB")[0]) * 2**20
    small = (48 * 3 + 48 * 16 + 12 * 64) * 2**10 if example == "transformer" else 0
    assert abs(predicted + small - copied) < 0.001 * copied
