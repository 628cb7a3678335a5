"""`nearest_earlier_at_least` compiled: one pass with a stack, O(n)
memory (linking.py uses it for large traces)."""

from __future__ import annotations

import numpy as np

from daydream._jit import jit


@jit
def nearest_earlier_at_least_compiled(values: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """For each i, the largest j < i with candidate[j] and values[j] >= values[i]; -1 if none.

    The stack holds the candidates no later candidate dominates (their values fall from bottom to
    top); each row binary-searches it: O(n log n) time, O(n) memory.
    """
    n = values.size
    result = np.full(n, -1, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for i in range(n):
        value = values[i]
        # The nearest candidate at least `value`: the last of the stack's prefix of values >= value.
        low, high = 0, top
        while low < high:
            middle = (low + high) // 2
            if values[stack[middle]] >= value:
                low = middle + 1
            else:
                high = middle
        if low > 0:
            result[i] = stack[low - 1]
        if candidate[i]:
            # An earlier candidate no larger than this one is never the nearest answer again.
            while top > 0 and values[stack[top - 1]] <= value:
                top -= 1
            stack[top] = i
            top += 1
    return result
