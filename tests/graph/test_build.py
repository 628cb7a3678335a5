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


def test_a_copy_call_blocks_only_when_all_it_launched_is_a_pageable_copy(tmp_path: Path) -> None:
    """cudaMemcpyAsync is not a sync by name: it blocks (a completion waiting for its copy) only where every piece of
    GPU work it launched moves pageable memory; a device-to-device copy, or a pageable copy beside other work, does
    not."""
    def completions(copies: list[dict]) -> int:  # type: ignore[type-arg]
        events = [e for e in _events() if e.get("cat") != "gpu_memcpy"] + copies
        graph = build_graph(read_job(write_trace(tmp_path, events), cache=False).traces[0])
        names = [graph.task_name(t) for t in range(graph.task_count)]
        return sum(1 for t, n in enumerate(names) if n == "cudaMemcpyAsync" and graph.tasks["kind"][t] == TaskKind.COMPLETION)

    def copy(name: str, ts: int) -> dict:  # type: ignore[type-arg]
        return {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 20,
                "args": {"correlation": 6, "External id": 6, "device": 0, "stream": 7, "bytes": 4}}

    pageable, device = "Memcpy DtoH (Device -> Pageable)", "Memcpy DtoD (Device -> Device)"
    assert completions([copy(pageable, 650)]) == 1
    assert completions([copy(pageable, 650), copy(pageable, 675)]) == 1
    assert completions([copy(device, 650)]) == 0
    assert completions([copy(pageable, 650), copy(device, 675)]) == 0


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


def _graph_of(tmp_path: Path, events: list[dict]) -> tuple:  # type: ignore[type-arg]
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    graph = build_graph(trace)
    names = [graph.task_name(t) for t in range(graph.task_count)]
    return graph, {name: names.index(name) for name in names}


def test_work_that_began_before_its_stream_was_done_runs_after_it(tmp_path: Path) -> None:
    # k2 starts at 195 µs, 5 µs before k1 ends (launched early): it did its own work from 200 to 260.
    graph, at = _graph_of(tmp_path, [
        annotation("ProfilerStep#1", 0, 400),
        runtime("cudaLaunchKernel", 10, 5, correlation=1, ext=1), kernel("k1", 100, 100, correlation=1, ext=1),
        runtime("cudaLaunchKernel", 20, 5, correlation=2, ext=2), kernel("k2", 195, 65, correlation=2, ext=2)])
    assert graph.calibration.early_starts == 1
    assert graph.tasks["duration_ns"][at["k2"]] == 60_000
    order = np.flatnonzero((graph.edges["kind"] == DepKind.STREAM_ORDER) & (graph.edges["dst"] == at["k2"]))
    assert graph.edges["src"][order].tolist() == [at["k1"]] and graph.edges["latency_ns"][order].tolist() == [0]
    timeline = simulate(graph)
    assert timeline.end_ns[at["k2"]] - timeline.end_ns[at["k1"]] == 60_000


def test_a_graph_launch_whose_kernels_began_after_it_returned(tmp_path: Path) -> None:
    from daydream.transforms import Context, apply_spec, parse_spec

    # The call takes 980 µs (its host work); the graph's kernels begin 1 µs after it returns.
    events = [annotation("ProfilerStep#1", 0, 2000), runtime("cudaGraphLaunch", 10, 980, correlation=1, ext=1),
              kernel("g1", 991, 50, correlation=1, ext=1), kernel("g2", 1041, 50, correlation=1, ext=1)]
    graph, at = _graph_of(tmp_path, events)
    launch = np.flatnonzero(graph.edges["kind"] == DepKind.LAUNCH)
    assert not graph.edges["from_start"][launch].any() and set(graph.edges["latency_ns"][launch].tolist()) == {1_000}
    assert simulate(graph).start_ns[at["g1"]] - simulate(graph).start_ns[at["cudaGraphLaunch"]] == 981_000
    apply_spec(graph, parse_spec("faster-host:factor=2"), Context())  # the call's own time halves: 490 µs
    timeline = simulate(graph)
    assert timeline.start_ns[at["g1"]] - timeline.start_ns[at["cudaGraphLaunch"]] == 491_000


def test_a_graph_launch_that_submits_its_kernels_while_it_runs(tmp_path: Path) -> None:
    from daydream.transforms import Context, apply_spec, parse_spec

    # hipGraphLaunch runs 850 µs; h1 begins 12 µs in, h2 at 90 µs after the stream sat idle (submitted then), h3
    # right behind h2.
    events = [annotation("ProfilerStep#1", 0, 2000), runtime("hipGraphLaunch", 10, 850, correlation=1, ext=1),
              kernel("h1", 22, 5, correlation=1, ext=1), kernel("h2", 100, 5, correlation=1, ext=1),
              kernel("h3", 105.5, 5, correlation=1, ext=1)]
    graph, at = _graph_of(tmp_path, events)
    launch = np.flatnonzero(graph.edges["kind"] == DepKind.LAUNCH)
    latency = dict(zip(graph.edges["dst"][launch].tolist(), graph.edges["latency_ns"][launch].tolist()))
    assert graph.edges["from_start"][launch].all()
    assert (latency[at["h1"]], latency[at["h2"]], latency[at["h3"]]) == (12_000, 90_000, 12_000)
    apply_spec(graph, parse_spec("faster-gpu:factor=2"), Context())
    timeline = simulate(graph)
    # h2 waits for the call to submit it, however fast the GPU; h3 follows h2.
    assert timeline.start_ns[at["h2"]] - timeline.start_ns[at["hipGraphLaunch"]] == 90_000
    assert timeline.start_ns[at["h3"]] >= timeline.end_ns[at["h2"]]
