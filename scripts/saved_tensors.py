"""The tensors autograd saves for backward in each op, and which ops save a result: daydream/data/saved_tensors.json,
from torch's own definitions.

    python scripts/saved_tensors.py             # writes daydream/data/saved_tensors.json
    python scripts/saved_tensors.py --out -     # prints it

Two sources, both of the torch installed here:

- every op with a derivative formula of its own (torch's derivatives.yaml, read with the torchgen that ships with
  torch): the tensors its formula saves, inputs and outputs (an optional tensor counted as given; of an op's
  overloads the default one, else `.Tensor`, else the one that saves fewest); its in-place form (`aten::tanh_`)
  saves as the op does;
- the ops this script calls (`calls()`: through `torch.ops.aten` on small float inputs that all require grad, as
  activations and weights do in training), counted by `torch.autograd.graph.saved_tensors_hooks`, the hooks
  `torch.utils.checkpoint` (use_reentrant=False) installs: their counts replace the formulas' (they settle the
  overload and the optional inputs of the usual call) and add the common ops that save nothing and have no formula
  (`aten::empty`, `aten::zeros`...).

Which ops save one of their results (`results`: a softmax its output, a layer norm its mean and deviation): their
formula names an output among what it saves. Autograd saves an op's inputs before the op runs and its results after,
so checkpointing's recomputation, which stops at the last tensor a call saved (torch.utils.checkpoint's early stop),
stops before the kernel of an op that saves only inputs (a matrix multiply) and after that of one that saves a result
(daydream/cost/saved.py).

Composite ops (`aten::linear`, `aten::conv2d`, `aten::layer_norm`, `aten::gru`...) have no entry: they save nothing
themselves, their recorded children do (daydream/cost/saved.py). tests/cost/test_saved.py holds the file to this
script's output and the called ops to the hooks.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _generated import write_or_print  # noqa: E402

OUT = REPO / "daydream" / "data" / "saved_tensors.json"
#: A saved variable of one of these C++ types is a tensor (or tensors) the hooks see; others (sizes, scalar types,
#: options, scalars) are not.
_TENSOR_TYPE = re.compile(r"name='(Tensor|TensorList|ITensorListRef|IOptTensorListRef)'")
#: Overloads taken first, in this order, where an op has several.
_PREFERRED_OVERLOADS = ("", "Tensor")


def calls() -> dict[str, Callable[[], Any]]:
    """Op name -> a call of it on small inputs that require grad."""
    import torch

    aten = torch.ops.aten

    def t(*shape: int, grad: bool = True) -> torch.Tensor:
        return torch.randn(*shape).requires_grad_(grad)

    def inner(*shape: int) -> torch.Tensor:  # a non-leaf that requires grad, for in-place ops
        return t(*shape) * 1.0

    def positive(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape) + 0.5).requires_grad_()

    def unary(name: str, argument: Callable[[int], torch.Tensor]) -> Callable[[], Any]:
        return lambda: getattr(aten, name)(argument(4))

    index = torch.tensor([0, 2, 1])
    mask = torch.tensor([True, False, True, False])
    found: dict[str, Callable[[], Any]] = {}
    for names, argument in ((("tanh", "sigmoid", "relu", "gelu", "silu", "hardtanh", "elu", "exp", "abs", "neg"), t),
                            (("tanh_", "sigmoid_", "relu_"), inner), (("log", "sqrt", "rsqrt"), positive)):
        found.update({f"aten::{name}": unary(name, argument) for name in names})
    return found | {
        "aten::addmm": lambda: aten.addmm(t(4), t(3, 5), t(5, 4)),
        "aten::mm": lambda: aten.mm(t(3, 5), t(5, 4)),
        "aten::bmm": lambda: aten.bmm(t(2, 3, 5), t(2, 5, 4)),
        "aten::baddbmm": lambda: aten.baddbmm(t(2, 3, 4), t(2, 3, 5), t(2, 5, 4)),
        "aten::addbmm": lambda: aten.addbmm(t(3, 4), t(2, 3, 5), t(2, 5, 4)),
        "aten::convolution": lambda: aten.convolution(t(1, 2, 6, 6), t(3, 2, 3, 3), t(3), [1, 1], [0, 0], [1, 1],
                                                      False, [0, 0], 1),
        "aten::threshold": lambda: aten.threshold(t(4), 0.0, 0.0),
        "aten::leaky_relu": lambda: aten.leaky_relu(t(4), 0.01),
        "aten::pow": lambda: aten.pow(t(4), 2),
        "aten::clamp": lambda: aten.clamp(t(4), -0.5, 0.5),
        "aten::clamp_min": lambda: aten.clamp_min(t(4), 0.0),
        "aten::_softmax": lambda: aten._softmax(t(2, 4), -1, False),
        "aten::_log_softmax": lambda: aten._log_softmax(t(2, 4), -1, False),
        "aten::native_layer_norm": lambda: aten.native_layer_norm(t(2, 4), [4], t(4), t(4), 1e-5),
        "aten::native_batch_norm": lambda: aten.native_batch_norm(t(2, 3, 4), t(3), t(3), torch.zeros(3),
                                                                  torch.ones(3), True, 0.1, 1e-5),
        "aten::_native_batch_norm_legit": lambda: aten._native_batch_norm_legit(t(2, 3, 4), t(3), t(3), torch.zeros(3),
                                                                                torch.ones(3), True, 0.1, 1e-5),
        "aten::native_dropout": lambda: aten.native_dropout(t(4), 0.5, True),
        "aten::embedding": lambda: aten.embedding(t(5, 3), index),
        "aten::mul": lambda: aten.mul(t(4), t(4)),
        "aten::div": lambda: aten.div(t(4), t(4)),
        "aten::add": lambda: aten.add(t(4), t(4)),
        "aten::sub": lambda: aten.sub(t(4), t(4)),
        "aten::add_": lambda: aten.add_(inner(4), t(4)),
        "aten::mul_": lambda: aten.mul_(inner(4), t(4)),
        "aten::sum": lambda: aten.sum(t(4)),
        "aten::mean": lambda: aten.mean(t(4)),
        "aten::cat": lambda: aten.cat([t(2), t(2)]),
        "aten::stack": lambda: aten.stack([t(2), t(2)]),
        "aten::unsafe_split": lambda: aten.unsafe_split(t(6), 2),
        "aten::unsafe_chunk": lambda: aten.unsafe_chunk(t(6), 3),
        "aten::clone": lambda: aten.clone(t(4)),
        "aten::copy_": lambda: aten.copy_(inner(4), t(4)),
        "aten::view": lambda: aten.view(t(4), [2, 2]),
        "aten::t": lambda: aten.t(t(2, 3)),
        "aten::transpose": lambda: aten.transpose(t(2, 3), 0, 1),
        "aten::permute": lambda: aten.permute(t(2, 3), [1, 0]),
        "aten::select": lambda: aten.select(t(2, 3), 0, 1),
        "aten::slice": lambda: aten.slice(t(4, 3), 0, 1, 3),
        "aten::expand": lambda: aten.expand(t(1, 3), [2, 3]),
        "aten::unsqueeze": lambda: aten.unsqueeze(t(3), 0),
        "aten::squeeze": lambda: aten.squeeze(t(1, 3)),
        "aten::reshape": lambda: aten.reshape(t(4), [2, 2]),
        "aten::_unsafe_view": lambda: aten._unsafe_view(t(4), [2, 2]),
        "aten::flatten": lambda: aten.flatten(t(2, 2)),
        "aten::split": lambda: aten.split(t(6), 2),
        "aten::chunk": lambda: aten.chunk(t(6), 3),
        "aten::empty": lambda: aten.empty([4]),
        "aten::empty_strided": lambda: aten.empty_strided([4], [1]),
        "aten::empty_like": lambda: aten.empty_like(t(4)),
        "aten::zeros": lambda: aten.zeros([4]),
        "aten::zeros_like": lambda: aten.zeros_like(t(4)),
        "aten::ones": lambda: aten.ones([4]),
        "aten::ones_like": lambda: aten.ones_like(t(4)),
        "aten::bernoulli_": lambda: aten.bernoulli_(inner(4), 0.5),
        "aten::zero_": lambda: aten.zero_(inner(4)),
        "aten::fill_": lambda: aten.fill_(inner(4), 1.0),
        "aten::as_strided": lambda: aten.as_strided(t(4), [2], [1]),
        "aten::as_strided_": lambda: aten.as_strided_(inner(4), [2], [1]),
        "aten::alias": lambda: aten.alias(t(4)),
        "aten::detach": lambda: aten.detach(t(4)),
        "aten::resolve_conj": lambda: aten.resolve_conj(t(4)),
        "aten::resolve_neg": lambda: aten.resolve_neg(t(4)),
        "aten::cudnn_is_acceptable": lambda: aten.cudnn_is_acceptable(t(4)),
        "aten::_to_copy": lambda: aten._to_copy(t(4), dtype=torch.float64),
        "aten::contiguous": lambda: aten.contiguous(t(2, 3).t()),
        "aten::gather": lambda: aten.gather(t(3, 3), 1, index.view(3, 1)),
        "aten::index_select": lambda: aten.index_select(t(3, 3), 0, index),
        "aten::masked_fill": lambda: aten.masked_fill(t(4), mask, 0.0),
        "aten::where": lambda: aten.where(mask, t(4), t(4)),
        "aten::max_pool2d_with_indices": lambda: aten.max_pool2d_with_indices(t(1, 1, 4, 4), [2, 2]),
        "aten::avg_pool2d": lambda: aten.avg_pool2d(t(1, 1, 4, 4), [2, 2]),
        "aten::_adaptive_avg_pool2d": lambda: aten._adaptive_avg_pool2d(t(1, 1, 4, 4), [1, 1]),
        "aten::mse_loss": lambda: aten.mse_loss(t(4), t(4, grad=False)),
        "aten::nll_loss_forward": lambda: aten.nll_loss_forward(t(3, 4), index, None, 1, -100),
        "aten::_scaled_dot_product_flash_attention_for_cpu": lambda: aten._scaled_dot_product_flash_attention_for_cpu(
            t(1, 2, 4, 8), t(1, 2, 4, 8), t(1, 2, 4, 8)),
    }


def count(call: Callable[[], Any]) -> int:
    """Tensors autograd packs for backward while `call` runs."""
    import torch

    packed = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed[0] += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        call()
    return packed[0]


def from_formulas() -> dict[str, int]:
    """Op name -> the tensors its derivative formula saves (torch's derivatives.yaml), in-place forms included."""
    return dict(_formulas()[0])


def results() -> list[str]:
    """The ops whose derivative formula saves one of their results, in-place forms included, sorted."""
    return list(_formulas()[1])


@functools.cache
def _formulas() -> tuple[dict[str, int], list[str]]:
    """(op name -> tensors its formula saves, the ops whose formula saves a result)."""
    import torchgen
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged")
    native = os.path.join(packaged, "ATen", "native")
    infos, _ = load_derivatives(os.path.join(packaged, "autograd", "derivatives.yaml"),
                                os.path.join(native, "native_functions.yaml"), os.path.join(native, "tags.yaml"))
    overloads: dict[str, dict[str, int]] = {}
    saving_results: dict[str, dict[str, bool]] = {}
    for by_key in infos.values():
        info = by_key.get("Default") or next(iter(by_key.values()))
        saved = [*info.all_saved_inputs, *info.all_saved_outputs]
        name = info.func.func.name
        overloads.setdefault(f"aten::{name.name}", {})[name.overload_name] = sum(
            1 for variable in saved if _TENSOR_TYPE.search(str(variable.nctype.type)))
        saving_results.setdefault(f"aten::{name.name}", {})[name.overload_name] = any(
            _TENSOR_TYPE.search(str(variable.nctype.type)) for variable in info.all_saved_outputs)
    table, result = {}, {}
    for op, counts in overloads.items():
        chosen = next((o for o in _PREFERRED_OVERLOADS if o in counts), min(counts, key=lambda o: (counts[o], o)))
        table[op], result[op] = counts[chosen], saving_results[op][chosen]
    import torch

    for op in list(table):  # the in-place forms torch has
        if hasattr(torch.ops.aten, f"{op.removeprefix('aten::')}_"):
            table.setdefault(f"{op}_", table[op])
            result.setdefault(f"{op}_", result[op])
    return table, sorted(op for op, saves in result.items() if saves)


def table() -> dict[str, Any]:
    """The file's table: "tensors", the formulas' counts, replaced and extended by the hooks' counts of the ops called
    here; "results", the ops whose formula saves a result."""
    found = from_formulas()
    found.update({name: count(call) for name, call in calls().items()})
    return {"tensors": dict(sorted(found.items())), "results": results()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUT), help="the JSON file to write, or - to print it")
    options = parser.parse_args()
    write_or_print(json.dumps(table(), indent=0) + "\n", options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
