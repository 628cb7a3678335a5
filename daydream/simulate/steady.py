"""Steady iterations: a prediction's headline is the median of the
iterations that are neither warm-up nor outliers.

An iteration whose measured time is more than `OUTLIER` times the median of the
trace's iterations, or less than its inverse (a first iteration three times the
rest, an empty ProfilerStep of 0.05 ms), is left out of the headline and said;
the rest are steady. A trace of one or two iterations keeps them all.

    chosen = steady([10, 11, 30, 10])   # [0, 1, 3]
    median_of([5, 6, 100, 5], chosen)   # 5
"""

from __future__ import annotations

import statistics

OUTLIER = 2.0


def steady(measured_ns: list[int]) -> list[int]:
    """Indices of the steady iterations among `measured_ns` (all of them for fewer than three)."""
    if len(measured_ns) < 3:
        return list(range(len(measured_ns)))
    middle = statistics.median(measured_ns)
    if middle <= 0:
        return list(range(len(measured_ns)))
    return ([i for i, value in enumerate(measured_ns)
             if middle / OUTLIER <= value <= middle * OUTLIER])


def median_of(values: list[int], chosen: list[int]) -> int:
    """The median of `values` over the indices `chosen` (0 when none)."""
    picked = [values[i] for i in chosen]
    return int(statistics.median(picked)) if picked else 0


def left_out(names: list[str], measured_ns: list[int], chosen: list[int]) -> str | None:
    """A sentence naming the iterations left out of the headline, or None."""
    middle = statistics.median(measured_ns) if measured_ns else 0
    gone = [i for i in range(len(measured_ns)) if i not in set(chosen)]
    if not gone or middle <= 0:
        return None
    parts = [f"{names[i]} ({measured_ns[i] / middle:.2g}x the median)" for i in gone[:5]]
    more = f" and {len(gone) - 5} more" if len(gone) > 5 else ""
    return (f"{len(gone)} of {len(measured_ns)} iterations left out of the headline as warm-up or "
            f"outliers: {', '.join(parts)}{more}; the headline is the median of the other "
            f"{len(chosen)}")
