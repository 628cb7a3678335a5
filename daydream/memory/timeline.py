"""Memory timeline and breakdown from a trace's `[memory]` events.

Allocations are paired with their frees by address (per device, in time order). Each
one is attributed to the CPU op that made it (the innermost op around the event on its
thread), and through it to a layer, a phase and an iteration. Categories come from
lifetimes and phases:

- weights: allocated before the first iteration and alive past the last (or never freed)
- activations: allocated in forward, freed in backward (saved for backward)
- gradients: allocated in backward, alive after the backward phase ends
- optimizer state: allocated in the optimizer phase and alive after it
- workspace: allocated inside a convolution, GEMM or attention op and freed before it ends
  (the library's scratch)
- temporaries: allocated and freed within one phase of one iteration
- before the trace: allocated before the trace window (the recorded total minus what the
  window shows)
- other: everything else, reported as unclassified

The peak allocated of a device is the largest `Total Allocated` the trace recorded
(exact); when the file has no such field (2021 traces), it is the running sum of `Bytes`.

What existed before the first traced iteration: a trace recorded by `daydream trace` carries
the weights (parameters and buffers), gradients and optimizer state the models and optimizers
held then and still held when that iteration ended (`memory_before`, per device: what the window
neither allocated nor freed). A GPU allocator's totals include it: it is named inside
"before the trace". The CPU's totals count only what was allocated while memory was profiled,
so what they held at the first event is replaced by what the recording found, and frees of blocks
the window did not allocate (an earlier recording's in the same process) are not counted.
For other traces, "before the trace" is the first event's `Total Allocated` less its own bytes,
or, where the totals start at the trace, the output says it is missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream.mapping import attribute, find_iterations
from daydream.mapping.attribution import BACKWARD, FORWARD, OPTIMIZER
from daydream.mapping.linking import innermost_enclosing
from daydream.trace import NO_VALUE, EventKind, Trace
from daydream.trace.model import memory_before

CATEGORIES = ("weights", "activations", "gradients", "optimizer state", "workspace", "temporaries",
              "before the trace", "other")
#: Ops whose own scratch memory is a library workspace (cuDNN, cuBLAS/cuBLASLt, MIOpen,
#: rocBLAS/hipBLASLt, oneDNN).
WORKSPACE_OPS = re.compile(r"conv|cudnn|miopen|mkldnn|onednn|\bmm\b|::mm$|addmm|bmm|matmul|linear|"
                           r"gemm|scaled_dot_product|flash|efficient_attention|_cslt|_scaled_mm",
                           re.IGNORECASE)
NEVER = np.iinfo(np.int64).max


@dataclass(slots=True)
class DeviceMemory:
    """One device's memory: peaks, the breakdown at the peak, and the timeline."""

    device: str  # "cuda:0" or "cpu"
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    peak_time_ns: int
    peak_from: str  # "Total Allocated" (recorded) or "running sum of Bytes"
    categories: dict[str, int]  # bytes live at the peak, per category
    layers: list[dict[str, object]]  # activation bytes live at the peak, per layer, largest first
    unclassified_share: float  # share of the peak in "other"
    #: where the memory from before the trace comes from: "recorded by daydream trace", "Total
    #: Allocated at the first event (not split)", or what is missing
    before_trace: str = ""
    #: blocks the profiler never saw freed whose addresses were handed out again (freed on a thread
    #: it does not watch, such as a communication library's worker): how many and their bytes; each
    #: ends where its address is taken again
    unseen_frees: tuple[int, int] = (0, 0)
    #: the highest allocated in each recorded iteration (from the timeline); rising from one
    #: iteration to the next in a steady loop is a leak, or blocks freed where the profiler did not
    #: see it and never reused
    iteration_peaks_bytes: tuple[int, ...] = ()
    times_ns: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    # bytes live after each time
    by_category: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    # per allocation: size, start, end, ...
    allocations: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    #: the iterations' boundaries (each start, then the last end), ns
    iteration_bounds_ns: np.ndarray = field(repr=False,
                                            default_factory=lambda: np.zeros(0, dtype=np.int64))


#: c10::DeviceType of a `[memory]` event -> the device name PyTorch gives it. ROCm builds record the
#: GPU as HIP (6) but address it as "cuda", so both are GPU memory named cuda:N.
DEVICE_TYPE_NAMES = {1: "cuda", 6: "cuda", 12: "xpu", 13: "mps", 19: "mtia", 20: "privateuse1"}


def device_label(device_type: int, device_id: int) -> str:
    """"cuda:0" for GPU memory (CUDA or HIP), "cpu" for host memory,
    the PyTorch name for other devices."""
    name = DEVICE_TYPE_NAMES.get(device_type)
    if name is None:
        return "cpu" if device_type in (0, NO_VALUE) else f"device-type-{device_type}:{device_id}"
    return f"{name}:{device_id}"


def analyze_memory(trace: Trace) -> list[DeviceMemory]:
    """Every device's memory timeline and breakdown; empty when the trace has no memory events."""
    table = trace.tables.get("memory")
    if table is None or table["event"].size == 0:
        return []
    attribution = attribute(trace)
    rows = table["event"]
    op = innermost_enclosing(trace, trace.indices(EventKind.CPU_OP), rows)
    # Per memory event: the end of its op when that op is a
    # convolution/GEMM/attention (a library workspace's owner).
    library = np.array([bool(WORKSPACE_OPS.search(name)) for name in trace.strings], dtype=bool)
    owner_end = np.where((op >= 0) & library[trace.name[np.maximum(op, 0)]],
                         trace.end_ns[np.maximum(op, 0)], NO_VALUE)
    phase = np.where(op >= 0, attribution.phase[np.maximum(op, 0)], NO_VALUE).astype(np.int64)
    layer = np.where(op >= 0, attribution.layer[np.maximum(op, 0)], NO_VALUE).astype(np.int64)
    iterations = find_iterations(trace)
    bounds = np.array([it.start_ns for it in iterations]
                      + ([iterations[-1].end_ns] if iterations else []), dtype=np.int64)
    results = []
    keys = np.stack([table["device_type"].astype(np.int64), table["device_id"].astype(np.int64)],
                    axis=1)
    for device_type, device_id in np.unique(keys, axis=0).tolist():
        mine = np.flatnonzero((keys[:, 0] == device_type) & (keys[:, 1] == device_id))
        results.append(_device(trace, table, mine, phase, layer, bounds, attribution.layers,
                               device_type, device_id, owner_end))
    return results


@dataclass(slots=True)
class _Allocations:
    """A device's allocations paired from its [memory] events (columns, one row per allocation)."""

    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    category: np.ndarray
    layer: np.ndarray
    phase: np.ndarray

    def extend(self, size: np.ndarray, start: np.ndarray, category: np.ndarray) -> None:
        """Allocations alive to the end, of no layer or phase."""
        count = size.size
        self.size, self.start = (np.concatenate([self.size, size]),
                                 np.concatenate([self.start, start]))
        self.end = np.concatenate([self.end, np.full(count, NEVER, dtype=np.int64)])
        self.category = np.concatenate([self.category, category])
        self.layer = np.concatenate([self.layer, np.full(count, NO_VALUE, dtype=self.layer.dtype)])
        self.phase = np.concatenate([self.phase, np.full(count, NO_VALUE, dtype=self.phase.dtype)])


def _paired(times: np.ndarray, sizes: np.ndarray, addresses: np.ndarray, phase: np.ndarray,
            layer: np.ndarray, bounds: np.ndarray,
            owner_end: np.ndarray) -> tuple[_Allocations, np.ndarray, np.ndarray]:
    """The allocations of one device's events (per event: time, signed size, address, phase, layer,
    the end of the op that owns it as workspace), classified; per allocation the event that frees it
    and the allocation that took its address while no free of it was recorded (-1: none; such a
    block ends there, see `_pair`)."""
    alloc_index, free_index, taken_by = _pair(times, sizes, addresses)
    start = times[alloc_index]
    freed_at = np.where(free_index >= 0, free_index, taken_by)
    end = np.where(freed_at >= 0, times[np.maximum(freed_at, 0)], NEVER)
    category = _classify(start, end, phase[alloc_index],
                         np.where(freed_at >= 0, phase[np.maximum(freed_at, 0)], NO_VALUE), bounds)
    workspace_until = owner_end[alloc_index]
    category[(workspace_until != NO_VALUE) & (end <= workspace_until) & (
        category == CATEGORIES.index("temporaries"))] = \
        CATEGORIES.index("workspace")
    allocations = _Allocations(sizes[alloc_index], start, end, category, layer[alloc_index],
                               phase[alloc_index].astype(np.int64))
    return allocations, free_index, taken_by


def _device(trace: Trace, table: dict[str, np.ndarray], mine: np.ndarray, phase: np.ndarray,
            layer: np.ndarray, bounds: np.ndarray, layer_names: list[str], device_type: int,
            device_id: int, owner_end: np.ndarray) -> DeviceMemory:
    rows = table["event"][mine]
    times, sizes, addresses, recorded = (trace.ts_ns[rows], trace.bytes[rows], table["addr"][mine],
                                         table["total_allocated"][mine])
    allocations, free_index, taken_by = _paired(times, sizes, addresses, phase[mine], layer[mine],
                                                bounds, owner_end[mine])
    unseen = _unseen_frees(sizes, np.flatnonzero(sizes > 0), taken_by)
    unseen_frees = (int((taken_by >= 0).sum()), int(allocations.size[taken_by >= 0].sum()))
    has_total = bool((recorded >= 0).any())
    running = np.cumsum(sizes) + unseen
    total = recorded + unseen if has_total else running - min(0, int(running.min()))
    before_first = int(total[0]) - int(sizes[0])  # what the totals held before the first event
    label = device_label(device_type, device_id)
    known = _known_before(trace, label)
    if known is not None and label == "cpu" and has_total:
        total = total - _earlier_frees(sizes, addresses, free_index)
    peak_at = int(np.argmax(total))
    peak_time, peak = int(times[peak_at]), int(total[peak_at])
    categories, live = _at_peak(allocations, peak_time, peak, bool((addresses >= 0).any()))
    layers = _activation_layers(allocations, live, layer_names)
    timeline_times, by_category = _stacked(times, allocations.start, allocations.end,
                                           allocations.size, allocations.category, total)
    if known is not None and (addresses >= 0).any():
        peak += _known_into(known, label, before_first, categories, by_category)
        named = [(CATEGORIES.index(name), value) for name, value in known.items() if value
                 and name != "before the trace"]
        # As allocations alive from before the first event, so that what-ifs (zero, optimizer) act
        # on them too. ("before the trace" itself is the what-ifs' baseline series already.)
        allocations.extend(np.array([v for _, v in named], dtype=allocations.size.dtype),
                           np.full(len(named), int(times[0]) - 1, dtype=np.int64),
                           np.array([c for c, _ in named], dtype=allocations.category.dtype))
        before_trace = ("weights, gradients and optimizer state recorded by daydream trace at the "
                        "first traced iteration" + _allocator_before(trace, label))
    else:
        before_trace = _before_untracked(has_total and int(recorded[0]) - int(sizes[0]) > 0)
    reserved = table["total_reserved"][mine]
    a = allocations
    return DeviceMemory(
        device=label,
        peak_allocated_bytes=peak,
        peak_reserved_bytes=int(reserved.max()) if (reserved > 0).any() else None,
        peak_time_ns=peak_time,
        peak_from="Total Allocated" if has_total else "running sum of Bytes",
        categories=categories,
        layers=layers,
        unclassified_share=categories["other"] / peak if peak else 0.0,
        before_trace=before_trace,
        unseen_frees=unseen_frees,
        iteration_peaks_bytes=_iteration_peaks(timeline_times, by_category, bounds),
        iteration_bounds_ns=bounds,
        times_ns=timeline_times,
        by_category=by_category,
        allocations={"size": a.size, "start": a.start, "end": a.end, "category": a.category,
                     "layer": a.layer, "phase": a.phase, "iteration": _iterations(bounds, a.start)},
    )


def _before_untracked(recorded: bool) -> str:
    """What the breakdown says of memory from before the trace that daydream trace did not record:
    `recorded` when the file's totals hold it."""
    if recorded:
        return ("allocated before the trace, from Total Allocated at the first event (not split "
                "into categories)")
    return ("missing: this trace's totals start at its first event, so what existed before it "
            "(weights, optimizer state, data) is not counted; a trace of daydream trace with "
            "--warmup 1 or more carries it")


def _iteration_peaks(times: np.ndarray, by_category: dict[str, np.ndarray],
                     bounds: np.ndarray) -> tuple[int, ...]:
    """The most allocated at any event time within each iteration
    (`bounds`: their starts, then the last end)."""
    if bounds.size < 2 or not by_category:
        return ()
    total = np.sum(list(by_category.values()), axis=0)
    peaks = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        inside = total[(times >= start) & (times < end)]
        peaks.append(int(inside.max()) if inside.size else 0)
    return tuple(peaks)


def _iterations(bounds: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The iteration each allocation starts in (by the iterations'
    start times `bounds`; 0 without any)."""
    return (np.searchsorted(bounds, start, side="right") - 1 if bounds.size
            else np.zeros(start.size, dtype=np.int64))


def _at_peak(allocations: _Allocations, peak_time: int, peak: int,
             addressed: bool) -> tuple[dict[str, int], np.ndarray]:
    """(bytes per category alive at the peak, which allocations are alive then); without addresses
    (2021 traces) nothing can be paired, so everything is "other"."""
    a = allocations
    live = (a.start <= peak_time) & (a.end > peak_time)
    if not addressed:
        live[:] = False
        return {**{name: 0 for name in CATEGORIES}, "other": peak}, live
    categories = {name: int(a.size[live & (a.category == i)].sum())
                  for i, name in enumerate(CATEGORIES)}
    categories["before the trace"] = max(0, peak - int(a.size[live].sum()))
    return categories, live


def _activation_layers(allocations: _Allocations, live: np.ndarray,
                       layer_names: list[str]) -> list[dict[str, object]]:
    """Per layer, the bytes of its activations alive at the peak,
    largest first (layers holding none left out)."""
    a = allocations
    if not layer_names:
        return []
    activations = live & (a.category == CATEGORIES.index("activations"))
    per_layer = np.bincount(np.maximum(a.layer[activations], 0), weights=a.size[activations],
                            minlength=len(layer_names))
    entries: list[dict[str, Any]] = [{"name": name, "activation_bytes": int(per_layer[i])}
                                     for i, name in enumerate(layer_names) if per_layer[i]]
    return sorted(entries, key=lambda entry: -int(entry["activation_bytes"]))


def _known_into(known: dict[str, int], label: str, before_first: int, categories: dict[str, int],
                by_category: dict[str, np.ndarray]) -> int:
    """What daydream trace recorded before the first event, put into
    the categories; how much it adds to the peak.

    The CPU's totals count only what was allocated while memory was profiled (in
    this process, also by earlier sessions): what they held before the first
    event is replaced by what the recording found. A GPU allocator's totals
    include it: the recording names the part of "before the trace" it knows."""
    if label == "cpu":
        categories["before the trace"] = max(0, categories["before the trace"] - before_first)
        by_category["before the trace"] = (
            np.maximum(by_category["before the trace"] - before_first, 0))
        for name, value in known.items():
            categories[name] += value
            by_category[name] = by_category[name] + value
        return sum(known.values()) - before_first
    for name, value in known.items():
        if name == "before the trace":
            continue
        taken = min(value, categories["before the trace"])
        categories[name] += taken
        categories["before the trace"] -= taken
        moved = np.minimum(by_category["before the trace"], value)
        by_category[name] = by_category[name] + moved
        by_category["before the trace"] = by_category["before the trace"] - moved
    return 0


def _bytes(value: object) -> int:
    """A recorded byte count, 0 when it is not a plausible one."""
    return int(value) if isinstance(value, (int, float)) and 0 <= value < 2**62 else 0


def _known_before(trace: Trace, label: str) -> dict[str, int] | None:
    """What daydream trace found on device `label` at the first traced iteration (weights,
    gradients, optimizer state)."""
    entry = memory_before(trace).get(label)
    if entry is None:
        return None
    return {name: _bytes(entry.get(recorded_as)) for name, recorded_as in
            (("weights", "weights"), ("gradients", "gradients"),
             ("optimizer state", "optimizer state"), ("before the trace", "other tensors"))}


def _allocator_before(trace: Trace, label: str) -> str:
    """What the caching allocator held on GPU `label` when daydream trace took its snapshot, as
    words ("" if unknown)."""
    entry = memory_before(trace).get(label) or {}
    reserved, segments = _bytes(entry.get("reserved")), _bytes(entry.get("segments"))
    if not reserved:
        return ""
    held = f" in {segments} segments" if segments else ""
    return f"; the allocator then held {reserved / 2**20:.1f} MiB reserved{held}"


def _pair(times: np.ndarray, sizes: np.ndarray,
          addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index of each allocation, index of its free or -1, index of the allocation that took its
    address while no free of it was recorded, or -1); events without an address stay unpaired.

    The profiler records a free only on a thread it watches: a block freed elsewhere (by a
    communication library's worker thread, as gloo's are) has no free event, and the CPU's Total
    Allocated keeps counting it. Its address being handed out again proves it was freed by then: the
    latest it can have been."""
    allocations = np.flatnonzero(sizes > 0)
    free_of = np.full(allocations.size, -1, dtype=np.int64)
    taken_by = np.full(allocations.size, -1, dtype=np.int64)
    known = addresses >= 0
    order = np.lexsort((times, addresses))
    order = order[known[order]]
    same_address = addresses[order][1:] == addresses[order][:-1]
    allocated = sizes[order][:-1] > 0
    # An allocation followed, at the same address, by a free of the same size is its pair.
    follows = same_address & allocated & (sizes[order][1:] == -sizes[order][:-1])
    free_of[np.searchsorted(allocations, order[:-1][follows])] = order[1:][follows]
    # One followed by another allocation at its address was freed where the profiler did not see it.
    unseen = same_address & allocated & (sizes[order][1:] > 0)
    taken_by[np.searchsorted(allocations, order[:-1][unseen])] = order[1:][unseen]
    return allocations, free_of, taken_by


def _unseen_frees(sizes: np.ndarray, alloc_index: np.ndarray, taken_by: np.ndarray) -> np.ndarray:
    """Per event, the bytes of blocks freed so far where the profiler did not see it (negative):
    what a recorded Total Allocated still counts."""
    delta = np.zeros(sizes.size, dtype=np.int64)
    unseen = taken_by >= 0
    np.add.at(delta, taken_by[unseen], -sizes[alloc_index[unseen]].astype(np.int64))
    return np.cumsum(delta)


def _earlier_frees(sizes: np.ndarray, addresses: np.ndarray, free_index: np.ndarray) -> np.ndarray:
    """Per event, the bytes freed so far of blocks the window did not
    allocate (negative), for a CPU recording whose memory from before
    the window is what daydream trace found there (`memory_before`).

    The CPU's totals count only what was allocated while memory was
    profiled, but in any profiling session of the
    process: a block an earlier recording allocated (a cache, or a script's object collected late)
    and this window frees would lower them, as if this script's memory had shrunk. What existed
    before the window is counted from the recording instead, so such frees are taken out."""
    earlier = (sizes < 0) & (addresses >= 0)
    earlier[free_index[free_index >= 0]] = False
    return np.cumsum(np.where(earlier, sizes, 0))


def _classify(start: np.ndarray, end: np.ndarray, alloc_phase: np.ndarray, free_phase: np.ndarray,
              bounds: np.ndarray) -> np.ndarray:
    category = np.full(start.size, CATEGORIES.index("other"), dtype=np.int8)
    if bounds.size:
        first, last = int(bounds[0]), int(bounds[-1])
        iteration_of_alloc = np.searchsorted(bounds, start, side="right")
        iteration_of_free = np.searchsorted(bounds, np.minimum(end, NEVER - 1), side="right")
        same_iteration = (iteration_of_alloc == iteration_of_free) & (end != NEVER)
        category[(alloc_phase == FORWARD) & (free_phase == BACKWARD)] = (
            CATEGORIES.index("activations"))
        category[(alloc_phase == BACKWARD) & (free_phase != BACKWARD)] = (
            CATEGORIES.index("gradients"))
        category[(alloc_phase == OPTIMIZER) & ((end == NEVER) | ~same_iteration)] = (
            CATEGORIES.index("optimizer state"))
        category[(alloc_phase == free_phase) & (alloc_phase >= 0) & same_iteration] = (
            CATEGORIES.index("temporaries"))
        category[(start < first) & ((end == NEVER) | (end > last))] = CATEGORIES.index("weights")
    return category


def _stacked(times: np.ndarray, start: np.ndarray, end: np.ndarray, size: np.ndarray,
             category: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Bytes live per category after each event time (the recorded
    total minus the window's is 'before the trace')."""
    grid = np.unique(times)
    by_category = {}
    window_total = np.zeros(grid.size, dtype=np.float64)
    for index, name in enumerate(CATEGORIES):
        if name == "before the trace":
            continue
        chosen = category == index
        delta = np.zeros(grid.size + 1, dtype=np.float64)
        np.add.at(delta, np.searchsorted(grid, start[chosen]), size[chosen])
        freed = end[chosen] != NEVER
        np.add.at(delta, np.searchsorted(grid, end[chosen][freed]), -size[chosen][freed])
        live = np.cumsum(delta)[:-1]
        by_category[name] = live
        window_total += live
    recorded_at = total[np.searchsorted(times, grid, side="right") - 1]
    by_category["before the trace"] = np.maximum(recorded_at - window_total, 0)
    return grid, by_category
