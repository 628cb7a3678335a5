"""CUDA-graph captures in a trace: launches recorded between `cudaStreamBeginCapture` and
`cudaStreamEndCapture` (HIP alike) are captured into a graph, not run, so they have no GPU work.

A trace of the capture itself (the profiler started around `torch.cuda.graph(...)`) holds launches
and no execution: nothing to replay and nothing a what-if can speed up. A trace that captures once
and then replays the graph (`cudaGraphLaunch`) runs the captured kernels under the graph launches:
that is an execution like any other.

    found = captures(trace)
    found.launches_captured   # launches inside capture ranges
    found.graph_launches_run  # graph launches that ran
    found.capture_only        # the trace records a capture and no execution of it
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from daydream.mapping.linking import Links, link
from daydream.trace import API_KINDS, GPU_ACTIVITY_KINDS, Trace, runtime_api

_BEGIN = re.compile(r"^(?:cuda|hip)StreamBeginCapture\w*$|^cuStreamBeginCapture\w*$")
_END = re.compile(r"^(?:cuda|hip)StreamEndCapture\w*$|^cuStreamEndCapture\w*$")


@dataclass(slots=True, frozen=True)
class Captures:
    """Kernel launch calls inside capture ranges, all kernel launch
    calls, and graph launch calls whose GPU work ran."""

    ranges: int
    launches_captured: int
    launches: int
    graph_launches_run: int

    @property
    def capture_only(self) -> bool:
        """The trace records a capture (most of its kernel launches
        captured) and no graph launch that ran."""
        return (self.launches_captured > 0 and 2 * self.launches_captured >= self.launches
                and self.graph_launches_run == 0)

    def describe(self) -> str:
        return (f"{self.launches_captured:,} of its {self.launches:,} kernel launches lie inside "
                f"{self.ranges} CUDA-graph capture range(s) (cudaStreamBeginCapture … "
                "cudaStreamEndCapture): captured, not run")


def captures(trace: Trace, links: Links | None = None) -> Captures:
    """The capture ranges of `trace` and the launches inside them."""
    names = trace.strings
    calls = trace.indices(*API_KINDS)
    begin_names = [i for i, name in enumerate(names) if _BEGIN.match(name[:200])]
    if not begin_names:
        return Captures(0, 0, 0, 0)
    end_names = [i for i, name in enumerate(names) if _END.match(name[:200])]
    launch_names = [i for i, name in enumerate(names) if runtime_api.LAUNCH.match(name[:200])]
    graph_names = [i for i, name in enumerate(names)
                   if runtime_api.role_of(name[:200]) is runtime_api.CallRole.GRAPH_LAUNCH]
    call_names = trace.name[calls]
    launches = calls[np.isin(call_names, launch_names)]
    captured = np.zeros(launches.size, dtype=bool)
    ranges = 0
    for track in np.unique(trace.track[calls]).tolist():
        mine = calls[trace.track[calls] == track]
        begins = np.sort(trace.ts_ns[mine[np.isin(trace.name[mine], begin_names)]])
        ends = np.sort(trace.end_ns[mine[np.isin(trace.name[mine], end_names)]])
        for start in begins.tolist():
            after = ends[ends >= start]
            stop = int(after[0]) if after.size else int(np.iinfo(np.int64).max)
            ranges += 1
            captured |= (trace.track[launches] == track) & (trace.ts_ns[launches] >= start) & (
                trace.ts_ns[launches] < stop)
    links = links if links is not None else link(trace)
    gpu = trace.indices(*GPU_ACTIVITY_KINDS)
    launched = np.unique(links.launch[gpu])
    graph_launches = calls[np.isin(call_names, graph_names)]
    ran = int(np.isin(graph_launches, launched).sum())
    return Captures(ranges=ranges, launches_captured=int(captured.sum()),
                    launches=int(launches.size), graph_launches_run=ran)
