"""How fast this CPU runs just now: one fixed fp32 multiply, timed with its operands in the caches.

A trace records it when its iterations are done (the host facts' `speed_probe_hot_ns`), and the
cost stage's measured tier records it with each time it caches. A shared or virtual machine's
speed drifts by tens of percent over hours: on this project's 2-core virtual machine the same
multiplies measured 1.26 to 1.39 times longer (the middle half of 27 large ones) in a session
after the one whose cache had kept them, and two examples' steps took 1.47 and 1.52 times as long.
A time cached then, carried to a trace recorded now, would carry that drift into every prediction
made from it (cost/measure.py `Measurer.cached`: a cached time × the trace's probe / the probe of
the process that measured it, beyond the factor two probes fall apart by within one run,
`PROBE_SPREAD`: within a run the probe moves as much as a step does, and not with it).

The multiply runs hot, as the core's own speed: with the caches emptied first (the probe before,
recorded as `speed_probe_ns`), it also timed what another process did to memory just then. On the
2-core AVX2 machine, with the other core streaming through 64 MiB, the emptied probe took 2.6-3.1
ms against 2.1-2.4 alone while the hot one stayed at 1.9-2.2; in one run of the examples' `amp`
the emptied probes of the measuring processes ranged from 2.2 to 3.9 ms, and a bf16 convolution
measured at 33.5 ms (the real bf16 step ran it in 33.0) was carried to 21.9 ms, 0.65 of it: the
convolution is bound by the core, not by memory (docs/validation-whatif-cpu.md, seventh run). A
probe recorded before this one is not carried from (a trace that has only `speed_probe_ns` gets
its cached times as measured).

    speed_probe_ns(threads=1)  # e.g. 1_100_000 (None without torch)
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

#: The probe: bias + [256, 512] x [512, 512], fp32 (0.13 GFLOP, about a millisecond on one core of a
#: server CPU), its operands in the caches from the run before.
PROBE_SHAPES = ((512,), (256, 512), (512, 512))
#: Warm-up runs, then timed runs (the median kept).
PROBE_WARMUP = 3
PROBE_REPETITIONS = 15
#: The host fact a trace records the probe under (`speed_probe_ns` held the emptied one's).
PROBE_FACT = "speed_probe_hot_ns"
#: How far apart two processes' probes fall with no drift between them: in one run of the examples'
#: `amp`, `batch-size`, `checkpoint` and `compile` on the 2-core AVX2 machine (five rounds, 75
#: traces), the traces' probes took 1.59-4.07 ms (median 2.09) and those of the 12 processes that
#: measured the cost stage's times 1.84-2.40; 95% of the ratios of a baseline's probe to a measuring
#: process's fell within this factor, while the steps did not follow the probes. Carried by the
#: whole ratio, the MLP's `amp` came out worse in every one of the five rounds (median error -10.9%,
#: against -1.8% carried beyond this factor only; docs/validation-whatif-cpu.md).
PROBE_SPREAD = 1.3


def cpu_clock(threads: int) -> Callable[[], int]:
    """What a run on `threads` intra-op threads is timed by, ns: with one, the thread's own CPU
    time, which another process taking the core does not stretch (with two busy loops beside it on
    a 2-core machine, a [1536, 256] x [256, 1024] multiply read 20-24 ms of wall time and 9-12 ms
    of its thread's; a cache on this project's machine had kept 14.6 ms for it, where measured again
    alone it took 6.7 ms); with more, the wall clock (the op's work runs on the other threads as
    well, while this one waits)."""
    return time.thread_time_ns if threads == 1 else time.perf_counter_ns


def speed_probe_ns(threads: int | None = None) -> int | None:
    """The probe's median time here now, ns, on `threads` intra-op threads (None: torch's setting);
    None where torch cannot be imported."""
    try:
        import torch
    except ImportError:
        return None
    previous = torch.get_num_threads()
    count = threads or previous
    torch.set_num_threads(count)
    try:
        with torch.no_grad():
            return _timed(torch, cpu_clock(count))
    finally:
        torch.set_num_threads(previous)


def _timed(torch: Any, clock: Callable[[], int]) -> int:
    bias, rows, weight = (torch.randn(*shape) for shape in PROBE_SHAPES)
    for _ in range(PROBE_WARMUP):
        torch.addmm(bias, rows, weight)
    times = []
    for _ in range(PROBE_REPETITIONS):
        start = clock()
        torch.addmm(bias, rows, weight)
        times.append(clock() - start)
    return max(1, int(statistics.median(times)))


def recorded_speed() -> dict[str, int]:
    """The host fact a trace records: {PROBE_FACT: ...} on the intra-op threads its script set,
    where the script imported torch; empty otherwise (a probe of its own would import torch into a
    process that never used it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    found = speed_probe_ns(int(torch.get_num_threads()))
    return {PROBE_FACT: found} if found is not None else {}


def drift_beyond_spread(trace_ns: int, measured_ns: int) -> float:
    """The factor a time measured at probe `measured_ns` is carried by to a trace whose probe took
    `trace_ns`: their ratio beyond `PROBE_SPREAD` on either side, 1 within it (two probes that far
    apart tell the machine's moment-to-moment noise, not a drift)."""
    ratio = trace_ns / measured_ns
    if ratio > PROBE_SPREAD:
        return ratio / PROBE_SPREAD
    if ratio < 1 / PROBE_SPREAD:
        return ratio * PROBE_SPREAD
    return 1.0
