"""What the recorded iterations cost the process in the kernel: page faults and system time per
iteration, and how far the resident set grew, counted at each step boundary from getrusage; and the
heap reserve (`heap.py`) made at the boundary before the first of them, which exists because the
profiler's own records can make a recorded iteration fault in fresh memory. The counts let the
analysis say where that happened anyway (`simulate/kernel_time.py`).

    usage = HostUsage.recording(warmup=1, iterations=3, reserve=True)
    usage.begin()        # when the script starts
    usage.at_step(1)     # at each step boundary, with the steps taken so far
    ...
    usage.recorded()     # {"iterations": [{"minor_faults": ..., "major_faults": ...,
                         #                  "system_ns": ..., "wall_ns": ...}, ...],
                         #  "max_rss_bytes": [before, after], "heap_reserve_bytes": ...}
"""

from __future__ import annotations

import sys
import time
from typing import Any

from daydream.trace.collect.heap import HeapReserve


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


def minor_faults() -> int:
    """The pages this process has faulted in so far (0 where getrusage does not exist)."""
    sample = _sample()
    return sample[0] if sample is not None else 0


def _now() -> int:
    """The wall clock of the boundaries, ns."""
    return time.perf_counter_ns()


class HostUsage:
    """Page faults, system time and wall time of each recorded iteration (the steps after
    `warmup`, `iterations` of them), from samples taken at the step boundaries; `reserve`, where
    given, makes its reserve at the same boundaries, before they are sampled."""

    def __init__(self, warmup: int, iterations: int, reserve: HeapReserve | None = None) -> None:
        self.warmup, self.iterations, self.reserve = warmup, iterations, reserve
        self._samples: list[tuple[int, tuple[int, int, int, int]]] = []

    @classmethod
    def recording(cls, warmup: int, iterations: int, reserve: bool) -> HostUsage:
        """The counts of a recording, with its heap reserve where `reserve` (--heap-reserve)."""
        return cls(warmup, iterations, HeapReserve(warmup, iterations, enabled=reserve))

    def begin(self) -> None:
        """Call when the script starts: the boundary before the first iteration (--warmup 0)."""
        self.at_step(0)

    def at_step(self, steps: int) -> None:
        """Call at each step boundary with the steps taken so far, before recording moves on;
        samples only the boundaries of the recorded iterations, so the rest of the run pays
        nothing (the reserve's own time lands before the first sample)."""
        if self.reserve is not None:
            self.reserve.at_step(steps)
        if self.warmup <= steps <= self.warmup + self.iterations:
            sample = _sample()
            if sample is not None:
                self._samples.append((_now(), sample))

    def recorded(self) -> dict[str, Any] | None:
        """Per recorded iteration its counts, the peak resident bytes at the start of the first
        and the end of the last, and the heap reserved before them; None unless every boundary
        was sampled."""
        if len(self._samples) != self.iterations + 1:
            return None
        pairs = zip(self._samples, self._samples[1:])
        iterations = [{"minor_faults": b[0] - a[0], "major_faults": b[1] - a[1],
                       "system_ns": b[2] - a[2], "wall_ns": t_b - t_a}
                      for (t_a, a), (t_b, b) in pairs]
        return {"iterations": iterations,
                "max_rss_bytes": [self._samples[0][1][3], self._samples[-1][1][3]],
                "heap_reserve_bytes": self.reserve.reserved if self.reserve is not None else 0}
