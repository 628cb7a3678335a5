"""The recorded host costs of the checkpoint wrapper: the fit of its part per saved tensor, and what a block's
recomputation subtracts, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from daydream.cost.host import RECORDED_HOST_UNITS
from daydream.cost.saved import saved_tensors_of
from daydream.cost.shapes import top_level_ops
from daydream.mapping.opening import open_trace
from daydream.trace import EventKind, discover
from tests.builders import annotation, op, write_trace
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import host_costs  # noqa: E402  (scripts/host_costs.py)


def test_the_part_per_saved_tensor_is_the_slope_with_the_part_per_call_held() -> None:
    # Calls saving 10 and 100 tensors cost 80 + 10 x 5 = 130 and 80 + 100 x 5 = 580 units: with 80 per call held, 5 per
    # tensor. Noise on the small call moves it little: its 10 tensors weigh 1/101 of the 100's in the slope.
    assert host_costs.per_tensor([10, 100], [130, 580], 80) == pytest.approx(5.0)
    assert host_costs.per_tensor([10, 100], [130 + 300, 580], 80) == pytest.approx(5.0 + 10 * 300 / (10**2 + 100**2))
    # held at zero: the slope through the origin
    assert host_costs.per_tensor([2, 4], [2, 4], 0) == pytest.approx(1.0)


def test_the_recorded_cpu_costs_are_the_fits() -> None:
    # The per-call parts as --measure gave them; the per-tensor parts as --fit gave them over the real pairs of
    # 2026-12-05 (mlp, cnn, transformer and speech, five rounds: 8.0, 10.0, 24.0 and 585.0 tensors per call, medians
    # forward 372.5, 422.2, 260.1, 5642.1 and backward 876.8, 785.0, 460.0, 10762.9 units per call).
    saved = [8.0, 10.0, 24.0, 585.0]
    forward = host_costs.per_tensor(saved, [372.5, 422.2, 260.1, 5642.1], RECORDED_HOST_UNITS["checkpoint.forward.cpu"])
    backward = host_costs.per_tensor(saved, [876.8, 785.0, 460.0, 10762.9], RECORDED_HOST_UNITS["checkpoint.backward.cpu"])
    assert round(forward, 1) == RECORDED_HOST_UNITS["checkpoint.forward_tensor.cpu"]
    assert round(backward, 1) == RECORDED_HOST_UNITS["checkpoint.backward_tensor.cpu"]


def test_a_blocks_recomputation_runs_up_to_its_last_pack(tmp_path: Path) -> None:
    # A block's forward call, 0..100 µs: a linear (saves its inputs when it starts, 0), a tanh (its result when it
    # ends, 60), a second linear (its inputs, at 60), an add (nothing). torch's early stop ends the recomputation at
    # 60 µs: that much of the block is subtracted as recomputed; a block whose ops save nothing counted, all of it.
    events = [annotation("daydream.layer::net.blocks.0", 0, 100),
              op("aten::linear", 0, 40, ext=1, **{"Sequence number": 1}),
              op("aten::tanh", 40, 20, ext=2, **{"Sequence number": 2}),
              op("aten::linear", 60, 30, ext=3, **{"Sequence number": 3}),
              op("aten::add", 90, 5, ext=4, **{"Sequence number": 4}),
              annotation("daydream.layer::net.blocks.1", 200, 50),
              op("aten::add", 210, 5, ext=5, **{"Sequence number": 5})]
    trace = open_trace(discover(write_trace(tmp_path, events))[0], cache=False)
    ops = top_level_ops(trace, trace.indices(EventKind.CPU_OP))
    last_pack = saved_tensors_of(trace, ops).last_pack_ns
    blocks = [r for r in trace.indices(EventKind.ANNOTATION) if trace.name_of(r).startswith("daydream.layer::")]
    assert [host_costs.recomputed_ns(trace, block, ops, last_pack) for block in blocks] == [60_000.0, 50_000.0]
