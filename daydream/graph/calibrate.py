"""Per-trace constants of the replay model, measured from the trace itself.

Each constant is a median over the events where it is observable on its own, so
that no task's recorded start is ever copied into its simulated start:

* `launch_latency_ns`: from a launch call's start to its GPU work's start, over
  GPU work whose stream was idle when it was launched;
* `kernel_gap_ns`: from one GPU activity's end to the next one's start on the
  same stream, over work launched well before its stream became free;
* `sync_return_ns`: from the end of the GPU work a blocking call waited for to
  the call's return, over calls that really waited;
* `sync_own_ns`: the duration of blocking calls that had nothing to wait for;
* `queue_depth`: how many launched-but-unfinished GPU operations CUDA's launch
  queue holds before a launch blocks, from launches that visibly blocked.
"""

from __future__ import annotations

import numpy as np

from daydream._jit import jit

DEFAULT_LAUNCH_LATENCY_NS = 5_000
DEFAULT_KERNEL_GAP_NS = 1_500
DEFAULT_SYNC_RETURN_NS = 5_000
DEFAULT_SYNC_OWN_NS = 5_000
DEFAULT_QUEUE_DEPTH = 1024
#: A launch is counted as blocked by the queue when it lasted this many times its usual duration...
BLOCKED_FACTOR = 8
#: ...and at least this many operations were outstanding when it
#: returned (CUDA's queue holds ~1024).
MIN_BLOCKED_OUTSTANDING = 512
#: Launches blocked by the queue return with outstanding counts within
#: this fraction of each other...
QUEUE_CLUSTER_TOLERANCE = 0.03
#: ...and there are at least this many of them.
QUEUE_CLUSTER_MIN = 10
#: Work ready (launched + latency) this long before its stream became
#: free was queued, not launch-bound.
QUEUED_MARGIN_NS = 2_000


def median_or(values: np.ndarray, default: int, minimum_count: int = 3) -> int:
    values = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if values.size < minimum_count:
        return default
    return max(0, int(np.median(values)))


def percentile_or(values: np.ndarray, q: float, default: int, minimum_count: int = 3) -> int:
    """The q-th percentile of `values` (ns), or `default` when there
    are fewer than `minimum_count`."""
    if values.size < minimum_count:
        return default
    return max(0, int(np.percentile(values, q)))


def launch_latency_and_gap(
    call_start: np.ndarray, gpu_start: np.ndarray, previous_end: np.ndarray
) -> tuple[int, int]:
    """(launch latency, inter-kernel gap) from launched GPU work.

    `previous_end` is the end of the previous activity on the same stream
    (int64 min for the first one).
    """
    idle_at_launch = previous_end <= call_start
    latency = median_or(gpu_start[idle_at_launch] - call_start[idle_at_launch],
                        DEFAULT_LAUNCH_LATENCY_NS)
    queued = (previous_end != np.iinfo(np.int64).min) & (call_start + latency
                                                         + QUEUED_MARGIN_NS < previous_end)
    gap = median_or(gpu_start[queued] - previous_end[queued], DEFAULT_KERNEL_GAP_NS)
    return latency, gap


def outstanding_at(gpu_end: np.ndarray, call_end: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """For each launch k of `launches` (ascending): how many earlier
    launches' GPU work ends after call k returns, #{j < k : gpu_end[j] >
    call_end[k]}, in O(n log n) (a Fenwick tree over the GPU ends' ranks)."""
    ordered = np.sort(gpu_end)
    rank = np.searchsorted(ordered, gpu_end, side="left")
    # of all ends, how many are <= call_end[k]
    at_most = np.searchsorted(ordered, call_end[launches], side="right")
    return _outstanding(rank.astype(np.int64), launches.astype(np.int64), at_most.astype(np.int64),
                        gpu_end.size)


@jit
def _outstanding(rank: np.ndarray, launches: np.ndarray, at_most: np.ndarray, n: int) -> np.ndarray:
    tree = np.zeros(n + 1, dtype=np.int64)  # tree over ranks: how many inserted ends have each rank
    result = np.zeros(launches.size, dtype=np.int64)
    inserted = 0
    for q in range(launches.size):
        k = launches[q]
        while inserted < k:  # insert the ends of launches before k
            i = rank[inserted] + 1
            while i <= n:
                tree[i] += 1
                i += i & -i
            inserted += 1
        below, i = 0, at_most[q]  # inserted ends <= call_end[k]: those of rank < at_most[q]
        while i > 0:
            below += tree[i]
            i -= i & -i
        result[q] = k - below
    return result


def queue_depth(
    launch_call_start: np.ndarray, launch_call_end: np.ndarray, usual_duration: np.ndarray,
    gpu_end_by_launch: np.ndarray
) -> tuple[int, int]:
    """(depth, blocked launch count). Inputs are per launch, in launch order; `gpu_end_by_launch`
    is the end of the GPU work each launch made."""
    duration = launch_call_end - launch_call_start
    candidates = np.flatnonzero(duration > BLOCKED_FACTOR * np.maximum(usual_duration, 1))
    if candidates.size == 0:
        return DEFAULT_QUEUE_DEPTH, 0
    counts = outstanding_at(gpu_end_by_launch, launch_call_end, candidates)
    counts = counts[counts >= MIN_BLOCKED_OUTSTANDING]
    if counts.size < QUEUE_CLUSTER_MIN:
        return DEFAULT_QUEUE_DEPTH, 0
    # Launches held by a full queue all return with (almost) the same number of operations
    # outstanding, the largest count seen; slow launches with scattered counts were slow for
    # some other reason. Take the cluster at the top.
    top = float(np.percentile(counts, 95))
    cluster = counts[np.abs(counts - top) <= QUEUE_CLUSTER_TOLERANCE * top]
    if cluster.size < QUEUE_CLUSTER_MIN:
        return DEFAULT_QUEUE_DEPTH, 0
    depth = float(np.median(cluster))
    clustered = cluster
    return int(depth), int(np.count_nonzero(clustered))
