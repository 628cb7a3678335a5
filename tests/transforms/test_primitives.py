"""The primitives on hand-built graphs."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.graph import DepKind, Graph, TaskKind
from daydream.simulate import PRIORITY, simulate, simulate_event_driven
from daydream.transforms import insert, remove, reschedule, scale, select
from tests.transforms.graphs import graph, kernel, launch_chain, op


def test_select_by_each_criterion() -> None:
    g = graph([op("aten::mm", 10, phase="forward", layer="net.fc"), op("aten::add", 5, phase="backward", layer="net.fc"),
               kernel("sgemm", 7, phase="forward", iteration=1), op("aten::mm", 3, phase="optimizer")],
              [], layers=["net.fc"])
    assert select(g, kind=TaskKind.HOST_OP).tolist() == [0, 1, 3]
    assert select(g, name=r"^aten::mm$").tolist() == [0, 3]
    assert select(g, layer=r"fc").tolist() == [0, 1]
    assert select(g, phase="forward").tolist() == [0, 2]
    assert select(g, iteration=1).tolist() == [2]
    assert select(g, predicate=lambda gr, ids: gr.tasks["duration_ns"][ids] > 6).tolist() == [0, 2]
    assert select(g, kind=TaskKind.HOST_OP, phase=["forward", "optimizer"]).tolist() == [0, 3]
    with pytest.raises(ValueError, match="unknown phase"):
        select(g, phase="warmup")


def test_scale_by_factor_and_by_function() -> None:
    g = graph([op("a", 10, gap=4), op("b", 20, gap=6)], [(0, 1, DepKind.HOST_ORDER, 0, False)])
    scale(g, np.array([0, 1]), factor=0.5, gaps=True)
    assert g.tasks["duration_ns"].tolist() == [5, 10] and g.tasks["gap_ns"].tolist() == [2, 3]
    scale(g, np.array([0, 1]), function=lambda gr, ids: np.array([2.0, 3.0]))
    assert g.tasks["duration_ns"].tolist() == [10, 30]
    with pytest.raises(ValueError):
        scale(g, np.array([0]), factor=2.0, function=lambda gr, ids: ids)


@pytest.mark.parametrize("factor", [float("nan"), float("inf"), -0.0, -1.0])
def test_scale_refuses_a_factor_that_is_no_duration_multiplier(factor: float) -> None:
    # NaN, inf and -0.0 used to predict as factor 0 without a word
    g = graph([op("a", 10)], [])
    with pytest.raises(ValueError, match="finite numbers of 0 or more"):
        scale(g, np.array([0]), factor=factor)
    assert g.tasks["duration_ns"].tolist() == [10]


def test_remove_reconnects_program_order_and_drops_its_launch() -> None:
    tasks, edges = launch_chain([{"kind": TaskKind.HOST_CALL, "name": "l", "duration": 5, "gap": 10}] * 3,
                                [kernel("k", 20), kernel("k", 20), kernel("k", 20)])
    g = graph(tasks, edges)
    # Before: calls at 0, 15, 30; kernels at 4, 25 (=24+1), 46.
    before = simulate(g)
    assert before.start_ns.tolist() == [0, 15, 30, 4, 25, 46]
    remove(g, np.array([1, 4]))  # the middle call and its kernel
    assert g.task_count == 4 and g.validate() == []
    after = simulate(g)
    # call 2 now follows call 0 (its gap of 10 kept): 5 + 10 = 15; its kernel follows kernel 0 on the stream.
    assert after.start_ns.tolist() == [0, 15, 4, 25]


def test_remove_keep_gaps_moves_the_cpu_work_to_the_successor() -> None:
    g = graph([op("a", 10), op("b", 10, gap=7), op("c", 10, gap=3)],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False)])
    remove(g, np.array([1]), keep_gaps=True)
    assert simulate(g).start_ns.tolist() == [0, 20]  # 10 + 7 + 3


def test_insert_with_edges_to_new_and_old_tasks() -> None:
    g = graph([op("a", 10), op("b", 10)], [(0, 1, DepKind.HOST_ORDER, 0, False)])
    ids = insert(g, {"kind": [TaskKind.KERNEL], "resource": [1], "duration_ns": [50]},
                 [(0, ("new", 0), DepKind.LAUNCH, 4, True), (("new", 0), 1, DepKind.SYNC, 0, False)])
    assert ids.tolist() == [2]
    assert simulate(g).start_ns.tolist() == [0, 54, 4]


def test_reschedule_priorities_order_a_shared_stream() -> None:
    g = graph([op("host", 1), kernel("a", 10), kernel("b", 10)],
              [(0, 1, DepKind.LAUNCH, 0, True), (0, 2, DepKind.LAUNCH, 0, True)])
    reschedule(g, np.array([2, 1]), priority=np.array([0, 1]))
    timeline = simulate_event_driven(g, policies={1: PRIORITY}, priority=g.tasks["priority"])
    assert timeline.start_ns.tolist()[1:] == [10, 0]
    with pytest.raises(ValueError, match="does not exist"):
        reschedule(g, np.array([1]), resource=7)


def _edges(g: Graph) -> set[tuple[int, int, int]]:
    return {(int(s), int(d), int(k)) for s, d, k in zip(g.edges["src"], g.edges["dst"], g.edges["kind"])}


def test_splice_puts_each_new_task_right_after_or_before_its_anchor_in_program_order() -> None:
    from daydream.transforms.primitives import splice

    # Host a -> b -> c (10 ns each, gap 5 before b); a launches kernel k (20 ns) on the stream, then k2 after it.
    g = graph([op("a", 10), op("b", 10, gap=5), op("c", 10), kernel("k", 20), kernel("k2", 20)],
              [(0, 1, DepKind.HOST_ORDER, 0, False), (1, 2, DepKind.HOST_ORDER, 0, False),
               (0, 3, DepKind.LAUNCH, 0, True), (3, 4, DepKind.STREAM_ORDER, 0, False), (0, 4, DepKind.LAUNCH, 0, True)])
    # Two tasks after a (given 7 then 3 ns), one after k (4 ns), one before c (6 ns), in two calls.
    after = splice(g, [0, 3, 0], [7, 4, 3], "copy in", after=True)
    [before] = splice(g, [2], 6, "copy back", after=False)
    assert after.tolist() == [5, 6, 7] and before == 8
    assert g.tasks["kind"].tolist()[5:] == [TaskKind.HOST_OP, TaskKind.KERNEL, TaskKind.HOST_OP, TaskKind.HOST_OP]
    assert g.tasks["resource"].tolist()[5:] == [0, 1, 0, 0]
    # As if spliced one at a time: a -> 3 ns -> 7 ns -> b (the last given after an anchor is nearest to it);
    # k -> 4 ns -> k2; b -> 6 ns -> c. Launches stay where they were.
    assert _edges(g) == {(0, 7, DepKind.HOST_ORDER), (7, 5, DepKind.HOST_ORDER), (5, 1, DepKind.HOST_ORDER),
                         (1, 8, DepKind.HOST_ORDER), (8, 2, DepKind.HOST_ORDER),
                         (0, 3, DepKind.LAUNCH), (0, 4, DepKind.LAUNCH),
                         (3, 6, DepKind.STREAM_ORDER), (6, 4, DepKind.STREAM_ORDER)}
    assert g.validate() == []
    timed = simulate(g)
    # a 0-10, 3 ns 10-13, 7 ns 13-20, b after its gap 25-35, 6 ns 35-41, c 41-51; k 0-20, 4 ns 20-24, k2 24-44.
    assert timed.start_ns.tolist() == [0, 25, 41, 0, 24, 13, 20, 10, 35]
    assert timed.end_ns.tolist()[5:] == [20, 24, 13, 41]
