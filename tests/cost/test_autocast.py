"""Autocast's casts on hand-made forwards: which ops get a cast, how many per forward, which come back in backward."""

from __future__ import annotations

from daydream.transforms.autocast import ForwardOp, plan_casts

F = "float"


def linear(row: int, layer: int, batch: int, width_in: int, width_out: int) -> ForwardOp:
    return ForwardOp(row, "aten::linear", layer, [((batch, width_in), F), ((width_out, width_in), F), ((width_out,), F)])


def unary(row: int, name: str, layer: int, shape: tuple[int, ...]) -> ForwardOp:
    return ForwardOp(row, name, layer, [(shape, F)])


def test_an_mlp_block_chain() -> None:
    # embed linear -> (linear -> layer_norm -> relu) x 2 -> head linear -> cross entropy
    ops = [linear(1, 0, 64, 256, 512)]
    row = 2
    for layer in (1, 2):
        ops += [linear(row, layer * 10, 64, 512, 512), unary(row + 1, "aten::layer_norm", layer * 10 + 1, (64, 512)),
                unary(row + 2, "aten::relu", layer * 10 + 2, (64, 512))]
        row += 3
    ops += [linear(row, 30, 64, 512, 10), ForwardOp(row + 1, "aten::cross_entropy_loss", 31, [((64, 10), F), ((64,), "long int")])]
    casts = plan_casts(ops, "cuda")
    by_row: dict[int, int] = {}
    for cast in casts:
        by_row[cast.row] = by_row.get(cast.row, 0) + 1
    # embed: x, W, b; the first block's linear: W, b only (its input is the embed's bf16 output); layer_norm casts its
    # bf16 input up; the second block's linear gets relu's fp32 output: x, W, b; the head: x, W, b; the loss casts up.
    assert by_row == {1: 3, 2: 2, 3: 1, 5: 3, 6: 1, 8: 3, 9: 1}
    assert len(casts) == 14
    # Every cast but the data's comes back in backward.
    assert [c.row for c in casts if not c.backward] == [1]
    assert sum(c.weight for c in casts) == 8


def test_a_weight_used_twice_is_cast_once_per_forward() -> None:
    shared = [linear(1, 5, 8, 16, 16), linear(2, 5, 8, 16, 16)]
    casts = plan_casts(shared, "cuda")
    assert sum(c.weight for c in casts) == 2  # W and b once; the second call's input is already bf16
    assert len(casts) == 3


def test_a_residual_add_promotes_to_fp32() -> None:
    # block (layer 7): layer_norm -> linear (bf16) -> add with the block's fp32 input -> layer_norm needs no cast
    ops = [ForwardOp(1, "aten::layer_norm", 7, [((4, 8), F)], layer_entry=True), linear(2, 8, 4, 8, 8),
           ForwardOp(3, "aten::add", 7, [((4, 8), "c10::BFloat16"), ((4, 8), F)]), unary(4, "aten::layer_norm", 9, (4, 8))]
    casts = plan_casts(ops, "cuda")
    assert [c.row for c in casts] == [2, 2, 2]


def test_the_cpu_keeps_layer_norm_in_bf16() -> None:
    ops = [linear(1, 0, 4, 8, 8), unary(2, "aten::layer_norm", 1, (4, 8)), linear(3, 2, 4, 8, 8)]
    assert [c.row for c in plan_casts(ops, "cpu")] == [1, 1, 1, 3, 3]
    assert [c.row for c in plan_casts(ops, "cuda")] == [1, 1, 1, 2, 3, 3, 3]


def test_a_model_recorded_in_bf16_gets_no_casts() -> None:
    B = "c10::BFloat16"
    ops = [ForwardOp(1, "aten::linear", 0, [((4, 8), B), ((8, 8), B), ((8,), B)]),
           ForwardOp(2, "aten::linear", 1, [((4, 8), B), ((8, 8), B), ((8,), B)])]
    assert plan_casts(ops, "cuda") == []
