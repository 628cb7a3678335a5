"""Training iterations: where each one starts and ends on the host timeline.

In order of preference:

1. a user-given marker (a regular expression over annotation / op names; each
   matching span is one iteration);
2. `ProfilerStep#N` annotations (each one's span is the iteration);
3. optimizer-step annotations (`Optimizer.step#SGD.step`, ...): iteration k runs
   from the end of step k-1 (the first from the start of the trace) to the end
   of step k;
4. otherwise the whole trace is one iteration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from daydream._regex import Pattern, user_regex
from daydream.trace import EventKind, Trace, TrackKind

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")

SOURCE_MARKER = "marker"
SOURCE_PROFILER_STEP = "profiler_step"
SOURCE_OPTIMIZER_STEP = "optimizer_step"
SOURCE_WHOLE_TRACE = "whole_trace"


@dataclass(slots=True, frozen=True)
class Iteration:
    """One training iteration; times in ns on the trace's time base."""

    name: str
    start_ns: int
    end_ns: int
    source: str

    @property
    def measured_ns(self) -> int:
        return self.end_ns - self.start_ns


def find_iterations(trace: Trace, marker: str | None = None) -> list[Iteration]:
    """The iterations of `trace`, by the first rule above that finds any."""
    if marker is not None:
        return _marked_spans(trace, _compile(marker), SOURCE_MARKER)
    steps = _marked_spans(trace, PROFILER_STEP, SOURCE_PROFILER_STEP)
    if steps:
        return steps
    optimizer = _optimizer_iterations(trace)
    if optimizer:
        return optimizer
    start, end = trace.span_ns()
    return [Iteration("whole trace", start, end, SOURCE_WHOLE_TRACE)] if len(trace) else []


def _compile(marker: str) -> Pattern:
    return user_regex(marker, "--iteration-marker", example="'ProfilerStep#\\d+'")


def _host_rows_named(trace: Trace, pattern: Pattern | re.Pattern[str]) -> np.ndarray:
    matching = np.array([bool(pattern.search(s)) for s in trace.strings], dtype=bool)
    host_track = ~trace.track_is_gpu()
    rows = trace.indices(EventKind.ANNOTATION, EventKind.CPU_OP)
    return rows[matching[trace.name[rows]] & host_track[trace.track[rows]]]


def _marked_spans(trace: Trace, pattern: Pattern | re.Pattern[str], source: str) -> list[Iteration]:
    iterations: list[Iteration] = []
    seen: set[str] = set()
    for row in _host_rows_named(trace, pattern).tolist():
        name = trace.name_of(row)
        if source == SOURCE_PROFILER_STEP and name in seen:
            continue  # a copy of the same step (e.g. on a second thread)
        seen.add(name)
        start = int(trace.ts_ns[row])
        iterations.append(Iteration(name, start, start + int(trace.dur_ns[row]), source))
    return iterations


def _optimizer_iterations(trace: Trace) -> list[Iteration]:
    rows = _host_rows_named(trace, OPTIMIZER_STEP)
    if rows.size == 0:
        return []
    ends = trace.end_ns[rows]
    # An optimizer step annotated twice (nested record_function) ends once.
    keep = np.ones(rows.size, dtype=bool)
    keep[1:] = trace.ts_ns[rows[1:]] >= ends[:-1]
    rows, ends = rows[keep], ends[keep]
    start = _host_start(trace)
    iterations = []
    for number, (row, end) in enumerate(zip(rows.tolist(), ends.tolist()), start=1):
        iterations.append(Iteration(f"{trace.name_of(row)} [{number}]", start, int(end),
                                    SOURCE_OPTIMIZER_STEP))
        start = int(end)
    return iterations


def _host_start(trace: Trace) -> int:
    host = np.array([t.kind is TrackKind.HOST for t in trace.tracks], dtype=bool)[trace.track]
    return int(trace.ts_ns[host].min()) if host.any() else trace.span_ns()[0]


def settle(starts: list[int], ends: list[int], gpu_ends: list[int | None],
           previous_end: int | None = None) -> list[tuple[int, int]]:
    """The rule above on plain numbers: per iteration, its markers' times and the end of its last
    GPU work (None: it launched none) -> its window (start, end). `previous_end`: the end of an
    iteration before the first."""
    windows: list[tuple[int, int]] = []
    for start, end, gpu_end in zip(starts, ends, gpu_ends):
        end = max(end, gpu_end) if gpu_end is not None else end
        if previous_end is not None:
            start = min(max(start, previous_end), end)
        windows.append((start, end))
        previous_end = end
    return windows


def completed(trace: Trace, iterations: list[Iteration], launch: np.ndarray) -> list[Iteration]:
    """`iterations`, each to its completion: its end marker passed and the GPU work launched inside
    it finished (`launch`: per row, the row of the call that launched it, -1 for none;
    mapping.link). See daydream.graph.windows for why; the graph's windows follow the same rule."""
    if not iterations:
        return iterations
    starts = np.array([it.start_ns for it in iterations], dtype=np.int64)
    ends = np.array([it.end_ns for it in iterations], dtype=np.int64)
    rows = np.flatnonzero(launch >= 0)
    launched_at = trace.ts_ns[launch[rows]]
    owner = np.searchsorted(starts, launched_at, side="right") - 1
    inside = (owner >= 0) & (launched_at < ends[np.maximum(owner, 0)])
    last = np.full(len(iterations), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, owner[inside], trace.end_ns[rows[inside]])
    gpu_ends = [int(v) if v != np.iinfo(np.int64).min else None for v in last.tolist()]
    settled = settle(starts.tolist(), ends.tolist(), gpu_ends)
    return ([Iteration(it.name, start, end, it.source)
             for it, (start, end) in zip(iterations, settled)])
