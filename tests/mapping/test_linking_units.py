"""Linking and iterations on hand-built traces where the right answer is known by construction."""

from __future__ import annotations

from pathlib import Path

from daydream.mapping import EXTERNAL_ID, TIME_NESTING, find_iterations, link
from daydream.trace import EventKind, read_job
from tests.builders import annotation, kernel, op, runtime, write_trace


def _trace(tmp_path: Path, events):  # type: ignore[no-untyped-def]
    return read_job(write_trace(tmp_path, events), cache=False).traces[0]


def _row(trace, name: str) -> int:  # type: ignore[no-untyped-def]
    return next(i for i in range(len(trace)) if trace.name_of(i) == name)


def test_external_id_convention(tmp_path: Path) -> None:
    events = [
        op("aten::linear", 0, 100, ext=10),
        op("aten::addmm", 5, 50, ext=11),
        runtime("cudaLaunchKernel", 10, 5, correlation=500, ext=11),
        kernel("gemm", 20, 30, correlation=500, ext=11),
        runtime("cudaMemsetAsync", 70, 5, correlation=501, ext=10),
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "pid": 0, "tid": 7, "ts": 80, "dur": 2,
         "args": {"correlation": 501, "External id": 10, "stream": 7, "device": 0}},
    ]
    trace = _trace(tmp_path, events)
    links = link(trace)
    assert links.convention == EXTERNAL_ID
    assert links.launch[_row(trace, "gemm")] == _row(trace, "cudaLaunchKernel")
    assert links.op[_row(trace, "gemm")] == _row(trace, "aten::addmm")
    assert links.op[_row(trace, "Memset")] == _row(trace, "aten::linear")


def test_time_nesting_convention_picks_the_innermost_op_on_the_same_thread(tmp_path: Path) -> None:
    events = [
        op("aten::conv2d", 0, 100, ext=1),
        op("aten::convolution", 1, 90, ext=2),
        op("aten::empty", 2, 3, ext=3),  # a sibling that ended before the launch
        runtime("cudaLaunchKernel", 10, 5, correlation=40, ext=40),
        op("aten::other_thread", 0, 100, ext=4, tid=2),
        kernel("conv", 20, 30, correlation=40, ext=40),
    ]
    trace = _trace(tmp_path, events)
    links = link(trace)
    assert links.convention == TIME_NESTING
    assert links.op[_row(trace, "cudaLaunchKernel")] == _row(trace, "aten::convolution")
    assert links.op[_row(trace, "conv")] == _row(trace, "aten::convolution")


def test_orphans_and_graph_launches(tmp_path: Path) -> None:
    events = [
        kernel("before_window", 0, 5, correlation=3, ext=3),
        op("aten::graph_replay", 10, 100, ext=1),
        runtime("cudaGraphLaunch", 20, 5, correlation=10, ext=10),
        kernel("g1", 30, 5, correlation=10, ext=10),
        kernel("g2", 40, 5, correlation=10, ext=10),
        kernel("g3", 50, 5, correlation=10, ext=10),
        kernel("lost", 60, 5, correlation=99, ext=99),  # no launch in the file, yet after the window start
    ]
    trace = _trace(tmp_path, events)
    links = link(trace)
    graph = _row(trace, "cudaGraphLaunch")
    assert [int(links.launch[_row(trace, k)]) for k in ("g1", "g2", "g3")] == [graph] * 3
    assert links.orphan[_row(trace, "before_window")] and links.launch[_row(trace, "before_window")] == -1
    assert not links.orphan[_row(trace, "lost")] and links.launch[_row(trace, "lost")] == -1
    assert links.op[_row(trace, "g2")] == _row(trace, "aten::graph_replay")


def test_external_id_that_does_not_enclose_falls_back_to_nesting(tmp_path: Path) -> None:
    events = [
        op("aten::far_away", 500, 10, ext=7),
        op("aten::actual", 0, 100, ext=8),
        runtime("cudaLaunchKernel", 10, 5, correlation=70, ext=7),
        runtime("cudaLaunchKernel2", 20, 5, correlation=71, ext=8),
        runtime("cudaLaunchKernel3", 30, 5, correlation=72, ext=8),
    ]
    trace = _trace(tmp_path, events)
    links = link(trace)
    assert links.convention == EXTERNAL_ID
    assert links.op[_row(trace, "cudaLaunchKernel")] == _row(trace, "aten::actual")


def test_iterations_prefer_profiler_steps_then_optimizer_then_whole(tmp_path: Path) -> None:
    steps = _trace(tmp_path, [annotation("ProfilerStep#3", 0, 10), annotation("ProfilerStep#4", 10, 12),
                              op("aten::add", 1, 2, ext=1)])
    assert [(i.name, i.measured_ns) for i in find_iterations(steps)] == [("ProfilerStep#3", 10000), ("ProfilerStep#4", 12000)]

    optimizer = _trace(tmp_path, [op("aten::add", 5, 2, ext=1), annotation("Optimizer.step#Adam.step", 20, 5),
                                  annotation("Optimizer.step#Adam.step", 50, 4)])
    found = find_iterations(optimizer)
    assert [(i.start_ns, i.end_ns) for i in found] == [(5000, 25000), (25000, 54000)]

    whole = _trace(tmp_path, [op("aten::add", 5, 2, ext=1), op("aten::mul", 9, 3, ext=2)])
    assert [(i.start_ns, i.end_ns, i.source) for i in find_iterations(whole)] == [(5000, 12000, "whole_trace")]


def test_user_marker(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [annotation("train_step", 0, 10), annotation("train_step", 20, 10),
                              annotation("ProfilerStep#1", 0, 40)])
    assert [i.start_ns for i in find_iterations(trace, marker=r"^train_step$")] == [0, 20000]
    assert trace.count(EventKind.ANNOTATION) == 3


def test_nearest_earlier_at_least_matches_brute_force() -> None:
    import numpy as np

    from daydream.mapping._stack import nearest_earlier_at_least_compiled
    from daydream.mapping.linking import nearest_earlier_at_least

    rng = np.random.default_rng(7)
    for size in (1, 2, 3, 17, 200):
        values = rng.integers(0, 50, size=size).astype(np.int64)
        candidate = rng.random(size) < 0.6
        expected = [max((j for j in range(i) if candidate[j] and values[j] >= values[i]), default=-1) for i in range(size)]
        assert nearest_earlier_at_least(values, candidate).tolist() == expected
        # The compiled stack pass that large traces take gives the same rows.
        assert nearest_earlier_at_least_compiled(values, candidate).tolist() == expected
        assert nearest_earlier_at_least_compiled.py_func(values, candidate).tolist() == expected
