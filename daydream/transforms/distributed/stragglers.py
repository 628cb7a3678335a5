"""What a synchronous step of many ranks pays for its slowest rank,
from how one rank's recorded steps vary.

Every rank of a data-parallel job waits at each step's gradient synchronization for the
last rank to arrive. If each rank's step varies with standard deviation s, independently
of the others, the last of n ranks arrives s·E[max of n standard normal draws] after the
typical one (0.56 s for 2 ranks, 1.42 s for 8, 2.34 s for 64); under gradient accumulation
over k iterations the ranks drift apart for k steps before they meet: s·√k. The
data-parallel what-ifs make the iteration's last gradient collective wait that long after
its gradients are ready (an edge latency: the channel stays free for earlier buckets).

s comes from the trace's recorded iterations, robustly: 1.4826 × their median absolute deviation,
the standard deviation of a normal spread, which leaves out one-off iterations (the first, a
checkpoint, a data-loader stall) that every rank pays at once. Nothing in one rank's trace says
whether the ranks vary independently (a shared cause moves them together and costs nothing), so the
note says the assumption and `stragglers=0` leaves the wait out; `stragglers=MS` gives the ranks'
standard deviation instead.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from daydream.transforms.registry import Parameter

#: Fewer recorded iterations than this give no estimate of their spread.
MIN_ITERATIONS = 3
#: A spread wider than this share of the median is more than jitter:
#: the note asks whether the ranks share its cause.
WIDE_SPREAD = 0.1
#: The median absolute deviation of a normal distribution, in standard
#: deviations: 1 / this scales it back.
MAD_TO_STD = 1.4826


def spread_setting(text: str) -> str | float:
    """The `stragglers=` parameter: auto, or the ranks' step standard
    deviation in ms (0: no wait)."""
    value = str(text).strip().lower()
    if value == "auto":
        return value
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(value)
    return number


spread_setting.__name__ = "standard deviation in ms (or auto)"

STRAGGLERS_PARAMETER = Parameter(
    spread_setting, "auto",
    "the wait for the slowest rank at each gradient synchronization: auto (the spread of the "
    "trace's own iterations, ranks assumed independent), MS (the ranks' "
    "step standard deviation), 0 (none)")


@functools.lru_cache(maxsize=64)
def expected_max_of_normals(n: int) -> float:
    """E[max of n independent standard normal draws]: 0 for n = 1,
    1/sqrt(pi) for 2, 1.5/sqrt(pi) for 3."""
    if n <= 1:
        return 0.0
    # E[max] = the integral of (1 - F^n) over x > 0 minus that of F^n
    # over x < 0 (F: the normal CDF).
    upper = np.linspace(0.0, 12.0, 12_001)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(upper / math.sqrt(2.0)))
    below = 1.0 - cdf  # F(-x) = 1 - F(x)
    return float(np.trapezoid(1.0 - cdf ** n, upper) - np.trapezoid(below ** n, upper))


def robust_spread_ns(iteration_ns: list[int]) -> float | None:
    """1.4826 × the median absolute deviation of the iterations' times;
    None for fewer than MIN_ITERATIONS."""
    if len(iteration_ns) < MIN_ITERATIONS:
        return None
    times = np.asarray(iteration_ns, dtype=np.float64)
    return MAD_TO_STD * float(np.median(np.abs(times - np.median(times))))


@dataclass(slots=True, frozen=True)
class StragglerWait:
    """How long each synchronization waits for the slowest rank, and the note that says where it
    came from; where the spread comes from the trace (`from_trace`), the spread and the multiplier
    that made the wait, for the contention pass to add what it finds (add_spread)."""

    wait_ns: int
    note: str
    spread_ns: float = 0.0
    multiplier: float = 0.0
    from_trace: bool = False


def straggler_wait(name: str, setting: str | float, iteration_ns: list[int], world: int,
                   accumulate: int = 1, simulated: int = 1) -> StragglerWait:
    """The wait of one gradient synchronization of `world` ranks, each synchronizing every
    `accumulate` iterations, per `setting` (auto: from the recorded `iteration_ns`). `simulated`
    ranks of the job are simulated together: the differences between their recordings are already in
    the job's time, so only the ranks beyond them add a wait."""
    if world <= 1:
        return StragglerWait(0, "")
    traced = min(max(simulated, 1), world)
    if traced == world:
        return StragglerWait(0, f"{name}: no wait for the slowest rank added: all {world} ranks "
                                "are simulated together from their own recordings, whose "
                                "differences set each iteration")
    multiplier = expected_max_of_normals(world) - expected_max_of_normals(traced)
    factor = multiplier * math.sqrt(accumulate)
    how = (f"{multiplier:.2f} (E[max of {world} normal draws]" + (
        f" − E[max of {traced}]: the job's {traced} traced ranks, simulated together, carry their "
        "own differences"
        if traced > 1 else "") + ")"
        + (f" × √{accumulate} (accumulate={accumulate}: the ranks drift for {accumulate} steps)"
           if accumulate > 1 else ""))
    if setting != "auto":
        spread = float(setting) * 1e6
        if spread <= 0:
            return StragglerWait(0, f"{name}: stragglers=0: no wait for the slowest rank modelled")
        wait = int(round(factor * spread))
        return StragglerWait(wait, f"{name}: stragglers: each synchronization waits "
                                   f"+{wait / 1e6:.3g} ms for the slowest of {world} ranks: "
                                   f"{spread / 1e6:.3g} ms (stragglers=) × {how}")
    spread_or_none = robust_spread_ns(iteration_ns)
    if spread_or_none is None:
        return StragglerWait(0, f"{name}: no wait for the slowest rank from the trace's "
                                f"iterations: it records {len(iteration_ns)}, {MIN_ITERATIONS} are "
                                "needed to see how steps vary (stragglers=MS sets it)", 0.0, factor,
                             True)
    wait = int(round(factor * spread_or_none))
    share = spread_or_none / float(np.median(iteration_ns))
    wide = (f"; a spread of {share:.0%} is more than jitter: if every rank's steps vary alike (a "
            "shared input, a schedule), give stragglers=0") if share > WIDE_SPREAD else ""
    return StragglerWait(wait, (
        f"{name}: stragglers: each synchronization waits +{wait / 1e6:.3g} ms for the slowest of "
        f"{world} ranks: the trace's {len(iteration_ns)} iterations vary by "
        f"{spread_or_none / 1e6:.3g} ms (1.4826 × median absolute deviation, {share * 100:.1f}% of "
        f"the median; one-off iterations left out) × {how}, assuming the ranks vary independently "
        "(stragglers=0 leaves it out; stragglers=MS sets their standard deviation)" + wide),
        spread_or_none, factor, True)


def add_spread(spread_ns: float, extra_ns: float) -> float:
    """Two independent sources of a rank's variation together: their
    standard deviations added in quadrature."""
    return math.hypot(spread_ns, extra_ns)


def contention_spread_ns(stretch_ns: float, events: int, host_ranks: int) -> float:
    """The standard deviation of one rank's stretch when the compute time
    `stretch_ns` that contention takes from each of `host_ranks` ranks sharing a
    host's CPUs is really taken from one of them at a time, at random, in `events`
    equal pieces (gloo's threads take a core from whichever compute thread the
    scheduler picks): S·√((R − 1) / M). 0 with one rank per host or no events."""
    if host_ranks <= 1 or events <= 0 or stretch_ns <= 0:
        return 0.0
    return stretch_ns * math.sqrt((host_ranks - 1) / events)
