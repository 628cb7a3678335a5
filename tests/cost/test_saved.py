"""The tensors autograd saves for backward under each host op (cost/saved.py): the table against torch's own count,
a hand-made op tree, and a recorded trace against the saved-tensor hooks of the same run."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.cost.saved import saved_per_op, saved_tensors_of, saves_result
from daydream.mapping.opening import open_trace
from daydream.trace import EventKind, discover
from tests.builders import op, write_trace
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))

import saved_tensors  # noqa: E402  (scripts/saved_tensors.py)


def _torch() -> None:
    if os.environ.get("CI") == "true":
        import torch  # noqa: F401  (in CI the test extras install torch; its absence is a failure)
    else:
        pytest.importorskip("torch")


def test_the_table_is_what_torch_saves_for_each_op() -> None:
    _torch()
    # the shipped file is the script's output (torch's formulas and hooks), and the ops the script can call save, under
    # checkpoint's own kind of hooks, what the file says
    table = saved_tensors.table()
    assert saved_per_op() == table["tensors"] and saves_result() == frozenset(table["results"])
    counted = {name: saved_tensors.count(call) for name, call in saved_tensors.calls().items()}
    assert counted == {name: saved_per_op()[name] for name in counted}
    # the formulas alone agree with the hooks on nearly every op both know (they differ where the usual call leaves
    # an optional input out, or picks another overload)
    formulas = saved_tensors.from_formulas()
    both = [name for name in counted if name in formulas]
    assert len(both) > 50 and sum(formulas[name] != counted[name] for name in both) <= 3
    # what torch's formulas say of a few ops, by hand: a multiply saves its inputs, an activation or a normalization its
    # result (softmax's output, layer norm's mean and deviation), in-place forms as the op
    assert {"aten::mm", "aten::addmm", "aten::convolution", "aten::mul", "aten::silu"}.isdisjoint(saves_result())
    assert {"aten::relu", "aten::tanh", "aten::tanh_", "aten::_softmax", "aten::native_layer_norm",
            "aten::native_batch_norm"} <= saves_result()


def _op(name: str, ts: int, dur: int, sequence: int | None = 1) -> dict:
    return op(name, ts, dur, ext=ts, **({} if sequence is None else {"Sequence number": sequence}))


def test_an_op_tree_counts_the_outermost_listed_ops_under_each_row(tmp_path: Path) -> None:
    # linear (listed: torch 2.13 gives it a formula of its own, 2) -> t and addmm, which run below it, as does addmm's
    # copy_;
    # tanh (1) on its own; a custom leaf the table does not know; a tanh under no_grad (no sequence number) saves
    # nothing; layer_norm (composite) -> native_layer_norm (5).
    events = [_op("aten::linear", 0, 50), _op("aten::t", 2, 5), _op("aten::addmm", 10, 30),
              _op("aten::copy_", 15, 5, None),
              _op("aten::tanh", 60, 10),
              _op("my::mystery", 80, 10),
              _op("aten::tanh", 100, 10, None),
              _op("aten::layer_norm", 120, 40), _op("aten::native_layer_norm", 125, 30)]
    trace = open_trace(discover(write_trace(tmp_path, events))[0], cache=False)
    names = [trace.name_of(r) for r in range(len(trace))]
    top = np.array([names.index("aten::linear"), names.index("aten::tanh"), names.index("my::mystery"),
                    [r for r in range(len(trace)) if names[r] == "aten::tanh"][1], names.index("aten::layer_norm")])
    found = saved_tensors_of(trace, top)
    assert found.tensors.tolist() == [2, 1, 0, 0, 5]
    assert found.unknown.tolist() == [0, 0, 1, 0, 0]
    # the last pack, of every saving op autograd recorded however deep: under linear, addmm saves its inputs before it
    # runs (its start, 10); tanh its result, after (its end, 70); native_layer_norm its mean and deviation (its end,
    # 155); none where nothing is saved
    assert saved_per_op()["aten::linear"] == 2 and "aten::linear" not in saves_result()
    assert found.last_pack_ns.tolist() == [10_000, 70_000, -1, -1, 155_000]
    # autograd recorded some op under each, but for the tanh run under no_grad
    assert found.recorded.tolist() == [True, True, True, False, True]


def test_a_recorded_block_saves_what_the_hooks_of_the_same_run_count(tmp_path: Path) -> None:
    _torch()
    import torch

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 8),
                                torch.nn.GELU(), torch.nn.Sigmoid())
    x = torch.randn(4, 8, requires_grad=True)
    packed = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed[0] += 1
        return tensor

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            block(x)
        with torch.no_grad():  # saves nothing
            block(x)
    path = tmp_path / "block.json"
    profile.export_chrome_trace(str(path))
    trace = open_trace(discover(path)[0], cache=False)
    ops = trace.indices(EventKind.CPU_OP)
    names = np.array([trace.name_of(r) for r in ops])
    top = ops[np.isin(names, ["aten::linear", "aten::tanh", "aten::layer_norm", "aten::gelu", "aten::sigmoid"])]
    found = saved_tensors_of(trace, top)
    assert packed[0] > 0 and found.unknown.sum() == 0
    assert int(found.tensors.sum()) == packed[0]


def test_a_checkpointed_call_is_recomputed_up_to_its_last_pack(tmp_path: Path) -> None:
    # torch.utils.checkpoint (use_reentrant=False) stops recomputing a call once the last tensor it saved is packed
    # again: the last op a block's ops are predicted to recompute is the one before its last pack, against what the
    # checkpointed run of the same block really ran again (counted from its own trace).
    _torch()
    import torch
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    first, second = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def block(x: torch.Tensor) -> torch.Tensor:
        return second(torch.tanh(first(x))) + 1.0  # tanh saves its result; the second linear its inputs; add nothing

    x = torch.randn(4, 8, requires_grad=True)
    traces = {}
    for name, run in (("plain", block), ("checkpointed", lambda x: checkpoint(block, x, use_reentrant=False))):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
            run(x).sum().backward()
        path = tmp_path / f"{name}.json"
        profile.export_chrome_trace(str(path))
        traces[name] = open_trace(discover(path)[0], cache=False)
    plain = traces["plain"]
    ops = plain.indices(EventKind.CPU_OP)
    names = [plain.name_of(r) for r in ops]
    forward = ops[[names.index(n) for n in ("aten::linear", "aten::tanh")]
                  + [len(names) - 1 - names[::-1].index("aten::linear"), names.index("aten::add")]]
    assert [plain.name_of(r) for r in forward] == ["aten::linear", "aten::tanh", "aten::linear", "aten::add"]
    stop = saved_tensors_of(plain, forward).last_pack_ns.max()
    again = [plain.name_of(r) for r in forward if plain.ts_ns[r] < stop]
    assert again == ["aten::linear", "aten::tanh", "aten::linear"]  # the add never runs again
    # the second linear runs up to its multiply's start, where the multiply packs its inputs
    second = forward[2]
    multiplies = [r for r in ops if plain.name_of(r) == "aten::addmm" and plain.ts_ns[second] <= plain.ts_ns[r] < plain.end_ns[second]]
    assert len(multiplies) == 1 and stop == plain.ts_ns[multiplies[0]] < plain.end_ns[second]

    def count(trace: Any, name: str, allocating: bool = False) -> int:
        """The ops called `name` (with `allocating`: those that allocated memory for a result)."""
        rows = [r for r in trace.indices(EventKind.CPU_OP) if trace.name_of(r) == name]
        if not allocating:
            return len(rows)
        allocations = trace.indices(EventKind.MEMORY)
        allocations = allocations[trace.bytes[allocations] > 0]
        return sum(bool(((trace.ts_ns[allocations] >= trace.ts_ns[r]) & (trace.ts_ns[allocations] <= trace.end_ns[r])).any())
                   for r in rows)

    checkpointed = traces["checkpointed"]
    # tanh ran twice, the add once; the second linear's addmm was entered again, but only the first linear's made a
    # result (the second stopped at its pack, before its kernel)
    assert (count(plain, "aten::tanh"), count(checkpointed, "aten::tanh")) == (1, 2)
    assert (count(plain, "aten::add"), count(checkpointed, "aten::add")) == (1, 1)
    assert (count(plain, "aten::addmm"), count(checkpointed, "aten::addmm")) == (2, 4)
    assert (count(plain, "aten::addmm", allocating=True), count(checkpointed, "aten::addmm", allocating=True)) == (2, 3)
