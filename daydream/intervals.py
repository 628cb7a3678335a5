"""Interval arithmetic over numpy columns, shared by the simulator's analysis and the reports."""

from __future__ import annotations

import numpy as np


def union_ns(starts: np.ndarray, ends: np.ndarray, window_start: int, window_end: int) -> int:
    """Total length of the union of intervals, clipped to [window_start, window_end)."""
    starts = np.clip(starts, window_start, window_end)
    ends = np.clip(ends, window_start, window_end)
    keep = ends > starts
    if not keep.any():
        return 0
    order = np.argsort(starts[keep], kind="stable")
    s, e = starts[keep][order], ends[keep][order]
    running_end = np.maximum.accumulate(e)
    # A new covered stretch begins where a start passes every earlier end.
    new_block = np.r_[True, s[1:] > running_end[:-1]]
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_start.size, dtype=np.int64)
    np.maximum.at(block_end, block_id, e)
    return int((block_end - block_start).sum())


class Coverage:
    """The union of many intervals, merged once, so that the covered
    length of any window costs O(log n).

        busy = Coverage(starts, ends)
        busy.within(window_start, window_end) == union_ns(starts, ends, window_start, window_end)
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        keep = ends > starts
        order = np.argsort(starts[keep], kind="stable")
        s, e = starts[keep][order], ends[keep][order]
        if s.size:
            running_end = np.maximum.accumulate(e)
            new_block = np.r_[True, s[1:] > running_end[:-1]]
            first = np.flatnonzero(new_block)
            self.block_start = s[first]
            self.block_end = np.maximum.reduceat(e, first)
        else:
            self.block_start = self.block_end = np.zeros(0, dtype=np.int64)
        self.covered_before = np.r_[0, np.cumsum(self.block_end - self.block_start)]

    def within_each(self, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
        """`within` of every window [lows[i], highs[i]) at once."""
        return self._covered_to(np.asarray(highs,
                                           dtype=np.int64)) - self._covered_to(
                                               np.asarray(lows, dtype=np.int64))

    def share_of_each(self, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
        """For each window [lows[i], highs[i]), the share of it that is
        covered (0 for an empty window)."""
        return np.clip(self.within_each(lows, highs) / np.maximum(highs - lows, 1), 0.0, 1.0)

    def _covered_to(self, points: np.ndarray) -> np.ndarray:
        """Covered length before each point."""
        if self.block_start.size == 0:
            return np.zeros(points.size, dtype=np.int64)
        block = np.searchsorted(self.block_start, points, side="right") - 1
        inside = block >= 0
        safe = np.maximum(block, 0)
        partial = np.clip(points - self.block_start[safe], 0,
                          self.block_end[safe] - self.block_start[safe])
        return np.where(inside, self.covered_before[safe] + partial, 0)

    def within(self, low: int, high: int) -> int:
        """Covered length inside [low, high)."""
        # the first block ending after `low`
        first = int(np.searchsorted(self.block_end, low, side="right"))
        # blocks from here on start at or after `high`
        stop = int(np.searchsorted(self.block_start, high, side="left"))
        if stop <= first:
            return 0
        total = int(self.covered_before[stop] - self.covered_before[first])
        total -= max(0, low - int(self.block_start[first]))
        total -= max(0, int(self.block_end[stop - 1]) - high)
        return total


class Overlaps:
    """Intervals indexed once, so that how many overlap a window, and
    the sum of their weights, cost O(log n).

    An interval [s, e) overlaps [low, high) when s < high and e > low: those starting before `high`,
    less those that ended by `low` (every one of which also started before `high`).
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray,
                 weights: np.ndarray | None = None) -> None:
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        weights = np.ones(starts.size) if weights is None else np.asarray(weights, dtype=np.float64)
        by_start, by_end = np.argsort(starts, kind="stable"), np.argsort(ends, kind="stable")
        self.starts, self.ends = starts[by_start], ends[by_end]
        self.weight_by_start = np.r_[0.0, np.cumsum(weights[by_start])]
        self.weight_by_end = np.r_[0.0, np.cumsum(weights[by_end])]

    def _bounds(self, low: int, high: int) -> tuple[int, int]:
        return (int(np.searchsorted(self.starts, high, side="left")),
                int(np.searchsorted(self.ends, low, side="right")))

    def count(self, low: int, high: int) -> int:
        started, ended = self._bounds(low, high)
        return max(started - ended, 0)

    def total(self, low: int, high: int) -> float:
        started, ended = self._bounds(low, high)
        return (float(self.weight_by_start[started] - self.weight_by_end[ended]) if started > ended
                else 0.0)
