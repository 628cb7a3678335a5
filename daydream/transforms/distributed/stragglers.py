"""What a synchronous step of many ranks may pay for its slowest rank, from how one rank's recorded steps vary.

Every rank of a data-parallel job waits at each step's all-reduce for the last rank to arrive. If each rank's
step varied as the trace's recorded iterations do (standard deviation s), and independently of the others, a step
of n ranks would take about s·E[max of n standard normal draws] longer than one rank's. Nothing in one rank's trace
says whether the ranks' variations are independent (a shared input pipeline or a common cause make them move
together, which costs nothing), so the what-ifs do not add it: they say what it could be.
"""

from __future__ import annotations

import math

import numpy as np

#: Fewer recorded iterations than this give no estimate of their spread.
MIN_ITERATIONS = 3


def expected_max_of_normals(n: int) -> float:
    """E[max of n independent standard normal draws]: 0 for n = 1, 1/sqrt(pi) for 2, 1.5/sqrt(pi) for 3."""
    if n <= 1:
        return 0.0
    # E[max] = the integral of (1 - F^n) over x > 0 minus that of F^n over x < 0 (F: the normal CDF).
    upper = np.linspace(0.0, 12.0, 12_001)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(upper / math.sqrt(2.0)))
    below = 1.0 - cdf  # F(-x) = 1 - F(x)
    return float(np.trapezoid(1.0 - cdf ** n, upper) - np.trapezoid(below ** n, upper))


def straggler_note(name: str, iteration_ns: list[int], world: int) -> str | None:
    """The note for a what-if of `world` ranks from a trace whose recorded iterations took `iteration_ns`; None when
    there are too few iterations or they do not vary."""
    if world <= 1 or len(iteration_ns) < MIN_ITERATIONS:
        return None
    times = np.asarray(iteration_ns, dtype=np.float64)
    spread = float(np.std(times, ddof=1))
    if spread <= 0:
        return None
    factor = expected_max_of_normals(world)
    return (f"{name}: not in the prediction: the trace's {times.size} iterations vary by {spread / 1e6:.3g} ms (standard "
            f"deviation, {spread / float(np.mean(times)) * 100:.1f}% of the mean); if every rank's steps varied as much, "
            f"independently, each step would wait for the slowest of {world}: about +{factor * spread / 1e6:.3g} ms "
            f"({factor:.2f} standard deviations)")
