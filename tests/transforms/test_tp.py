"""tp (tensor parallelism) on a hand-built graph: one column- and one row-parallel linear layer, every op's time and
every collective worked out on paper."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.cost import CostModel
from daydream.cost.host import HostCosts
from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.simulate import simulate
from daydream.transforms import Context, apply_spec, parse_spec
from daydream.transforms.batch import BatchOps, BatchShape
from daydream.transforms.reshape import ShapedOp
from tests.transforms.graphs import graph, op

#: 1000 tokens of width 16: blocks.0.up takes them to 32, blocks.0.down back to 16 (fp32).
TOKENS, WIDTH, HIDDEN = 1000, 16, 32
#: Over 1 GB/s (1 byte/ns) without latency, between 2 ranks, an all-reduce of the 64,000 bytes of 1000 × 16 fp32
#: moves 2 · (2 - 1)/2 · 64,000 bytes: 64,000 ns; a reduce-scatter or an all-gather half of that.
LINK = "bandwidth=1,latency=0"


def _x(*shape: int) -> tuple[tuple[int, ...], str]:
    return tuple(shape), "float"


def _step() -> tuple[Graph, Context]:
    """One CPU thread: up's forward (1000 ns), down's forward (1000), down's backward (2000), up's backward (2000):
    6000 ns. Each op's inputs are recorded; dispatch is free (a host unit of 0 ns), so at half the rows each op
    takes half its time (its FLOPs halve)."""
    tasks = [op("aten::linear", 1000, phase="forward", layer="blocks.0.up"),
             op("aten::linear", 1000, phase="forward", layer="blocks.0.down"),
             op("aten::mm", 2000, phase="backward", layer="blocks.0.down"),
             op("aten::mm", 2000, phase="backward", layer="blocks.0.up")]
    g = graph(tasks, [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(3)],
              layers=["blocks.0.up", "blocks.0.down"])
    g.tasks["event"][:] = np.arange(4)
    g.tasks["measured_end_ns"][:] = g.tasks["measured_start_ns"] + 5
    inputs = [[_x(TOKENS, WIDTH), _x(HIDDEN, WIDTH), _x(HIDDEN)], [_x(TOKENS, HIDDEN), _x(WIDTH, HIDDEN), _x(WIDTH)],
              [_x(TOKENS, WIDTH), _x(WIDTH, HIDDEN)], [_x(TOKENS, HIDDEN), _x(HIDDEN, WIDTH)]]
    ops = [ShapedOp(row, name, tensors, None, int(g.tasks["duration_ns"][row]), int(g.tasks["measured_start_ns"][row]),
                   0, False, False)
           for row, (name, tensors) in enumerate(zip(["aten::linear", "aten::linear", "aten::mm", "aten::mm"], inputs))]
    shape = BatchShape(TOKENS, parameters=frozenset({(HIDDEN, WIDTH), (HIDDEN,), (WIDTH, HIDDEN), (WIDTH,)}))
    found = BatchOps(shape, "recorded", ops, {o.row: o for o in ops}, {o.row for o in ops}, True)
    costs = CostModel(host=HostCosts(unit_ns=0), on_gpu=False)
    context = Context(gradient_bytes={"blocks.0.up": (HIDDEN * WIDTH + HIDDEN) * 4,
                                      "blocks.0.down": (WIDTH * HIDDEN + WIDTH) * 4},
                      derive={"batch_ops": lambda: lambda batch: found, "costs": lambda: costs})
    return g, context


def _collectives(g: Graph) -> list[int]:
    return np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE).tolist()


def test_the_unsplit_step_is_as_the_docstring_says() -> None:
    assert simulate(_step()[0]).makespan_ns == 6000


def test_a_split_linear_pair_halves_its_work_and_all_reduces_in_forward_and_backward() -> None:
    # Forward: up 0-500, down 500-1000, the all-reduce of down's output 1000-65000, the host waiting for it; backward:
    # down 65000-66000, up 66000-67000, the all-reduce of up's input gradient 67000-131000.
    g, context = _step()
    apply_spec(g, parse_spec(f"tp:degree=2,layers=blocks\\.0\\.,{LINK}"), context)
    timeline = simulate(g)
    assert timeline.start_ns[:4].tolist() == [0, 500, 65000, 66000]
    assert timeline.end_ns[:4].tolist() == [500, 1000, 66000, 67000]
    reduces = _collectives(g)
    assert [g.task_name(t).split(" (")[0] for t in reduces] == ["tp allreduce", "tp allreduce"]
    assert timeline.start_ns[reduces].tolist() == [1000, 67000]
    assert g.tasks["bytes"][reduces].tolist() == [TOKENS * WIDTH * 4] * 2
    assert timeline.makespan_ns == 131000


def test_dtensors_host_work_comes_before_each_split_layers_call_forward_and_backward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As above, with DTensor's own host work of 100 ns before each split layer's call in forward and 200 ns before
    # its backward: up 100-600, down 700-1200, the all-reduce 1200-65200; down's backward 65400-66400, up's
    # 66600-67600, the all-reduce 67600-131600.
    costs = {"tp.forward": 100, "tp.backward": 200}
    monkeypatch.setattr(HostCosts, "recorded_ns", lambda self, what: costs.get(what, 0))
    g, context = _step()
    apply_spec(g, parse_spec(f"tp:degree=2,layers=blocks\\.0\\.,{LINK}"), context)
    timeline = simulate(g)
    assert timeline.start_ns[:4].tolist() == [100, 700, 65400, 66600]
    assert timeline.start_ns[_collectives(g)].tolist() == [1200, 67600]
    dtensor = sorted((int(timeline.start_ns[t]), g.task_name(t)) for t in range(g.tasks["kind"].size)
                     if g.task_name(t).startswith("tp: DTensor"))
    assert dtensor == [(0, "tp: DTensor (forward, blocks.0.up)"), (600, "tp: DTensor (forward, blocks.0.down)"),
                       (65200, "tp: DTensor (backward, blocks.0.down)"), (66400, "tp: DTensor (backward, blocks.0.up)")]
    assert timeline.makespan_ns == 131600


def test_sequence_parallel_gathers_before_the_column_layer_and_reduce_scatters_after_the_row_layer() -> None:
    # Forward: the all-gather 0-32000, up 32000-32500, down -33000, the reduce-scatter 33000-65000; backward: the
    # all-gather before down's backward 65000-97000, down 97000-98000, up -99000, the reduce-scatter 99000-131000.
    g, context = _step()
    apply_spec(g, parse_spec(f"tp:degree=2,layers=blocks\\.0\\.,sequence_parallel=1,{LINK}"), context)
    timeline = simulate(g)
    collectives = sorted(_collectives(g), key=lambda t: int(timeline.start_ns[t]))
    assert [g.task_name(t).split(" (")[0] for t in collectives] == ["tp all-gather", "tp reducescatter",
                                                                    "tp all-gather", "tp reducescatter"]
    assert timeline.start_ns[collectives].tolist() == [0, 33000, 65000, 99000]
    assert timeline.start_ns[:4].tolist() == [32000, 32500, 97000, 98000]
    assert timeline.makespan_ns == 131000


def test_a_degree_that_does_not_divide_the_widths_says_which_would() -> None:
    g, context = _step()
    with pytest.raises(InputError, match="degree=3 does not divide blocks.0.up's 32 outputs — use a degree that "
                                         "divides 32"):
        apply_spec(g, parse_spec(f"tp:degree=3,layers=blocks\\.0\\.,{LINK}"), context)
    with pytest.raises(InputError, match="layers='decoder' matches no linear layer"):
        apply_spec(g, parse_spec(f"tp:degree=2,layers=decoder,{LINK}"), context)
    with pytest.raises(InputError, match="records no op shapes"):
        apply_spec(g, parse_spec(f"tp:degree=2,{LINK}"), Context(gradient_bytes=context.gradient_bytes))


def test_the_dtensor_constants_are_the_calibration_rounds_medians_and_the_kept_rounds_rows_the_scripts() -> None:
    import sys

    from daydream.cost.host import RECORDED_HOST_UNITS
    from tests.conftest import REPO

    kept = REPO / "examples" / "layouts" / "tp-calibration"
    sys.path.insert(0, str(REPO / "scripts"))
    import tp_costs

    table = (kept / "calibration.md").read_text()
    rows = [line for line in tp_costs.report(kept).splitlines() if line.startswith("| round-")]
    assert len(rows) == 2 and all(row in table for row in rows)  # both ranks of the kept round, as recorded
    [median] = [line for line in table.splitlines() if line.startswith("| **median** |")]
    cells = [float(cell.strip().strip("*")) for cell in median.strip().strip("|").split("|")[2:]]
    assert cells == [RECORDED_HOST_UNITS[f"tp.{k}"] for k in tp_costs.KINDS]
    assert all(row in (REPO / "docs" / "validation-parallel.md").read_text() for row in table.splitlines()
               if row.startswith("| round-"))


def _attention_step() -> tuple[Graph, Context]:
    """As `_step`, but one layer, blocks.0.attn, runs both multiplies itself (nn.MultiheadAttention calls its output
    projection as a function, not as a module): its input projection 16 → 32, then its output projection 16 → 16
    (the attention between them, not recorded here, takes the 32 back to 16): the layer ends at its input's width."""
    g, context = _step()
    g.layers[:] = ["blocks.0.attn"]
    g.tasks["layer"][:] = 0
    found = context.batch_ops(0)  # type: ignore[misc]
    # the output projection takes 16 wide rows back to the block's width, 16
    found.ops[1].tensors[:] = [_x(TOKENS, WIDTH), _x(WIDTH, WIDTH), _x(WIDTH)]
    context.gradient_bytes.clear()
    context.gradient_bytes["blocks.0.attn"] = (HIDDEN * WIDTH + HIDDEN + WIDTH * WIDTH + WIDTH) * 4
    return g, context


def test_an_attention_layer_that_runs_both_projections_is_a_pair_by_itself() -> None:
    # The same times as the up/down pair: forward 0-500, 500-1000, the all-reduce of the layer's output (1000 × 16
    # fp32: 64,000 bytes) 1000-65000; backward 65000-66000, 66000-67000, the all-reduce of its input gradient
    # 67000-131000.
    g, context = _attention_step()
    notes = apply_spec(g, parse_spec(f"tp:degree=2,layers=attn,{LINK}"), context)
    assert "blocks.0.attn (by its heads)" in notes[0] and "left whole" not in notes[0]
    timeline = simulate(g)
    reduces = _collectives(g)
    assert [g.task_name(t).split(" (")[0] for t in reduces] == ["tp allreduce", "tp allreduce"]
    assert g.tasks["bytes"][reduces].tolist() == [TOKENS * WIDTH * 4] * 2
    assert timeline.start_ns[reduces].tolist() == [1000, 67000]
    assert timeline.makespan_ns == 131000


def test_a_layer_whose_two_multiplies_do_not_return_to_its_width_is_one_linear_layer() -> None:
    from daydream.transforms.distributed.tp import linears

    g, context = _attention_step()
    found = context.batch_ops(0)  # type: ignore[misc]
    found.ops[1].tensors[:] = [_x(TOKENS, WIDTH), _x(HIDDEN, WIDTH), _x(HIDDEN)]  # 16 → 32 again: its next call
    (only,) = linears(found, {op.row: 0 for op in found.ops}).values()
    assert (only.inputs, only.outputs, only.closes) == (WIDTH, HIDDEN, False)
    found.ops[1].tensors[:] = [_x(TOKENS, HIDDEN), _x(HIDDEN * 2, HIDDEN), _x(HIDDEN * 2)]  # 32 → 64: not back to 16
    (only,) = linears(found, {op.row: 0 for op in found.ops}).values()
    assert not only.closes
    found.ops[1].tensors[:] = [_x(TOKENS, HIDDEN), _x(WIDTH, HIDDEN), _x(WIDTH)]  # 32 → 16: back to its width
    (only,) = linears(found, {op.row: 0 for op in found.ops}).values()
    assert (only.closes, only.row_inputs, only.row_outputs) == (True, HIDDEN, WIDTH)
