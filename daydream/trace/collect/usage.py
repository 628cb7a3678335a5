"""What the recorded iterations cost the process in the kernel: page faults and system time per
iteration, and how far the resident set grew, counted at each step boundary from getrusage.

A profiler keeps every event it records in the process's own heap until it exports them. On the
CPU those small allocations land in the holes that freed tensors leave, so the next large tensor no
longer fits there and the heap grows instead: each recorded iteration can touch fresh pages the
same script without the profiler reuses. Page faults cost from about a microsecond each on bare
metal to tens of microseconds in virtual machines that hand free memory back to their host; the ops
that write the fresh memory (a `zero_` of the logits, an optimizer's temporaries) run that much
slower in the trace than they do without it. The counts let the analysis say so
(`simulate/whatif.py`: `kernel_time_warning`).

    usage = HostUsage(warmup=1, iterations=3)
    usage.at_step(1)     # at each step boundary, with the steps taken so far
    ...
    usage.recorded()     # {"iterations": [{"minor_faults": ..., "system_ns": ..., "wall_ns": ...}],
                         #  "max_rss_bytes": [before, after]}
"""

from __future__ import annotations

import sys
import time
from typing import Any


def _sample() -> tuple[int, int, int, int] | None:
    """(minor faults, major faults, system ns, peak resident bytes) of this process so far; None
    where getrusage does not exist (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # ru_maxrss: kilobytes on Linux, bytes on macOS
    peak = int(usage.ru_maxrss) * (1 if sys.platform == "darwin" else 1024)
    return int(usage.ru_minflt), int(usage.ru_majflt), int(usage.ru_stime * 1e9), peak


def _now() -> int:
    """The wall clock of the boundaries, ns."""
    return time.perf_counter_ns()


class HostUsage:
    """Page faults, system time and wall time of each recorded iteration (the steps after
    `warmup`, `iterations` of them), from samples taken at the step boundaries."""

    def __init__(self, warmup: int, iterations: int) -> None:
        self.warmup, self.iterations = warmup, iterations
        self._samples: list[tuple[int, tuple[int, int, int, int]]] = []

    def begin(self) -> None:
        """Call when the script starts: the boundary before the first iteration (--warmup 0)."""
        self.at_step(0)

    def at_step(self, steps: int) -> None:
        """Call at each step boundary with the steps taken so far; samples only the boundaries of
        the recorded iterations, so the rest of the run pays nothing."""
        if self.warmup <= steps <= self.warmup + self.iterations:
            sample = _sample()
            if sample is not None:
                self._samples.append((_now(), sample))

    def recorded(self, reserved: int = 0) -> dict[str, Any] | None:
        """Per recorded iteration its counts, the peak resident bytes at the start of the first
        and the end of the last, and the heap reserved before them (`heap.py`); None unless every
        boundary was sampled."""
        if len(self._samples) != self.iterations + 1:
            return None
        pairs = zip(self._samples, self._samples[1:])
        iterations = [{"minor_faults": b[0] - a[0], "major_faults": b[1] - a[1],
                       "system_ns": b[2] - a[2], "wall_ns": t_b - t_a}
                      for (t_a, a), (t_b, b) in pairs]
        return {"iterations": iterations,
                "max_rss_bytes": [self._samples[0][1][3], self._samples[-1][1][3]],
                "heap_reserve_bytes": reserved}
