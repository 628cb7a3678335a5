"""The window scanner's parts that do not depend on which implementation reads: the two implementations against
each other, the C one's own checks on what it is given, and the helpers of the rows it reads."""

from __future__ import annotations

import os

import numpy as np
import pytest

from daydream.trace.kineto import layout, scan, scanned
from tests.trace.test_scan import _EVENTS

IMPLEMENTATIONS = scan.available()


def test_the_c_scanner_is_built_in_ci() -> None:
    # CI installs with a compiler: the C scanner must have been built there, not silently left out.
    if os.environ.get("CI") == "true":
        assert "c" in IMPLEMENTATIONS


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="needs both the C scanner and numba")
def test_both_implementations_write_the_same_columns_at_every_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    # The text of every kind of event, cut at each byte: both implementations read the same events into the same
    # columns, and stop at the same place for the same reason.
    whole = ("[" + ", ".join(_EVENTS[:16]) + "]").encode()
    for cut in range(1, len(whole) + 1):
        text = bytearray(whole[:cut])
        results = []
        for name in IMPLEMENTATIONS:
            monkeypatch.setattr(scan, "IMPLEMENTATION", name)
            out = np.zeros((64, layout.WIDTH), dtype=np.int64)
            times = np.zeros((64, 2), dtype=np.float64)
            count, stop, status = scan.scan(text, 1, len(text), out, times)
            results.append((count, stop, status, out[:count].tobytes(), times[:count].tobytes()))
        assert results[0] == results[1], cut
    assert results[0][0] > 10  # the whole text: most events read


@pytest.mark.skipif("c" not in IMPLEMENTATIONS, reason="the C scanner was not built here")
def test_the_c_scanner_refuses_buffers_that_do_not_fit() -> None:
    # A caller's mistake is a ValueError, never a write outside the arrays it was given.
    compiled = scan._compiled
    text = bytearray(b'[{"ph": "X"}]')
    tables = (*layout.TOP, *layout.HOT, *layout.DIMS, *layout.RAWS, *layout.KNOWN)
    out = np.zeros((4, layout.WIDTH), dtype=np.int64)
    times = np.zeros((4, 2), dtype=np.float64)
    assert compiled.scan(text, 1, len(text), out, times, layout.LAYOUT, *tables)[0] == 1
    with pytest.raises(ValueError, match="within the text"):
        compiled.scan(text, 1, len(text) + 1, out, times, layout.LAYOUT, *tables)
    with pytest.raises(ValueError, match="width"):
        compiled.scan(text, 1, len(text), out[:, :-1].copy(), times, layout.LAYOUT, *tables)
    with pytest.raises(ValueError, match="two float64"):
        compiled.scan(text, 1, len(text), out, times[:3].copy(), layout.LAYOUT, *tables)
    with pytest.raises(ValueError, match="not the columns"):
        compiled.scan(text, 1, len(text), out, times, layout.LAYOUT[:-1].copy(), *tables)
    narrow = layout.LAYOUT.copy()
    narrow[0] = layout.I_NAME_HASH  # a row too narrow for its last column
    with pytest.raises(ValueError, match="outside the row"):
        compiled.scan(text, 1, len(text), np.zeros((4, layout.I_NAME_HASH), dtype=np.int64), times, narrow,
                      *tables)
    with pytest.raises(ValueError, match="outside the text"):
        compiled.joined_spans(text, np.array([0]), np.array([len(text) + 1]))


@pytest.mark.parametrize("distinct", [1, 3, scanned.FEW, scanned.FEW + 1, 500])
def test_unique_gives_what_numpy_gives(distinct: int) -> None:
    values = np.random.default_rng(distinct).integers(-2**62, 2**62, size=distinct)[
        np.random.default_rng(0).integers(0, distinct, size=2000)]
    expected = np.unique(values, return_index=True, return_inverse=True)
    found = scanned.unique(values)
    for mine, numpy_s in zip(found, expected):
        assert np.array_equal(mine, numpy_s.reshape(-1))
    assert [a.size for a in scanned.unique(np.zeros(0, dtype=np.int64))] == [0, 0, 0]


def test_the_scanner_s_columns_are_kept_from_window_to_window_unless_still_viewed() -> None:
    scratch = scanned.Scratch()
    text = bytearray(b'[{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}]')
    read, _, _ = scanned.scan_events(text, 1, len(text), scratch)
    assert read is not None and read.size == 1
    arrays = scratch.arrays
    assert arrays is not None
    scratch.release()  # the rows still refer to the columns: given up
    assert scratch.arrays is None
    del read
    again, _, _ = scanned.scan_events(text, 1, len(text), scratch)
    assert again is not None and again.names()[0] == ["k"]
    kept = scratch.arrays
    del again
    scratch.release()  # nothing refers to them any more: kept for the next window
    assert scratch.arrays is kept and scratch.get() is kept
