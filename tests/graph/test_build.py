"""The graph builder on a tiny hand-made trace: which dependencies it derives, and from what."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daydream.graph import DepKind, TaskKind, build_graph
from daydream.simulate import simulate
from daydream.trace import read_job
from tests.builders import annotation, kernel, op, runtime, write_trace

MAIN, AUTOGRAD = 1, 2


def _events() -> list[dict]:  # type: ignore[type-arg]
    return [
        annotation("ProfilerStep#1", 0, 1000),
        runtime("cudaLaunchKernel", 10, 5, correlation=1, ext=1),
        kernel("a_on_7", 20, 100, correlation=1, ext=1, stream=7),
        runtime("cudaEventRecord", 30, 2, correlation=2, ext=2),
        runtime("cudaStreamWaitEvent", 40, 2, correlation=3, ext=3),
        runtime("cudaLaunchKernel", 50, 5, correlation=4, ext=4),
        kernel("b_on_20", 130, 50, correlation=4, ext=4, stream=20),
        # backward on the autograd thread while the main thread waits
        op("autograd::engine::evaluate_function: MmBackward0", 200, 40, ext=50, tid=AUTOGRAD),
        runtime("cudaLaunchKernel", 210, 5, correlation=5, ext=5, tid=AUTOGRAD),
        kernel("c_on_7", 220, 30, correlation=5, ext=5, stream=7),
        runtime("cudaMemcpyAsync", 300, 400, correlation=6, ext=6),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7, "ts": 650,
         "dur": 40, "args": {"correlation": 6, "External id": 6, "device": 0, "stream": 7, "bytes": 4}},
        runtime("cudaStreamSynchronize", 710, 5, correlation=7, ext=7),
        runtime("cudaLaunchKernel", 800, 5, correlation=8, ext=8),
        kernel("d_on_7", 810, 10, correlation=8, ext=8, stream=7),
    ]


def test_builder_derives_each_dependency_kind(tmp_path: Path) -> None:
    trace = read_job(write_trace(tmp_path, _events()), cache=False).traces[0]
    graph = build_graph(trace)
    assert graph.validate() == []
    names = [graph.task_name(t) for t in range(graph.task_count)]
    kinds = graph.tasks["kind"].tolist()

    def task(name: str, kind: TaskKind | None = None) -> int:
        matches = [i for i, n in enumerate(names) if n == name and (kind is None or kinds[i] == kind)]
        assert len(matches) == 1, (name, matches)
        return matches[0]

    edges = {(int(s), int(d), DepKind(int(k))) for s, d, k in zip(graph.edges["src"], graph.edges["dst"], graph.edges["kind"])}
    # the event wait: b_on_20 waits for a_on_7, recorded just before on the main thread's stream 7
    assert (task("a_on_7"), task("b_on_20"), DepKind.EVENT_WAIT) in edges
    # the copy into pageable memory blocks its call until the transfer is done
    copy_completion = task("cudaMemcpyAsync", TaskKind.COMPLETION)
    assert (task("Memcpy DtoH (Device -> Pageable)"), copy_completion, DepKind.SYNC) in edges
    assert (task("cudaMemcpyAsync", TaskKind.HOST_CALL), copy_completion, DepKind.SYNC) in edges
    # the stream sync waits for the last work launched on stream 7 before it: the copy
    sync_completion = task("cudaStreamSynchronize", TaskKind.COMPLETION)
    assert (task("Memcpy DtoH (Device -> Pageable)"), sync_completion, DepKind.SYNC) in edges
    # program order continues from completions, not from the blocking calls
    starts = graph.tasks["measured_start_ns"].tolist()
    launch_at = {starts[i] // 1000: i for i, n in enumerate(names) if n == "cudaLaunchKernel" and kinds[i] == TaskKind.HOST_CALL}
    assert (sync_completion, launch_at[800], DepKind.HOST_ORDER) in edges
    # the autograd thread's burst is chained to the main thread on both sides
    autograd_launch = launch_at[210]
    into = {s for s, d, k in edges if d == autograd_launch and k is DepKind.CROSS_THREAD}
    out_of = {d for s, d, k in edges if s == autograd_launch and k is DepKind.CROSS_THREAD}
    assert into == {launch_at[50]}
    assert out_of == {task("cudaMemcpyAsync", TaskKind.HOST_CALL)}
    # every kernel is launched by its call, from the call's start
    for name in ("a_on_7", "b_on_20", "c_on_7", "d_on_7"):
        assert any(d == task(name) and k is DepKind.LAUNCH for _, d, k in edges)
    # the iteration boundaries are markers on the main thread
    assert len(graph.iteration_markers) == 1
    start, end = graph.iteration_markers[0]
    assert graph.tasks["measured_start_ns"][start] == 0 and graph.tasks["measured_start_ns"][end] == 1_000_000


def test_wait_without_a_recorded_side_keeps_order_and_a_relative_delay(tmp_path: Path) -> None:
    events = [e for e in _events() if e["name"] != "cudaEventRecord"]
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    graph = build_graph(trace)
    names = [graph.task_name(t) for t in range(graph.task_count)]
    held = names.index("b_on_20")
    assert graph.pinned()[held]
    assert graph.calibration.event_waits_pinned == 1
    assert any("stream waits have no known recorded side" in note for note in graph.notes)
    # No timestamp holds it: the untouched replay starts it where the recording did (130 µs), through a delay
    # after its readiness; the order of the other stream's preceding work (a_on_7) is kept as an edge.
    assert int(simulate(graph).start_ns[held]) == 130_000
    assert graph.tasks["delay_ns"][held] >= 0
    edges = {(int(s), int(d), DepKind(int(k))) for s, d, k in zip(graph.edges["src"], graph.edges["dst"], graph.edges["kind"])}
    assert (names.index("a_on_7"), held, DepKind.EVENT_WAIT) in edges


def test_outstanding_launches_match_a_count_by_hand() -> None:
    # For each chosen launch k: how many earlier launches' GPU work ends after call k returns, counted directly.
    from daydream.graph.calibrate import _outstanding, outstanding_at

    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 100, 2000):
        gpu_end = rng.integers(0, 500, n).astype(np.int64)  # ties on purpose
        call_end = rng.integers(0, 500, n).astype(np.int64)
        launches = np.flatnonzero(rng.random(n) < 0.4)
        expected = [int(np.count_nonzero(gpu_end[:k] > call_end[k])) for k in launches.tolist()]
        assert outstanding_at(gpu_end, call_end, launches).tolist() == expected
        ordered = np.sort(gpu_end)
        plain = _outstanding.py_func(np.searchsorted(ordered, gpu_end), launches,
                                     np.searchsorted(ordered, call_end[launches], side="right"), n)
        assert plain.tolist() == expected
