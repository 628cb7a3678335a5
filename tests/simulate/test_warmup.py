"""The warm-up iteration a what-if simulates before the first recorded one (simulate.warmup), on hand-made loops."""

from __future__ import annotations

from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.windows import iteration_windows
from daydream.simulate.job import simulate_job
from daydream.simulate.warmup import extend
from tests.transforms.graphs import call, graph, kernel, op


def _loop(iterations: int, synchronize: bool = False) -> Graph:
    """Per iteration: start marker, 300 ns of host work, a 100 ns launch of a 1000 ns kernel (from the launch's start,
    no latency), [a blocking call that waits for the kernel,] end marker; host and stream in program order."""
    tasks: list[dict] = []
    edges: list[tuple[int, int, DepKind, int, bool]] = []
    markers, previous_end, previous_kernel = [], None, None
    for number in range(iterations):
        start = len(tasks)
        tasks += [{"kind": TaskKind.MARKER, "duration": 0, "iteration": number}, op("work", 300, iteration=number),
                  call(duration=100, iteration=number), kernel("k", 1000, iteration=number)]
        host = [start, start + 1, start + 2]
        if synchronize:
            tasks += [call("cudaStreamSynchronize", duration=10, iteration=number),
                      {"kind": TaskKind.COMPLETION, "duration": 0, "iteration": number}]
            host += [start + 4, start + 5]
            edges.append((start + 3, start + 5, DepKind.SYNC, 0, False))
        tasks.append({"kind": TaskKind.MARKER, "duration": 0, "iteration": number})
        host.append(len(tasks) - 1)
        edges += [(a, b, DepKind.HOST_ORDER, 0, False) for a, b in zip(host, host[1:])]
        edges.append((start + 2, start + 3, DepKind.LAUNCH, 0, True))
        if previous_end is not None:
            edges += [(previous_end, start, DepKind.HOST_ORDER, 0, False),
                      (previous_kernel, start + 3, DepKind.STREAM_ORDER, 0, False)]
        previous_end, previous_kernel = host[-1], start + 3
        markers.append((start, host[-1]))
    built = graph(tasks, edges)
    built.iteration_markers = markers
    return built


def _windows(g: Graph, warmup: bool) -> list[int]:
    [timeline] = simulate_job([g], warmup=warmup)
    return [w.duration_ns for w in iteration_windows(g, timeline)]


def test_a_loop_that_runs_ahead_is_steady_from_its_first_iteration() -> None:
    # Alone, the first iteration's 300 ns of host work come before its kernel can start: kernel 300-1300, and each
    # later kernel follows the one before (the host, 400 ns an iteration, runs ahead): windows 1300, 1000, 1000.
    g = _loop(3)
    assert _windows(g, warmup=False) == [1300, 1000, 1000]
    # Behind a copy of the first iteration, the first's host work runs while the copy's kernel does, as every later
    # iteration's does: its kernel follows the copy's, and its window starts where the copy's ended.
    assert _windows(g, warmup=True) == [1000, 1000, 1000]


def test_a_loop_that_waits_for_its_gpu_every_iteration_is_unchanged() -> None:
    # Each iteration: 300 + 100 host, its kernel 300-1300, the sync returns at 1300 (it waited), 0-ns marker: 1300 ns.
    g = _loop(3, synchronize=True)
    assert _windows(g, warmup=False) == _windows(g, warmup=True) == [1300, 1300, 1300]


def test_the_copy_keeps_the_first_iterations_edges_and_leaves_the_graph_alone() -> None:
    g = _loop(3)
    first = int((g.tasks["iteration"] == 0).sum())
    edges_inside = 4  # marker -> work -> launch -> end marker (3 host-order edges) and the launch
    extended, copies = extend(g)
    assert copies.tolist() == list(range(g.task_count, g.task_count + first))
    assert extended.task_count == g.task_count + first and g.task_count == 15
    # Inside the copy, its own edges; into the first iteration, the two that led from the first into the second.
    assert extended.edge_count == g.edge_count + edges_inside + 2
    assert (extended.tasks["iteration"][copies] == -1).all()
    # One iteration says nothing about what comes between two: no copy.
    single = _loop(1)
    assert extend(single)[0] is single


def _rank(work_ns: int) -> Graph:
    """_loop(2) with `work_ns` of host work, each kernel followed on its stream by a 200 ns all-reduce matched across
    ranks (job-wide ids 1 and 2)."""
    g = _loop(2)
    g.tasks["duration_ns"][g.tasks["name"] == g.strings.index("work")] = work_ns
    kernels = [int(k) for k in (g.tasks["kind"] == TaskKind.KERNEL).nonzero()[0]]
    collectives = g.add_tasks(kind=int(TaskKind.COLLECTIVE), resource=1, duration_ns=200, iteration=[0, 1],
                              collective=[1, 2], measured_start_ns=[35, 95])
    g.add_edges(kernels, collectives, DepKind.STREAM_ORDER)
    g.add_edges(collectives[:1], kernels[1:], DepKind.STREAM_ORDER)
    return g


def test_ranks_warm_up_together_and_their_copies_match_each_other() -> None:
    # Alone: rank 1's first kernel ends at 1600 (600 ns of host work first), so the first all-reduce runs 1600-1800 on
    # both ranks; the second iteration's kernels 1800-2800, all-reduce 2800-3000: windows 1800 and 1200.
    ranks = [_rank(300), _rank(600)]
    cold = simulate_job(ranks)
    assert [[w.duration_ns for w in iteration_windows(g, t)] for g, t in zip(ranks, cold)] == [[1800, 1200]] * 2
    # Behind their warm-ups (whose all-reduces match only each other), both iterations are the GPU's 1000 + 200.
    warm = simulate_job(ranks, warmup=True)
    assert [[w.duration_ns for w in iteration_windows(g, t)] for g, t in zip(ranks, warm)] == [[1200, 1200]] * 2
    first_all_reduce = [int(t.start_ns[g.tasks["collective"] == 1][0]) for g, t in zip(ranks, warm)]
    assert first_all_reduce[0] == first_all_reduce[1]


def test_extending_leaves_the_graphs_columns_as_they_were() -> None:
    g = _loop(3)
    def columns() -> dict[str, object]:
        return {f"{table}.{name}": column.copy() for table, part in (("tasks", g.tasks), ("edges", g.edges))
                for name, column in part.items()}

    before = columns()
    extended, copies = extend(g)
    assert copies.size > 0 and extended.edge_count > g.edge_count
    after = columns()
    assert before.keys() == after.keys()
    assert all(len(after[name]) == len(column) and (after[name] == column).all() for name, column in before.items())
