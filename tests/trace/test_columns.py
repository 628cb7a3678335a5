"""The column builder's shortcuts against the plain work they stand for: interning a column at once, and the work
shapes give remembered per distinct shape."""

from __future__ import annotations

import msgspec
import numpy as np

from daydream.trace.kineto import shapes
from daydream.trace.kineto.rows import EventRows
from daydream.trace.kineto.schema import ArgValues, _Args, _Event, _Interner


def test_in_order_numbers_strings_as_one_call_each_would() -> None:
    values = ["b", "a", "b", "", "c", "a"]
    one_by_one = _Interner()
    one_by_one("x")
    expected = [one_by_one(v) for v in values]
    at_once = _Interner()
    at_once("x")
    assert at_once.in_order(values).tolist() == expected == [1, 2, 1, 3, 4, 2]
    assert at_once.strings == one_by_one.strings


def test_in_order_reads_bytes_as_utf8_with_replacement() -> None:
    # two different invalid byte strings read as the same text: one id, numbered where the first appears
    values = [b"[1, 2]", b"\xff", b"[1, 2]", b"\xfe", "\ufffd", b"caf\xc3\xa9"]
    interner = _Interner()
    ids = interner.in_order(values).tolist()
    assert ids == [0, 1, 0, 1, 1, 2]
    assert interner.strings == ["[1, 2]", "\ufffd", "café"]


def _values(args: list[_Args]) -> ArgValues:
    """The args as a chunk of decoded events gives them."""
    return EventRows([_Event(args=a) for a in args]).arg_values


def _args(dims: str, types: str) -> _Args:
    return _Args(input_dims=msgspec.Raw(dims.encode()), input_types=msgspec.Raw(types.encode()))


def test_streamed_bytes_are_the_same_remembered_or_not(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    names = _Interner()
    add = names("aten::add")
    other = names("aten::relu")
    args = [_args("[[2, 3], [2, 3]]", '["float", "float"]'), _args("[[4], []]", '["c10::BFloat16", "Scalar"]'),
            _args("[[2, 3], [2, 3]]", '["float", "float"]'), _args("[[2, 3]]", '["float"]'),
            _args("not json", '["float"]')]
    shaped = np.ones(len(args), dtype=bool)  # CPU ops that recorded their shapes
    rows = np.array([add, add, add, other, add])
    # by hand: 2x3 floats twice read and the larger once more written: 3 x 24 bytes; 4 bf16 twice: 16 bytes
    expected = {"event": [0, 1, 2], "bytes": [72.0, 16.0, 72.0]}
    memo: dict = {}  # type: ignore[type-arg]
    found = shapes._elementwise_bytes(shaped, _values(args), names, rows, memo)
    assert {k: v.tolist() for k, v in found.items()} == expected
    assert len(memo) == 3  # the two distinct countable shapes and the unreadable one, each worked out once
    again = shapes._elementwise_bytes(shaped, _values(args), names, rows, memo)
    assert {k: v.tolist() for k, v in again.items()} == expected
    monkeypatch.setattr(shapes, "MEMO_LIMIT", 0)
    unremembered: dict = {}  # type: ignore[type-arg]
    assert {k: v.tolist() for k, v in shapes._elementwise_bytes(shaped, _values(args), names, rows, unremembered).items()} == expected
    assert unremembered == {}


def test_gemm_flops_are_remembered_per_op_and_shape() -> None:
    names = _Interner()
    mm, bmm = names("aten::mm"), names("aten::bmm")
    same_dims = "[[2, 3, 4], [2, 4, 5]]"
    args = [_args("[[2, 3], [3, 4]]", "[]"), _args(same_dims, "[]"), _args("[[2, 3], [3, 4]]", "[]")]
    shaped = np.ones(len(args), dtype=bool)  # CPU ops that recorded their shapes
    memo: dict = {}  # type: ignore[type-arg]
    found = shapes._gemm_flops(shaped, _values(args), names, np.array([mm, bmm, mm]), memo)
    # by hand: mm 2x3 @ 3x4 = 2*2*3*4 FLOPs, 6 + 12 + 8 elements; bmm 2 x (3x4 @ 4x5) = 2*2*3*4*5, 24 + 40 + 30
    assert found["event"].tolist() == [0, 1, 2]
    assert found["flops"].tolist() == [48.0, 240.0, 48.0]
    assert found["elements"].tolist() == [26.0, 94.0, 26.0]
    assert len(memo) == 2
