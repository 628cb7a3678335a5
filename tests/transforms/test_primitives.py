"""The primitives on hand-built graphs."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.graph import DepKind, TaskKind
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
