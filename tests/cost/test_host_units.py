"""The recorded host costs of the checkpoint wrapper: the fit of its part per saved tensor, by hand."""

from __future__ import annotations

import sys

import pytest

from daydream.cost.host import RECORDED_HOST_UNITS
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
    # 2026-12-04 (mlp, cnn, transformer and speech, three rounds: 8.0, 10.0, 24.0 and 585.0 tensors per call, medians
    # forward 354.5, -229.0, 7.6, 5489.6 and backward 255.2, 80.3, -639.1, 13263.6 units per call).
    saved = [8.0, 10.0, 24.0, 585.0]
    forward = host_costs.per_tensor(saved, [354.5, -229.0, 7.6, 5489.6], RECORDED_HOST_UNITS["checkpoint.forward.cpu"])
    backward = host_costs.per_tensor(saved, [255.2, 80.3, -639.1, 13263.6], RECORDED_HOST_UNITS["checkpoint.backward.cpu"])
    assert round(forward, 1) == RECORDED_HOST_UNITS["checkpoint.forward_tensor.cpu"]
    assert round(backward, 1) == RECORDED_HOST_UNITS["checkpoint.backward_tensor.cpu"]
