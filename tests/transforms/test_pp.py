"""pp (pipeline parallelism) on hand-built graphs, where every stage's schedule and bubble can be worked out on paper."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.mapping.attribution import LayerWork
from daydream.memory.whatif import Allocations, ModelFacts, peak_bytes, pp_memory
from daydream.simulate import simulate
from daydream.transforms import Context, apply_spec, parse_spec
from daydream.transforms.distributed.pp import balanced_cuts, schedule
from tests.transforms.graphs import NEVER, graph, op, two_block_allocations

MiB = 2**20
CONTEXT = Context(gradient_bytes={"blocks.0": MiB, "blocks.1": MiB})
#: Sends of unknown size (no shapes recorded) over a link without latency take no time.
LINK = "bandwidth=1000,latency=0"


def _step() -> Graph:
    """One CPU thread: making the batch (0 ns), forward blocks.0 and blocks.1 (400 ns each), backward blocks.1 and
    blocks.0 (800 ns each), the optimizer (100 ns): 2500 ns in all. At half the batch, with the fixed cost the
    shortest task (0 ns, fixed_percentile=0), each forward takes 200 ns and each backward 400."""
    tasks = [op("batch", 0, phase="other"), op("fwd", 400, phase="forward", layer="blocks.0"),
             op("fwd", 400, phase="forward", layer="blocks.1"), op("bwd", 800, phase="backward", layer="blocks.1"),
             op("bwd", 800, phase="backward", layer="blocks.0"), op("sgd", 100, phase="optimizer")]
    edges = [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(5)]
    return graph(tasks, edges, layers=["blocks.0", "blocks.1"])


def _runs(g: Graph, name: str) -> list[tuple[int, int, str]]:
    """(start, end, thread) of each task named `name`, by start."""
    timeline = simulate(g)
    found = [t for t in range(g.task_count) if g.task_name(t) == name]
    return sorted((int(timeline.start_ns[t]), int(timeline.end_ns[t]), g.resources[int(g.tasks["resource"][t])].label)
                  for t in found)


def test_the_unpipelined_step_is_as_the_docstring_says() -> None:
    assert simulate(_step()).makespan_ns == 2500


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
def test_two_stages_two_microbatches_run_the_schedule_with_its_bubble(kind: str) -> None:
    # 1F1B, stage 0: F0 0-200, F1 200-400; stage 1: F0 200-400 (after stage 0's F0), B0 400-800, F1 800-1000, B1
    # 1000-1400; stage 0: B0 once stage 1's B0 is in (800-1200), B1 once stage 1's B1 is (1400-1800); each stage's
    # optimizer at half the parameters, 50 ns: stage 1 1400-1450, stage 0 1800-1850.
    # GPipe, stage 1: F0 200-400, F1 400-600, B0 600-1000, B1 1000-1400; stage 0: B0 1000-1400, B1 1400-1800; the same
    # step. Either way stage 0 idles (S - 1)(F + B) = 600 ns of its 1800: the bubble.
    g = _step()
    apply_spec(g, parse_spec(f"pp:stages=2,microbatches=2,schedule={kind},fixed_percentile=0,{LINK}"), CONTEXT)
    assert simulate(g).makespan_ns == 1850
    stage1 = "main (pp stage 1)"
    forwards, backwards = _runs(g, "fwd"), _runs(g, "bwd")
    assert [r for r in forwards if r[2] == "main"] == [(0, 200, "main"), (200, 400, "main")]
    assert [r for r in backwards if r[2] == "main"] == [(800, 1200, "main"), (1400, 1800, "main")] if kind == "1f1b" \
        else [(1000, 1400, "main"), (1400, 1800, "main")]
    expected_stage1 = {"1f1b": ([(200, 400), (800, 1000)], [(400, 800), (1000, 1400)]),
                       "gpipe": ([(200, 400), (400, 600)], [(600, 1000), (1000, 1400)])}[kind]
    assert [r[:2] for r in forwards if r[2] == stage1] == expected_stage1[0]
    assert [r[:2] for r in backwards if r[2] == stage1] == expected_stage1[1]
    assert sorted(r[:2] for r in _runs(g, "sgd")) == [(1400, 1450), (1800, 1850)]
    busy = sum(e - s for s, e, thread in forwards + backwards if thread == "main")
    assert 1800 - busy == 600


def test_sends_between_stages_are_on_links_of_their_own() -> None:
    g = _step()
    apply_spec(g, parse_spec(f"pp:stages=2,microbatches=2,fixed_percentile=0,{LINK}"), CONTEXT)
    sends = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    # each micro-batch: its activations 0 -> 1 and its gradients 1 -> 0
    assert len(sends) == 4
    assert sorted({g.resources[int(r)].label for r in g.tasks["resource"][sends]}) == [
        "pp send stage 0 -> 1", "pp send stage 1 -> 0"]


def test_the_1f1b_order_warms_up_with_one_forward_per_later_stage() -> None:
    forward, backward = 0, 1
    assert schedule("1f1b", 4, 6, 0) == [(forward, 0), (forward, 1), (forward, 2), (forward, 3), (backward, 0),
                                         (forward, 4), (backward, 1), (forward, 5), (backward, 2), (backward, 3),
                                         (backward, 4), (backward, 5)]
    assert schedule("1f1b", 4, 6, 3)[:4] == [(forward, 0), (backward, 0), (forward, 1), (backward, 1)]
    assert schedule("gpipe", 2, 2, 1) == [(forward, 0), (forward, 1), (backward, 0), (backward, 1)]


def test_stages_are_cut_where_the_slowest_is_fastest() -> None:
    assert balanced_cuts([5, 1, 1, 1, 4], 2) == [0, 2]  # 6 | 6
    assert balanced_cuts([1, 1, 1, 1], 4) == [0, 1, 2, 3]
    assert balanced_cuts([9, 1, 1, 1], 2) == [0, 1]


def test_bad_layouts_say_what_would_work() -> None:
    with pytest.raises(InputError, match="stages=3 but the model has 2 repeated blocks"):
        apply_spec(_step(), parse_spec(f"pp:stages=3,microbatches=2,{LINK}"), CONTEXT)
    with pytest.raises(InputError, match="schedule='zb'"):
        apply_spec(_step(), parse_spec(f"pp:stages=2,schedule=zb,{LINK}"), CONTEXT)
    with pytest.raises(InputError, match="no per-layer parameters"):
        apply_spec(_step(), parse_spec(f"pp:stages=2,{LINK}"), Context())


def _allocations() -> tuple[Allocations, ModelFacts]:
    """Weights 200 and optimizer state 400 (no layer owns them); blocks.0's activation (1000) made at 10 in forward,
    blocks.1's (1000) at 20; blocks.1's backward makes its gradient (100) at 40, blocks.0's at 55; the activations
    freed at 50 (blocks.1's) and 60; the gradients live on. The two blocks' parameters weigh the same, so each stage
    holds half the weights and state: 100 + 200."""
    a = two_block_allocations([200, 400, 1000, 1000, 100, 100], [-1, -1, 10, 20, 40, 55],
                              [NEVER, NEVER, 60, 50, NEVER, NEVER])
    work = LayerWork(np.array([10, 10]), np.array([10, 20]))
    return a, ModelFacts(["blocks.0", "blocks.1"], None, {"blocks.0": 4, "blocks.1": 4}, "cpu", work)


@pytest.mark.parametrize(("kind", "stage", "expected"), [
    # 1F1B, 2 stages, 2 micro-batches (500 bytes of activations each). Stage 0 runs F0 F1 B0 B1: at its first
    # backward both micro-batches' activations are alive and its gradient appears at 55: 300 + 1000 + 100.
    ("1f1b", 0, 300 + 1000 + 100),
    # Stage 1 runs F0 B0 F1 B1: one micro-batch's activations at a time, and from B0 on its gradient with them.
    ("1f1b", 1, 300 + 500 + 100),
    # GPipe: every micro-batch's activations before the first backward, on every stage.
    ("gpipe", 1, 300 + 1000 + 100),
])
def test_each_stage_holds_its_parameters_and_the_activations_in_flight(kind: str, stage: int, expected: int) -> None:
    a, facts = _allocations()
    assert peak_bytes(a) == 600 + 2000 + 100  # before: both activations and blocks.1's gradient at 40-50
    pp_memory(a, {"stages": 2, "microbatches": 2, "schedule": kind, "memory_stage": stage}, facts)
    assert peak_bytes(a) == expected


def test_the_rank_memory_is_the_largest_stages() -> None:
    a, facts = _allocations()
    note = pp_memory(a, {"stages": 2, "microbatches": 2, "schedule": "1f1b", "memory_stage": -1}, facts)
    assert peak_bytes(a) == 1400 and "stage 0's is the largest" in note
