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
