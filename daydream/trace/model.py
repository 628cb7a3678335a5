"""The normalized trace model: one `Trace` per rank, events stored as columns.

Every reader produces this model and every later stage consumes it. Events are
rows of a handful of numpy columns (integer nanoseconds, interned names), not
Python objects; the rarer, kind-specific fields (memory events, collective
metadata, kernel launch configuration, explicit sync records, autograd flows)
live in side tables that point back at their event by row index.

Times are integer nanoseconds relative to the trace's own time base
(`TraceMeta.base_time_ns` gives the absolute epoch of zero where the file has
one). Missing integer fields are -1.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NO_VALUE = -1


class EventKind(enum.IntEnum):
    """What an event is; stored as int8 in `Trace.kind`."""

    CPU_OP = 0
    RUNTIME = 1  # CUDA runtime API call (cudaLaunchKernel, cudaMemcpyAsync, ...)
    DRIVER = 2  # CUDA driver API call (cuLaunchKernelEx, ...)
    KERNEL = 3  # GPU compute kernel
    MEMCPY = 4
    MEMSET = 5
    SYNC = 6  # cuda_sync record: the GPU-side view of a synchronization
    ANNOTATION = 7  # host user annotation (ProfilerStep#N, ## forward ##, ...)
    GPU_ANNOTATION = 8  # copy of a user annotation on a GPU stream
    MEMORY = 9  # [memory] allocation / free instant event
    COMMUNICATION = 10  # GPU collective kernel (NCCL and similar)
    OVERHEAD = 11  # profiler overhead span
    HOST_COMMUNICATION = 12  # a collective's work on a CPU thread (gloo)

    @property
    def label(self) -> str:
        return _KIND_LABELS[self]


_KIND_LABELS = {
    EventKind.CPU_OP: "cpu op",
    EventKind.RUNTIME: "runtime call",
    EventKind.DRIVER: "driver call",
    EventKind.KERNEL: "kernel",
    EventKind.MEMCPY: "memcpy",
    EventKind.MEMSET: "memset",
    EventKind.SYNC: "sync",
    EventKind.ANNOTATION: "annotation",
    EventKind.GPU_ANNOTATION: "gpu annotation",
    EventKind.MEMORY: "memory",
    EventKind.COMMUNICATION: "communication",
    EventKind.OVERHEAD: "overhead",
    EventKind.HOST_COMMUNICATION: "host communication",
}

#: Kinds that execute on a GPU stream and occupy it.
GPU_ACTIVITY_KINDS = (EventKind.KERNEL, EventKind.COMMUNICATION, EventKind.MEMCPY, EventKind.MEMSET)
#: Kinds that count as kernels, exactly as the file lists them (collectives are kernels too).
KERNEL_KINDS = (EventKind.KERNEL, EventKind.COMMUNICATION)
#: A collective's execution, on a GPU stream or on a CPU thread.
COLLECTIVE_KINDS = (EventKind.COMMUNICATION, EventKind.HOST_COMMUNICATION)
#: Host API calls that may launch GPU work.
API_KINDS = (EventKind.RUNTIME, EventKind.DRIVER)


class TrackKind(enum.IntEnum):
    HOST = 0  # a host thread: pid / tid
    GPU = 1  # a GPU stream: device / stream
    OTHER = 2


def unsigned(value: int | str) -> int | str:
    """A thread or process id as the system numbers it: Kineto writes a
    pthread id past 2^31 as a negative int32."""
    return value & 0xFFFFFFFF if isinstance(value, int) and value < 0 else value


@dataclass(slots=True, frozen=True)
class Track:
    """Where an event ran: a host thread or a GPU stream."""

    kind: TrackKind
    pid: int | str
    tid: int | str
    device: int = NO_VALUE  # GPU tracks only
    stream: int = NO_VALUE  # GPU tracks only

    @property
    def label(self) -> str:
        if self.kind is TrackKind.GPU:
            return f"cuda:{self.device} stream {self.stream}"
        return f"thread {unsigned(self.tid)} (pid {unsigned(self.pid)})"


@dataclass(slots=True, frozen=True)
class GpuInfo:
    """One entry of the trace's `deviceProperties`."""

    device: int
    name: str
    total_memory_bytes: int | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    arch: str | None = None  # ROCm's gcnArchName ("gfx942:sramecc+:xnack-"), where recorded


@dataclass(slots=True)
class TraceMeta:
    """Trace-level facts: where it came from, which GPUs, which rank, which format."""

    source: str
    rank: int | None = None
    world_size: int | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    format: str = "unknown"  # human label of the format vintage
    features: list[str] = field(default_factory=list)  # e.g. "baseTimeNanoseconds", "cuda_driver"
    base_time_ns: int = 0
    events_in_file: int = 0  # traceEvents entries, including those dropped on purpose
    categories: dict[str, int] = field(default_factory=dict)  # cat -> count, as listed in the file
    skipped: dict[str, int] = field(default_factory=dict)  # malformed events skipped, by reason
    distributed: dict[str, Any] = field(default_factory=dict)  # distributedInfo, as recorded
    # the `daydream` block of traces daydream recorded
    collector: dict[str, Any] = field(default_factory=dict)
    # vendor and runtime/driver/tracer versions, as recorded
    runtime: dict[str, Any] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


#: Columns every trace has, with their dtypes.
EVENT_COLUMNS: dict[str, Any] = {
    "kind": np.int8,
    "name": np.int32,
    "track": np.int32,
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "correlation": np.int64,
    "external_id": np.int64,
    "sequence": np.int64,  # autograd sequence number
    "bytes": np.int64,  # memcpy/memset bytes; [memory] Bytes (negative = free)
}

#: Side tables: name -> {column -> dtype}. Each has an "event" column (row in the trace).
#: Columns ending in "_str" hold indices into `Trace.strings`.
SIDE_TABLES: dict[str, dict[str, Any]] = {
    # floating-point operations of matrix-multiply CPU ops, and the elements of their operands and
    # result, from their recorded input shapes (record_shapes)
    "flops": {
        "event": np.int64,
        "flops": np.float64,
        "elements": np.float64,
    },
    # bytes the streaming elementwise ops (copy_, mul, add, ...: kineto.ELEMENTWISE_OPS) read and
    # write, from their recorded input shapes and types
    "elementwise": {
        "event": np.int64,
        "bytes": np.float64,
    },
    # the recorded input shapes and types of CPU ops (record_shapes), as the file writes them (JSON
    # text, interned): the cost stage re-times an op at new shapes or dtypes from them
    # (daydream/cost/shapes.py)
    "shapes": {
        "event": np.int64,
        "dims_str": np.int32,
        "types_str": np.int32,
        # "Concrete Inputs": the non-tensor arguments' values, where recorded ("" if not)
        "concrete_str": np.int32,
        # "Input Strides": each tensor input's strides, where recorded ("" if not)
        "strides_str": np.int32,
    },
    "memory": {
        "event": np.int64,
        "addr": np.int64,
        "total_allocated": np.int64,
        "total_reserved": np.int64,
        "device_type": np.int8,
        "device_id": np.int32,
    },
    "collective": {
        "event": np.int64,
        "collective_str": np.int32,
        "in_nelems": np.int64,
        "out_nelems": np.int64,
        "group_size": np.int32,
        "dtype_str": np.int32,
        "group_name_str": np.int32,
        "group_ranks_str": np.int32,
    },
    "launch_config": {
        "event": np.int64,
        "grid_x": np.int32,
        "grid_y": np.int32,
        "grid_z": np.int32,
        "block_x": np.int32,
        "block_y": np.int32,
        "block_z": np.int32,
        "registers": np.int32,
        "shared_memory": np.int64,
    },
    "sync": {
        "event": np.int64,
        "sync_kind_str": np.int32,
        "wait_on_stream": np.int64,
        "wait_on_event_record_correlation": np.int64,
        "wait_on_event_id": np.int64,
    },
    "flow": {
        # autograd forward->backward flows (cat fwdbwd): start on the forward op,
        # finish on the backward op, matched by id.
        "flow_id": np.int64,
        "ts_ns": np.int64,
        "track": np.int32,
        "is_start": np.int8,
    },
}


def empty_table(name: str) -> dict[str, np.ndarray]:
    return {col: np.zeros(0, dtype=dt) for col, dt in SIDE_TABLES[name].items()}


@dataclass(slots=True)
class Trace:
    """One rank's events as columns, sorted by start time.

    `columns` holds the `EVENT_COLUMNS`, all the same length; `tables` holds the
    `SIDE_TABLES`; `derived` holds arrays later stages computed and want cached
    with the trace (e.g. the mapping's links), keyed "stage.name".
    """

    meta: TraceMeta
    strings: list[str]
    tracks: list[Track]
    columns: dict[str, np.ndarray]
    tables: dict[str, dict[str, np.ndarray]]
    derived: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.columns["kind"].shape[0])

    # Column accessors keep call sites short and typo-proof.
    @property
    def kind(self) -> np.ndarray:
        return self.columns["kind"]

    @property
    def name(self) -> np.ndarray:
        return self.columns["name"]

    @property
    def track(self) -> np.ndarray:
        return self.columns["track"]

    @property
    def ts_ns(self) -> np.ndarray:
        return self.columns["ts_ns"]

    @property
    def dur_ns(self) -> np.ndarray:
        return self.columns["dur_ns"]

    @property
    def end_ns(self) -> np.ndarray:
        return self.columns["ts_ns"] + self.columns["dur_ns"]

    @property
    def correlation(self) -> np.ndarray:
        return self.columns["correlation"]

    @property
    def external_id(self) -> np.ndarray:
        return self.columns["external_id"]

    @property
    def sequence(self) -> np.ndarray:
        return self.columns["sequence"]

    @property
    def bytes(self) -> np.ndarray:
        return self.columns["bytes"]

    def mask(self, *kinds: EventKind) -> np.ndarray:
        """Boolean mask of the events whose kind is one of `kinds`."""
        wanted = np.zeros(len(EventKind), dtype=bool)
        wanted[[int(k) for k in kinds]] = True
        return wanted[self.columns["kind"]]

    def kind_counts(self) -> dict[EventKind, int]:
        """Events per kind, every kind listed."""
        counts = np.bincount(self.columns["kind"], minlength=len(EventKind))
        return {kind: int(counts[kind]) for kind in EventKind}

    def indices(self, *kinds: EventKind) -> np.ndarray:
        return np.flatnonzero(self.mask(*kinds))

    def count(self, *kinds: EventKind) -> int:
        return int(np.count_nonzero(self.mask(*kinds)))

    def name_of(self, event: int) -> str:
        return self.strings[int(self.columns["name"][event])]

    def string_index(self, text: str) -> int:
        """Index of `text` in the string table, or -1 when no event uses it."""
        try:
            return self.strings.index(text)
        except ValueError:
            return NO_VALUE

    def track_is_gpu(self) -> np.ndarray:
        """Per track: True for GPU streams (index with `Trace.track`)."""
        return np.array([t.kind is TrackKind.GPU for t in self.tracks], dtype=bool)

    @property
    def gpu_names(self) -> list[str]:
        """Distinct names of the GPUs this rank used (or, if none ran, of those listed)."""
        used = {t.device for t in self.tracks if t.kind is TrackKind.GPU}
        gpus = [g for g in self.meta.gpus if g.device in used] or list(self.meta.gpus)
        return list(dict.fromkeys(g.name for g in gpus))

    def span_ns(self) -> tuple[int, int]:
        """(first start, last end) over all events, or (0, 0) for an empty trace."""
        if len(self) == 0:
            return (0, 0)
        return int(self.ts_ns.min()), int(self.end_ns.max())


@dataclass(slots=True)
class Job:
    """All ranks of one training job, in rank order (one `Trace` per rank)."""

    source: str
    traces: list[Trace]
    #: Each rank's graph, built with the traces (daydream.ranks) for
    #: the commands that simulate; None otherwise.
    graphs: list[Any] | None = None
    #: What reading the job decided that a person should know (which of
    #: several captures of one process it took).
    notes: list[str] = field(default_factory=list)
    #: Where the files were several captures of one process, not ranks:
    #: every capture's file, oldest first.
    runs: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int | None:
        sizes = {t.meta.world_size for t in self.traces if t.meta.world_size is not None}
        return max(sizes) if sizes else None


def recorded_fact(trace: Trace, key: str) -> Any:
    """What `daydream trace` wrote under `key` in the trace's `daydream` block (its host facts,
    layers, batch size, memory when the warm-up ended, ...), as read from the file and not yet
    checked; None where the trace does not say (a trace other recorders wrote has no such block)."""
    collector = trace.meta.collector
    return collector.get(key) if isinstance(collector, dict) else None


def memory_before(trace: Trace) -> dict[str, dict[str, Any]]:
    """Per device label ("cuda:0", "cpu"), what `daydream trace` found held there when its warm-up
    ended (`memory_before`: weights, gradients, optimizer state, bytes); empty where not recorded,
    and without entries that are not tables."""
    before = recorded_fact(trace, "memory_before")
    return ({str(label): entry for label, entry in before.items() if isinstance(entry, dict)}
            if isinstance(before, dict) else {})


def batch_size(trace: Trace) -> int | None:
    """Samples per iteration, as `daydream trace` recorded it; None when the trace does not say."""
    value = recorded_fact(trace, "batch_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
