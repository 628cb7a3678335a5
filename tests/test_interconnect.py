"""The collective cost model against the alpha-beta formulas worked out by hand."""

from __future__ import annotations

import pytest

from daydream.errors import InputError
from daydream.interconnect import Interconnect, collective_time_ns, interconnect, interconnect_of_device, normalize_operation

LINK = Interconnect("test", bus_bandwidth_gbs=100.0, step_latency_us=10.0)  # 100 bytes/ns, 10,000 ns per step


@pytest.mark.parametrize("operation,size,ranks,algorithm,expected_ns", [
    # ring all-reduce, 8 ranks, 1e8 B: 2*7*10 us + 2*7/8 * 1e8/100 ns = 140,000 + 1,750,000
    ("allreduce", 1e8, 8, "ring", 1_890_000),
    # tree all-reduce: 2*ceil(log2 8)=6 steps -> 60,000 + 1,750,000
    ("allreduce", 1e8, 8, "tree", 1_810_000),
    ("allreduce", 1e8, 8, "auto", 1_810_000),
    # 2 ranks: ring and tree both take 2 steps: 20,000 + 2*1/2*1e6/100 = 30,000
    ("allreduce", 1e6, 2, "ring", 30_000),
    # reduce-scatter / all-gather of the whole 1e8 B buffer among 4: 3 steps + 3/4 * 1e6 ns
    ("reducescatter", 1e8, 4, "ring", 780_000),
    ("allgather", 1e8, 4, "ring", 780_000),
    # broadcast among 4, tree: 2 steps + 1e8/100
    ("broadcast", 1e8, 4, "tree", 1_020_000),
    ("sendrecv", 1e8, 4, "ring", 780_000),
])
def test_hand_computed_times(operation: str, size: float, ranks: int, algorithm: str, expected_ns: int) -> None:
    assert collective_time_ns(operation, size, ranks, LINK, algorithm) == expected_ns


def test_one_rank_or_nothing_to_send_costs_nothing() -> None:
    assert collective_time_ns("allreduce", 1e9, 1, LINK) == 0
    assert collective_time_ns("allreduce", 0, 8, LINK) == 0


def test_small_messages_pick_the_tree_large_ones_keep_its_bandwidth() -> None:
    ring, tree = (collective_time_ns("allreduce", 1024, 64, LINK, a) for a in ("ring", "tree"))
    assert tree < ring and collective_time_ns("allreduce", 1024, 64, LINK) == tree


@pytest.mark.parametrize("name,expected", [("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "allreduce"),
                                           ("ncclDevKernel_AllGather_RING_LL", "allgather"),
                                           ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "sendrecv"),
                                           ("reduce_scatter", "reducescatter"), ("all_to_all", "alltoall"),
                                           ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "broadcast")])
def test_operation_names(name: str, expected: str) -> None:
    assert normalize_operation(name) == expected


def test_presets_and_device_links() -> None:
    speeds = [interconnect(name).bus_bandwidth_gbs for name in ("NVLink3", "pcie4", "ethernet-10g")]
    assert speeds == sorted(speeds, reverse=True)
    assert interconnect_of_device("NVLink 2").name == "nvlink2"
    assert interconnect_of_device("PCIe 3.0 x16").name == "pcie3"
    assert interconnect_of_device(None) is None
    with pytest.raises(InputError, match="known:"):
        interconnect("carrier-pigeon")
