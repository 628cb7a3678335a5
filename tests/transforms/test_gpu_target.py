"""gpu:target=: hand-made device rows and kernels, the trace's own GPU, the table and its names, choosing a GPU."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from daydream.api import open_job, predict_job
from daydream.cli import main
from daydream.devices import DEVICES, SHORT_NAMES, Device, find_device
from daydream.graph import TaskKind, build_graph
from daydream.simulate.whatif import gemm_shapes_of
from daydream.transforms.target import retime, wave_utilization
from tests.builders import annotation, kernel, op, runtime, write_trace

REPO = Path(__file__).resolve().parents[2]
BERT_H100 = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"

SOURCE = Device("source", fp32_tflops=10.0, tf32_tflops=None, fp16_tflops=100.0, memory_bandwidth_gbs=1000.0, memory_gib=16,
                interconnect_gbs=50.0, interconnect="PCIe 4.0 x16", key="source", bf16_tflops=100.0)
TARGET = dataclasses.replace(SOURCE, name="target", key="target", fp32_tflops=20.0, fp16_tflops=400.0,
                             memory_bandwidth_gbs=3000.0, bf16_tflops=400.0)

FP32_GEMM = "volta_sgemm_128x64_nn"
BF16_GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)"


def _one_step(tmp_path: Path, kernels: list[tuple[str, float]]) -> Path:
    events = [annotation("ProfilerStep#1", 0.0, 1000.0)]
    at, free = 10.0, 0.0
    for index, (name, duration) in enumerate(kernels):
        events.append(runtime("cudaLaunchKernel", at, 5.0, 100 + index, index))
        start = max(at + 10.0, free + 1.0)  # one stream: each kernel after the one before it
        events.append(kernel(name, start, duration, 100 + index, index))
        at, free = at + 5.0, start + duration
    return write_trace(tmp_path, events, "step.json")


def test_hand_computed_kernels_on_hand_made_rows(tmp_path: Path) -> None:
    graph = build_graph(open_job(_one_step(tmp_path, [(FP32_GEMM, 100.0), (BF16_GEMM, 100.0), (ADD, 30.0)]), cache=False).traces[0])
    kernels = np.flatnonzero(graph.tasks["kind"] == TaskKind.KERNEL)
    names = [graph.strings[n] for n in graph.tasks["name"][kernels]]
    moved = retime(graph, SOURCE, TARGET, fixed_ns=2_000)
    after = dict(zip(names, graph.tasks["duration_ns"][kernels].tolist()))
    # By hand: 2 µs stay; the rest ÷ the peak ratio at the kernel's precision, or ÷ the bandwidth ratio.
    assert after[FP32_GEMM] == 2_000 + 98_000 // 2          # fp32: 20 / 10
    assert after[BF16_GEMM] == 2_000 + 98_000 // 4          # bf16 on tensor cores: 400 / 100
    assert after[ADD] == round(2_000 + 28_000 / 3)          # memory-bound: 3000 / 1000
    assert moved["gemm"][0] == 2 and moved["elementwise"][0] == 1
    # A device without a bf16 tensor path runs bf16 at its fp32 rate: from it, the same kernel gains 400 / 10.
    graph = build_graph(open_job(tmp_path / "step.json", cache=False).traces[0])
    retime(graph, dataclasses.replace(SOURCE, bf16_tflops=None), TARGET, fixed_ns=2_000)
    assert dict(zip(names, graph.tasks["duration_ns"][kernels].tolist()))[BF16_GEMM] == 2_000 + 98_000 // 40


def test_a_measured_matmul_efficiency_moves_compute_only(tmp_path: Path) -> None:
    # The target reaches half its peak, the source (unmeasured, NVIDIA) the vendor's median share m:
    # compute-bound kernels gain 400 * 0.5 / (100 * m) instead of 400 / 100; memory-bound ones still 3000 / 1000.
    from daydream.devices import VENDOR_MATMUL_EFFICIENCY
    half = dataclasses.replace(TARGET, matmul_efficiency=0.5)
    median = VENDOR_MATMUL_EFFICIENCY["nvidia"]
    path = _one_step(tmp_path, [(BF16_GEMM, 100.0), (ADD, 30.0)])
    for achievable, gain in ((True, 400 * 0.5 / (100 * median)), (False, 4.0)):
        graph = build_graph(open_job(path, cache=False).traces[0])
        kernels = np.flatnonzero(graph.tasks["kind"] == TaskKind.KERNEL)
        retime(graph, SOURCE, half, fixed_ns=2_000, achievable=achievable)
        after = dict(zip([graph.strings[n] for n in graph.tasks["name"][kernels]], graph.tasks["duration_ns"][kernels].tolist()))
        assert after[BF16_GEMM] == round(2_000 + 98_000 / gain)
        assert after[ADD] == round(2_000 + 28_000 / 3)


def test_a_roofline_kernel_from_its_shapes(tmp_path: Path) -> None:
    # Two bf16 GEMMs launched by aten::mm ops with recorded shapes, and one without. On the hand-made rows (100 and
    # 400 TFLOPS at the same achievable share, 1000 and 3000 GB/s):
    # - mm([4096, 4096], [4096, 4096]): 2 * 4096^3 FLOPs, 3 * 4096^2 elements of 2 bytes: compute-bound on both
    #   (1.37 ms vs 0.10 ms of memory on the source), so 400 / 100 = 4x;
    # - mm([16, 4096], [4096, 4096]): 2 * 16 * 4096^2 FLOPs, (2 * 16 * 4096 + 4096^2) * 2 bytes: memory-bound on both,
    #   so it gains the bandwidth ratio, 3x, not the peaks';
    # - the kernel whose op recorded no shapes keeps the ratio of peaks, 4x.
    big, small = 2.0 * 4096**3, 2.0 * 16 * 4096**2
    small_bytes = (2 * 16 * 4096 + 4096**2) * 2
    assert small / 100e12 < small_bytes / 1000e9 and small / 400e12 < small_bytes / 3000e9  # memory-bound on both
    assert big / 100e12 > 3 * 4096**2 * 2 / 1000e9 and big / 400e12 > 3 * 4096**2 * 2 / 3000e9  # compute-bound on both
    events = [annotation("ProfilerStep#1", 0.0, 1000.0),
              op("aten::mm", 10, 20, ext=1, **{"Input Dims": [[4096, 4096], [4096, 4096]]}),
              runtime("cudaLaunchKernel", 12, 5, 101, 1), kernel(BF16_GEMM, 30, 100, 101, 1),
              op("aten::mm", 40, 20, ext=2, **{"Input Dims": [[16, 4096], [4096, 4096]]}),
              runtime("cudaLaunchKernel", 42, 5, 102, 2), kernel(BF16_GEMM, 140, 100, 102, 2),
              op("aten::mm", 70, 20, ext=3),
              runtime("cudaLaunchKernel", 72, 5, 103, 3), kernel(BF16_GEMM, 250, 100, 103, 3)]
    trace = open_job(write_trace(tmp_path, events, "shapes.json"), cache=False).traces[0]
    graph = build_graph(trace)
    kernels = np.flatnonzero(graph.tasks["kind"] == TaskKind.KERNEL)
    retime(graph, SOURCE, TARGET, fixed_ns=2_000, gemm_shapes=gemm_shapes_of(trace))
    # In the order of the trace: the big one 4x, the small one 3x, the shapeless one 4x.
    by_event = dict(zip(graph.tasks["event"][kernels].tolist(), graph.tasks["duration_ns"][kernels].tolist()))
    order = sorted(by_event)
    assert [by_event[e] for e in order] == [2_000 + 98_000 // 4, round(2_000 + 98_000 / 3), 2_000 + 98_000 // 4]


def test_the_trace_own_gpu_changes_nothing(corpus: Path) -> None:
    [prediction] = predict_job(corpus / BERT_H100, ["gpu:target=H100"])
    assert prediction.predicted_ns == prediction.simulated_ns


def test_a_faster_memory_moves_a_gpu_bound_step(corpus: Path) -> None:
    # H100 SXM -> H200: the same peaks, 4.8 / 3.35 TB/s of memory bandwidth; only memory-bound work moves.
    [prediction] = predict_job(corpus / QWEN_H100, ["gpu:target=H200"])
    assert prediction.predicted_ns <= prediction.simulated_ns
    assert any("gemm ×1.00" in note for note in prediction.notes)
    assert any("elementwise ×1.43" in note for note in prediction.notes)


def test_every_row_parses_and_carries_a_source() -> None:
    for key, row in DEVICES.items():
        assert row.key == key
        for figure in (row.fp32_tflops, row.fp16_tflops, row.memory_bandwidth_gbs, row.memory_gib, row.interconnect_gbs):
            assert math.isfinite(figure) and figure > 0, key
        for figure in (row.tf32_tflops, row.bf16_tflops, row.fp8_tflops, row.fp64_tflops, row.fp32_matrix_tflops):
            assert figure is None or (math.isfinite(figure) and figure > 0), key
        assert row.fp16_tflops >= row.fp32_tflops, key  # tensor/matrix cores are never slower than SIMT
        assert len(row.source) > 40 and ("datasheet" in row.source.lower() or "whitepaper" in row.source.lower()
                                         or "data sheet" in row.source.lower() or "specifications" in row.source.lower()), key
        assert find_device(key) is row and find_device(row.name) is row, key
    assert all(find_device(short) is DEVICES[row] for short, row in SHORT_NAMES.items())


def test_the_doc_is_the_table() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from devices_doc import page
    assert (REPO / "docs" / "devices.md").read_text() == page(), "run python scripts/devices_doc.py"


@pytest.mark.parametrize(("recorded", "details", "row"), [
    ("Tesla V100-SXM2-16GB", {}, "V100 SXM2 16GB"),
    ("Tesla V100-DGXS-32GB", {}, "V100 SXM2 32GB"),
    ("NVIDIA A100-SXM4-80GB", {}, "A100 SXM 80GB"),
    ("NVIDIA A100-PG509-200", {"memory_bytes": 42_297_524_224}, "A100 SXM 40GB"),
    ("NVIDIA A100 80GB PCIe", {}, "A100 PCIe 80GB"),
    ("NVIDIA A10", {}, "A10"),
    ("NVIDIA L4", {}, "L4"),
    ("NVIDIA L40S", {}, "L40S"),
    ("NVIDIA H100 80GB HBM3", {"memory_bytes": 85_018_279_936}, "H100 SXM"),
    ("NVIDIA H100 PCIe", {}, "H100 PCIe"),
    ("NVIDIA H100 NVL", {}, "H100 NVL"),
    ("NVIDIA B300 SXM6 AC", {}, "B300"),
    ("NVIDIA GeForce RTX 4090", {}, "RTX 4090"),
    ("AMD Instinct MI300X VF", {"memory_bytes": 205_571_227_648}, "MI300X"),
    ("AMD Instinct MI250X/MI250", {}, "MI250X"),
    ("AMD Radeon Graphics", {"arch": "gfx942:sramecc+:xnack-", "memory_bytes": 274_877_906_944}, "MI325X"),
    ("AMD Radeon Graphics", {"arch": "gfx950"}, "MI355X"),
    ("AMD Radeon Graphics", {"compute_capability": "9.0", "sm_count": 104}, "MI250"),
])
def test_names_as_traces_record_them(recorded: str, details: dict[str, object], row: str) -> None:
    found = find_device(recorded, **details)  # type: ignore[arg-type]
    assert found is not None and found.key == row


def test_every_gpu_of_the_corpus_has_a_row(corpus: Path) -> None:
    names = set()
    for path in sorted(corpus.glob("**/*.gz")):
        for trace in open_job(path).traces:
            for gpu in trace.meta.gpus:
                names.add(gpu.name)
                assert find_device(gpu.name, arch=gpu.arch, compute_capability=gpu.compute_capability,
                                   memory_bytes=gpu.total_memory_bytes, sm_count=gpu.sm_count) is not None, (path, gpu)
    assert len(names) >= 8


def test_device_means_the_trace_gpu_only(capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(REPO / "examples" / "traces" / "cnn_v100.json.gz")
    assert main(["whatif", trace, "--opt", "amp", "--device", "H100"]) == 2
    err = capsys.readouterr().err
    assert "says it ran on Tesla V100-SXM2-32GB" in err and "gpu:target=H100" in err and len(err.strip().splitlines()) == 1
    assert main(["whatif", trace, "--opt", "amp", "--device", "V100"]) == 0  # agreeing is fine
    assert main(["whatif", trace, "--opt", "gpu:target=H10"]) == 2
    assert "did you mean 'H100'" in capsys.readouterr().err


def test_choosing_a_gpu(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(corpus / QWEN_H100)
    assert main(["whatif", path, "--opt", "gpu", "--sweep", "target=H100,MI300X,L4", "--memory",
                 "--price", "H100=2.5,L4=0.8", "--json"]) == 0
    points = {p["value"]: p for p in json.loads(capsys.readouterr().out)["points"]}
    assert points["H100"]["fits"] and points["MI300X"]["fits"]
    # The same allocations: the larger memory fits the larger batch (192 GB against 80 GB).
    assert points["MI300X"]["largest_batch_factor"] > points["H100"]["largest_batch_factor"]
    for value, price in (("H100", 2.5), ("L4", 0.8)):
        assert points[value]["cost_per_1000_steps"] == pytest.approx(price * points[value]["predicted_ns"] / 1e9 * 1000 / 3600)
    assert "cost_per_1000_steps" not in points["MI300X"]
    assert main(["whatif", path, "--opt", "gpu", "--sweep", "target=H100", "--price", "B200=5"]) == 2


def test_wave_quantization_by_hand(tmp_path: Path) -> None:
    assert wave_utilization(np.array([132, 133, 264, 66]), 132).tolist() == pytest.approx([1.0, 133 / 264, 1.0, 0.5])
    graph = build_graph(open_job(_one_step(tmp_path, [(FP32_GEMM, 100.0)]), cache=False).traces[0])
    gemm = int(np.flatnonzero(graph.tasks["kind"] == TaskKind.KERNEL)[0])
    blocks = np.full(int(graph.tasks["event"].max()) + 1, -1, dtype=np.int64)
    blocks[graph.tasks["event"][gemm]] = 100
    # 100 blocks fill the source's 100 SMs; on the target's 200 they fill half: twice the fp32 peak, half of it used.
    source, target = dataclasses.replace(SOURCE, sm_count=100), dataclasses.replace(TARGET, sm_count=200)
    retime(graph, source, target, fixed_ns=2_000, launch_blocks=blocks)
    assert graph.tasks["duration_ns"][gemm] == 100_000


def test_a_gemm_its_launch_bounds_below_the_ridge_moves_by_bandwidth(tmp_path: Path) -> None:
    from daydream.devices import VENDOR_MATMUL_EFFICIENCY
    # The hand-made rows' ridge points: 100 TFLOPS x the vendor's achievable share per 1000 GB/s, 400 x it per 3000.
    share = VENDOR_MATMUL_EFFICIENCY["nvidia"]
    ridge = min(100 * share * 1000 / 1000, 400 * share * 1000 / 3000)  # FLOPs per byte
    skinny = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x256_MI16x16x1_SN_LDSB1"  # bf16, 64 x 16 tiles
    narrow = "nvjet_sm90_tst_64x64_64x16_4x1_v_bz_TNT"  # 64 x 64 tiles, its precision from the trace's majority
    gemv = "void gemvNSP_kernel<__nv_bfloat16, __nv_bfloat16, float, float, 1, 32, 4, 1024>(int)"
    # bf16 (2 bytes): a 16-wide tile bounds the intensity by 16 * 2 / 2 = 16 FLOPs/byte; 4 blocks of 64 x 64 by
    # sqrt(4 * 64 * 64) / 2 = 64; 200 blocks on a 100-SM source say nothing (a persistent kernel could loop).
    assert 16 < ridge and 64 < ridge
    path = _one_step(tmp_path, [(skinny, 100.0), (narrow, 100.0), (narrow, 100.0), (BF16_GEMM, 100.0), (gemv, 100.0)])
    graph = build_graph(open_job(path, cache=False).traces[0])
    kernels = np.flatnonzero(graph.tasks["kind"] == TaskKind.KERNEL)
    grids = np.full(int(graph.tasks["event"].max()) + 1, -1, dtype=np.int64)
    grids[graph.tasks["event"][kernels[1]]], grids[graph.tasks["event"][kernels[2]]] = 4, 200
    moved = retime(graph, dataclasses.replace(SOURCE, sm_count=100), TARGET, fixed_ns=2_000, grids=grids)
    by_bandwidth, by_compute = round(2_000 + 98_000 / 3), round(2_000 + 98_000 / 4)
    assert graph.tasks["duration_ns"][kernels].tolist() == [by_bandwidth, by_bandwidth, by_compute, by_compute,
                                                           by_bandwidth]
    assert moved["gemm, bandwidth-bound"][0] == 3 and moved["gemm"][0] == 2


def test_a_sweep_of_named_gpus_draws_one_bar_each(tmp_path: Path) -> None:
    from daydream.report.sweep import plot_sweep

    pytest.importorskip("matplotlib")
    plot = tmp_path / "gpus.png"
    summary = {"parameter": "target", "optimizations": ["gpu"], "source": "t.json.gz",
               "points": [{"value": name, "predicted_ns": ns} for name, ns in (("A100", 6e7), ("H100", 3e7), ("L4", 1.3e8))]}
    plot_sweep(plot, summary)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib import pyplot

    assert not pyplot.get_fignums()  # closed after writing


def test_the_cross_gpu_page_is_its_script(corpus: Path, tmp_path: Path) -> None:
    import re

    sys.path.insert(0, str(REPO / "scripts"))
    import validate_cross_gpu

    text = (REPO / "docs" / "validation-cross-gpu.md").read_text()
    day = re.search(r"on (\d{4}-\d\d-\d\d)\.", text)
    assert day is not None
    pairs = [(corpus / a, corpus / b) for a, b in validate_cross_gpu.PAIRS]
    pairs += validate_cross_gpu.corpus_archived_pairs(corpus, tmp_path)
    assert validate_cross_gpu.page(pairs, day.group(1)) == text
