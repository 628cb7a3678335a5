"""The dependency graph: tasks on resources, and typed dependency edges between them.

Tasks and edges are stored as numpy columns (a task is an integer id, a row of
`Graph.tasks`), because real traces give hundreds of thousands of tasks and the
simulator wants arrays. `Graph.to_networkx()` gives the networkx view (node ids
are task ids, task and edge fields as attributes) for analysis and validation.

Timing semantics, applied by the simulator (all ns):

    host_ready  = max over HOST edges      (ref(src) + latency)
    other_ready = max over all other edges (ref(src) + latency)
    ready       = max(host_ready + gap, other_ready)
    start       = ready + delay
    end         = start + duration

`ref(src)` is the source's end, or its start for edges with `from_start` (a
kernel may begin a launch latency after its launch call *began*). `gap` is the
host's own CPU work between the task and the host task it waited for (framework
overhead, Python, data loading): it is measured once and kept, as in Daydream.
`delay` is what the trace cannot explain (a single rank's wait for its peers, a stream
wait whose event is not recorded), never a recorded timestamp: a fixed ns delay, or,
where the task has a DELAY_ANCHOR edge (from its iteration's start), a delay that scales
with the progress since the anchor: delay × (ready − anchor start) / `delay_span`, so
that a what-if that makes the iteration's work faster shrinks it alike (see
docs/replay-model.md). Tasks with such a delay are `unexplained`; `Graph.pinned()`
counts them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from daydream.interconnect import Interconnect

NO_TASK = -1


class TaskKind(enum.IntEnum):
    HOST_CALL = 0  # a CUDA runtime/driver API call
    HOST_OP = 1  # a CPU op (threads without API calls, CPU-only traces)
    COMPLETION = 2  # the moment a blocking call returns, once what it waits for is done
    KERNEL = 3
    MEMCPY = 4
    MEMSET = 5
    COLLECTIVE = 6  # a communication kernel (NCCL)
    # an iteration boundary on its host thread (zero duration; its gap is the host time before it)
    MARKER = 7


# Task-kind groups, defined here only.
#: Work that only a GPU does. A graph with any is a GPU graph; collectives alone do not make one
#: (gloo runs them on CPU threads, and data-parallel what-ifs insert them into CPU graphs too).
DEVICE_WORK = (TaskKind.KERNEL, TaskKind.MEMCPY, TaskKind.MEMSET)
#: Computation kernels (no copies, sets or collectives).
KERNELS = (TaskKind.KERNEL,)
#: Everything that occupies a GPU stream or a communication channel.
GPU_WORK = (*DEVICE_WORK, TaskKind.COLLECTIVE)
#: Work a host thread does: API calls and CPU ops.
HOST_WORK = (TaskKind.HOST_CALL, TaskKind.HOST_OP)
#: Every task that sits on a host thread: its work, blocking calls'
#: completions and iteration markers.
HOST_TASKS = (*HOST_WORK, TaskKind.COMPLETION, TaskKind.MARKER)


class DepKind(enum.IntEnum):
    HOST_ORDER = 0  # program order on a host thread (the successor's gap applies)
    STREAM_ORDER = 1  # program order on a GPU stream
    LAUNCH = 2  # API call -> the GPU work it launched (from the call's start)
    SYNC = 3  # GPU work -> the completion of the host call that waits for it
    EVENT_WAIT = 4  # GPU -> GPU across streams (cudaEventRecord -> cudaStreamWaitEvent)
    CROSS_THREAD = 5  # host thread -> host thread (main thread <-> autograd thread)
    COMMUNICATION = 6  # gradient producer -> collective -> consumer; across ranks
    LAUNCH_QUEUE = 7  # GPU work finishing frees a slot of CUDA's launch queue -> a blocked launch
    # iteration start -> a task with an unexplained delay that scales with the iteration's progress
    DELAY_ANCHOR = 8
    # gradients ready -> the collective that meets the other ranks
    # (latency: the wait for the slowest)
    SLOWEST_RANK = 9

    @property
    def is_host(self) -> bool:
        return self in (DepKind.HOST_ORDER, DepKind.CROSS_THREAD)


class ResourceKind(enum.IntEnum):
    HOST_THREAD = 0
    GPU_STREAM = 1
    COMM_CHANNEL = 2


@dataclass(slots=True, frozen=True)
class Resource:
    kind: ResourceKind
    label: str
    device: int = -1
    stream: int = -1
    track: int = -1  # the trace track it came from


TASK_COLUMNS: dict[str, Any] = {
    "kind": np.int8,
    "resource": np.int32,
    "event": np.int64,  # row in the trace, -1 for tasks daydream made (completions, inserted work)
    "name": np.int32,  # index into Graph.strings
    "duration_ns": np.int64,
    "gap_ns": np.int64,
    # the trace does not say what part of this task's start or duration waited for
    "unexplained": np.bool_,
    # unexplained delay after the task is ready (0 for none), see the module docstring
    "delay_ns": np.int64,
    # recorded progress from the DELAY_ANCHOR to ready the delay scales with (0: fixed)
    "delay_span_ns": np.int64,
    "measured_start_ns": np.int64,
    "measured_end_ns": np.int64,
    "iteration": np.int32,  # -1 outside every iteration
    "layer": np.int32,  # index into Graph.layers, -1 for none
    # index into daydream.mapping.PHASES (forward, backward, optimizer, other), -1 for none
    "phase": np.int8,
    "priority": np.int64,  # for queue policies that order by priority (lower first)
    "bytes": np.int64,  # payload of a collective or copy, 0 when unknown
    # a collective matched across ranks: its job-wide id (from 1); 0 for none
    "collective": np.int64,
}

EDGE_COLUMNS: dict[str, Any] = {
    "src": np.int64,
    "dst": np.int64,
    "kind": np.int8,
    "latency_ns": np.int64,
    "from_start": np.bool_,
}


def empty_columns(spec: dict[str, Any], size: int = 0) -> dict[str, np.ndarray]:
    return {name: np.zeros(size, dtype=dtype) for name, dtype in spec.items()}


@dataclass(slots=True)
class Calibration:
    """What the builder measured on the trace (the constants the replay
    uses, ns) and counted (what it derived, and what it could not); every
    field is shown by `daydream replay --json` under "calibration"."""

    # from a launch call's start to its kernel's start, when nothing else held it
    launch_latency_ns: int = 0
    kernel_gap_ns: int = 0  # between back-to-back kernels on a stream
    sync_return_ns: int = 0  # from the end of awaited work to the return of the call that waited
    sync_own_ns: int = 0  # a blocking call's own time when it had nothing to wait for
    # launches CUDA's queue held before one blocked (None: never reached)
    queue_depth: int | None = None
    blocking_calls: int = 0
    blocking_calls_pinned: int = 0
    blocking_calls_not_waiting: int = 0
    blocked_launches: int = 0
    event_waits_derived: int = 0
    event_waits_trivial: int = 0
    event_waits_pinned: int = 0
    cross_thread_bursts: int = 0
    pinned_orphans: int = 0
    pinned_collectives: int = 0
    pinned_unlinked: int = 0
    # GPU work that began before its stream's earlier work ended (trimmed to run after it)
    early_starts: int = 0

    def as_dict(self) -> dict[str, int]:
        """The fields that are known, by name."""
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        return {name: int(value) for name, value in values.items() if value is not None}


@dataclass(slots=True, frozen=True)
class DataParallel:
    """What one communication what-if leaves for the next in a chain of
    --opt (no-comm → ddp → grad-compression)."""

    #: all-reduce bytes per iteration that no-comm removed: the
    #: gradient volume a following ddp, zero or p3 uses
    removed_allreduce_bytes: int = 0
    #: ranks and link a data-parallel what-if modelled (0 and None before one has)
    world: int = 0
    link: Interconnect | None = None
    #: where inserted communication overlaps compute, both take this many times as long (1: no
    #: contention), and how the factor was found (simulate/contention.py)
    contention: float = 1.0
    contention_source: str = ""
    #: the wait for the slowest rank (transforms/distributed/stragglers.py),
    #: where the ranks' spread comes from the
    #: trace: (that spread in ns, the multiplier that turns a spread into the wait), for the
    #: contention pass to add the spread its random share between the ranks of a host makes; None:
    #: no wait, or a given one
    slowest_rank: tuple[float, float] | None = None
    #: ranks that share one host's CPUs, and the scheduling events
    #: (steps) of each inserted collective
    host_ranks: int = 1
    collective_steps: int = 0
    #: the names (Graph.strings ids) of inserted collectives sent from one
    #: rank that runs on while they are in flight (DDP's buffer broadcasts
    #: over gloo): the graph is the receivers' view, which waits for them
    rooted: frozenset[int] = frozenset()


@dataclass(slots=True)
class Graph:
    """Tasks, edges and resources of one rank; `calibration` holds what
    the builder measured and counted."""

    tasks: dict[str, np.ndarray]
    edges: dict[str, np.ndarray]
    resources: list[Resource]
    strings: list[str]
    calibration: Calibration = field(default_factory=Calibration)
    notes: list[str] = field(default_factory=list)  # what the builder could not derive, for people
    #: Per iteration: (marker task at its start, marker task at its end).
    iteration_markers: list[tuple[int, int]] = field(default_factory=list)
    #: Layer names (module paths) that `tasks["layer"]` indexes.
    layers: list[str] = field(default_factory=list)
    #: Resources whose order is not fixed by program-order edges:
    #: resource id -> queue policy (daydream.simulate.engine.POLICIES).
    #: A graph with any is simulated by the event-driven engine.
    queue_policies: dict[int, str] = field(default_factory=dict)
    #: State the communication what-ifs hand on (the measured constants stay in `calibration`).
    data_parallel: DataParallel = field(default_factory=DataParallel)

    @property
    def task_count(self) -> int:
        return int(self.tasks["kind"].shape[0])

    @property
    def edge_count(self) -> int:
        return int(self.edges["src"].shape[0])

    def copy(self) -> Graph:
        """An independent copy (arrays and lists copied), for what-ifs
        that must keep the original."""
        return Graph(
            tasks={k: v.copy() for k, v in self.tasks.items()},
            edges={k: v.copy() for k, v in self.edges.items()},
            resources=list(self.resources),
            strings=list(self.strings),
            calibration=replace(self.calibration),
            notes=list(self.notes),
            iteration_markers=list(self.iteration_markers),
            layers=list(self.layers),
            queue_policies=dict(self.queue_policies),
            data_parallel=self.data_parallel,
        )

    def has_device_work(self) -> bool:
        """Whether this is a GPU graph (kernels, copies or memsets), as
        opposed to a CPU-only one."""
        return bool(np.isin(self.tasks["kind"], [int(k) for k in DEVICE_WORK]).any())

    def has_host_work(self) -> bool:
        """Whether any host thread does work (API calls or CPU ops):
        not so in a trace of GPU activity alone."""
        return bool(np.isin(self.tasks["kind"], [int(k) for k in HOST_WORK]).any())

    def task_name(self, task: int) -> str:
        return self.strings[int(self.tasks["name"][task])]

    def string_id(self, text: str) -> int:
        """The id of `text` in the graph's strings, added if new (a
        name for tasks a transform adds)."""
        if text not in self.strings:
            self.strings.append(text)
            return len(self.strings) - 1
        return self.strings.index(text)

    def pinned(self) -> np.ndarray:
        return self.tasks["unexplained"]

    def edges_of_kind(self, kind: DepKind) -> np.ndarray:
        return np.flatnonzero(self.edges["kind"] == kind)

    def add_tasks(self, **columns: Any) -> np.ndarray:
        """Append tasks (columns not given take defaults); returns their ids."""
        count = max(int(np.size(values)) for values in columns.values())
        defaults = {"event": -1, "name": 0, "gap_ns": 0, "unexplained": False, "delay_ns": 0,
                    "delay_span_ns": 0, "iteration": -1,
                    "measured_start_ns": 0, "measured_end_ns": 0, "layer": -1, "phase": -1,
                    "priority": 0, "bytes": 0, "collective": 0}
        first = self.task_count
        for name, dtype in TASK_COLUMNS.items():
            values = columns.get(name, defaults.get(name))
            if values is None:
                raise ValueError(f"add_tasks needs the {name!r} column")
            block = np.broadcast_to(np.asarray(values, dtype=dtype), (count,))
            self.tasks[name] = np.concatenate([self.tasks[name], block])
        return np.arange(first, first + count)

    def add_edges(self, src: Any, dst: Any, kind: DepKind, latency_ns: Any = 0,
                  from_start: bool = False) -> None:
        src = np.asarray(src, dtype=np.int64).reshape(-1)
        dst = np.asarray(dst, dtype=np.int64).reshape(-1)
        count = src.size
        new = {
            "src": src,
            "dst": dst,
            "kind": np.full(count, int(kind), dtype=np.int8),
            "latency_ns": np.broadcast_to(np.asarray(latency_ns, dtype=np.int64), (count,)),
            "from_start": np.full(count, from_start, dtype=np.bool_),
        }
        for name in EDGE_COLUMNS:
            self.edges[name] = np.concatenate([self.edges[name], new[name]])

    def to_networkx(self) -> Any:
        """A networkx.DiGraph view: node = task id with its fields,
        edge attributes kind/latency_ns."""
        import networkx as nx

        view = nx.MultiDiGraph()
        columns = {name: values.tolist() for name, values in self.tasks.items()}
        view.add_nodes_from((i, {name: columns[name][i] for name in columns})
                            for i in range(self.task_count))
        view.add_edges_from(
            (int(s), int(d), {"kind": DepKind(int(k)), "latency_ns": int(lat)})
            for s, d, k, lat in zip(self.edges["src"], self.edges["dst"], self.edges["kind"],
                                    self.edges["latency_ns"])
        )
        return view

    def validate(self) -> list[str]:
        """Problems that make the graph unsimulatable: dangling edges,
        tasks without a resource, cycles."""
        problems = []
        n = self.task_count
        src, dst = self.edges["src"], self.edges["dst"]
        dangling = (src < 0) | (src >= n) | (dst < 0) | (dst >= n)
        if dangling.any():
            problems.append(f"{int(dangling.sum())} edges point at tasks that do not exist (first: "
                            f"edge {int(np.argmax(dangling))})")
        homeless = (self.tasks["resource"] < 0) | (self.tasks["resource"] >= len(self.resources))
        if homeless.any():
            problems.append(f"{int(homeless.sum())} tasks have no resource (first: task "
                            f"{int(np.argmax(homeless))})")
        if not dangling.any():
            from daydream.graph.order import find_cycle

            cycle = find_cycle(n, src, dst)
            if cycle:
                shown = " -> ".join(f"{t} ({self.task_name(t)})" for t in cycle[:6])
                problems.append(f"dependency cycle of {len(cycle)} tasks: "
                                f"{shown}{' -> ...' if len(cycle) > 6 else ''}")
        return problems


@dataclass(slots=True)
class Timeline:
    """Simulated start and end (ns) of every task of a graph; `previous_end_ns`: where the graph was
    simulated behind a warm-up iteration (simulate.warmup), when that iteration ended (the first
    iteration's window starts no earlier)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    previous_end_ns: int | None = None

    @property
    def makespan_ns(self) -> int:
        return int(self.end_ns.max() - self.start_ns.min()) if self.start_ns.size else 0
