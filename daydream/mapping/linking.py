"""Linking GPU work to the API call that launched it, and calls to their CPU op.

GPU activity → API call: by CUPTI correlation id (`args.correlation`), never by
flow events, which are often incomplete; never to a call that starts after the
activity does (a damaged or reused id). One `cudaGraphLaunch` correlation
covers many GPU activities. GPU activities whose correlation is below every
host call's (their launch happened before the trace window) are *orphans*:
counted and flagged, never linked to a wrong call.

API call → CPU op, two conventions seen in real traces:

* **external-id** ("N"): the call's `External id` is the `External id` of the
  CPU op that launched it;
* **time-nesting** ("O"): the call's `External id` merely repeats its own
  correlation, so the call is placed in the innermost `cpu_op` that encloses
  it in time on the same host thread.

The convention is detected per trace; a call whose external id does not point
at an enclosing op on its own thread falls back to time nesting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.trace import API_KINDS, GPU_ACTIVITY_KINDS, NO_VALUE, EventKind, Trace

EXTERNAL_ID = "external-id"
TIME_NESTING = "time-nesting"
_CONVENTIONS = (EXTERNAL_ID, TIME_NESTING)
_LINKED_KINDS = (*GPU_ACTIVITY_KINDS, EventKind.SYNC)


@dataclass(slots=True)
class Links:
    """Per-event links (arrays as long as the trace; -1 where there is none).

    `launch[i]`: for a GPU activity or sync record, the row of its launching API call.
    `op[i]`: for an API call or GPU activity, the row of its innermost enclosing CPU op.
    `orphan[i]`: True for GPU work launched before the trace window.
    """

    launch: np.ndarray
    op: np.ndarray
    orphan: np.ndarray
    convention: str

    def save_into(self, trace: Trace) -> None:
        trace.derived["mapping.launch"] = self.launch
        trace.derived["mapping.op"] = self.op
        trace.derived["mapping.orphan"] = self.orphan
        trace.derived["mapping.convention"] = np.array([_CONVENTIONS.index(self.convention)],
                                                       dtype=np.int8)

    @classmethod
    def from_trace(cls, trace: Trace) -> Links | None:
        derived = trace.derived
        if "mapping.launch" not in derived or derived["mapping.launch"].shape[0] != len(trace):
            return None
        return cls(
            launch=derived["mapping.launch"],
            op=derived["mapping.op"],
            orphan=derived["mapping.orphan"].astype(bool),
            convention=_CONVENTIONS[int(derived["mapping.convention"][0])],
        )


def link(trace: Trace) -> Links:
    """Link every GPU activity to its launch and every launch to its CPU op.

    The result is also stored in `trace.derived`, so that a cached trace keeps it;
    a trace that already carries links gets them back without recomputation.
    """
    cached = Links.from_trace(trace)
    if cached is not None:
        return cached
    launch, orphan = link_launches(trace)
    convention = detect_convention(trace)
    op = link_calls_to_ops(trace, convention)
    gpu = np.flatnonzero(launch >= 0)
    op[gpu] = op[launch[gpu]]
    links = Links(launch=launch, op=op, orphan=orphan, convention=convention)
    links.save_into(trace)
    return links


def link_launches(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(launch row per event, orphan flag per event), matching by correlation id."""
    n = len(trace)
    launch = np.full(n, NO_VALUE, dtype=np.int64)
    orphan = np.zeros(n, dtype=bool)
    gpu_rows = trace.indices(*_LINKED_KINDS)
    gpu_rows = gpu_rows[trace.correlation[gpu_rows] != NO_VALUE]
    api_rows = trace.indices(*API_KINDS)
    api_rows = api_rows[trace.correlation[api_rows] != NO_VALUE]
    if gpu_rows.size == 0:
        return launch, orphan
    if api_rows.size == 0:
        orphan[gpu_rows] = True
        return launch, orphan
    # Sort calls by correlation; on a tie, the runtime call (kind 1) wins over the driver call.
    order = np.lexsort((trace.kind[api_rows], trace.correlation[api_rows]))
    api_sorted = api_rows[order]
    api_corr = trace.correlation[api_sorted]
    wanted = trace.correlation[gpu_rows]
    position = np.searchsorted(api_corr, wanted, side="left")
    found = position < api_corr.size
    found[found] = api_corr[position[found]] == wanted[found]
    # Work cannot start before the call that launched it: such a match is a damaged or reused id.
    found[found] = trace.ts_ns[gpu_rows[found]] >= trace.ts_ns[api_sorted[position[found]]]
    launch[gpu_rows[found]] = api_sorted[position[found]]
    orphan[gpu_rows[~found & (wanted < api_corr[0])]] = True
    return launch, orphan


def detect_convention(trace: Trace) -> str:
    """EXTERNAL_ID when API calls' external ids point at ops,
    TIME_NESTING when they repeat the correlation."""
    api_rows = trace.indices(*API_KINDS)
    external = trace.external_id[api_rows]
    has_external = external != NO_VALUE
    if not has_external.any():
        return TIME_NESTING
    repeats = external[has_external] == trace.correlation[api_rows][has_external]
    return TIME_NESTING if repeats.mean() > 0.5 else EXTERNAL_ID


def link_calls_to_ops(trace: Trace, convention: str) -> np.ndarray:
    """Row of the innermost enclosing CPU op of every API call (-1 where none)."""
    op = np.full(len(trace), NO_VALUE, dtype=np.int64)
    api_rows = trace.indices(*API_KINDS)
    if api_rows.size == 0:
        return op
    resolved = np.zeros(api_rows.size, dtype=bool)
    if convention == EXTERNAL_ID:
        resolved = _link_by_external_id(trace, api_rows, op)
    pending = api_rows[~resolved]
    if pending.size:
        _link_by_nesting(trace, pending, op)
    return op


def _link_by_external_id(trace: Trace, api_rows: np.ndarray, op: np.ndarray) -> np.ndarray:
    op_rows = trace.indices(EventKind.CPU_OP)
    resolved = np.zeros(api_rows.size, dtype=bool)
    if op_rows.size == 0:
        return resolved
    # Several ops may share an external id in odd files; keep the first of each.
    op_external = trace.external_id[op_rows]
    order = np.argsort(op_external, kind="stable")
    sorted_external = op_external[order]
    wanted = trace.external_id[api_rows]
    position = np.searchsorted(sorted_external, wanted, side="left")
    hit = (position < sorted_external.size) & (wanted != NO_VALUE)
    hit[hit] = sorted_external[position[hit]] == wanted[hit]
    candidate = np.full(api_rows.size, NO_VALUE, dtype=np.int64)
    candidate[hit] = op_rows[order[position[hit]]]
    valid = hit.copy()
    rows, ops = api_rows[hit], candidate[hit]
    valid[hit] = (
        (trace.track[rows] == trace.track[ops])
        & (trace.ts_ns[ops] <= trace.ts_ns[rows])
        & (trace.end_ns[rows] <= trace.end_ns[ops])
    )
    op[api_rows[valid]] = candidate[valid]
    return valid


def _link_by_nesting(trace: Trace, call_rows: np.ndarray, op: np.ndarray) -> None:
    """Innermost enclosing CPU op on the same thread, for every row of `call_rows`."""
    enclosing = innermost_enclosing(trace, trace.indices(EventKind.CPU_OP), call_rows)
    found = enclosing >= 0
    op[call_rows[found]] = enclosing[found]


def innermost_enclosing(trace: Trace, candidate_rows: np.ndarray,
                        query_rows: np.ndarray) -> np.ndarray:
    """For each query row, the innermost candidate row enclosing it on the same thread (-1 if none).

    With rows ordered by (thread, start, longest first), the innermost candidate that
    encloses a row is the nearest earlier candidate whose end is not before the row's
    end; `nearest_earlier_at_least` finds it for all rows at once. A row never encloses itself.
    """
    result = np.full(query_rows.size, NO_VALUE, dtype=np.int64)
    if candidate_rows.size == 0 or query_rows.size == 0:
        return result
    queried = np.zeros(len(trace.tracks), dtype=bool)  # the threads of the query rows
    queried[trace.track[query_rows]] = True
    candidate_rows = candidate_rows[queried[trace.track[candidate_rows]]]
    rows = np.concatenate([candidate_rows, query_rows])
    is_query = np.concatenate([np.zeros(candidate_rows.size, dtype=bool),
                               np.ones(query_rows.size, dtype=bool)])
    position = np.concatenate([np.full(candidate_rows.size, -1), np.arange(query_rows.size)])
    # Ties: by row, and a row's query copy before its own candidate
    # copy, so it is not its own answer.
    order = np.lexsort((~is_query, rows, -trace.dur_ns[rows], trace.ts_ns[rows], trace.track[rows]))
    rows, is_query, position = rows[order], is_query[order], position[order]
    tracks = trace.track[rows]
    enclosing = nearest_earlier_at_least(trace.end_ns[rows], ~is_query)
    same_thread = enclosing >= 0
    same_thread[same_thread] = tracks[enclosing[same_thread]] == tracks[same_thread]
    answered = is_query & same_thread
    result[position[answered]] = rows[enclosing[answered]]
    return result


#: Rows from which `nearest_earlier_at_least` runs compiled (numba, imported then) rather than as
#: numpy work whose memory grows as n log n: a small trace is read without the compiler's start-up,
#: a large one in O(n) memory.
COMPILED_FROM_ROWS = 1 << 17


def nearest_earlier_at_least(values: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """For each i, the largest j < i with candidate[j] and values[j] >= values[i]; -1 if none."""
    if values.size >= COMPILED_FROM_ROWS:
        from daydream.mapping._stack import nearest_earlier_at_least_compiled

        return nearest_earlier_at_least_compiled(np.ascontiguousarray(values, dtype=np.int64),
                                                 np.ascontiguousarray(candidate, dtype=np.bool_))
    return _nearest_earlier_at_least_numpy(values, candidate)


def _nearest_earlier_at_least_numpy(values: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Vectorized binary lifting over a sparse table of window maxima:
    O(n log n) numpy work and memory."""
    n = values.size
    floor = np.iinfo(np.int64).min
    level = np.where(candidate, values, floor).astype(np.int64)
    maxima = [level]  # maxima[k][j] = max of values[max(0, j - 2**k + 1) .. j]
    width = 1
    while width < n:
        shifted = np.concatenate([np.full(width, floor, dtype=np.int64), level[:-width]])
        level = np.maximum(level, shifted)
        maxima.append(level)
        width *= 2
    position = np.arange(n, dtype=np.int64) - 1
    for k in range(len(maxima) - 1, -1, -1):
        inside = position >= 0
        window_max = np.full(n, floor, dtype=np.int64)
        window_max[inside] = maxima[k][position[inside]]
        jump = inside & (window_max < values)
        position[jump] -= 1 << k
    found = position >= 0
    found[found] = candidate[position[found]] & (values[position[found]] >= values[found])
    return np.where(found, position, -1)


def link_by_nesting_reference(trace: Trace, call_rows: np.ndarray) -> np.ndarray:
    """Reference for `_link_by_nesting`: a plain stack sweep per thread (slow, obviously right)."""
    op = np.full(len(trace), NO_VALUE, dtype=np.int64)
    op_rows = set(trace.indices(EventKind.CPU_OP).tolist())
    rows = sorted(op_rows | set(call_rows.tolist()),
                  key=lambda r: (int(trace.track[r]), int(trace.ts_ns[r]), -int(trace.dur_ns[r]),
                                 r not in op_rows))
    stack: list[int] = []
    for row in rows:
        while stack and (trace.track[stack[-1]] != trace.track[row]
                         or trace.end_ns[stack[-1]] < trace.end_ns[row]):
            stack.pop()
        if row in op_rows:
            stack.append(row)
        elif stack:
            op[row] = stack[-1]
    return op
