"""How a re-shaped op's time changes (transforms/reshape.op_growth), on hand-made ops with a stand-in measurer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from daydream.cost import Tier
from daydream.cost.shapes import Tensor
from daydream.transforms.reshape import Growth, ShapedOp, op_growth


class Doubled:
    """A Scaling that doubles every tensor's last axis; `additive`: a measured op that grows gains what it measured
    more; `pointwise`: elementwise ops are not measured."""

    additive = True
    pointwise = False

    def inputs(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        return [((*t[0][:-1], t[0][-1] * 2), t[1]) if t is not None else None for t in tensors]

    def arguments(self, name: str, arguments: list[Any]) -> list[Any]:
        return arguments

    def unscaled(self, op: ShapedOp) -> tuple[float, Tier]:
        return 2.0, Tier.RATIO


class Scaled(Doubled):
    additive = False


class Untouched(Doubled):
    def inputs(self, name: str, tensors: list[Tensor | None]) -> list[Tensor | None] | None:
        return None


def _op(name: str, *shapes: tuple[int, ...]) -> ShapedOp:
    return ShapedOp(0, name, [(s, "float") for s in shapes], None, 1_000, 0, 0, False, False)


def _costs(pair: tuple[int, int] | None, ratio: float | None = None) -> Any:
    """A cost model whose measurer gives the pair (new, old) and the ratio; it notes what it was asked for, and whether
    hot (caches as the previous run left them) or with caches emptied."""
    seen: list[str] = []

    def op_pair_ns(name: str, new: list, old: list) -> tuple[int, int] | None:
        seen.append(f"pair {name} {new} {old}")
        return pair

    def op_ratio(name: str, new: list, old: list, hot: bool = False) -> float | None:
        seen.append(f"ratio {name} {'hot' if hot else 'emptied'}")
        return ratio

    return SimpleNamespace(measurer=SimpleNamespace(op_pair_ns=op_pair_ns, op_ratio=op_ratio, seen=seen))


def test_a_measured_op_whose_weights_grow_gains_what_it_measured_more() -> None:
    # Alone it took 1,100 ns at its shapes and 4,300 ns at the new ones: 800 ns of its own work past the fixed part
    # becomes 800 + 3,200, not 800 x 4,300 / 1,100.
    costs = _costs((4_300, 1_100))
    growth = op_growth(_op("aten::mm", (8, 16), (16, 32)), Doubled(), costs, measure=True)
    assert growth == Growth(1.0, 3_200, Tier.MEASURED) and growth.new_ns(800) == 4_000
    # it ran the op at the new shapes and the recorded ones, and nothing else
    assert costs.measurer.seen == ["pair aten::mm [((8, 32), 'float'), ((16, 64), 'float')] "
                                   "[((8, 16), 'float'), ((16, 32), 'float')]"]


def test_a_measured_op_that_shrinks_or_whose_activations_grow_is_scaled() -> None:
    shrinking = _costs((900, 1_200), ratio=0.25)
    growth = op_growth(_op("aten::mm", (8, 16), (16, 32)), Doubled(), shrinking, measure=True)
    assert growth == Growth(0.25, 0, Tier.MEASURED) and growth.new_ns(800) == 200
    assert shrinking.measurer.seen[-1] == "ratio aten::mm emptied"  # what grows is weights, read from memory
    batch = _costs((4_300, 1_100), ratio=3.9)
    assert op_growth(_op("aten::mm", (8, 16), (16, 32)), Scaled(), batch, measure=True) == Growth(3.9, 0, Tier.MEASURED)
    # what grows is activations the op before has just written: measured hot
    assert batch.measurer.seen == ["ratio aten::mm hot"]


def test_without_a_measurement_a_multiply_grows_by_its_flops_and_other_ops_by_their_bytes() -> None:
    # [8, 16] x [16, 32] -> [8, 32] x [32, 64]: 8 x 64 x 32 over 8 x 32 x 16, four times the FLOPs
    assert op_growth(_op("aten::mm", (8, 16), (16, 32)), Doubled(), _costs(None), measure=True) == Growth(
        4.0, 0, Tier.MODELLED)
    # not measuring, the same
    assert op_growth(_op("aten::mm", (8, 16), (16, 32)), Doubled(), _costs((5, 1)), measure=False) == Growth(
        4.0, 0, Tier.MODELLED)
    # an elementwise op reads twice the bytes
    assert op_growth(_op("aten::relu", (4, 100)), Doubled(), _costs(None), measure=True) == Growth(
        2.0, 0, Tier.MODELLED)


def test_an_op_whose_inputs_do_not_change_takes_what_the_scaling_says() -> None:
    assert op_growth(_op("aten::relu", (4, 100)), Untouched(), _costs(None), measure=True) == Growth(
        2.0, 0, Tier.RATIO)
