"""Memory timeline, categories and what-if memory on hand-built event lists, and the corpus peaks."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.cli import main
from daydream.mapping import attribute
from daydream.memory import analyze_memory
from daydream.memory.whatif import current_optimizer_of, predict_memory
from daydream.trace import read_job
from daydream.transforms import parse_spec
from tests.builders import annotation, op, write_trace
from tests.conftest import CORPUS


def memory(ts: float, addr: int, nbytes: int, total: int) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Addr": addr, "Bytes": nbytes, "Total Allocated": total, "Total Reserved": 0,
                     "Device Type": 1, "Device Id": 0}}


def _training_step(base: float) -> list[dict[str, Any]]:
    """One iteration: forward saves a 1000-byte activation in layer net.fc and a 100-byte temporary;
    backward frees the activation and makes a 400-byte gradient; the optimizer step frees the gradient."""
    return [
        annotation("daydream.phase::forward", base + 10, 30),
        annotation("daydream.layer::net.fc", base + 11, 28),
        op("aten::addmm", base + 12, 20, ext=int(base) + 1, **{"Sequence number": int(base) + 7}),
        memory(base + 13, 7000, 1000, 0),       # activation
        memory(base + 14, 8000, 100, 0),        # temporary
        memory(base + 15, 8000, -100, 0),
        annotation("daydream.phase::backward", base + 50, 30),
        op("autograd::engine::evaluate_function: AddmmBackward0", base + 51, 20, ext=int(base) + 2,
           **{"Sequence number": int(base) + 7}),
        memory(base + 52, 9000, 400, 0),        # gradient
        memory(base + 60, 7000, -1000, 0),      # activation freed in backward
        annotation("daydream.phase::optimizer", base + 90, 8),
        op("aten::add_", base + 91, 5, ext=int(base) + 3),
        memory(base + 92, 9000, -400, 0),       # gradient freed after backward
    ]


def _totals(events: list[dict[str, Any]], before: int = 10_000) -> int:
    """Each [memory] event's Total Allocated as the allocator reports it, after each event in time order, `before`
    bytes allocated before the window; returns the last."""
    running = before
    for event in sorted((e for e in events if e["name"] == "[memory]"), key=lambda e: e["ts"]):
        running += event["args"]["Bytes"]
        event["args"]["Total Allocated"] = running
    return running


def _trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100),
              *_training_step(0), *_training_step(100), memory(-5, 1, 5000, 0)]
    _totals(events)
    return read_job(write_trace(tmp_path, events), cache=False).traces[0]


def test_pairing_categories_and_peak(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    (device,) = analyze_memory(trace)
    assert device.device == "cuda:0"
    # Peak: before-window 10,000 + the early 5,000 weight + activation 1,000 + gradient 400 = 16,400
    assert device.peak_allocated_bytes == 16_400
    assert device.categories["activations"] == 1000
    assert device.categories["gradients"] == 400
    assert device.categories["weights"] == 5000
    assert device.categories["before the trace"] == 10_000
    assert device.layers == [{"name": "net.fc", "activation_bytes": 1000}]
    assert device.iteration_peaks_bytes == (16_400, 16_400)  # each holds the activation and the gradient at 52
    sizes = device.allocations["size"].tolist()
    assert sorted(sizes) == sorted([5000] + [1000, 100, 400] * 2)


def test_a_block_freed_where_the_profiler_did_not_see_it_ends_where_its_address_is_taken_again(tmp_path: Path) -> None:
    # The first iteration's gradient (400 bytes at 9000) is freed on a thread the profiler does not watch: no free
    # event, and Total Allocated never drops by it. The second iteration's gradient takes address 9000 at 152, so the
    # first was freed by then, and is counted until then (the latest it can have been freed): the peak is at 114, in
    # the second forward, 10,000 + 5,000 + 400 + 1,000 + 100 = 16,500; read as recorded it would be 16,800 at 152
    # (both gradients and the activation).
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100),
              *[e for e in _training_step(0) if e["ts"] != 92], *_training_step(100), memory(-5, 1, 5000, 0)]
    assert _totals(events) == 15_400  # as recorded: the unseen 400 still counted at the end
    (device,) = analyze_memory(read_job(write_trace(tmp_path, events), cache=False).traces[0])
    assert (device.peak_allocated_bytes, device.peak_time_ns) == (16_500, 114_000)
    assert device.unseen_frees == (1, 400)
    first = [int(end) for size, start, end in zip(device.allocations["size"], device.allocations["start"],
                                                   device.allocations["end"], strict=True) if size == 400 and start < 100_000]
    assert first == [152_000]  # ends where address 9000 is taken again (ns)
    assert device.by_category["gradients"].max() == 400
    # Each iteration's own peak: the first at 52 (its activation and gradient), the second at 114 (the first's
    # gradient still counted).
    assert device.iteration_peaks_bytes == (16_400, 16_500)


def test_a_peak_that_rises_every_iteration_is_named() -> None:
    from daydream.report.memory import _rising

    assert "rises every iteration, 100 B to 120 B over 3" in _rising([100, 110, 120])
    assert _rising([100, 90, 120]) == ""  # not every iteration
    assert _rising([100, 101, 102]) == ""  # by under 5%
    assert _rising([100, 120]) == ""  # two iterations say little


def test_what_if_memory_on_the_hand_built_trace(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    (device,) = analyze_memory(trace)
    layers = attribute(trace).layers

    def peak(spec: str) -> int:
        return predict_memory(device, [parse_spec(spec)], layers, None, None).predicted_peak_bytes

    assert peak("batch-size:factor=2") == 16_400 + 1000  # the activation doubles; the temporary is gone by then
    assert peak("zero:stage=2,world=4") == 16_400 - 300  # gradients ÷4
    assert peak("ddp:world=4") == 16_400 + 400  # the buckets: one more copy of the 400-byte gradients
    # Gradients as bucket views: the buckets are the gradients, 400 bytes held all run instead of from backward to the
    # optimizer; the peak moves to forward's temporary: 10,000 + 5,000 + 1,000 + 100 + 400.
    assert peak("ddp:world=4,bucket_view=1") == 16_500
    assert peak(r"checkpoint:layers=net\.fc") == 16_400  # recomputed before backward: the peak stays in backward


def test_a_tensor_that_holds_the_batch_twice_grows_with_the_square_of_the_factor(tmp_path: Path) -> None:
    # The hand-built trace's 1000-byte activation taken as a similarity of every sample with every other (its bytes
    # those of a tensor that holds the batch twice): at twice the batch it holds 4000 bytes, so the peak in backward is
    # 10,000 + 5,000 + 4,000 + 400; the 100-byte temporary, not of that size, is gone by then.
    trace = _trace(tmp_path)
    (device,) = analyze_memory(trace)
    layers = attribute(trace).layers
    spec = [parse_spec("batch-size:factor=2")]
    paired = predict_memory(device, spec, layers, None, None, pair_bytes=frozenset({1000}))
    assert paired.predicted_peak_bytes == 10_000 + 5_000 + 4_000 + 400
    assert any("2 of them the size of a tensor that holds the batch twice × 4" in n for n in paired.notes)
    assert predict_memory(device, spec, layers, None, None).predicted_peak_bytes == 16_400 + 1000


def test_a_pair_sized_block_is_found_as_asked_for_or_as_a_caching_allocator_rounds_it() -> None:
    from daydream.memory.whatif import _pair_sized

    sizes = np.array([1024.0, 1000.0, 512.0])
    assert _pair_sized(sizes, frozenset({1000}), rounded=False).tolist() == [False, True, False]  # a CPU's
    # a GPU's caching allocator rounds a block up to a multiple of 512 bytes: 1000 and 700 take 1024
    assert _pair_sized(sizes, frozenset({1000}), rounded=True).tolist() == [True, True, False]
    assert _pair_sized(sizes, frozenset({700}), rounded=True).tolist() == [True, False, False]
    assert _pair_sized(sizes, frozenset(), rounded=True).tolist() == [False, False, False]


def test_current_optimizer_is_read_from_annotations() -> None:
    assert current_optimizer_of(["aten::add", "Optimizer.step#AdamW.step"]) == "adamw"
    assert current_optimizer_of(["aten::add"]) is None


def test_memory_cli_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path)
    plot = tmp_path / "mem.png"
    assert main(["memory", "--json", "--plot", str(plot), trace.meta.source]) == 0
    document = json.loads(capsys.readouterr().out)
    (device,) = document["devices"]
    assert device["device"] == "cuda:0" and device["peak_allocated_bytes"] == 16_400
    assert set(device["categories"]) >= {"weights", "activations", "gradients", "optimizer state", "temporaries", "other"}
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert 600 <= width <= 3000 and 200 <= height <= 3000 and len(data) > 5000


def test_corpus_peaks_equal_the_largest_total_allocated(corpus: Path, manifest: dict[str, Any]) -> None:
    checked = 0
    for key, facts in manifest.items():
        expected = facts["peak_total_allocated_bytes"]
        if "::" in key or not expected or not any(expected.values()):
            continue  # no memory events, or (2021 format) no Total Allocated field
        devices = analyze_memory(read_job(corpus / key, cache=False).traces[0])
        ours = {d.device: d.peak_allocated_bytes for d in devices}
        for device_key, value in expected.items():
            device_type, device_id = (int(x) for x in device_key.split(":"))
            # Device Type 1 is CUDA, 6 is HIP (ROCm builds): both are the GPU PyTorch calls cuda:N.
            label = f"cuda:{device_id}" if device_type in (1, 6) else "cpu"
            assert ours[label] == value, (key, device_key)
            checked += 1
    assert checked >= 4


def test_whatif_memory_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    if not path.exists():
        pytest.skip("corpus missing")
    assert main(["whatif", str(path), "--opt", "batch-size:factor=2", "--memory", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["memory"]
    gpu = [e for e in entries if e["device"] == "cuda:0"][0]
    assert gpu["measured_peak_bytes"] == 2088508416
    assert gpu["predicted_peak_bytes"] >= gpu["measured_peak_bytes"]
    assert gpu["fits"] is True and gpu["capacity_bytes"] == 80 * 2**30
    assert isinstance(gpu["largest_batch_factor"], float) and gpu["largest_batch_factor"] > 2


def test_a_library_ops_scratch_is_workspace(tmp_path: Path) -> None:
    from daydream.memory import CATEGORIES

    events = [annotation("ProfilerStep#1", 0, 100), annotation("daydream.phase::forward", 10, 60),
              op("aten::cudnn_convolution", 12, 20, ext=1),
              memory(13, 100, 4096, 0), memory(30, 100, -4096, 0),   # freed inside the convolution: its workspace
              memory(31, 200, 512, 0),                               # freed after it ends (in the add): a temporary
              op("aten::add", 40, 10, ext=2),
              memory(41, 300, 256, 0), memory(45, 300, -256, 0),     # inside an elementwise op: a temporary
              memory(46, 200, -512, 0)]
    [device] = analyze_memory(read_job(write_trace(tmp_path, events), cache=False).traces[0])
    sizes = device.allocations["size"].tolist()
    categories = [CATEGORIES[c] for c in device.allocations["category"].tolist()]
    assert dict(zip(sizes, categories)) == {4096: "workspace", 512: "temporaries", 256: "temporaries"}


def test_memory_recorded_before_the_trace_is_counted_with_the_allocators_state(tmp_path: Path) -> None:
    # daydream trace's snapshot: 6,000 bytes of weights and 4,000 of optimizer state on cuda:0, held by the
    # caching allocator in 2 segments of 2 MiB each. The window's own Total Allocated starts at 10,000.
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100),
              *_training_step(0), *_training_step(100)]
    _totals(events)
    before = {"cuda:0": {"weights": 6000, "gradients": 0, "optimizer state": 4000, "other tensors": 0,
                         "allocated": 10_000, "reserved": 4 * 2**20, "segments": 2, "inactive split bytes": 0}}
    path = write_trace(tmp_path, events, daydream={"memory_before": before})
    (device,) = analyze_memory(read_job(path, cache=False).traces[0])
    assert device.categories["weights"] == 6000
    assert device.categories["optimizer state"] == 4000
    assert device.categories["before the trace"] == 0
    # Peak: 10,000 before + activation 1,000 + gradient 400.
    assert device.peak_allocated_bytes == 11_400
    assert device.before_trace.endswith("the allocator then held 4.0 MiB reserved in 2 segments")


def test_the_allocators_summary_keeps_only_what_it_reports() -> None:
    from daydream.trace.collect.hooks import allocator_summary

    stats = {"segment.all.current": 3, "segment.large_pool.current": 1, "segment.small_pool.current": 2,
             "inactive_split_bytes.all.current": 4096, "allocated_bytes.all.current": 10}
    assert allocator_summary(stats) == {"segments": 3, "large pool segments": 1, "small pool segments": 2,
                                        "inactive split bytes": 4096}
    assert allocator_summary({}) == {}


def test_whatif_memory_reads_the_one_table_of_memory_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daydream.api import list_optimizations
    from daydream.memory.whatif import MEMORY_MODELS
    from daydream.transforms import OPTIMIZATIONS

    trace = _trace(tmp_path)
    (device,) = analyze_memory(trace)
    layers = attribute(trace).layers

    def note_and_peak(spec: str) -> tuple[str, int]:
        prediction = predict_memory(device, [parse_spec(spec)], layers, None, None)
        return prediction.notes[0], prediction.predicted_peak_bytes

    # An optimization without a memory model says so and leaves the peak alone.
    note, peak = note_and_peak("fused-optimizer")
    assert note == "fused-optimizer: no memory model; allocations unchanged" and peak == 16_400
    # Adding a model to the table changes what whatif --memory does and what whatif --list says: one table for both.
    def everything_doubled(a, params, model):  # type: ignore[no-untyped-def]
        """every allocation doubled"""
        a.size *= 2
        return "doubled"

    monkeypatch.setitem(MEMORY_MODELS, "fused-optimizer", everything_doubled)
    note, peak = note_and_peak("fused-optimizer")
    assert note == "doubled" and peak == 10_000 + 2 * (5000 + 1000 + 400)
    listed = {entry["name"]: entry["memory"] for entry in list_optimizations()}
    assert listed["fused-optimizer"] == "every allocation doubled"
    # Every model in the table belongs to a registered optimization.
    assert set(MEMORY_MODELS) <= set(OPTIMIZATIONS)


def test_cuda_graphs_adds_a_cublas_workspace_for_each_stream_of_the_capture(tmp_path: Path) -> None:
    from daydream.devices import device as table_device

    trace = _trace(tmp_path)
    (device,) = analyze_memory(trace)
    layers = attribute(trace).layers

    def peak(gpu: str | None) -> int:
        target = table_device(gpu) if gpu else None
        return predict_memory(device, [parse_spec("cuda-graphs")], layers, None, target).predicted_peak_bytes

    # PyTorch keeps one cuBLAS workspace per stream: 4096 KiB x 8 on Hopper, 4096 KiB x 2 + 16 KiB x 8 on an A100;
    # the capture recipe adds two streams. Without a known NVIDIA GPU nothing is added.
    assert peak("H200") == 16_400 + 2 * 32 * 2**20
    assert peak("A100") == 16_400 + 2 * (8 * 2**20 + 128 * 2**10)
    assert peak("MI300X") == peak(None) == 16_400


def test_cuda_graphs_memory_against_the_real_capture_on_the_h200(capsys: pytest.CaptureFixture[str]) -> None:
    # examples/h200/realistic/round-2: the cnn's baseline trace, and its real CUDA-graphs run's
    # torch.cuda.max_memory_allocated (263.4 MiB; the baseline's own peak 199 MiB).
    folder = Path(__file__).resolve().parents[2] / "examples" / "h200" / "realistic" / "round-2"
    real = int((folder / "cnn-cuda-graphs.peak").read_text())
    assert main(["whatif", str(folder / "cnn-baseline.json.xz"), "--opt", "cuda-graphs", "--memory", "--json"]) == 0
    (found,) = [m for m in json.loads(capsys.readouterr().out)["memory"] if m["device"].startswith("cuda")]
    assert abs(found["predicted_peak_bytes"] - real) <= 0.01 * real
