"""Recorded iterations that spent much of their time in the kernel: the warning a prediction
carries when the trace's own host ran slower than the script does without the profiler.

`daydream trace` counts page faults and system time per recorded iteration
(trace/collect/usage.py). A profiler's event records grow the heap while it records, so a
recorded iteration can fault in fresh pages that the same script without the profiler reuses;
where each fault is dear (virtual machines that hand free memory back to their host) the ops
writing that memory take many times their time. The simulator replays what was recorded, so the
baseline and every prediction keep that time; this says how much of it there was.

    kernel_time_warning({"host_usage": {"iterations": [...], "max_rss_bytes": [a, b]}})
"""

from __future__ import annotations

import statistics
from typing import Any

#: An iteration this share of whose wall time was system time is said to be kernel-bound.
SHARE = 0.10


def _iterations(collector: Any) -> list[dict[str, int]]:
    """The well-formed per-iteration counts of a daydream recording's `host_usage` (else [])."""
    usage = collector.get("host_usage") if isinstance(collector, dict) else None
    entries = usage.get("iterations") if isinstance(usage, dict) else None
    if not isinstance(entries, list):
        return []
    keys = ("minor_faults", "system_ns", "wall_ns")
    return [entry for entry in entries if isinstance(entry, dict)
            and all(isinstance(entry.get(k), int) and entry[k] >= 0 for k in keys)
            and entry["wall_ns"] > 0]


def _growth(collector: dict[str, Any]) -> str:
    """", the process grew from A to B MiB while recording" where the recording says so."""
    peaks = collector["host_usage"].get("max_rss_bytes")
    if (not isinstance(peaks, list) or len(peaks) != 2
            or not all(isinstance(p, int) and p > 0 for p in peaks) or peaks[1] <= peaks[0]):
        return ""
    return (f"; the process's resident memory grew from {peaks[0] / 2**20:,.0f} to "
            f"{peaks[1] / 2**20:,.0f} MiB while it recorded")


def kernel_time_warning(collector: Any) -> str | None:
    """A sentence on the recorded iterations whose system time was at least SHARE of their wall
    time, or None (none were, or the trace did not count them)."""
    entries = _iterations(collector)
    heavy = [e for e in entries if e["system_ns"] >= SHARE * e["wall_ns"]]
    if not heavy:
        return None
    system = statistics.median(e["system_ns"] for e in heavy) / 1e6
    wall = statistics.median(e["wall_ns"] for e in heavy) / 1e6
    faults = statistics.median(e["minor_faults"] for e in heavy)
    which = "the recorded iterations" if len(heavy) == len(entries) else \
        f"{len(heavy)} of the {len(entries)} recorded iterations"
    return (f"{which} spent a median {system:,.1f} ms of {wall:,.1f} ms in the kernel "
            f"({faults:,.0f} page faults an iteration{_growth(collector)}): the profiler's own "
            "records grow the heap, so ops that write fresh memory ran slower than the script "
            "runs without the profiler, and the baseline and every prediction keep that time; "
            "record fewer iterations (daydream trace -n 3) or time the script unprofiled to see "
            "how much")
