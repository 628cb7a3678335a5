"""The simulator on hand-built graphs whose timelines are computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import EDGE_COLUMNS, TASK_COLUMNS, empty_columns
from daydream.simulate import PRIORITY, simulate, simulate_event_driven, simulate_reference

HOST, STREAM, STREAM2 = 0, 1, 2


def _graph(tasks: list[tuple[TaskKind, int, int, int]], edges: list[tuple[int, int, DepKind, int, bool]],
           delays: dict[int, tuple[int, int]] | None = None) -> Graph:
    """tasks: (kind, resource, duration, gap); edges: (src, dst, kind, latency, from_start);
    delays: task -> (unexplained delay, recorded span it scales with; 0 for a fixed delay)."""
    graph = Graph(
        tasks=empty_columns(TASK_COLUMNS),
        edges=empty_columns(EDGE_COLUMNS),
        resources=[Resource(ResourceKind.HOST_THREAD, "main"), Resource(ResourceKind.GPU_STREAM, "s7", 0, 7),
                   Resource(ResourceKind.GPU_STREAM, "s8", 0, 8)],
        strings=["task"],
    )
    graph.add_tasks(
        kind=[t[0] for t in tasks], resource=[t[1] for t in tasks], duration_ns=[t[2] for t in tasks],
        gap_ns=[t[3] for t in tasks], measured_start_ns=np.arange(len(tasks)) * 10,
    )
    for index, (delay, span) in (delays or {}).items():
        graph.tasks["delay_ns"][index] = delay
        graph.tasks["delay_span_ns"][index] = span
        graph.tasks["unexplained"][index] = True
    for src, dst, kind, latency, from_start in edges:
        graph.add_edges([src], [dst], kind, latency_ns=latency, from_start=from_start)
    return graph


def _all_engines(graph: Graph) -> list[tuple[list[int], list[int]]]:
    results = []
    for timeline in (simulate(graph), simulate_reference(graph), simulate_event_driven(graph)):
        results.append((timeline.start_ns.tolist(), timeline.end_ns.tolist()))
    return results


def test_launch_bound_host_sets_the_pace() -> None:
    # Two launches (5 ns each, 20 ns of CPU work before the second) of 3 ns kernels; launch latency 4.
    graph = _graph(
        [(TaskKind.HOST_CALL, HOST, 5, 0), (TaskKind.HOST_CALL, HOST, 5, 20), (TaskKind.KERNEL, STREAM, 3, 0),
         (TaskKind.KERNEL, STREAM, 3, 0)],
        [(0, 1, DepKind.HOST_ORDER, 0, False), (0, 2, DepKind.LAUNCH, 4, True), (1, 3, DepKind.LAUNCH, 4, True),
         (2, 3, DepKind.STREAM_ORDER, 1, False)],
    )
    # call0 [0,5]; kernel0 at 0+4 -> [4,7]; call1 at 5+20=25 -> [25,30]; kernel1 at max(25+4, 7+1) = 29 -> [29,32]
    for starts, ends in _all_engines(graph):
        assert starts == [0, 25, 4, 29] and ends == [5, 30, 7, 32]


def test_gpu_bound_stream_sets_the_pace() -> None:
    graph = _graph(
        [(TaskKind.HOST_CALL, HOST, 2, 0), (TaskKind.HOST_CALL, HOST, 2, 0), (TaskKind.KERNEL, STREAM, 100, 0),
         (TaskKind.KERNEL, STREAM, 100, 0)],
        [(0, 1, DepKind.HOST_ORDER, 0, False), (0, 2, DepKind.LAUNCH, 4, True), (1, 3, DepKind.LAUNCH, 4, True),
         (2, 3, DepKind.STREAM_ORDER, 1, False)],
    )
    # kernel1 waits for kernel0: max(2+4, 104+1) = 105
    for starts, ends in _all_engines(graph):
        assert starts[3] == 105 and ends[3] == 205


def test_stream_sync_completion_waits_for_the_gpu() -> None:
    # launch, then cudaStreamSynchronize (own 3) whose completion waits for the kernel (+2 return latency),
    # then a host task with 10 ns of CPU work before it.
    graph = _graph(
        [(TaskKind.HOST_CALL, HOST, 5, 0), (TaskKind.KERNEL, STREAM, 50, 0), (TaskKind.HOST_CALL, HOST, 3, 1),
         (TaskKind.COMPLETION, HOST, 0, 0), (TaskKind.HOST_CALL, HOST, 4, 10)],
        [(0, 1, DepKind.LAUNCH, 4, True), (0, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.SYNC, 0, False),
         (1, 3, DepKind.SYNC, 2, False), (3, 4, DepKind.HOST_ORDER, 0, False)],
    )
    # kernel [4,54]; sync call [6,9]; completion at max(9, 54+2) = 56; next host task at 56+10 = 66
    for starts, ends in _all_engines(graph):
        assert starts == [0, 4, 6, 56, 66] and ends[4] == 70


def test_event_wait_across_two_streams() -> None:
    graph = _graph(
        [(TaskKind.HOST_CALL, HOST, 1, 0), (TaskKind.KERNEL, STREAM, 40, 0), (TaskKind.HOST_CALL, HOST, 1, 0),
         (TaskKind.KERNEL, STREAM2, 10, 0)],
        [(0, 1, DepKind.LAUNCH, 2, True), (0, 2, DepKind.HOST_ORDER, 0, False), (2, 3, DepKind.LAUNCH, 2, True),
         (1, 3, DepKind.EVENT_WAIT, 1, False)],
    )
    # kernel on stream 8 waits for stream 7's kernel: max(1+2, 42+1) = 43
    for starts, ends in _all_engines(graph):
        assert starts[3] == 43 and ends[3] == 53


def test_autograd_thread_blocks_the_main_thread() -> None:
    graph = _graph(
        [(TaskKind.HOST_CALL, HOST, 5, 0), (TaskKind.HOST_CALL, STREAM2, 7, 3), (TaskKind.HOST_CALL, HOST, 2, 4)],
        [(0, 1, DepKind.CROSS_THREAD, 0, False), (1, 2, DepKind.CROSS_THREAD, 0, False)],
    )
    graph.resources[STREAM2] = Resource(ResourceKind.HOST_THREAD, "autograd")
    # main [0,5]; autograd at 5+3 -> [8,15]; main resumes at 15+4 -> [19,21]
    for starts, ends in _all_engines(graph):
        assert starts == [0, 8, 19] and ends == [5, 15, 21]


def test_a_fixed_delay_follows_the_task_s_readiness_not_a_timestamp() -> None:
    graph = _graph([(TaskKind.KERNEL, STREAM, 5, 0), (TaskKind.COLLECTIVE, STREAM, 5, 0)],
                   [(0, 1, DepKind.STREAM_ORDER, 1, False)], delays={1: (94, 0)})
    # kernel [0,5]; collective ready at 5+1 = 6, plus its delay of 94 -> [100,105]
    for starts, _ in _all_engines(graph):
        assert starts == [0, 100]
    graph.tasks["duration_ns"][0] = 55  # the kernel takes 50 ns longer: the delay moves with it
    for starts, _ in _all_engines(graph):
        assert starts == [0, 150]


def test_an_anchored_delay_scales_with_the_progress_since_its_anchor() -> None:
    # anchor (a marker) at 0; a 40 ns kernel; a collective ready at 40 that waited 20 ns more in the
    # recording (span 40). Halve the kernel: progress 20 of 40, so the delay halves to 10.
    tasks = [(TaskKind.MARKER, HOST, 0, 0), (TaskKind.KERNEL, STREAM, 40, 0), (TaskKind.COLLECTIVE, STREAM, 5, 0)]
    edges = [(0, 1, DepKind.LAUNCH, 0, True), (1, 2, DepKind.STREAM_ORDER, 0, False), (0, 2, DepKind.DELAY_ANCHOR, 0, False)]
    graph = _graph(tasks, edges, delays={2: (20, 40)})
    for starts, _ in _all_engines(graph):
        assert starts == [0, 0, 60]
    graph.tasks["duration_ns"][1] = 20
    for starts, _ in _all_engines(graph):
        assert starts == [0, 0, 30]
    graph.tasks["duration_ns"][1] = 400  # slower work never lengthens the delay beyond the recorded one
    for starts, _ in _all_engines(graph):
        assert starts == [0, 0, 420]


def test_priority_policy_reorders_a_shared_stream() -> None:
    # Two kernels ready at once on one stream, no order edge between them: priority decides.
    graph = _graph([(TaskKind.HOST_CALL, HOST, 1, 0), (TaskKind.KERNEL, STREAM, 10, 0), (TaskKind.KERNEL, STREAM, 10, 0)],
                   [(0, 1, DepKind.LAUNCH, 0, True), (0, 2, DepKind.LAUNCH, 0, True)])
    fifo = simulate_event_driven(graph)
    assert fifo.start_ns.tolist()[1:] == [0, 10]
    prioritized = simulate_event_driven(graph, policies={STREAM: PRIORITY}, priority=np.array([0, 5, 1]))
    assert prioritized.start_ns.tolist()[1:] == [10, 0]
    with pytest.raises(ValueError, match="unknown queue policy"):
        simulate_event_driven(graph, policies={STREAM: "random"})


def test_validate_reports_cycles_dangling_edges_and_homeless_tasks() -> None:
    graph = _graph([(TaskKind.HOST_CALL, HOST, 1, 0), (TaskKind.HOST_CALL, HOST, 1, 0)],
                   [(0, 1, DepKind.HOST_ORDER, 0, False)])
    assert graph.validate() == []
    graph.add_edges([1], [0], DepKind.HOST_ORDER)
    assert any("cycle" in p for p in graph.validate())
    with pytest.raises(ValueError, match="cycle"):
        simulate(graph)
    broken = _graph([(TaskKind.HOST_CALL, HOST, 1, 0)], [(0, 5, DepKind.HOST_ORDER, 0, False)])
    broken.tasks["resource"][0] = 9
    problems = broken.validate()
    assert any("do not exist" in p for p in problems) and any("no resource" in p for p in problems)


def test_networkx_view_has_every_task_and_edge() -> None:
    graph = _graph([(TaskKind.HOST_CALL, HOST, 1, 0), (TaskKind.KERNEL, STREAM, 1, 0)], [(0, 1, DepKind.LAUNCH, 4, True)])
    view = graph.to_networkx()
    assert view.number_of_nodes() == 2 and view.number_of_edges() == 1
    assert view.edges[0, 1, 0]["kind"] is DepKind.LAUNCH and view.nodes[1]["duration_ns"] == 1


def test_engines_agree_on_random_graphs() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = 60
        kinds = rng.choice([TaskKind.HOST_CALL, TaskKind.KERNEL], size=n)
        tasks = [(TaskKind(int(k)), HOST if k == TaskKind.HOST_CALL else STREAM, int(rng.integers(0, 50)), int(rng.integers(0, 9)))
                 for k in kinds]
        edges = []
        for resource in (HOST, STREAM):
            members = [i for i, t in enumerate(tasks) if t[1] == resource]
            kind = DepKind.HOST_ORDER if resource == HOST else DepKind.STREAM_ORDER
            edges += [(a, b, kind, int(rng.integers(0, 3)), False) for a, b in zip(members, members[1:])]
        for _ in range(40):
            a, b = sorted(rng.choice(n, size=2, replace=False).tolist())
            edges.append((a, b, DepKind.SYNC, int(rng.integers(0, 5)), bool(rng.random() < 0.3)))
        delayed = sorted(rng.choice(np.arange(1, n), size=3, replace=False).tolist())
        for task in delayed[1:]:  # two delays scale with an earlier anchor, one is fixed
            edges.append((int(rng.integers(0, task)), task, DepKind.DELAY_ANCHOR, 0, False))
        graph = _graph(tasks, edges, delays={task: (int(rng.integers(1, 500)), int(rng.integers(0, 300))) for task in delayed})
        results = _all_engines(graph)
        assert results[0] == results[1] == results[2]
