"""The recorded host costs of the checkpoint wrapper: the fit of its part per saved tensor, and what a block's
recomputation subtracts, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
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
    # As --fit --with-call gave them over the real pairs of 2026-12-05 (five rounds; per example the tensors saved per
    # call and the medians of its units per call, forward and backward): the least-squares line through them.
    saved = [8.0, 10.0, 24.0, 21.0, 585.0, 9.0, 7.8, 2.82]
    forward = [372.5, 422.2, 260.1, 154.2, 5642.1, -121.9, 229.5, 232.1]
    backward = [876.8, 785.0, 460.0, 1681.0, 10762.9, 72.4, 876.4, 434.0]
    for side, units in (("forward", forward), ("backward", backward)):
        slope, intercept = np.polyfit(saved, units, 1)
        assert round(intercept) == round(RECORDED_HOST_UNITS[f"checkpoint.{side}.cpu"])
        assert round(slope, 1) == RECORDED_HOST_UNITS[f"checkpoint.{side}_tensor.cpu"]


def test_the_line_through_the_examples_gives_both_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Three examples saving 2, 10 and 50 tensors per call, at 100 + 5 per tensor forward and 300 + 20 backward in every
    # round: the line returns those parts; held at 80 per call, only the slope is fitted.
    units = {"a": (110.0, 340.0), "b": (150.0, 500.0), "c": (350.0, 1300.0)}
    monkeypatch.setattr(host_costs, "checkpoint_units", lambda folder, example: (*units[example], 1))
    monkeypatch.setattr(host_costs, "saved_per_call", lambda trace: trace)
    monkeypatch.setattr(host_costs, "open_trace", lambda path: {"a": 2.0, "b": 10.0, "c": 50.0}[path.name[0]])
    monkeypatch.setattr(host_costs, "discover", lambda path: [path])
    monkeypatch.setattr(host_costs, "kept", lambda folder, name: folder / name)
    rows, fitted = host_costs.fit_tensors([tmp_path / "round-1", tmp_path / "round-2"], ["a", "b", "c"], None)
    assert [r[1:] for r in rows] == [(2.0, 110.0, 340.0), (10.0, 150.0, 500.0), (50.0, 350.0, 1300.0)]
    assert fitted == pytest.approx({"forward.call": 100.0, "forward.tensor": 5.0, "backward.call": 300.0,
                                    "backward.tensor": 20.0})
    _, held = host_costs.fit_tensors([tmp_path / "round-1"], ["a", "b", "c"], (80.0, 300.0))
    assert held["forward.call"] == 80.0 and held["backward.tensor"] == pytest.approx(20.0)


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
