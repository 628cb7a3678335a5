"""The human rendering of `daydream inspect`, at a fixed terminal width."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.report.console import format_ns, short_kernel_name
from tests.builders import annotation, kernel, op, runtime, write_trace


def _trace(tmp_path: Path) -> Path:
    events = [annotation("ProfilerStep#7", 0, 1000), op("aten::mm", 10, 50, ext=1),
              runtime("cudaLaunchKernel", 20, 5, correlation=7, ext=1),
              kernel("void at::native::gemm<float, 4>(float*, int)", 30, 400, correlation=7, ext=1)]
    return write_trace(tmp_path, events, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])


def test_text_summary_names_gpu_iterations_and_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["inspect", str(_trace(tmp_path))]) == 0
    out = capsys.readouterr().out
    for expected in ("NVIDIA H100 80GB HBM3", "ProfilerStep#7", "1 ms", "at::native::gemm<float, 4>", "400 µs",
                     "1 of 1 GPU activities linked to a CPU op"):
        assert expected in out, expected


def test_json_and_text_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _trace(tmp_path)
    assert main(["inspect", "--json", str(path)]) == 0
    rank = json.loads(capsys.readouterr().out)["ranks"][0]
    # Utilization by hand: the 400 µs fp32 GEMM in a 1 ms step; the op (50 µs) holds the launch call on thread 1.
    assert rank["kernels"] == 1 and rank["iterations"] == [
        {"name": "ProfilerStep#7", "start_ns": 0, "measured_ns": 1_000_000, "host_start_ns": 0, "host_ns": 1_000_000,
         "source": "profiler_step",
         "utilization": {"gpu_busy_share": 0.4, "gemm_flop_per_s": None, "tensor_core_share": 0.0,
                         "host_busy_share": {"thread 1": 0.05}}}
    ]
    assert rank["batch_size"] is None and rank["samples_per_s"] is None  # the trace does not say its batch
    assert rank["top_kernels"][0]["total_ns"] == 400_000


def test_format_ns() -> None:
    assert [format_ns(v) for v in (12, 1_500, 45_600_000, 2_000_000_000)] == ["12 ns", "1.5 µs", "45.6 ms", "2 s"]


def test_short_kernel_name_keeps_one_template_level() -> None:
    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>)")
    expected = "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<…>, at::detail::Array<…> >"
    assert short_kernel_name(name, width=200) == expected


def test_gemm_flops_from_recorded_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # addmm(bias, [4, 8], [8, 10]) is 2 * 4 * 8 * 10 = 640 FLOPs, mm([2, 3], [3, 5]) 2 * 2 * 3 * 5 = 60; linear calls
    # addmm, so its own shapes are not counted again; a malformed shape list is skipped. In a 1 ms step: 700,000 FLOP/s.
    events = [annotation("ProfilerStep#1", 0, 1000),
              op("aten::linear", 10, 30, ext=1, **{"Input Dims": [[4, 8], [10, 8], [10]]}),
              op("aten::addmm", 12, 20, ext=2, **{"Input Dims": [[10], [4, 8], [8, 10], [], []]}),
              op("aten::mm", 50, 20, ext=3, **{"Input Dims": [[2, 3], [3, 5]]}),
              op("aten::mm", 80, 20, ext=4, **{"Input Dims": [[2], "x"]}),
              op("aten::mm", 2000, 20, ext=5, **{"Input Dims": [[100, 100], [100, 100]]})]  # after the step
    path = write_trace(tmp_path, events, "flops.json")
    assert main(["inspect", "--json", str(path)]) == 0
    (iteration,) = json.loads(capsys.readouterr().out)["ranks"][0]["iterations"]
    assert iteration["utilization"]["gemm_flop_per_s"] == pytest.approx(700 / 1e-3)


@pytest.mark.parametrize(("runtime_call", "envelope", "expected"), [
    # ROCm leaves the name empty; 192 GiB and gfx942 (or compute capability 9.4) are an MI300X in the device table.
    ("hipLaunchKernel", {"hip_runtime_version": 60443483}, "AMD Instinct MI300X (unnamed in the trace"),
    ("hipLaunchKernel", {}, "AMD Instinct MI300X (unnamed in the trace"),
    # The same facts from a CUDA trace say nothing: compute capability 9.x is a Hopper there.
    ("cudaLaunchKernel", {}, "unnamed in the trace (give --device NAME"),
])
def test_an_unnamed_gpu_is_told_by_its_facts_on_rocm_only(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           runtime_call: str, envelope: dict, expected: str) -> None:
    unnamed = {"id": 0, "name": "", "totalGlobalMem": 192 * 2**30, "computeMajor": 9, "computeMinor": 4, "numSms": 304}
    if runtime_call.startswith("hip"):
        unnamed["gcnArchName"] = "gfx942:sramecc+:xnack-"
    events = [annotation("ProfilerStep#7", 0, 1000), op("aten::mm", 10, 50, ext=1),
              runtime(runtime_call, 20, 5, correlation=7, ext=1),
              kernel("Cijk_Alik_Bljk_SB_MT128x128x16", 30, 400, correlation=7, ext=1)]
    path = write_trace(tmp_path, events, deviceProperties=[unnamed], **envelope)
    assert main(["inspect", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["gpu"][0].startswith(expected)
    assert main(["whatif", "--json", str(path), "--opt", "amp"]) == 0
    notes = " ".join(json.loads(capsys.readouterr().out)["ranks"][0].get("notes", []))
    # amp's factor comes from the device table's MI300X row where the GPU is told, from Daydream's constant where not.
    assert ("(from the device table (AMD Instinct MI300X))" in notes) == runtime_call.startswith("hip")
    assert ("GPU not in the device table" in notes) == runtime_call.startswith("cuda")
