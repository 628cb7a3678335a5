"""Recorded op shapes and dtypes (torch.profiler's `record_shapes`),
and the arithmetic of the ops that use them.

`OpShapes` reads the trace's `shapes` side table: per CPU-op row, its input dims and types as
recorded. An op whose shapes are missing (a profile without `record_shapes`) or written otherwise
gives None, never an error: the caller falls back to its ratio and says so.

    shapes = OpShapes(trace)
    shapes.tensors(row)             # tensor inputs only: [((2048, 512), "float"), ...]
    gemm_dims("aten::addmm", dims)  # (batch, m, n, k) of the multiply, or None
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.trace import Trace
from daydream.trace.kineto.shapes import streamed_bytes

#: Bytes per element of the tensor types torch.profiler names ("Input type").
ITEM_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
              "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
              "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1,
              "c10::Float8_e5m2": 1}
#: Floating-point types: what autocast may cast.
FLOATING = ("float", "double", "c10::Half", "c10::BFloat16")
FULL = "float"
REDUCED = ("c10::BFloat16", "c10::Half")

Tensor = tuple[tuple[int, ...], str]


class OpShapes:
    """Per trace row of a CPU op, its recorded input dims and types (decoded once, on first use)."""

    def __init__(self, trace: Trace) -> None:
        table = trace.tables.get("shapes")
        self._strings = trace.strings
        self._row: dict[int, int] = {}
        if table is not None and table["event"].size:
            self._dims_str = table["dims_str"]
            self._types_str = table["types_str"]
            self._concrete_str = table.get("concrete_str")
            self._strides_str = table.get("strides_str")
            self._row = dict(zip(table["event"].tolist(), range(table["event"].size)))
        self._decoded: dict[int, Any] = {}
        self._orders: dict[int, list[tuple[int, ...] | None]] = {}

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, row: int) -> bool:
        return int(row) in self._row

    def inputs(self, row: int) -> tuple[list[Any], list[Any]] | None:
        """(dims, types) of the op at trace row `row` as recorded, or None where they are not."""
        entry = self._row.get(int(row))
        if entry is None:
            return None
        key = int(self._dims_str[entry]) * 1_000_003 + int(self._types_str[entry])
        if key not in self._decoded:
            self._decoded[key] = _decode(self._strings[int(self._dims_str[entry])],
                                         self._strings[int(self._types_str[entry])])
        return self._decoded[key]

    def arguments(self, row: int, lists: bool = False) -> list[Argument] | None:
        """Every input of the op at `row` as it could be passed again: ("tensor", shape, type,
        order), ("none",) for an absent optional tensor, ("value", v) for a recorded scalar or list;
        None where any non-tensor input's value was not recorded ("Concrete Inputs" missing: older
        profilers), so that the op cannot be re-run as called. `order`: the tensor's dims from
        outermost to innermost in memory where its recorded strides are not the contiguous ones (a
        channels-last image is (0, 2, 3, 1)), None where they are or were not recorded.

        `lists`: a list of tensors (`aten::cat`'s, `aten::stack`'s) as ("tensors", shapes, type).
        The profiler records each element's dims but no element type ("TensorList"), so the type is
        that of the op's other floating tensors, else fp32: what a list of activations holds. Left
        out (None for the op) unless asked for, by callers that know the kind."""
        recorded = self.inputs(row)
        entry = self._row.get(int(row))
        if recorded is None or entry is None or self._concrete_str is None:
            return None
        try:
            concrete = json.loads(self._strings[int(self._concrete_str[entry])] or "null")
        except (ValueError, RecursionError):
            return None
        dims, types = recorded
        if not isinstance(concrete, list) or len(concrete) != len(types):
            return None
        orders = self.orders(row)
        found: list[Argument] = []
        for index, (d, t, c) in enumerate(zip(dims, types, concrete)):
            tensor = _tensor(d, t)
            if tensor is not None:
                found.append(("tensor", tensor[0], tensor[1], orders[index] if index < len(orders)
                              else None))
            elif lists and t == "TensorList" and (listed := _shapes(d)) is not None:
                found.append(("tensors", listed, _list_type(types)))
            elif c == "" and t == "":
                found.append(("none",))
            elif isinstance(c, str) and c != "":
                value = _value(c)
                if value is _MISSING:
                    return None
                found.append(("value", value))
            else:
                return None
        return found

    def orders(self, row: int) -> list[tuple[int, ...] | None]:
        """Per input of the op at `row`, its dims' order in memory where
        its recorded strides are not contiguous (see `arguments`), else
        None; an empty list where no strides were recorded."""
        entry = self._row.get(int(row))
        if entry is None or self._strides_str is None:
            return []
        key = int(self._strides_str[entry]) * 1_000_003 + int(self._dims_str[entry])
        if key not in self._orders:
            self._orders[key] = _orders(self._strings[int(self._dims_str[entry])],
                                        self._strings[int(self._strides_str[entry])])
        return self._orders[key]

    def tensors(self, row: int) -> list[Tensor | None] | None:
        """Per input of the op at `row`: (shape, type) where it is a
        tensor, None where it is not (scalars, lists)."""
        recorded = self.inputs(row)
        if recorded is None:
            return None
        dims, types = recorded
        return [_tensor(d, t) for d, t in zip(dims, types)]

    def tensors_listed(self, row: int) -> list[Tensor | None] | None:
        """As `tensors`, with each list of tensors (`aten::cat`'s, `aten::stack`'s) as its elements
        in its place, of the type `arguments` gives them."""
        recorded = self.inputs(row)
        if recorded is None:
            return None
        dims, types = recorded
        if "TensorList" not in types:
            return [_tensor(d, t) for d, t in zip(dims, types)]
        found: list[Tensor | None] = []
        for d, t in zip(dims, types):
            listed = _shapes(d) if t == "TensorList" else None
            if listed is not None:
                found.extend((shape, _list_type(types)) for shape in listed)
            else:
                found.append(_tensor(d, t))
        return found


Argument = tuple[Any, ...]
_MISSING = object()


def _value(text: str) -> Any:
    """A recorded non-tensor argument ("[1, 1]", "1", "1e-05", "0.",
    "False", "[True, False]") as a value, or _MISSING."""
    spelled = {"True": True, "False": False, "None": None}
    if text in spelled:
        return spelled[text]
    try:
        value = json.loads(text.replace("True", "true").replace("False", "false"))
    except (ValueError, RecursionError):
        try:
            value = float(text)  # as Python writes a float: "0.", "1e-05"
        except ValueError:
            return _MISSING
    ok = (isinstance(value, (int, float))
          or (isinstance(value, list) and all(isinstance(v, (int, float)) for v in value)))
    return value if ok else _MISSING


def _orders(dims_text: str, strides_text: str) -> list[tuple[int, ...] | None]:
    """Per input, the memory order of its dims where its strides are
    not the contiguous ones of its dims."""
    try:
        dims, strides = json.loads(dims_text), json.loads(strides_text or "[]")
    except (ValueError, RecursionError):
        return []
    if not isinstance(dims, list) or not isinstance(strides, list):
        return []
    found: list[tuple[int, ...] | None] = []
    for d, st in zip(dims, strides):
        ok = isinstance(d, list) and isinstance(st,
                                                list) and len(d) == len(st) and len(d) > 1 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*d, *st])
        found.append(memory_order(tuple(d), tuple(st)) if ok else None)
    return found


def memory_order(dims: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The order of `dims` from outermost to innermost in memory for
    `strides`, None where they are the contiguous strides (or say
    nothing: every dim of size 1). Dims of size 1 keep their place."""
    contiguous, step = [0] * len(dims), 1
    for index in range(len(dims) - 1, -1, -1):
        contiguous[index] = step
        step *= max(dims[index], 1)
    if all(size == 1 or s == c for size, s, c in zip(dims, strides, contiguous)):
        return None
    order = tuple(sorted(range(len(dims)),
                         key=lambda i: (-strides[i] if dims[i] > 1 else -contiguous[i], i)))
    return order if order != tuple(range(len(dims))) else None


def _decode(dims_text: str, types_text: str) -> tuple[list[Any], list[Any]] | None:
    try:
        dims, types = json.loads(dims_text), json.loads(types_text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    return dims, types


def _tensor(dims: Any, kind: Any) -> Tensor | None:
    if not isinstance(dims, list) or not isinstance(kind, str) or kind not in ITEM_BYTES:
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in dims):
        return None
    if not dims and kind in ("Scalar", ""):
        return None
    return tuple(dims), kind


def _shapes(dims: Any) -> tuple[tuple[int, ...], ...] | None:
    """A recorded list of tensors' dims (one list of ints per element), or None where it is not."""
    if not isinstance(dims, list) or not dims:
        return None
    found = [_tensor(d, FULL) for d in dims]
    return tuple(t[0] for t in found if t is not None) if all(found) else None


def _list_type(types: list[Any]) -> str:
    """The element type assumed for an op's recorded list of tensors: its first floating tensor
    input's type, else fp32."""
    return next((t for t in types if t in FLOATING), FULL)


def elements(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


def tensor_bytes(tensor: Tensor) -> int:
    return elements(tensor[0]) * ITEM_BYTES[tensor[1]]


#: Lookups in a table: (the table's input, the indices' input). Each index reads one row of the
#: table (its dim 0), not the whole table.
LOOKUPS = {"aten::embedding": (0, 1), "aten::embedding_bag": (0, 1), "aten::_embedding_bag": (0, 1),
           "aten::_embedding_bag_forward_only": (0, 1)}


def read_bytes(name: str, tensors: list[Tensor | None]) -> int:
    """The bytes op `name` reads of its `tensors`: all of each, but of a lookup's table only the
    rows its indices name (at most the table): an embedding bag of 5,267 ids into a [20000, 64]
    table reads 1.3 MB of its 5.1 MB, and at twice the batch twice that."""
    total = sum(tensor_bytes(t) for t in tensors if t is not None)
    positions = LOOKUPS.get(name)
    if positions is None or len(tensors) <= max(positions):
        return total
    table, indices = tensors[positions[0]], tensors[positions[1]]
    if table is None or indices is None or not table[0] or not table[0][0]:
        return total
    whole = tensor_bytes(table)
    rows = elements(indices[0]) * (whole // table[0][0])
    return total - whole + min(whole, rows)


def footprint_bytes(inputs: list[Tensor | None]) -> int:
    """The bytes an elementwise or normalization op touches in fp32: its floating inputs and an
    output the size of the largest (trace/kineto/shapes.streamed_bytes's rule, every floating
    input taken as fp32); 0 where none was recorded."""
    floats = [list(t[0]) for t in inputs if t is not None and t[1] in FLOATING]
    return int(streamed_bytes(floats, [FULL] * len(floats)))


def gemm_dims(name: str, tensors: list[Tensor | None]) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of a matrix multiply from its recorded tensor
    inputs, or None for other ops or shapes.

    aten::mm (A, B), addmm (bias, A, B), bmm (A, B), baddbmm (bias, A, B), linear (x, W[, b]: x's
    leading dims are m) and matmul (A, B, broadcasting: A's leading dims are the batch).
    """
    shaped: list[Any] = [t[0] if t is not None else None for t in tensors]
    try:
        if name == "aten::mm":
            (m, k), (_, n) = shaped[0], shaped[1]
            return 1, m, n, k
        if name == "aten::addmm":
            (m, k), (_, n) = shaped[1], shaped[2]
            return 1, m, n, k
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = shaped[0], shaped[1]
            return b, m, n, k
        if name == "aten::baddbmm":
            (b, m, k), (_, _, n) = shaped[1], shaped[2]
            return b, m, n, k
        if name == "aten::linear":
            x, (n, k) = shaped[0], shaped[1]
            return 1, elements(tuple(x[:-1])), n, k
        if name == "aten::matmul":
            a, b = shaped[0], shaped[1]
            if len(a) < 2 or len(b) < 2:
                return None
            return elements(tuple(a[:-2])), a[-2], b[-1], a[-1]
    except (TypeError, ValueError, IndexError):
        return None
    return None


#: Multiplies whose first input is the bias the product is added to.
WITH_BIAS = ("aten::addmm", "aten::baddbmm")


def matrix_operands(name: str) -> tuple[int, int]:
    """The positions of multiply `name`'s two matrix operands among its inputs (after the bias of
    `WITH_BIAS`'s)."""
    return (1, 2) if name in WITH_BIAS else (0, 1)


def product_shape(name: str, tensors: list[Tensor | None]) -> tuple[int, ...] | None:
    """The shape of a matrix multiply's product (as `gemm_dims` reads its operands), or None for
    other ops, shapes that do not multiply, or a matmul that broadcasts a vector."""
    shaped: list[Any] = [t[0] if t is not None else None for t in tensors]
    first, second = matrix_operands(name)
    try:
        a, b = shaped[first], shaped[second]
        if name == "aten::linear":
            return (*a[:-1], b[0])
        if name not in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul"):
            return None
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            return None
        leading = a[:-2] if len(a) >= len(b) else b[:-2]
        return (*leading, a[-2], b[-1])
    except (TypeError, IndexError):
        return None


def gemm_flops(dims: tuple[int, int, int, int]) -> float:
    batch, m, n, k = dims
    return 2.0 * batch * m * n * k


def gemm_bytes(dims: tuple[int, int, int, int], item_bytes: int) -> float:
    """Bytes a GEMM reads and writes once: both operands and the result."""
    batch, m, n, k = dims
    return float(batch * (m * k + k * n + m * n) * item_bytes)


def float_inputs(tensors: list[Tensor | None]) -> np.ndarray:
    """Indices of the floating-point tensor inputs."""
    return np.array([i for i, t in enumerate(tensors) if t is not None and t[1] in FLOATING],
                    dtype=np.int64)


def top_level_ops(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Of the CPU-op rows `rows`, those no other CPU op encloses on
    their thread (the calls user code made)."""
    from daydream.mapping.linking import innermost_enclosing
    from daydream.trace import EventKind

    return rows[innermost_enclosing(trace, trace.indices(EventKind.CPU_OP), rows) < 0]


#: Gist's encodings: one bit per element; the non-zeros with a one-byte
#: index each; one byte per element.
GIST_FORMATS = ("binarize", "csr", "fp8")


def encoded_ratio(format_name: str, item_bytes: int, sparsity: float) -> float:
    """Bytes of a Gist-encoded activation per byte of the activation (elements of `item_bytes`;
    `sparsity`: the share of zeros, for csr)."""
    if format_name == "binarize":
        return 1.0 / (8 * item_bytes)
    if format_name == "csr":
        return (1.0 - sparsity) * (item_bytes + 1) / item_bytes
    if format_name == "fp8":
        return min(1.0, 1.0 / item_bytes)
    raise InputError(f"--opt gist:format={format_name}: the formats are {', '.join(GIST_FORMATS)}")


def parameter_shapes(shapes: OpShapes, optimizer_rows: np.ndarray,
                      update_rows: np.ndarray, transposed: bool = True) -> set[tuple[int, ...]]:
    """The shapes of the tensors the optimizer step (or a hand-written update loop) touches, and,
    with `transposed`, the transposes of the 2-D ones (a linear layer's weight enters its multiply
    transposed): parameters, whose size the batch leaves."""
    found: set[tuple[int, ...]] = set()
    for row in np.concatenate([optimizer_rows, update_rows]).tolist():
        for tensor in shapes.tensors(row) or []:
            if tensor is not None and tensor[0]:
                found.add(tensor[0])
                if transposed and len(tensor[0]) == 2:
                    found.add(tensor[0][::-1])
    return found
