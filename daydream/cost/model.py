"""The cost model of one trace: what a what-if asks ("how long would
this op take?"), answered by tier.

    costs = CostModel.of(trace, device, measure=True)
    timed = costs.cast((2048, 512), "float", "c10::BFloat16")  # Timed(host_ns, device_ns, tier)
    costs.tiers_note()  # changed work per tier, for the prediction's note
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from daydream.cost.elementwise import CopySpeed, elementwise_speed
from daydream.cost.host import HostCosts
from daydream.cost.measure import COMPILE_BUDGET_S, Measurer
from daydream.cost.roofline import Roofline
from daydream.cost.shapes import ITEM_BYTES, elements
from daydream.devices import Device
from daydream.trace import EventKind, Trace, TrackKind

#: Host costs of autocast in host units (`HostCosts.unit_ns`), from the three bf16 runs of
#: examples/h200 against their fp32 baselines (torch 2.11 + CUDA; each the median of mlp /
#: transformer / cnn): one cast's dispatch chain, launch not included (13.5 / 10.5 / 16.9 units:
#: 15.1, 12.5, 14.9 µs); autograd's ToCopyBackward0 node that casts a gradient back (5.1 / 3.9 / 7.0
#: units); the autocast wrapper's re-dispatch of each op it handles, a second frame of the same op
#: (6.4 / 6.3 / 5.3 units: aten::linear and aten::layer_norm run twice per call under autocast).
CAST_CHAIN_UNITS = 13.5
CAST_BACKWARD_UNITS = 5.1
AUTOCAST_DISPATCH_UNITS = 6.3


@dataclass(slots=True, frozen=True)
class CostOptions:
    """How the cost stage may time changed work: `measure` (None: on unless DAYDREAM_MEASURE=0), the
    measuring budget per what-if, and the budget for compiling fused runs (the compile what-if),
    seconds."""

    measure: bool | None = None
    budget_s: float = 5.0
    compile_budget_s: float = COMPILE_BUDGET_S


class Tier(enum.Enum):
    MEASURED = "measured"  # run on this machine at the recorded shapes and dtypes
    # roofline at the trace's own efficiency, host time from the trace's own ops
    MODELLED = "modelled"
    RATIO = "ratio"  # no shapes recorded: a fixed ratio, as marked


@dataclass(slots=True, frozen=True)
class Timed:
    host_ns: int
    device_ns: int
    tier: Tier


@dataclass(slots=True)
class CostModel:
    host: HostCosts
    on_gpu: bool
    device: Device | None = None
    elementwise: CopySpeed | None = None
    floor_ns: int = 0  # the shortest kernel of the trace
    # the measured tier, where it applies (a CPU trace, torch importable)
    measurer: Measurer | None = None
    tally: Counter[Tier] = field(default_factory=Counter)

    @classmethod
    def of(cls, trace: Trace, device: Device | None, measure: bool = True, budget_s: float = 5.0,
           threads: int = 0,
           elementwise_of: Callable[[bool], CopySpeed | None] | None = None,
           compile_budget_s: float = COMPILE_BUDGET_S, speed_at: int = 0) -> CostModel:
        """The model of `trace`; with `measure`, a CPU trace gets the measured tier (torch,
        `threads` intra-op threads, 0: torch's default) within `budget_s` seconds per what-if,
        and `compile_budget_s` for compiling fused runs; `speed_at`: the speed probe the trace
        recorded (its host facts; 0: none), the speed its measured times are carried to.
        `elementwise_of(on_gpu)`: the trace's streaming speed where the caller has it already
        (cost/elementwise.py)."""
        gpu_track = np.array([t.kind is TrackKind.GPU for t in trace.tracks], dtype=bool)
        kernels = trace.indices(EventKind.KERNEL)
        on_gpu = bool(kernels.size) and bool(gpu_track[trace.track[kernels]].any())
        durations = trace.dur_ns[kernels]
        floor = int(np.percentile(durations[durations > 0], 1)) if (durations > 0).any() else 0
        measurer = None
        if measure and not on_gpu:
            measurer = Measurer.for_cpu(threads or _default_threads(), budget_s, compile_budget_s)
            if measurer is not None and speed_at > 0:
                measurer.speed_at = speed_at
        speed = (elementwise_of(on_gpu) if elementwise_of is not None
                 else elementwise_speed(trace, on_gpu))
        return cls(host=HostCosts.of(trace), on_gpu=on_gpu, device=device, elementwise=speed,
                   floor_ns=floor, measurer=measurer)

    def count(self, tier: Tier, n: int = 1) -> None:
        self.tally[tier] += n

    def tiers_note(self) -> str:
        """'12 measured, 30 modelled, 4 by ratio' of the changed work timed so far."""
        parts = [f"{self.tally[t]} {t.value if t is not Tier.RATIO else 'by ratio'}" for t in Tier
                 if self.tally[t]]
        return ", ".join(parts) if parts else "nothing timed"

    def cast(self, shape: tuple[int, ...], from_type: str, to_type: str,
             hot: bool = False) -> Timed:
        """One autocast cast of a tensor of `shape` from `from_type` to
        `to_type` (torch.profiler's type names); `hot`: its operand in the
        caches (`Measurer.cast_ns`)."""
        if self.measurer is not None:
            measured = self.measurer.cast_ns(shape, to_type, from_type, hot)
            if measured is not None:
                self.count(Tier.MEASURED)
                return Timed(measured, 0, Tier.MEASURED)

        host = int(round(CAST_CHAIN_UNITS * self.host.unit_ns))
        moved = elements(shape) * (ITEM_BYTES.get(from_type, 4) + ITEM_BYTES.get(to_type, 2))
        device = self.stream_ns(moved)
        if self.on_gpu:
            host += self.host.launch_ns
        else:
            host += device  # on a CPU trace, the copy is the host's own work
            device = 0
        self.count(Tier.MODELLED)
        return Timed(host, device, Tier.MODELLED)

    def cast_backward_host_ns(self) -> int:
        """autograd's ToCopyBackward0 node (the cast of a gradient
        back), host side, without the cast it dispatches."""
        return int(round(CAST_BACKWARD_UNITS * self.host.unit_ns))

    def dispatch_ns(self) -> int:
        """The autocast wrapper's own host work on one op it handles
        (its second dispatch of the op)."""
        return int(round(AUTOCAST_DISPATCH_UNITS * self.host.unit_ns))

    def stream_ns(self, moved_bytes: float) -> int:
        """A streaming kernel (or CPU op) that reads and writes
        `moved_bytes` in all, at the trace's own speed."""
        if self.elementwise is not None:
            return max(self.floor_ns, int(round(self.elementwise.overhead_ns
                                                + moved_bytes / self.elementwise.bytes_per_ns)))
        if self.device is not None and self.on_gpu:
            return max(self.floor_ns, int(round(moved_bytes / self.device.memory_bandwidth_gbs)))
        return self.floor_ns

    def memory_bound_ns(self, moved_bytes: float) -> int:
        """The least time a kernel that reads and writes `moved_bytes` takes
        on the trace's device: the bytes at its bandwidth times the share of
        it the trace's own streaming kernels reached (0 without a device)."""
        if self.device is None:
            return 0
        roofline = Roofline(0.0, self.device.memory_bandwidth_gbs,
                            memory_efficiency=self.memory_efficiency())
        return int(round(roofline.memory_ns(moved_bytes)))

    def memory_efficiency(self) -> float:
        """The trace's streaming speed as a share of the device's
        bandwidth (1 where either is unknown)."""
        if self.elementwise is None or self.device is None or not self.device.memory_bandwidth_gbs:
            return 1.0
        return min(1.0, self.elementwise.bytes_per_ns / self.device.memory_bandwidth_gbs)


def _default_threads() -> int:
    try:
        import torch
    except ImportError:
        return 1
    return int(torch.get_num_threads())
