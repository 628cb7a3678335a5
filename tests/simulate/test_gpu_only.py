"""A trace of GPU work alone (no CPU ops, no runtime calls): one whole-trace iteration whose prediction moves with
the GPU, told by hand. 100 kernels of 90 µs, one every 100 µs: 9.91 ms of which 9 ms is GPU work and 0.91 ms idle
between kernels that nothing in the trace explains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.simulate.whatif import predict
from daydream.trace import read_job
from tests.builders import kernel, write_trace

KERNELS, EVERY_US, LASTS_US = 100, 100.0, 90.0
WINDOW_MS = ((KERNELS - 1) * EVERY_US + LASTS_US) / 1e3
IDLE_MS = WINDOW_MS - KERNELS * LASTS_US / 1e3


def _gpu_only(folder: Path) -> Path:
    events = [kernel("volta_sgemm_128x64_nn", i * EVERY_US, LASTS_US, correlation=i + 1, ext=i + 1) for i in range(KERNELS)]
    return write_trace(folder, events, deviceProperties=[{"id": 0, "name": "Tesla V100-SXM2-32GB"}])


def test_a_faster_gpu_shortens_the_whole_trace_and_the_idle_time_stays(tmp_path: Path) -> None:
    trace = read_job(_gpu_only(tmp_path)).traces[0]
    baseline = predict(trace, ["faster-gpu:factor=1"])
    assert baseline.measured_ns == pytest.approx(WINDOW_MS * 1e6) and baseline.predicted_ns == baseline.simulated_ns
    faster = predict(trace, ["faster-gpu:factor=2"])
    assert faster.predicted_ns == pytest.approx((KERNELS * LASTS_US / 2e3 + IDLE_MS) * 1e6, rel=0.01)
    assert faster.bound is not None and faster.bound.bound == "gpu"


def test_the_output_says_the_host_is_not_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _gpu_only(tmp_path)
    assert main(["whatif", "--json", str(path), "--opt", "no-host-overhead"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["iteration_ns"]["measured"] == round(WINDOW_MS * 1e6)
    warnings = " ".join(document["warnings"])
    assert "no host work" in warnings and "gpu-bound" in warnings and "host-bound" not in warnings
    assert main(["replay", str(path)]) == 0
    assert "no host work recorded to explain it" in capsys.readouterr().out


def test_a_trace_that_names_a_gpu_but_records_no_gpu_work_is_said_so(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.builders import annotation, op

    monkeypatch.setenv("COLUMNS", "200")
    events = [annotation(f"ProfilerStep#{n}", n * 1000.0, 900.0) for n in range(3)]
    events += [op("aten::mm", n * 1000.0 + 10, 800.0, ext=n + 1) for n in range(3)]
    named = write_trace(tmp_path, events, name="named.json", deviceProperties=[{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}])
    assert main(["replay", str(named)]) == 0
    out = capsys.readouterr().out
    assert "a GPU trace without GPU activity: it names NVIDIA A100-SXM4-80GB" in out and "CPU only" not in out
    plain = write_trace(tmp_path, events, name="plain.json")
    assert main(["replay", str(plain)]) == 0
    assert "CPU only" in capsys.readouterr().out
