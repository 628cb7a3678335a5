"""Autocast's casts on hand-made forwards: which ops get a cast, how many per forward, which come back in backward."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.api import open_job
from daydream.cli import main
from daydream.simulate.whatif import forward_ops_of
from daydream.trace import EventKind
from daydream.transforms.autocast import ForwardOp, autocast_view, enclosing_layers, plan, plan_casts
from tests.builders import bf16_lstm_runs_here, copies_per_step

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


def test_projections_of_one_fp32_tensor_each_cast_it() -> None:
    # attention's q, k and v (layers 1-3) read one fp32 tensor in turn: each casts it, as none reads the one before it
    qkv = [linear(1, 1, 8, 16, 16), linear(2, 2, 8, 16, 16), linear(3, 3, 8, 16, 16)]
    activations = [(c.row, c.backward) for c in plan_casts(qkv, "cuda") if not c.weight]
    assert activations == [(1, False), (2, False), (3, False)]  # the data's: no gradient back
    # a low-rank pair (16 -> 4 -> 16): the second reads the first's [8, 4] bf16 output, so casts only its weights
    pair = [linear(1, 1, 8, 16, 4), linear(2, 2, 8, 4, 16)]
    assert [c.row for c in plan_casts(pair, "cuda") if not c.weight] == [1]


def test_a_forward_after_a_backward_casts_the_weights_again() -> None:
    # two micro-batches' forwards in one step, each under its own autocast: each casts the weights and its data
    ops = [linear(1, 0, 8, 16, 16), linear(2, 0, 8, 16, 16)]
    ops[1] = replace(ops[1], region=1)
    casts = plan_casts(ops, "cuda")
    assert [(c.row, c.weight, c.backward) for c in casts] == [(1, False, False), (1, True, True), (1, True, True),
                                                             (2, False, False), (2, True, True), (2, True, True)]


def test_a_bf16_activation_times_an_fp32_parameter_is_fp32() -> None:
    # a layer scale (an [8] parameter times the linear's [4, 8] bf16 output) promotes: on the CPU the multiply copies
    # the bf16 input up, autograd casts its gradient back, and the multiply's backward copies it up again for the
    # scale's gradient; the residual add after it is of two fp32 tensors, and the next linear casts its input down
    scaled = [linear(1, 0, 4, 8, 8), ForwardOp(2, "aten::mul", 1, [((8,), F), ((4, 8), F)], broadcast=(0,)),
              ForwardOp(3, "aten::add", 1, [((4, 8), F), ((4, 8), F)]), linear(4, 2, 4, 8, 8)]
    casts, types = plan(scaled, "cpu")
    assert [(c.row, c.input, c.shape, c.forward, c.backward) for c in casts if c.row in (2, 3)] == \
        [(2, 1, (4, 8), True, True), (2, 1, (4, 8), False, True)]
    assert types[2] == types[3] == F and [c.row for c in casts if not c.weight] == [1, 2, 2, 4]
    # without the parameter (the same multiply by another bf16 activation of the layer), it stays bf16
    casts, types = plan([replace(op, broadcast=()) for op in scaled], "cpu")
    assert types[2] == "c10::BFloat16" and [c.row for c in casts if not c.weight] == [1]


def test_an_attention_mask_is_cast_at_every_call() -> None:
    # q, k and v from a linear (bf16 by then); the additive mask is made apart from them, fp32: autocast casts it down
    # at each call, and it requires no gradient
    q = ((2, 4, 6, 8), F)
    attention = ForwardOp(2, "aten::scaled_dot_product_attention", 1, [q, q, q, ((1, 1, 6, 6), F)])
    casts = plan_casts([linear(1, 0, 12, 8, 8), attention, replace(attention, row=3)], "cpu")
    assert [(c.row, c.input, c.shape, c.backward) for c in casts if c.row > 1] == \
        [(2, 3, (1, 1, 6, 6), False), (3, 3, (1, 1, 6, 6), False)]


def test_a_residual_add_promotes_to_fp32() -> None:
    # block (layer 7): layer_norm -> linear (bf16) -> add with the block's fp32 input -> layer_norm needs no cast
    ops = [ForwardOp(1, "aten::layer_norm", 7, [((4, 8), F)], layer_entry=True), linear(2, 8, 4, 8, 8),
           ForwardOp(3, "aten::add", 7, [((4, 8), "c10::BFloat16"), ((4, 8), F)]), unary(4, "aten::layer_norm", 9, (4, 8))]
    casts = plan_casts(ops, "cuda")
    # the linear's x, W, b; no cast op for the add, whose gradient autograd casts back to bf16 for its bf16 input
    assert [(c.row, c.forward, c.backward) for c in casts] == [(2, True, True)] * 3 + [(3, False, True)]
    assert (casts[-1].from_type, casts[-1].to_type, casts[-1].shape) == ("c10::BFloat16", F, (4, 8))


def test_a_cat_of_an_fp32_and_a_bf16_tensor_copies_the_bf16_one_up() -> None:
    # word embeddings (fp32) and a convolution's features (bf16) concatenated, as a tagger's encoder does: the profiler
    # records cat's list without types, so the tensor made just before it (the list's last) carries the reduced type;
    # a bf16 run of examples/own/gru_tagger.py copied its [32, 48, 64] features up in the cat, its gradient back
    enc = 1
    ops = [ForwardOp(1, "aten::embedding", enc, [((100, 8), F), ((4, 5), "long int")], layer_entry=True),
           ForwardOp(2, "aten::conv1d", 2, [((20, 8, 3), F), ((6, 8, 3), F), ((6,), F)], enclosing=(enc,)),
           ForwardOp(3, "aten::cat", enc, [None, None], listed=((4, 5, 8), (4, 5, 6))),
           linear(4, 3, 4, 14, 8)]
    casts, types = plan(ops, "cpu")
    cat = [(c.shape, c.from_type, c.forward, c.backward) for c in casts if c.row == 3]
    assert cat == [((4, 5, 6), "c10::BFloat16", True, True)] and types[3] == F
    # the linear after it gets an fp32 input again: x, W, b
    assert sum(c.row == 4 for c in casts) == 3


def test_a_block_begins_at_the_first_op_of_the_layers_it_holds() -> None:
    # A pre-norm block (nn.MultiheadAttention's, as a user writes it): its first op of its own is the residual add,
    # after its sublayers' ops; the add's other input is the block's fp32 input, so it runs in fp32.
    names = ["vit", "vit.blocks.0", "vit.blocks.0.norm1", "vit.blocks.0.attn", "vit.blocks.0.norm2"]
    enclosing = enclosing_layers(names)
    assert enclosing == [(), (0,), (0, 1), (0, 1), (0, 1)]

    def ops(held: list[tuple[int, ...]]) -> list[ForwardOp]:
        return [ForwardOp(1, "aten::layer_norm", 2, [((4, 8), F)], enclosing=held[2]),
                ForwardOp(2, "aten::linear", 3, [((4, 8), F), ((8, 8), F), ((8,), F)], enclosing=held[3]),
                ForwardOp(3, "aten::add", 1, [((4, 8), F), ((4, 8), F)], enclosing=held[1]),
                ForwardOp(4, "aten::layer_norm", 4, [((4, 8), F)], enclosing=held[4])]

    casts, types = plan(ops(enclosing), "cpu")
    assert types == {1: F, 2: "c10::BFloat16", 3: F, 4: F}
    # on the CPU the add copies its bf16 input up inside itself (TensorIterator), a cast op of its own
    assert [(c.row, c.forward) for c in casts] == [(2, True)] * 3 + [(3, True)]
    # without the layers that hold each op's, the block would seem to begin at the add, in bf16
    _, types = plan(ops([()] * len(names)), "cpu")
    assert types[3] == types[4] == "c10::BFloat16"


def test_a_post_norm_blocks_add_mixes_the_callers_fp32_input() -> None:
    # A post-norm encoder layer (layer 1) as the translation model writes it: its attention's output linear (layer 2),
    # then `AddNorm` (layer 3), whose first op is `x + update`: x is the encoder layer's own fp32 input, handed down,
    # while the activation is the linear's bf16 output. The add runs in fp32 (a real bf16 CPU run of
    # examples/suite/translation.py casts in each of its 10 such adds), and so does the layer norm after it.
    held = {1: (0,), 2: (0, 1), 3: (0, 1), 4: (0, 1, 3)}
    ops = [ForwardOp(1, "aten::linear", 2, [((4, 8), F), ((8, 8), F), ((8,), F)], enclosing=held[2]),
           ForwardOp(2, "aten::add", 3, [((4, 8), F), ((4, 8), F)], enclosing=held[3]),
           ForwardOp(3, "aten::layer_norm", 4, [((4, 8), F)], enclosing=held[4])]
    casts, types = plan(ops, "cpu")
    assert [(c.row, c.from_type) for c in casts if c.row == 2] == [(2, "c10::BFloat16")]
    assert types[2] == types[3] == F
    # a block whose first op is its own (a linear) keeps its entry type: the add later in it mixes nothing new
    ops = [ForwardOp(1, "aten::linear", 3, [((4, 8), F), ((8, 8), F), ((8,), F)], enclosing=held[3]),
           ForwardOp(2, "aten::add", 3, [((4, 8), F), ((4, 8), F)], enclosing=held[3])]
    casts, types = plan([ForwardOp(0, "aten::linear", 1, [((4, 8), F), ((8, 8), F), ((8,), F)], enclosing=(0,)), *ops],
                        "cpu")
    assert not [c for c in casts if c.row == 2] and types[2] == "c10::BFloat16"


def test_the_cpu_keeps_layer_norm_in_bf16() -> None:
    ops = [linear(1, 0, 4, 8, 8), unary(2, "aten::layer_norm", 1, (4, 8)), linear(3, 2, 4, 8, 8)]
    assert [c.row for c in plan_casts(ops, "cpu")] == [1, 1, 1, 3, 3]
    assert [c.row for c in plan_casts(ops, "cuda")] == [1, 1, 1, 2, 3, 3, 3]


def test_a_model_recorded_in_bf16_gets_no_casts() -> None:
    B = "c10::BFloat16"
    ops = [ForwardOp(1, "aten::linear", 0, [((4, 8), B), ((8, 8), B), ((8,), B)]),
           ForwardOp(2, "aten::linear", 1, [((4, 8), B), ((8, 8), B), ((8,), B)])]
    assert plan_casts(ops, "cuda") == []


def test_a_composite_ops_calls_go_through_autocast() -> None:
    # aten::gru is on no CPU autocast list: it falls through, and the aten::linear calls it makes are decided one by
    # one, each with its casts. As at::native's GRU cell calls them: the layer's input projected (a [5, 4, 8] sequence),
    # then per step the hidden linear, the gates (bf16), and the update mixing the fp32 state with them.
    def step(row: int) -> tuple[ForwardOp, ...]:
        gates = [ForwardOp(row + 1, "aten::add_", 0, [((4, 8), F), ((4, 8), F)]), unary(row + 2, "aten::sigmoid_", 0, (4, 8)),
                 unary(row + 3, "aten::tanh_", 0, (4, 8))]
        update = [ForwardOp(row + 4 + k, name, 0, [((4, 8), F), ((4, 8), F)])
                  for k, name in enumerate(("aten::sub", "aten::mul_", "aten::add_"))]
        return (linear(row, 0, 4, 8, 24), *gates, *update)

    cell = (ForwardOp(2, "aten::linear", 0, [((5, 4, 8), F), ((24, 8), F), ((24,), F)]), *step(10), *step(20))
    gru = ForwardOp(1, "aten::gru", 0, [((4, 5, 8), F)], inner=cell)
    view = autocast_view([gru], "cpu")
    assert [op.row for op in view] == [op.row for op in cell] and {op.within for op in view} == {"aten::gru"}
    casts = plan_casts(view, "cpu")
    B = "c10::BFloat16"
    # the projection: x (the data: no gradient back), W, b; the first step's linear: the fp32 state (made in the op:
    # no gradient back), its W and b; the second step's: the state only (W and b cast already); each update op copies
    # its gate up, the multiply's backward copies it up again
    update = [(14, B, True, True), (15, B, True, True), (15, F, False, True), (16, B, True, True)]
    assert [(c.row, c.from_type, c.forward, c.backward) for c in casts] == [
        (2, F, True, False), (2, F, True, True), (2, F, True, True),
        (10, F, True, False), (10, F, True, True), (10, F, True, True), *update,
        (20, F, True, True), *[(row + 10, *rest) for row, *rest in update]]
    _, types = plan(view, "cpu")
    assert types[13] == B and types[16] == types[26] == F  # the gates in bf16, the state in fp32
    # a GPU's kernels read a mixed input as they load it: the state is not followed there, no copies
    assert all(c.row in (2, 10, 20) for c in plan_casts(view, "cuda"))
    # a bf16 input (a linear before the GRU): the state is made like it, in bf16, and only the weights are cast
    before = ForwardOp(0, "aten::linear", 5, [((4, 5, 8), F), ((8, 8), F), ((8,), F)])
    casts = plan_casts([before, *view], "cpu")
    assert [(c.row, c.weight) for c in casts if c.row > 0] == [(2, True), (2, True), (10, True), (10, True)]
    # seen whole, as before: no op autocast decides, no cast
    assert plan_casts([gru], "cpu") == []


def test_a_listed_op_decides_for_what_it_calls() -> None:
    # aten::linear is on the list: the aten::addmm inside it runs below autocast, never decided again
    inner = (ForwardOp(2, "aten::addmm", 0, [((8,), F), ((4, 8), F), ((8, 8), F)]),)
    listed = ForwardOp(1, "aten::linear", 0, [((4, 8), F), ((8, 8), F), ((8,), F)], inner=inner)
    assert autocast_view([listed], "cpu") == [listed]
    # an op off the lists that calls nothing on them stays whole
    plain = ForwardOp(3, "aten::embedding", 1, [((10, 8), F)], inner=(unary(4, "aten::index_select", 1, (4, 8)),))
    assert autocast_view([plain], "cuda") == [plain]
    # and what a list names differs by device: aten::linalg_vecdot is decided on the CPU only
    vecdot = ForwardOp(6, "aten::linalg_vecdot", 2, [((4, 8), F), ((4, 8), F)])
    wrapper = ForwardOp(5, "aten::einsum", 2, [((4, 8), F)], inner=(vecdot,))
    assert autocast_view([wrapper], "cpu") == [replace(vecdot, within="aten::einsum")]
    assert autocast_view([wrapper], "cuda") == [wrapper]


GRU_SCRIPT = '''
import argparse, torch, torch.nn as nn
parser = argparse.ArgumentParser(); parser.add_argument("--steps", type=int, default=6)
steps = parser.parse_args().steps
torch.manual_seed(0)
emb, rnn, head = nn.Embedding(50, 16), nn.GRU(16, 16, num_layers=2, batch_first=True), nn.Linear(16, 50)
model = nn.ModuleDict({"emb": emb, "rnn": rnn, "head": head})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(steps):
    x = torch.randint(0, 50, (4, 6))
    out = head(rnn(emb(x))[0])
    nn.functional.cross_entropy(out.reshape(-1, 50), x.reshape(-1)).backward()
    opt.step(); opt.zero_grad()
'''


def test_a_recorded_gru_is_seen_through(tmp_path: Path) -> None:
    # A GRU's forward on the CPU runs aten::gru, which no CPU autocast list names; autocast decides on the aten::linear
    # calls inside it instead. The trace's own nesting says which those are: every aten::linear within an aten::gru's
    # span on its thread.
    if os.environ.get("CI") != "true":
        pytest.importorskip("torch")
    script, out = tmp_path / "gru.py", tmp_path / "gru.json.gz"
    script.write_text(GRU_SCRIPT)
    assert main(["trace", "--backend", "torch", "-o", str(out), str(script), "--", "--steps", "6"]) == 0
    trace = open_job(out).traces[0]
    facts, _ = forward_ops_of(trace)
    rows = trace.indices(EventKind.CPU_OP)
    names = np.array([trace.name_of(r) for r in rows])
    for ops in facts.values():
        grus = [op for op in ops if op.name == "aten::gru"]
        assert len(grus) == 1
        gru = grus[0]
        start, end = trace.ts_ns[gru.row], trace.end_ns[gru.row]
        track = trace.track[gru.row]
        inside = rows[(names == "aten::linear") & (trace.ts_ns[rows] >= start) & (trace.end_ns[rows] <= end)
                      & (trace.track[rows] == track)]
        assert inside.size > 0
        view = autocast_view(ops, "cpu")
        assert sorted(op.row for op in view if op.name == "aten::linear" and start <= trace.ts_ns[op.row] < end) \
            == sorted(inside.tolist())
        assert all(op.name != "aten::gru" for op in view)
        # the head's linear, outside the GRU, is there as before
        assert sum(op.name == "aten::linear" for op in view) == inside.size + 1


def to_float(row: int, layer: int, shape: tuple[int, ...], dtype: int = 6) -> ForwardOp:
    # `x.float()` as the trace records it: aten::to(self, dtype, non_blocking, copy, memory_format), dtype's code
    return ForwardOp(row, "aten::to", layer, [(shape, F), None, None, None, None],
                     arguments=[("tensor", shape, F, None), ("value", dtype), ("value", False), ("value", False), ("none",)])


def test_a_scripts_own_float_casts_a_reduced_activation_up() -> None:
    # actor linear (bf16) -> .float() between the modules -> critic linear: the critic's input is fp32 again
    ops = [linear(1, 0, 4, 8, 8), to_float(2, -1, (4, 8)), linear(3, 1, 4, 8, 8), to_float(4, -1, (4, 8)),
           to_float(5, -1, (4, 8))]
    casts, types = plan(ops, "cpu")
    # the first linear: x (the data: no gradient back), W, b; .float(): one cast up; the second linear: x, W, b; the
    # last .float() casts up, the one after it has nothing left to cast
    assert [(c.row, c.from_type, c.backward) for c in casts] == \
        [(1, F, False), (1, F, True), (1, F, True), (2, "c10::BFloat16", True), (3, F, True), (3, F, True), (3, F, True),
         (4, "c10::BFloat16", True)]
    assert types == {1: "c10::BFloat16", 2: F, 3: "c10::BFloat16", 4: F, 5: F}
    # .long() (int64's code, 4) is not a cast to fp32: the activation stays bf16 and the next linear casts only its weights
    ops = [linear(1, 0, 4, 8, 8), to_float(2, -1, (4, 8), dtype=4), linear(3, 1, 4, 8, 8)]
    assert [c.row for c in plan_casts(ops, "cpu")] == [1, 1, 1, 3, 3]


MODULES_BETWEEN_SCRIPT = '''
import argparse, torch, torch.nn as nn
parser = argparse.ArgumentParser(); parser.add_argument("--steps", type=int, default=6); parser.add_argument("--amp", action="store_true")
options = parser.parse_args()
torch.manual_seed(0)
actor = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
critic = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
gate = nn.Parameter(torch.ones(16))
opt = torch.optim.SGD([*actor.parameters(), *critic.parameters(), gate], lr=0.01)
x = torch.randn(8, 16)
for _ in range(options.steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.amp):
        h, loss = x, 0
        for _ in range(3):
            h = actor(h).float() * gate
            loss = loss + critic(h).float().square().mean()
    loss.backward()
    opt.step(); opt.zero_grad()
'''


def _fp32_trace_and_real_casts(folder: Path, script_text: str, bf16: bool = True) -> tuple[Any, float | None]:
    """A script (taking --steps and --amp) traced in fp32 and under bf16 autocast: the fp32 trace, and the casts per step
    the bf16 run added (its `aten::_to_copy` calls over the fp32 run's), counted from the files alone (None without
    `bf16`: the bf16 run not made)."""
    if os.environ.get("CI") != "true":
        pytest.importorskip("torch")
    script = folder / "script.py"
    script.write_text(script_text)
    runs = {}
    for name, extra in (("fp32", []), ("bf16", ["--amp"]))[:2 if bf16 else 1]:
        runs[name] = folder / f"{name}.json.gz"
        assert main(["trace", "--backend", "torch", "-o", str(runs[name]), str(script), "--", "--steps", "6", *extra]) == 0
    real = copies_per_step(runs["bf16"]) - copies_per_step(runs["fp32"]) if bf16 else None
    return open_job(runs["fp32"]).traces[0], real


def _planned_on_the_cpu(trace: Any) -> tuple[dict[int, list[ForwardOp]], list[list[Any]], float]:
    """The trace's forward ops per iteration (the ops between the modules' calls included, as amp sees them), the casts
    planned for each on the CPU, and their count (forward casts and gradients cast back) per iteration."""
    facts, _ = forward_ops_of(trace, between=True)
    per_step = [plan_casts(autocast_view(ops, "cpu"), "cpu") for ops in facts.values()]
    return facts, per_step, sum(sum(c.forward + c.backward for c in casts) for casts in per_step) / len(per_step)


def test_casts_between_the_models_calls_match_a_real_bf16_run(tmp_path: Path) -> None:
    # Two modules called in turn, three times a step, with the script's own .float() and an fp32 gate between them:
    # every call casts its input down, every .float() casts up, each weight once a step. Planned from the fp32 trace,
    # against the aten::_to_copy calls the real bf16 run added (forward casts and autograd's casts back).
    trace, real = _fp32_trace_and_real_casts(tmp_path, MODULES_BETWEEN_SCRIPT)
    planned = {}
    for between in (False, True):
        facts, _ = forward_ops_of(trace, between=between)
        per_step = [plan_casts(ops, "cpu") for ops in facts.values()]
        planned[between] = sum(sum(c.forward + c.backward for c in casts) for casts in per_step) / len(per_step)
    # 8 weights (and their gradients' casts back); 3 calls of each module, each casting its input; 6 .float(); every
    # activation's cast but the data's comes back in backward
    assert real == 8 * 2 + 12 * 2 - 1
    assert planned[True] == real
    assert planned[False] < real  # inside the modules alone, the .float() calls and the casts after them are not seen


ATTENTION_SCRIPT = '''
import argparse, torch, torch.nn as nn
parser = argparse.ArgumentParser(); parser.add_argument("--steps", type=int, default=6); parser.add_argument("--amp", action="store_true")
options = parser.parse_args()
torch.manual_seed(0)
model = nn.ModuleDict({"norm": nn.LayerNorm(16), "q": nn.Linear(16, 16), "k": nn.Linear(16, 16), "v": nn.Linear(16, 16),
                       "out": nn.Linear(16, 16), "critic": nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))})
scale = nn.Parameter(torch.full((16,), 0.1))
opt = torch.optim.SGD([*model.parameters(), scale], lr=0.01)
x = torch.randn(8, 16)
for _ in range(options.steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.amp):
        h = model["norm"](x)
        q, k, v = model["q"](h), model["k"](h), model["v"](h)
        y = h + scale * model["out"](torch.softmax(q @ k.T, dim=-1) @ v)
        loss = model["critic"](y).float().mean()
    loss.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.amp):
        loss = model["critic"](x).float().mean()
    loss.backward()
    opt.step(); opt.zero_grad()
'''


def test_projections_a_layer_scale_and_a_second_forward_match_a_real_bf16_run(tmp_path: Path) -> None:
    # q, k and v of one fp32 tensor, a layer scale (an fp32 parameter times a bf16 activation), and a second forward
    # and backward before the optimizer's step (another micro-batch), each under its own autocast. Planned from the
    # fp32 trace, against the aten::_to_copy calls the real bf16 run added.
    trace, real = _fp32_trace_and_real_casts(tmp_path, ATTENTION_SCRIPT)
    facts, per_step, planned = _planned_on_the_cpu(trace)
    # the first forward: 12 weights and their gradients back (24); q, k and v each cast the norm's fp32 output, the
    # critic the fp32 sum (4, each with its gradient back: 8); the scale's multiply copies the bf16 input up, and in
    # backward its gradient is cast back and the input copied up again (3); .float() and its gradient (2). The second:
    # the critic's 4 weights again (8), the data cast (no gradient back) and .float() with its gradient (3).
    assert real == 24 + 8 + 3 + 2 + 8 + 3
    assert planned == real
    for ops in facts.values():
        linears = [op for op in ops if op.name == "aten::linear"]
        assert [op.region for op in linears] == [0] * 6 + [1] * 2


LSTM_SCRIPT = '''
import argparse, torch, torch.nn as nn
parser = argparse.ArgumentParser(); parser.add_argument("--steps", type=int, default=6); parser.add_argument("--amp", action="store_true")
options = parser.parse_args()
torch.manual_seed(0)
emb, first, second, head = nn.Embedding(50, 16), nn.LSTM(16, 16), nn.LSTM(16, 16), nn.Linear(16, 50)
model = nn.ModuleDict({"emb": emb, "first": first, "second": second, "head": head})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randint(0, 50, (6, 4))
for _ in range(options.steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.amp):
        out = head(second(first(emb(x))[0])[0])
        loss = nn.functional.cross_entropy(out.reshape(-1, 50), x.reshape(-1))
    loss.backward()
    opt.step(); opt.zero_grad()
'''


def test_an_lstm_layer_runs_in_bf16_on_the_cpu_with_the_casts_a_real_run_makes(tmp_path: Path) -> None:
    # nn.LSTM on the CPU runs aten::lstm, which calls aten::mkldnn_rnn_layer: CPU autocast runs that in bf16 (its
    # weights, biases, input and, where the input was fp32, the zero state nn.LSTM made are cast down; only the input's
    # and the parameters' gradients come back). Planned from the fp32 trace, against the aten::_to_copy calls the real
    # bf16 run added.
    if os.environ.get("CI") != "true":
        pytest.importorskip("torch")
    real_run = bf16_lstm_runs_here()
    trace, real = _fp32_trace_and_real_casts(tmp_path, LSTM_SCRIPT, bf16=real_run)
    facts, per_step, planned = _planned_on_the_cpu(trace)  # the loss is outside the modules, as amp sees it
    for ops, casts in zip(facts.values(), per_step):
        rnn = [op.row for op in autocast_view(ops, "cpu") if op.name == "aten::mkldnn_rnn_layer"]
        assert len(rnn) == 2
        assert [sum(c.forward for c in casts if c.row == row) for row in rnn] == [7, 4]
        assert [sum(c.backward and not c.forward for c in casts if c.row == row) for row in rnn] == [5, 5]
    # the first layer: input, 4 parameters, h and c down (7); in backward oneDNN gives the input's and the parameters'
    # gradients in fp32, which the engine casts to bf16 (5), and the casts' own nodes take them back up (5). The
    # second: its 4 parameters (its input and zero state are bf16 already), 5 gradients cast by the engine, 4 back up.
    # The head: weight and bias (2 + 2); the loss's input up, its gradient back (1 + 1).
    assert planned == (7 + 5 + 5) + (4 + 5 + 4) + 4 + 2
    if real_run:  # oneDNN's bf16 LSTM needs AVX-512 (on an AVX2 CPU it fails to build its primitive)
        assert real == planned


GRU_AMP_SCRIPT = '''
import argparse, torch, torch.nn as nn
parser = argparse.ArgumentParser(); parser.add_argument("--steps", type=int, default=6); parser.add_argument("--amp", action="store_true")
options = parser.parse_args()
torch.manual_seed(0)
emb, rnn, head = nn.Embedding(50, 16), nn.GRU(16, 16, num_layers=2, batch_first=True), nn.Linear(16, 50)
model = nn.ModuleDict({"emb": emb, "rnn": rnn, "head": head})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randint(0, 50, (4, 5))
for _ in range(options.steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.amp):
        out = head(rnn(emb(x))[0])
        loss = nn.functional.cross_entropy(out.reshape(-1, 50), x.reshape(-1))
    loss.backward()
    opt.step(); opt.zero_grad()
'''


def test_a_gru_keeps_its_state_in_fp32_on_the_cpu_with_the_casts_a_real_run_makes(tmp_path: Path) -> None:
    # nn.GRU on the CPU runs its cells as ATen ops inside aten::gru; under autocast each step's hidden linear runs in bf16
    # but the state stays fp32 (the first is made in fp32, and the update mixes it with the gates). Each step casts the
    # state down for its linear, and its update's sub, mul_ and add_ copy a bf16 gate up inside themselves (the CPU's
    # TensorIterator). Planned from the fp32 trace, against the aten::_to_copy calls the real bf16 run added.
    trace, real = _fp32_trace_and_real_casts(tmp_path, GRU_AMP_SCRIPT)
    facts, per_step, planned = _planned_on_the_cpu(trace)
    for ops, casts in zip(facts.values(), per_step):
        view = autocast_view(ops, "cpu")
        updates = [op.row for op in view if op.within == "aten::gru" and op.name in ("aten::sub", "aten::mul_", "aten::add_")]
        cast_up = [c.row for c in casts if c.from_type == "c10::BFloat16" and c.forward and c.row in updates]
        # two layers of five steps: one sub, one mul_ and one add_ of the update per step, each copying its gate up
        assert len(cast_up) == 2 * 5 * 3
    assert planned == real
    # a GPU's kernels read a mixed input as they load it: no copies in the update there
    for ops in facts.values():
        view = autocast_view(ops, "cuda")
        updates = {op.row for op in view if op.within == "aten::gru" and op.name in ("aten::sub", "aten::mul_", "aten::add_")}
        assert updates and not any(c.forward and c.row in updates for c in plan_casts(view, "cuda"))


def test_each_forward_after_a_backward_is_a_region_of_its_own(tmp_path: Path) -> None:
    # Two made-up iterations, each two micro-batches (a forward, a loss op of no layer, a backward) and a loss op after
    # the last backward. By hand: the loss ops right after a forward run in a forward region, the one after the last
    # backward does not; the second forward of each iteration is its region 1, and each iteration starts at 0.
    from daydream.mapping import attribute, find_iterations
    from daydream.simulate.whatif import iteration_of_row
    from daydream.transforms.amp import forward_regions
    from tests.builders import annotation, op, write_trace

    events, ext, names = [], 0, []
    for iteration in range(2):
        base = iteration * 1000.0
        events.append(annotation(f"ProfilerStep#{iteration + 1}", base, 900))
        for micro in range(2):
            at = base + micro * 400
            events += [annotation("daydream.phase::forward", at, 100), annotation("daydream.phase::backward", at + 200, 100)]
            for name, ts in ((f"aten::mm#{micro}", at + 10), (f"aten::mse_loss#{micro}", at + 150),
                             (f"aten::mm_backward#{micro}", at + 210)):
                ext += 1
                events.append(op(name.split("#")[0], ts, 20, ext=ext))
                names.append((iteration, name))
        ext += 1
        events.append(op("aten::mean", base + 850, 20, ext=ext))
        names.append((iteration, "after"))
    trace = open_job(write_trace(tmp_path, events)).traces[0]
    attribution = attribute(trace)
    rows = trace.indices(EventKind.CPU_OP)
    rows = rows[np.argsort(trace.ts_ns[rows], kind="stable")]
    inside, region = forward_regions(trace, rows, attribution.phase, iteration_of_row(trace, find_iterations(trace)))
    assert len(rows) == len(names) == 14
    got = {(iteration, name): (bool(i), int(r)) for (iteration, name), i, r in zip(names, inside, region)}
    for iteration in range(2):
        assert got[(iteration, "aten::mm#0")] == (True, 0) and got[(iteration, "aten::mm#1")] == (True, 1)
        assert got[(iteration, "aten::mse_loss#0")][0] and got[(iteration, "aten::mse_loss#1")][0]
        assert not got[(iteration, "aten::mm_backward#0")][0] and not got[(iteration, "after")][0]
