"""What torch.compile (inductor) makes of recorded CPU ops: the work it
leaves to ATen and the work it fuses.

Inside a compiled region inductor calls a few ops as they are (*extern* ops: matrix multiplies,
convolutions, CPU flash attention) and turns everything else between two of them into fused C++
loops. Its recorded runs show it: in torch 2.13 CPU runs of the examples and the suite
(examples/training.py --compile), the only ops under a `## Call CompiledFxGraph` frame are those of
`EXTERN_OPS`, and the convolutions' tensors are channels-last.

Each top-level op of the eager trace is read the way the compiler sees it: a sequence of *units*,
each an extern op or a fusible op (whose recorded time is its dispatch and its own passes over
memory, which the fused loop replaces).

    view = compiler_view(trace, rows)  # .units: top-level row -> [Unit, ...] in program order
    fused_runs(units)                  # the runs of fusible units between externs
    channels_last(arguments)           # a convolution's recorded arguments, images channels-last
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.cost.shapes import OpShapes
from daydream.mapping.linking import innermost_enclosing
from daydream.trace import EventKind, Trace

#: The ops inductor calls as they are on a CPU (extern kernels and
#: fallbacks): the ops seen directly under `## Call CompiledFxGraph` in
#: torch 2.13 CPU runs, and their relatives that lower to the same calls.
EXTERN_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution",
    "aten::_convolution", "aten::mkldnn_convolution", "aten::convolution_backward",
    "aten::convolution_overrideable", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_efficient_attention", "aten::mkldnn_rnn_layer",
    "aten::mkldnn_rnn_layer_backward", "aten::_embedding_bag", "aten::_embedding_bag_backward",
    "aten::sort", "aten::topk", "aten::nonzero",
})
#: Ops that move no data (views, metadata, allocation): free inside a compiled region.
FREE_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::t", "aten::transpose", "aten::reshape",
    "aten::expand", "aten::as_strided", "aten::permute", "aten::select", "aten::slice",
    "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias", "aten::empty",
    "aten::empty_strided", "aten::empty_like", "aten::resolve_conj", "aten::resolve_neg",
    "aten::resize_", "aten::as_strided_", "aten::_reshape_alias", "aten::flatten",
    "aten::unflatten", "aten::split", "aten::chunk", "aten::unbind", "aten::narrow",
    "aten::view_as", "aten::expand_as", "aten::contiguous", "aten::lift_fresh", "aten::numel",
    "aten::size", "aten::stride", "aten::is_nonzero", "aten::_has_compatible_shallow_copy_type",
    "detach", "detach_", "aten::detach_",
})
#: The fused loops' time over the recorded time of the ops they replace, the median over the forward
#: and backward phases of the compiled models in `python scripts/compile_costs.py DIR` (torch 2.13
#: CPU runs, one thread; the calibration rounds of docs/validation-compile-cpu.md).
FUSED_SHARE = 0.94
#: Recurrent layers: torch.compile decomposes them into per-step cell
#: ops, whose time an eager trace does not show.
RECURRENT = frozenset({"aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"})
#: Extern ops inductor runs with their images channels-last (its layout
#: optimization, on for graphs with convolutions).
CONVOLUTIONS = frozenset({"aten::convolution", "aten::_convolution", "aten::mkldnn_convolution",
                          "aten::convolution_backward"})


@dataclass(slots=True, frozen=True)
class Unit:
    """One op as the compiler sees it: extern (called as it is) or fusible."""

    row: int
    extern: bool
    ns: int  # its recorded time
    convolution: bool = False
    recurrent: bool = False  # inside a recurrent layer (RECURRENT): kept as recorded
    # a fusible unit's outermost ATen ops (itself, or those in an autograd node): what re-runs it
    calls: tuple[int, ...] = ()


@dataclass(slots=True)
class CompilerView:
    """The recorded ops as the compiler sees them: per top-level row
    its units; the shapes to re-run them."""

    units: dict[int, list[Unit]]
    shapes: OpShapes
    names: list[str]
    name_index: np.ndarray

    def name(self, row: int) -> str:
        return self.names[int(self.name_index[row])]


def compiler_view(trace: Trace, rows: np.ndarray) -> CompilerView:
    """Per top-level CPU-op row of `rows`, the units inside it in program order: an extern op is one
    unit; a fusible op with no extern inside it is one unit; an op holding an extern (aten::linear,
    an autograd node) is read through to its children. Free ops are left out."""
    ops = trace.indices(EventKind.CPU_OP)
    parent = innermost_enclosing(trace, ops, ops)
    order = np.lexsort((-trace.dur_ns[ops], trace.ts_ns[ops]))
    children: dict[int, list[int]] = {}
    for i in order.tolist():
        if parent[i] >= 0:
            children.setdefault(int(parent[i]), []).append(int(ops[i]))
    wanted = [index for index in (trace.string_index(n) for n in EXTERN_OPS) if index >= 0]
    is_extern = np.isin(trace.name, wanted)
    walk = _Walk(children, is_extern, _holding(ops, parent, is_extern), trace)
    units: dict[int, list[Unit]] = {}
    for row in rows.tolist():
        found: list[Unit] = []
        walk.into(int(row), found)
        units[int(row)] = found
    return CompilerView(units, OpShapes(trace), trace.strings, trace.name)


def _holding(ops: np.ndarray, parent: np.ndarray, is_extern: np.ndarray) -> set[int]:
    """Rows of the ops with an extern op nested somewhere inside them."""
    position = {int(r): i for i, r in enumerate(ops.tolist())}
    holding: set[int] = set()
    for row in ops[is_extern[ops]].tolist():
        up = int(parent[position[row]])
        while up >= 0 and up not in holding:
            holding.add(up)
            up = int(parent[position[up]])
    return holding


@dataclass(slots=True)
class _Walk:
    children: dict[int, list[int]]
    is_extern: np.ndarray
    holds_extern: set[int]
    trace: Trace

    def into(self, row: int, units: list[Unit]) -> None:
        name = self.trace.strings[int(self.trace.name[row])]
        if name in RECURRENT:
            units.append(Unit(row, True, int(self.trace.dur_ns[row]), recurrent=True))
        elif self.is_extern[row]:
            units.append(Unit(row, True, int(self.trace.dur_ns[row]), name in CONVOLUTIONS))
        elif row in self.holds_extern:
            for child in self.children.get(row, []):
                self.into(child, units)
        elif name not in FREE_OPS:
            units.append(Unit(row, False, int(self.trace.dur_ns[row]), calls=self.calls(row)))

    def calls(self, row: int) -> tuple[int, ...]:
        """The outermost ATen ops at or under `row`, in program order."""
        if self.trace.strings[int(self.trace.name[row])].startswith("aten::"):
            return (row,)
        return tuple(call for child in self.children.get(row, []) for call in self.calls(child))


def fused_runs(units: list[Unit]) -> list[list[Unit]]:
    """The runs of consecutive fusible units between externs."""
    return [run for run, _ in fed_runs(units)]


def fed_runs(units: list[Unit]) -> list[tuple[list[Unit], Unit | None]]:
    """The runs of consecutive fusible units between externs, each with the extern unit after it
    (None: the call's last run)."""
    runs: list[tuple[list[Unit], Unit | None]] = [([], None)]
    for unit in units:
        if unit.extern:
            runs[-1] = (runs[-1][0], unit)
            runs.append(([], None))
        else:
            runs[-1][0].append(unit)
    return [(run, after) for run, after in runs if run]


def channels_last(arguments: list[Any] | None) -> list[Any] | None:
    """A convolution's recorded `arguments` (cost/shapes.OpShapes.arguments)
    with every image tensor (4 or 5 dims) laid out channels-last; None where
    there is none, or where one already was not contiguous."""
    if not arguments:
        return None
    laid_out, images = [], 0
    for argument in arguments:
        if argument[0] == "tensor" and len(argument[1]) in (4, 5):
            if len(argument) > 3 and argument[3] is not None:
                return None
            dims = len(argument[1])
            laid_out.append(("tensor", argument[1], argument[2], (0, *range(2, dims), 1)))
            images += 1
        else:
            laid_out.append(argument)
    return laid_out if images else None


#: `aten::convolution_backward`'s arguments: where its groups are.
GROUPS_AT = 9


def grouped_backward(name: str, arguments: list[Any] | None) -> bool:
    """Whether the op is a grouped (depthwise) convolution's backward, by its recorded groups."""
    if name != "aten::convolution_backward" or not arguments or len(arguments) <= GROUPS_AT:
        return False
    groups = arguments[GROUPS_AT]
    return groups[0] == "value" and isinstance(groups[1], int) and groups[1] > 1


def contiguous(arguments: list[Any]) -> list[Any] | None:
    """A convolution's recorded `arguments` with every image tensor (4 or 5 dims) contiguous; None
    where each already was."""
    laid_out = [("tensor", a[1], a[2], None) if a[0] == "tensor" and len(a[1]) in (4, 5) else a
                for a in arguments]
    return laid_out if laid_out != list(arguments) else None

