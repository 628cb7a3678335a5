"""The link a data-parallel job communicates over: presets, overrides,
and flat or hierarchical collectives.

    net = fabric({"interconnect": "nvlink3"}, context, world=8)
    net.time_ns("allreduce", 100 * 2**20)

Flat: one ring (or tree) over all `world` ranks on one link: the GPUs' own link within a node, the
network between nodes once `world` exceeds `gpus_per_node`. Hierarchical (BlueConnect, NCCL's tree
across nodes): an all-reduce of S bytes among g ranks per node and m nodes is a reduce-scatter of S
inside each node, an all-reduce of each rank's S/g shard across the m nodes (every rank on its own
NIC, at once), and an all-gather of S inside the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from daydream.errors import InputError
from daydream.interconnect import (
    Interconnect,
    collective_time_ns,
    interconnect,
    interconnect_of_device,
    normalize_operation,
)
from daydream.transforms.registry import Context, Parameter, bandwidth

GPUS_PER_NODE = 8
TOPOLOGIES = ("flat", "hierarchical")
_SIZE = re.compile(r"^\s*([0-9.]+(?:e[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def parse_bytes(text: str, what: str) -> int:
    """'25MB' -> 25e6, '25MiB' -> 25 * 2**20, '1e8' -> 1e8 (bytes)."""
    found = _SIZE.match(str(text))
    if not found or found.group(2).lower() not in _UNITS:
        raise InputError(f"{what}={text!r} is not a size — write bytes like 25MB, 512KiB or 1e8")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])



def topology(text: str) -> str:
    """The `topology=` parameter: flat or hierarchical."""
    value = text.strip().lower()
    if value not in TOPOLOGIES:
        raise ValueError(value)
    return value


topology.__name__ = "topology (flat or hierarchical)"


@dataclass(slots=True, frozen=True)
class Fabric:
    """The link a data-parallel job of `world` ranks communicates over:
    `link` for a flat ring or tree; with `network` and more than one node,
    `link` is the link inside a node and `network` the one between nodes."""

    link: Interconnect
    world: int
    algorithm: str
    network: Interconnect | None = None
    per_node: int = GPUS_PER_NODE

    @property
    def nodes(self) -> int:
        return -(-self.world // self.per_node)

    @property
    def hierarchical(self) -> bool:
        return self.network is not None and self.nodes > 1 and self.per_node > 1

    def time_ns(self, operation: str, message_bytes: float) -> int:
        """One collective of `message_bytes` (the whole buffer) among the job's ranks, ns."""
        network = self.network
        if (network is None or not self.hierarchical
            or normalize_operation(operation) != "allreduce"):
            return collective_time_ns(operation, message_bytes, self.world, self.link,
                                      self.algorithm)
        inside = min(self.per_node, self.world)
        return (collective_time_ns("reducescatter", message_bytes, inside, self.link,
                                   self.algorithm)
                + collective_time_ns("allreduce", message_bytes / inside, self.nodes, network,
                                     self.algorithm)
                + collective_time_ns("allgather", message_bytes, inside, self.link, self.algorithm))

    def describe(self) -> str:
        if self.network is not None and self.hierarchical:
            return (f"hierarchical: {self.link.name} inside each of {self.nodes} nodes of "
                    f"{self.per_node} ({self.link.bus_bandwidth_gbs:g} GB/s), {self.network.name} "
                    f"between them ({self.network.bus_bandwidth_gbs:g} GB/s, "
                    f"{self.network.step_latency_us:g} µs per step), {self.algorithm}")
        link = self.link
        return (f"{link.name} ({link.bus_bandwidth_gbs:g} GB/s bus, {link.step_latency_us:g} µs "
                f"per step, {self.algorithm})")


def fabric(params: dict[str, Any], context: Context, world: int) -> Fabric:
    """interconnect= (preset), else the trace's GPU's link within a node
    and network= across nodes; bandwidth=/latency= override the link the
    collectives cross (the network's, once world exceeds gpus_per_node)."""
    if world < 1:
        raise InputError(f"world={world}: the number of ranks must be at least 1")
    per_node = int(params.get("gpus_per_node", GPUS_PER_NODE))
    spans_nodes = world > per_node
    name = str(params.get("interconnect") or "auto")
    hierarchical = str(params.get("topology", "flat")) == "hierarchical" and spans_nodes
    if name != "auto":
        link = interconnect(name)
    elif spans_nodes and not hierarchical:
        link = interconnect(str(params.get("network", "ib-hdr")))
    else:
        found = interconnect_of_device(context.device.interconnect if context.device else None)
        if found is None and not params.get("bandwidth"):
            raise InputError(_no_link(context))
        link = found or Interconnect("custom", 1.0, 10.0)
    network = interconnect(str(params.get("network", "ib-hdr"))) if hierarchical else None
    network = _override(network, params) if network is not None else None
    link = link if network is not None else _override(link, params)
    algorithm = str(params.get("algorithm", "auto"))
    if algorithm not in ("ring", "tree", "auto"):
        raise InputError(f"algorithm={algorithm!r}: choose ring, tree or auto")
    return Fabric(link, world, algorithm, network, per_node)


def _no_link(context: Context) -> str:
    """Why the link the collectives cross is not known, and what to give."""
    if context.device is None and not context.device_name:
        return ("the trace names no GPU (a CPU trace: ranks talk over gloo), so the link between "
                "ranks is unknown — give bandwidth=GB/s and latency=µs (two processes over "
                "loopback on one machine: about bandwidth=1,latency=1000, as "
                "scripts/validate_parallel.py fits them) or interconnect=NAME")
    return ("the trace's GPU is not in the device table, so its interconnect is unknown — give "
            "interconnect=NAME (e.g. nvlink3, pcie4, ib-hdr) or bandwidth=GB/s")


def _override(link: Interconnect, params: dict[str, Any]) -> Interconnect:
    """`link` with bandwidth= and latency= applied."""
    if params.get("bandwidth"):
        link = Interconnect(link.name, float(params["bandwidth"]), link.step_latency_us)
    if float(params.get("latency", -1.0)) >= 0:
        link = Interconnect(link.name, link.bus_bandwidth_gbs, float(params["latency"]))
    return link


#: What `fabric` reads: the link a collective is timed over.
LINK_PARAMETERS: dict[str, Parameter] = {
    "interconnect": Parameter(str, "auto", "preset: nvlink2..5, pcie3..5, ib-edr/hdr/ndr, "
                                           "ethernet-10g/25g/100g"),
    "network": Parameter(str, "ib-hdr",
                         "the preset between nodes, when world exceeds gpus_per_node"),
    "gpus_per_node": Parameter(int, GPUS_PER_NODE, "ranks that share the intra-node link", 1, 4096),
    "topology": Parameter(topology, "flat", "flat (one ring over the slowest link) or hierarchical "
                                            "(reduce-scatter in "
                          "the node, all-reduce across nodes, all-gather in the node)"),
    "bandwidth": Parameter(bandwidth, 0.0, "bus bandwidth in GB/s, or with a unit: 25GB/s, 200Gbps "
                                           "(overrides the preset; "
                                           "the network's when the job spans nodes)", 0.0, 1e6),
    "latency": Parameter(float, -1.0, "per-step latency in µs (overrides the preset)", -1.0, 1e7),
    "algorithm": Parameter(str, "auto", "ring, tree or auto (the faster per message)"),
}
