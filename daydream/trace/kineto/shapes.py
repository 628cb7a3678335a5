"""What recorded shapes say about the work of an op: FLOPs and elements of matrix multiplies, bytes
of streaming elementwise ops (the `flops` and `elementwise` side tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from daydream.trace.kineto.schema import ArgValues, _Interner, _table
from daydream.trace.model import empty_table


def _numel(dims: list[Any]) -> float:
    """Elements of a tensor from its recorded dims ([] is a scalar)."""
    return float(math.prod(dims))


#: op name -> (FLOPs, elements read and written) from its input shapes: 2 x multiply-adds, and the
#: operands plus the result, for the matrix multiplies that do the work themselves (aten::linear and
#: aten::matmul call these, so they are not counted again).
_GEMM_SHAPES: dict[str, Callable[[list[Any]], tuple[float, float]]] = {
    "aten::mm": lambda d: (2.0 * d[0][0] * d[0][1] * d[1][1],
                           _numel(d[0]) + _numel(d[1]) + d[0][0] * d[1][1]),
    "aten::addmm": lambda d: (2.0 * d[1][0] * d[1][1] * d[2][1],
                              _numel(d[0]) + _numel(d[1]) + _numel(d[2]) + d[1][0] * d[2][1]),
    "aten::bmm": lambda d: (2.0 * d[0][0] * d[0][1] * d[0][2] * d[1][2],
                            _numel(d[0]) + _numel(d[1]) + d[0][0] * d[0][1] * d[1][2]),
    "aten::baddbmm": lambda d: (2.0 * d[1][0] * d[1][1] * d[1][2] * d[2][2],
                                _numel(d[0]) + _numel(d[1]) + _numel(d[2])
                                + d[1][0] * d[1][1] * d[2][2]),
}


#: Distinct shapes remembered per read (`memo`): past this many, new ones are worked out each time.
MEMO_LIMIT = 1 << 16


def _remembered(memo: dict[Any, Any], key: Any, work: Callable[..., Any], *arguments: Any) -> Any:
    """`work(*arguments)`, once per `key` (a training step repeats its ops' shapes)."""
    if key in memo:
        return memo[key]
    value = work(*arguments)
    if len(memo) < MEMO_LIMIT:
        memo[key] = value
    return value


def _gemm_flops(shaped: np.ndarray, values: ArgValues, strings: _Interner,
                names: np.ndarray, memo: dict[Any, Any]) -> dict[str, np.ndarray]:
    """FLOPs of the matrix multiplies among the `shaped` rows (CPU ops that recorded their input
    dims), from those dims."""
    gemm_names = {strings.index[name]: formula for name, formula in _GEMM_SHAPES.items()
                  if name in strings.index}
    if not gemm_names:
        return empty_table("flops")
    rows = np.flatnonzero(shaped & np.isin(names, list(gemm_names)))
    events, flops, elements = [], [], []
    listed = rows.tolist()
    for row, name, raw in zip(listed, names[rows].tolist(), values(listed, ("input_dims",))[0]):
        if not len(raw):
            continue
        found = _remembered(memo, ("gemm", name, bytes(raw)), _gemm_work, gemm_names[name], raw)
        if found is not None:
            events.append(row)
            flops.append(found[0])
            elements.append(found[1])
    return _table("flops", event=events, flops=flops, elements=elements)


def _gemm_work(formula: Callable[[list[Any]], tuple[float, float]],
               raw: msgspec.Raw) -> tuple[float, float] | None:
    """(FLOPs, elements) of a matrix multiply from its recorded dims; None where they do not
    give them."""
    try:
        value, moved = formula(msgspec.json.decode(raw))
    except (msgspec.DecodeError, TypeError, IndexError, KeyError, ValueError, RecursionError):
        return None  # shapes missing or written otherwise: no FLOPs for this op
    if all(isinstance(v, float) and math.isfinite(v) and 0 <= v < 1e21 for v in (value, moved)):
        return value, moved
    return None


#: Elementwise ops that only stream their operands (a copy, a scale, a
#: sum): what DDP's bucket copies are.
ELEMENTWISE_OPS = ("aten::copy_", "aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::div",
                   "aten::div_", "aten::sub", "aten::sub_")
#: Bytes per element of the tensor types torch.profiler names ("Input
#: type"); other types are not counted.
_ITEM_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
               "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
               "c10::complex<float>": 8, "c10::complex<double>": 16}


def streamed_bytes(dims: list[Any], types: list[Any]) -> float:
    """Bytes an elementwise op reads and writes: every tensor operand
    once, and its result (the largest operand, as broadcasting gives)
    once more. Scalars and untyped operands count nothing."""
    sizes = [_numel(d) * _ITEM_BYTES[t] for d, t in zip(dims, types) if isinstance(d, list)
             and t in _ITEM_BYTES]
    return float(sum(sizes) + max(sizes)) if sizes else 0.0


def _elementwise_bytes(shaped: np.ndarray, values: ArgValues, strings: _Interner,
                       names: np.ndarray, memo: dict[Any, Any]) -> dict[str, np.ndarray]:
    """Bytes the elementwise ops among the `shaped` rows (CPU ops that recorded their input dims)
    stream, from their dims and types."""
    ids = [strings.index[name] for name in ELEMENTWISE_OPS if name in strings.index]
    if not ids:
        return empty_table("elementwise")
    events, moved = [], []
    rows = np.flatnonzero(shaped & np.isin(names, ids)).tolist()
    for row, dims, types in zip(rows, *values(rows, ("input_dims", "input_types"))):
        if not len(dims) or not len(types):
            continue
        value = _remembered(memo, ("streamed", bytes(dims), bytes(types)), _streamed_work, dims,
                            types)
        if value is not None:
            events.append(row)
            moved.append(value)
    return _table("elementwise", event=events, bytes=moved)


def _streamed_work(dims: msgspec.Raw, types: msgspec.Raw) -> float | None:
    """`streamed_bytes` from the recorded dims and types; None where they do not give it."""
    try:
        value = streamed_bytes(msgspec.json.decode(dims), msgspec.json.decode(types))
    except (msgspec.DecodeError, TypeError, ValueError, RecursionError):
        return None  # shapes written otherwise: no bytes for this op
    return value if math.isfinite(value) and 0 < value < 1e18 else None
