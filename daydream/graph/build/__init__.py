"""Building the dependency graph of one rank from its linked trace.

The rules, with the reasons behind them, are in docs/replay-model.md. `build_graph` applies
them in this order; each is a function of what the earlier ones gave, in the module of its
family:

- `tasks.make_tasks`: host calls (or top-level CPU ops), GPU work, iteration markers (the
  linked trace → `Tasks`)
- `launches.link_gpu_work`: 3. launch, each GPU task's launching call (tasks → `Launches`)
- `launches.early_starts`: 2. work that began before its stream's earlier work ended runs after
  it (tasks → trimmed durations, which tasks started early)
- `syncs.blocking_calls`: 4. a blocking call = call + completion, waiting for its GPU work
  (launches → `Completions`)
- `host.host_order`: 1. program order on host threads, after completions (completions → edges)
- `waits.event_waits`: 5. cross-stream event waits (launches → edges, unexplained held-back
  work)
- `delays.unlinked_gpu_work`: work launched before the window, unlinked work, a single rank's
  collectives (launches → unexplained GPU work)
- `launches.calibrate_gpu`: launch latency and kernel gap from work nothing else held back (all
  unexplained so far → `GpuConstants`)
- `launches.stream_order`, `launches.launch_edges`: 2. stream order, 3. launch edges (constants
  → edges)
- `launches.launch_queue`: 7. the launch queue (launches → edges, trimmed held launches)
- `host.cross_thread`: 6. the autograd thread's bursts (completions → edges)
- `host.assign_iterations`, `host.host_gaps`: iteration of each task; CPU time between host
  tasks (host edges → gaps)
- `delays.relative_delays`: what the trace cannot explain becomes a relative delay (every
  unexplained task → delays, anchors)

The last step is the only place a recorded start time enters the graph, and it enters as a
delay after the task's readiness, never as a timestamp (graph.model). `index.LaunchIndex` answers
the lookups the sync and wait rules share (the launches of a thread or a stream, a call by
correlation id).
"""

from __future__ import annotations

import numpy as np

from daydream.errors import TraceFormatError
from daydream.graph.build.delays import (
    pinned_collectives_note,
    refuse_cycles,
    relative_delays,
    unlinked_gpu_work,
)
from daydream.graph.build.host import assign_iterations, cross_thread, host_gaps, host_order
from daydream.graph.build.index import LaunchIndex
from daydream.graph.build.launches import (
    calibrate_gpu,
    early_starts,
    launch_edges,
    launch_queue,
    link_gpu_work,
    stream_order,
)
from daydream.graph.build.syncs import blocking_calls
from daydream.graph.build.tasks import make_tasks
from daydream.graph.build.waits import event_waits
from daydream.graph.model import Graph
from daydream.mapping import Links, link
from daydream.trace import Trace

__all__ = ["build_graph", "pinned_collectives_note"]


def build_graph(trace: Trace, links: Links | None = None) -> Graph:
    """The dependency graph of one rank: the rules of the module docstring, in its order."""
    links = links if links is not None else link(trace)
    tasks = make_tasks(trace, links)
    graph = tasks.graph
    if graph.task_count == 0:
        categories = list(trace.meta.categories.items())[:5]
        found = ", ".join(f"{cat} {n}" for cat, n in categories) or "nothing"
        raise TraceFormatError(trace.meta.source, "nothing to simulate: no CPU op, runtime call "
                               f"or GPU work (found: {found})",
                               "record with torch.profiler's CPU and CUDA activities")
    launches = link_gpu_work(trace, links, tasks)
    early = early_starts(graph, tasks.gpu_tasks)
    index = LaunchIndex(trace, graph, tasks, launches)
    completions = blocking_calls(trace, graph, tasks, launches, index)
    host_order(graph, tasks.host_tasks, completions.completion)
    held_back = event_waits(graph, tasks, index)
    unexplained = np.unique(np.concatenate([completions.unexplained, held_back,
                                            unlinked_gpu_work(graph, links, tasks, launches)]))
    constants = calibrate_gpu(graph, tasks.gpu_tasks, launches, unexplained)
    stream_order(graph, tasks.gpu_tasks, launches, early, constants)
    launch_edges(graph, tasks.gpu_tasks, launches, constants)
    launch_queue(graph, tasks.gpu_tasks, launches)
    cross_thread(trace, graph, tasks, completions.completion)
    assign_iterations(graph, tasks, launches)
    host_gaps(graph)
    refuse_cycles(trace, graph)
    relative_delays(trace, graph, unexplained)
    return graph
