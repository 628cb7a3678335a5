"""Iteration windows: an iteration ends when its host has passed its
end and its GPU work has finished.

A training loop that never waits for the GPU inside an iteration (CUDA graphs, or any loop
without `loss.item()`) runs its host ahead: the host's step markers are then spaced by the
host's own time, while the steps complete at the GPU's pace. Measured between markers such
an iteration looks as fast as its host (0.2 ms for a graph replay whose GPU work takes
1.4 ms); measured to its completion, it lasts what the loop really sustains.

So iteration i's window is (`mapping.iterations.settle`, which `inspect` uses on the trace itself)

    end_i   = max(its end marker, the end of the last GPU task launched in it)
    start_i = max(its start marker, end_(i-1))

For a loop that synchronizes every iteration, end_(i-1) comes before start_i and nothing
changes; for one that runs ahead, end_i - end_(i-1) is the steady-state period. The same rule
gives the measured window (recorded times), the replayed one and the predicted one, so they
compare like with like. The windows tile the run: their sum is end_last - start_first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.graph.model import GPU_WORK, Graph, Timeline
from daydream.mapping.iterations import settle

#: Work whose completion ends an iteration (what its host launched).
_GPU_WORK = np.array([int(k) for k in GPU_WORK])


@dataclass(frozen=True, slots=True)
class Window:
    """One iteration's window, ns; `last` is the task that ends it (its end marker, or GPU work)."""

    start_ns: int
    end_ns: int
    first: int
    last: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def last_gpu_tasks(graph: Graph, end_ns: np.ndarray) -> np.ndarray:
    """Per iteration (by index into `graph.iteration_markers`), the GPU
    task launched in it that ends last; -1: none."""
    count = len(graph.iteration_markers)
    last = np.full(count, -1, dtype=np.int64)
    iteration = graph.tasks["iteration"]
    gpu = np.flatnonzero(np.isin(graph.tasks["kind"],
                                 _GPU_WORK) & (iteration >= 0) & (iteration < count))
    if gpu.size:
        # Sorted by (iteration, end): the last of each iteration's run is its latest-ending task.
        order = gpu[np.lexsort((end_ns[gpu], iteration[gpu]))]
        owners = iteration[order]
        ends_of_runs = np.flatnonzero(np.r_[owners[1:] != owners[:-1], True])
        last[owners[ends_of_runs]] = order[ends_of_runs]
    return last


def iteration_windows(graph: Graph, timeline: Timeline) -> list[Window]:
    """The windows of `graph`'s iterations on `timeline`; the first starts no earlier than
    `timeline.previous_end_ns` (the warm-up iteration's end, where there was one)."""
    start_ns, end_ns = timeline.start_ns, timeline.end_ns
    last_gpu = last_gpu_tasks(graph, end_ns)
    markers = graph.iteration_markers
    gpu_ends = [int(end_ns[g]) if g >= 0 else None for g in last_gpu.tolist()]
    host_ends = [int(start_ns[b]) for _, b in markers]
    settled = settle([int(start_ns[a]) for a, _ in markers], host_ends, gpu_ends,
                     timeline.previous_end_ns)
    windows = []
    for (start, end), (first, marker), gpu, host_end in zip(settled, markers, last_gpu.tolist(),
                                                            host_ends):
        windows.append(Window(start, end, first, gpu if end > host_end else marker))
    return windows


def measured_windows(graph: Graph) -> list[Window]:
    """The windows as recorded."""
    return iteration_windows(graph, Timeline(graph.tasks["measured_start_ns"],
                                             graph.tasks["measured_end_ns"]))
