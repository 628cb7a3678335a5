"""Interconnects and the collective cost model the distributed what-ifs time communication with.

    link = interconnect("nvlink3")                          # or Interconnect("custom", 20.0, 10.0)
    collective_time_ns("allreduce", 100 * 2**20, 8, link)  # ring or tree, whichever is faster

The model is the alpha-beta model NCCL's own performance notes use. For `n` ranks, a
message of `S` bytes, a bus bandwidth `B` (bytes/s a rank sends and receives at once,
what nccl-tests reports as *busbw*) and a per-step latency `a`:

| collective | ring | tree |
|---|---|---|
| all-reduce | 2(n-1)·a + 2(n-1)/n · S/B | 2⌈log2 n⌉·a + 2(n-1)/n · S/B |
| reduce-scatter, all-gather | (n-1)·a + (n-1)/n · S/B | as ring |
| broadcast, reduce | (n-1)·a + S/B | ⌈log2 n⌉·a + S/B |
| all-to-all, send/recv | (n-1)·a + (n-1)/n · S/B | as ring |

`S` is the whole buffer (for reduce-scatter and all-gather, the unsharded size). The
tree's bandwidth term is the ring's: NCCL's double binary tree reaches the ring's bus
bandwidth for large messages; it wins on latency. `algorithm="auto"` takes the faster
of the two for each message, as NCCL's tuner does. With one rank every collective is free.

The presets are achievable bus bandwidths (nccl-tests *busbw* on the fabric, about
75-90% of the link's peak), not link peaks; a measured busbw passed as `bandwidth=`
is always better than a preset.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from daydream.errors import InputError


@dataclass(slots=True, frozen=True)
class Interconnect:
    name: str
    bus_bandwidth_gbs: float  # GB/s (1e9 bytes/s) each rank moves, achievable
    step_latency_us: float  # one ring/tree step
    description: str = ""


INTERCONNECTS: dict[str, Interconnect] = {
    "nvlink2": Interconnect("nvlink2", 130.0, 5.0, "V100 SXM2 NVLink 2 (DGX-1)"),
    "nvlink3": Interconnect("nvlink3", 230.0, 5.0, "A100 SXM4 NVLink 3 (DGX A100)"),
    "nvlink4": Interconnect("nvlink4", 370.0, 5.0, "H100/H200 SXM NVLink 4 (DGX H100), no NVLS"),
    "nvlink5": Interconnect("nvlink5", 720.0, 5.0, "B200 NVLink 5 (DGX B200), no NVLS"),
    "pcie3": Interconnect("pcie3", 10.0, 8.0, "PCIe 3.0 x16 through the host"),
    "pcie4": Interconnect("pcie4", 20.0, 8.0, "PCIe 4.0 x16 through the host"),
    "pcie5": Interconnect("pcie5", 40.0, 8.0, "PCIe 5.0 x16 through the host"),
    "ib-edr": Interconnect("ib-edr", 11.0, 10.0, "InfiniBand EDR 100 Gb/s, one NIC per GPU"),
    "ib-hdr": Interconnect("ib-hdr", 22.0, 10.0, "InfiniBand HDR 200 Gb/s, one NIC per GPU"),
    "ib-ndr": Interconnect("ib-ndr", 44.0, 10.0, "InfiniBand NDR 400 Gb/s, one NIC per GPU"),
    "ethernet-10g": Interconnect("ethernet-10g", 1.0, 30.0, "10 GbE, TCP"),
    "ethernet-25g": Interconnect("ethernet-25g", 2.6, 25.0, "25 GbE, TCP"),
    "ethernet-100g": Interconnect("ethernet-100g", 10.0, 20.0, "100 GbE, TCP/RoCE"),
}

#: The fabric between the GPUs of one machine, by the device table's interconnect label.
_BY_DEVICE_LINK = [(re.compile(r"NVLink\s*2", re.I), "nvlink2"),
                   (re.compile(r"NVLink\s*3", re.I), "nvlink3"),
                   (re.compile(r"NVLink\s*4", re.I), "nvlink4"),
                   (re.compile(r"NVLink\s*5", re.I), "nvlink5"),
                   (re.compile(r"PCIe\s*3", re.I), "pcie3"),
                   (re.compile(r"PCIe\s*4", re.I), "pcie4"),
                   (re.compile(r"PCIe\s*5", re.I), "pcie5")]

OPERATIONS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall",
              "sendrecv")
ALGORITHMS = ("ring", "tree", "auto")


def interconnect(name: str) -> Interconnect:
    """A preset by name (case and '-'/'_' insensitive)."""
    key = name.strip().lower().replace("_", "-")
    if key not in INTERCONNECTS:
        raise InputError(f"unknown interconnect {name!r} — known: {', '.join(INTERCONNECTS)}; or "
                         "give bandwidth=GB/s")
    return INTERCONNECTS[key]


def interconnect_of_device(link_label: str | None) -> Interconnect | None:
    """The preset for a device-table interconnect label ("NVLink 3", "PCIe 3.0 x16"), if any."""
    for pattern, name in _BY_DEVICE_LINK:
        if link_label and pattern.search(link_label):
            return INTERCONNECTS[name]
    return None


def normalize_operation(name: str) -> str:
    """'AllReduce', 'all_reduce', 'ncclKernel_AllReduce_RING_LL_Sum_float' -> 'allreduce'."""
    flat = re.sub(r"[^a-z]", "", name.lower())
    for operation in ("reducescatter", "allreduce", "allgather", "alltoall", "sendrecv",
                      "broadcast", "reduce"):
        if operation in flat:
            return operation
    if "send" in flat or "recv" in flat:
        return "sendrecv"
    raise ValueError(f"not a collective daydream can time: {name!r}")


def collective_time_ns(operation: str, message_bytes: float, ranks: int, link: Interconnect,
                       algorithm: str = "auto") -> int:
    """Time (ns) of one collective of `message_bytes` among `ranks` over `link`."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r} (ring, tree or auto)")
    if ranks <= 1 or message_bytes <= 0:
        return 0
    op = normalize_operation(operation)
    if algorithm == "auto":
        return min(_time_ns(op, message_bytes, ranks, link, "ring"),
                   _time_ns(op, message_bytes, ranks, link, "tree"))
    return _time_ns(op, message_bytes, ranks, link, algorithm)


def collective_steps(operation: str, ranks: int, algorithm: str = "ring") -> int:
    """Latency-bound steps of one collective among `ranks`: 2(n-1) for a ring all-reduce,
    2·ceil(log2 n) for a tree; n-1 (ring) or ceil(log2 n) (tree) for a broadcast or reduce; n-1 for
    the one-pass collectives."""
    if ranks <= 1:
        return 0
    op = normalize_operation(operation)
    tree_steps = math.ceil(math.log2(ranks))
    if op == "allreduce":
        return 2 * tree_steps if algorithm == "tree" else 2 * (ranks - 1)
    if op in ("broadcast", "reduce"):
        return tree_steps if algorithm == "tree" else ranks - 1
    return ranks - 1  # reduce-scatter, all-gather, all-to-all, send/recv


def _time_ns(op: str, size: float, n: int, link: Interconnect, algorithm: str) -> int:
    alpha_s = link.step_latency_us * 1e-6
    beta_s = size / (link.bus_bandwidth_gbs * 1e9)  # one full message over the bus bandwidth
    share = (n - 1) / n
    steps = collective_steps(op, n, algorithm)
    if op == "allreduce":
        seconds = steps * alpha_s + 2 * share * beta_s
    elif op in ("broadcast", "reduce"):
        seconds = steps * alpha_s + beta_s
    else:  # reduce-scatter, all-gather, all-to-all, send/recv: one pass of the (n-1)/n share
        seconds = steps * alpha_s + share * beta_s
    return int(round(seconds * 1e9))
