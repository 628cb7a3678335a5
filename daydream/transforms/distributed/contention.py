"""How much inserted communication and the rank's compute slow each other where they overlap.

simulate/contention.py applies the factor; this module finds it, per trace:

- **GPU**: from the trace itself, where a recorded collective (NCCL/RCCL kernel) ran beside compute
  kernels: for each kernel name seen both with a collective running beside it (most of its time) and
  without one, the ratio of its median durations; the factor is their mean weighted by the time
  spent beside collectives. A trace with no such overlap (one GPU, or collectives that never overlap
  compute) gives no evidence: no contention is modelled, and the note says so.
- **CPU** (gloo): compute threads and gloo's threads share the host's cores. The ranks on one host
  (`gpus_per_node`, at most `world`) each run their intra-op threads plus one gloo thread; where
  they all want a core, each gets cpus / demand of one: factor max(1, demand / cpus), from the CPUs
  and threads `daydream trace` records (an older trace does not say them: no contention, said).
  A collective the host blocks in (fsdp, tp) slows only while the other ranks compute beside it,
  and they compute for the share of the step their host work fills (`blocking_stretch`).

`contention=F` sets the factor; `contention=1` turns it off.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.graph.model import HOST_TASKS
from daydream.intervals import Coverage
from daydream.trace import EventKind, Trace
from daydream.transforms.registry import Context, Parameter

CONTENTION_PARAMETER = Parameter(
    str, "auto", "auto: calibrated from the trace (GPU: kernels with and without a recorded "
                 "collective beside them; CPU: the host's CPUs against the ranks' compute and gloo "
                 "threads); F >= 1 sets it; 1: none")
#: Samples of a kernel name needed on each side (beside a collective, alone) for its ratio to count.
MIN_SAMPLES = 3
#: A kernel counts as beside a collective when one runs for at least this share of its time.
BESIDE_SHARE = 0.5
#: Factors beyond this are not contention but a different kernel behind the same name.
MAX_FACTOR = 4.0


def gpu_slowdown(trace: Trace) -> tuple[float, int] | None:
    """(the factor, kernels it rests on) from the trace's compute kernels beside and away from its
    collectives; None without evidence."""
    kernels = trace.indices(EventKind.KERNEL)
    collectives = trace.indices(EventKind.COMMUNICATION)
    if kernels.size == 0 or collectives.size == 0:
        return None
    busy = Coverage(trace.ts_ns[collectives], trace.end_ns[collectives])
    share = busy.share_of_each(trace.ts_ns[kernels], trace.end_ns[kernels])
    beside, alone = share >= BESIDE_SHARE, share == 0
    names, durations = trace.name[kernels], trace.dur_ns[kernels]
    near_names, near_median, near_count, near_total = _per_name(names[beside], durations[beside])
    away_names, away_median, away_count, _ = _per_name(names[alone], durations[alone])
    _, near_at, away_at = np.intersect1d(near_names, away_names, assume_unique=True,
                                         return_indices=True)
    usable = ((near_count[near_at] >= MIN_SAMPLES) & (away_count[away_at] >= MIN_SAMPLES)
              & (away_median[away_at] > 0))
    if not usable.any():
        return None
    near_at, away_at = near_at[usable], away_at[usable]
    ratios = near_median[near_at] / away_median[away_at]
    factor = float(np.clip(np.average(ratios, weights=near_total[near_at]), 1.0, MAX_FACTOR))
    return factor, int(np.count_nonzero(beside))


def _per_name(names: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per distinct name (sorted): its median duration, how many there are, their total."""
    if names.size == 0:
        empty = np.zeros(0)
        return names, empty, empty, empty
    order = np.lexsort((durations, names))
    names, durations = names[order], durations[order].astype(np.float64)
    first = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
    count = np.diff(np.r_[first, names.size])
    median = (durations[first + (count - 1) // 2] + durations[first + count // 2]) / 2
    return names[first], median, count, np.add.reduceat(durations, first)


def calibrate(graph: Graph, params: dict[str, Any], context: Context,
              ranks_per_host: int) -> tuple[float, str]:
    """(factor, how it was found) for the communication a data-parallel
    what-if inserts into `graph`."""
    text = str(params.get("contention", "auto")).strip().lower()
    if text != "auto":
        try:
            factor = float(text)
        except ValueError:
            factor = float("nan")
        if not 1.0 <= factor <= 100.0:
            raise InputError(f"contention={text!r}: write auto, or a factor from 1 (no contention) "
                             "to 100")
        return factor, "set by contention=" if factor > 1.0 else "off (contention=1)"
    if graph.has_device_work():
        if context.gpu_contention is None:
            return (1.0, "none: the trace shows no compute kernel beside a collective to calibrate "
                         "from")
        factor, kernels = context.gpu_contention
        return factor, f"calibrated on {kernels} kernels the trace ran beside its collectives"
    cpus, threads = (int(context.host.get("cpus", 0) or 0),
                     int(context.host.get("intra_op_threads", 0) or 0))
    if cpus <= 0 or threads <= 0:
        return (1.0, "none: the trace does not record the host's CPUs and threads (record it with "
                     "daydream trace)")
    return (cpu_factor(cpus, threads, ranks_per_host),
            f"{ranks_per_host} ranks × ({threads} compute + 1 gloo thread) on {cpus} CPUs")


def cpu_factor(cpus: int, threads: int, ranks_per_host: int) -> float:
    """The CPU contention factor: `ranks_per_host` ranks × (`threads` computing + 1 gloo thread) on
    `cpus` CPUs, where they all want a core (at least 1)."""
    return max(1.0, ranks_per_host * (threads + 1) / cpus)


def blocking_stretch(factor: float, host_ns: float, collective_ns: float) -> float:
    """How much each collective a rank blocks in is stretched where the ranks share the host's CPUs
    (`factor`, `cpu_factor`): while this rank waits in it, the other ranks compute for the share
    of the step their host work fills, b = H / T, and only then take the cores it needs, so
    s = 1 + (factor - 1) b. The step T = H + C s, this rank's host work `host_ns` (H) and its
    collectives `collective_ns` (C) one after the other, so s solves
    C s^2 + (H - C) s - factor H = 0.

    Host-bound ranks (all compute) get the whole factor; ranks that mostly wait in collectives
    hardly any: on this project's 2-core machine, FSDP2's all-gathers in the real two-rank runs'
    traces took about 1.4 times the link's time on suite/a2c (small units, its step mostly
    collectives) and 1.8 to 2.2 times on examples/transformer, whose 1-4 MiB all-gathers the
    fitted link itself times 23-26% low (docs/validation-parallel.md)."""
    if factor <= 1.0 or collective_ns <= 0 or host_ns <= 0:
        return 1.0
    linear = host_ns - collective_ns
    root = math.sqrt(linear * linear + 4.0 * collective_ns * factor * host_ns)
    # the root's two forms, each free of cancellation on its side
    if linear >= 0:
        return 2.0 * factor * host_ns / (linear + root)
    return (root - linear) / (2.0 * collective_ns)


def blocking_note(stretch: float, factor: float) -> str:
    """What `blocking_stretch` gave, for a what-if's note."""
    return (f"each collective ×{stretch:.2f}: the other ranks sharing the host's CPUs (contention "
            f"×{factor:.2f}) compute for {(stretch - 1) / (factor - 1):.0%} of the step while this "
            "one waits in it")


def host_work_ns(graph: Graph) -> int:
    """The host work of the graph's iterations: each host task's time and the host time before
    it."""
    tasks = graph.tasks
    mine = np.isin(tasks["kind"], HOST_TASKS) & (tasks["iteration"] >= 0)
    return int(tasks["duration_ns"][mine].sum() + tasks["gap_ns"][mine].sum())
