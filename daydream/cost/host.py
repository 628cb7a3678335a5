"""Host cost of ops, from the trace's own measurements.

Every host-side what-if needs to know what an op costs on *this* trace's host: a cast autocast inserts, the
dispatch a fused step no longer does, the wrapper of a checkpointed call. `HostCosts` reads it off the trace:

- `op_ns(name)`: the median *exclusive* host time of the op name (its own work: nested ops and API calls taken out),
  over every time the trace ran it;
- `unit_ns`: the speed of this host's dispatcher, the median exclusive time of the cheap ops every PyTorch trace
  runs (`aten::empty`, `aten::view`, ...). A cost the trace cannot show (the work a what-if adds that the recorded
  code never ran) is recorded once, elsewhere, in these units (`RECORDED_HOST_UNITS`) and converted with this host's
  unit, so a slower host pays proportionally more.

    costs = HostCosts.of(trace)
    costs.op_ns("aten::_to_copy"), costs.unit_ns, costs.launch_ns
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from daydream.trace import API_KINDS, EventKind, Trace, TrackKind, runtime_api

#: Cheap dispatcher ops that nearly every PyTorch trace runs: their median exclusive time is the host's speed unit.
UNIT_OPS = ("aten::empty", "aten::view", "aten::t", "aten::detach", "aten::as_strided", "aten::empty_strided",
            "aten::transpose", "aten::reshape", "aten::expand", "aten::resolve_conj", "aten::resolve_neg",
            "aten::unsqueeze", "aten::select", "aten::slice", "aten::permute", "aten::alias", "detach")
#: Without any of them: the unit measured on the H200 host of examples/h200 (median of its UNIT_OPS), ns.
DEFAULT_UNIT_NS = 1_500

#: Host costs a trace cannot show, in host units (`HostCosts.unit_ns`), per kind of trace ("cuda": a GPU trace, "cpu":
#: a CPU-only one), each with where it was measured. The checkpoint wrapper's own work per checkpointed call
#: (torch.utils.checkpoint, use_reentrant=False: saved-tensor hooks, the RNG-state stash, the frames around the
#: recomputation), forward and backward apart, beyond the recomputed ops themselves.
#: cuda: `python scripts/host_costs.py examples/h200` (torch 2.11 + CUDA 13, H200 host, under daydream trace; the
#: median of mlp 232/332, cnn 241/90, transformer 87/42 units per call, forward/backward).
#: cpu: `OMP_NUM_THREADS=1 python scripts/host_costs.py --measure` (torch 2.13 CPU, this project's 2-core development
#: host; the median of five runs on 2026-12-01: forward 52-189, backward 198-380 units per call, units of 475-786 ns).
RECORDED_HOST_UNITS: dict[str, float] = {
    "checkpoint.forward.cuda": 232.0,
    "checkpoint.backward.cuda": 90.0,
    "checkpoint.forward.cpu": 91.0,
    "checkpoint.backward.cpu": 255.0,
}


@dataclass(slots=True)
class HostCosts:
    """Per op name, its exclusive host times in this trace (ns); the host unit and the median launch call."""

    exclusive_ns: dict[str, list[int]] = field(default_factory=dict)
    unit_ns: int = DEFAULT_UNIT_NS
    unit_from: str = "default"  # "trace" when this trace's own ops gave the unit
    launch_ns: int = 0  # median host time of a kernel launch call (0: none recorded)

    @classmethod
    def of(cls, trace: Trace) -> HostCosts:
        exclusive = exclusive_host_ns(trace)
        by_name: dict[str, list[int]] = {}
        names = trace.name[exclusive[0]]
        for name_id in np.unique(names).tolist():
            by_name[trace.strings[name_id]] = exclusive[1][names == name_id].tolist()
        costs = cls(exclusive_ns=by_name)
        unit = [statistics.median(by_name[op]) for op in UNIT_OPS if len(by_name.get(op, ())) >= 3]
        if unit:
            costs.unit_ns, costs.unit_from = max(1, int(statistics.median(unit))), "trace"
        launches = [v for name, values in by_name.items() if runtime_api.LAUNCH.search(name) for v in values]
        costs.launch_ns = int(statistics.median(launches)) if launches else 0
        return costs

    def op_ns(self, name: str) -> int | None:
        """The median exclusive host time of op `name` in this trace, ns; None where the trace never ran it."""
        values = self.exclusive_ns.get(name)
        return int(statistics.median(values)) if values else None

    def recorded_ns(self, what: str) -> int:
        """A host cost the trace cannot show (a key of RECORDED_HOST_UNITS), on this trace's host, ns."""
        return int(round(RECORDED_HOST_UNITS[what] * self.unit_ns))


def exclusive_host_ns(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(rows, exclusive ns) of the CPU ops and API calls on host threads: each one's duration less that of the ops and
    calls directly nested in it on its thread."""
    host_track = np.array([t.kind is TrackKind.HOST for t in trace.tracks], dtype=bool)
    rows = np.flatnonzero(trace.mask(EventKind.CPU_OP, *API_KINDS) & host_track[trace.track])
    if rows.size == 0:
        return rows, np.zeros(0, dtype=np.int64)
    order = rows[np.lexsort((-trace.dur_ns[rows], trace.ts_ns[rows], trace.track[rows]))]
    starts, ends, tracks = trace.ts_ns[order], trace.end_ns[order], trace.track[order]
    own = trace.dur_ns[order].astype(np.int64).copy()
    parent = _parents(starts.tolist(), ends.tolist(), tracks.tolist())
    nested = parent >= 0
    np.subtract.at(own, parent[nested], trace.dur_ns[order][nested])
    return order, np.maximum(own, 0)


def _parents(starts: list[int], ends: list[int], tracks: list[int]) -> np.ndarray:
    """Per span (sorted by track, start, longest first), the index of the innermost span enclosing it, or -1."""
    parent = np.full(len(starts), -1, dtype=np.int64)
    stack: list[int] = []
    track = None
    for i, (start, end, on) in enumerate(zip(starts, ends, tracks)):
        if on != track:
            stack, track = [], on
        while stack and ends[stack[-1]] <= start:
            stack.pop()
        if stack and end <= ends[stack[-1]]:
            parent[i] = stack[-1]
        stack.append(i)
    return parent
