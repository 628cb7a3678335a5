"""The covered length of intervals in a window: by hand, and Coverage (merged once) against the direct union."""

from __future__ import annotations

import numpy as np

from daydream.intervals import Coverage, union_ns


def test_by_hand() -> None:
    starts, ends = np.array([0, 5, 20, 22, 40]), np.array([10, 8, 25, 30, 40])  # [40, 40) is empty
    # union: [0, 10) and [20, 30)
    assert union_ns(starts, ends, 0, 100) == 20
    assert union_ns(starts, ends, 6, 22) == 6  # [6, 10) and [20, 22)
    coverage = Coverage(starts, ends)
    assert coverage.block_start.tolist() == [0, 20] and coverage.block_end.tolist() == [10, 30]
    assert [coverage.within(*w) for w in ((0, 100), (6, 22), (10, 20), (25, 26), (-5, 1))] == [20, 6, 0, 1, 1]


def test_coverage_agrees_with_the_direct_union_on_random_windows() -> None:
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n = int(rng.integers(0, 30))
        starts = rng.integers(0, 1000, n)
        ends = starts + rng.integers(-5, 150, n)
        coverage = Coverage(starts, ends)
        low = int(rng.integers(-100, 1100))
        high = low + int(rng.integers(0, 700))
        assert coverage.within(low, high) == union_ns(starts, ends, low, high)


def test_membership_in_any_span_agrees_with_one_mask_per_span() -> None:
    from daydream.mapping.attribution import within_any

    rng = np.random.default_rng(11)
    assert within_any(np.array([1, 5, 9]), [(0, 2), (4, 6)]).tolist() == [True, True, False]
    for _ in range(1000):
        spans = [(int(a), int(a + rng.integers(0, 60))) for a in rng.integers(0, 500, int(rng.integers(0, 8)))]
        times = rng.integers(-10, 600, 40)
        direct = np.zeros(times.size, dtype=bool)
        for start, end in spans:
            direct |= (times >= start) & (times < end)
        assert (within_any(times, spans) == direct).all()


def test_overlaps_agree_with_a_mask_per_window() -> None:
    from daydream.intervals import Overlaps

    rng = np.random.default_rng(13)
    for _ in range(1000):
        n = int(rng.integers(0, 30))
        starts = rng.integers(0, 1000, n)
        ends = starts + rng.integers(0, 150, n)
        weights = rng.integers(0, 100, n).astype(float)
        overlaps = Overlaps(starts, ends, weights)
        low = int(rng.integers(-100, 1100))
        high = low + int(rng.integers(1, 700))
        mask = (starts < high) & (ends > low)
        assert overlaps.count(low, high) == int(mask.sum())
        assert overlaps.total(low, high) == float(weights[mask].sum())
