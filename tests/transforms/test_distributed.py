"""Distributed what-ifs on hand-built graphs, where every time can be worked out on paper."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.errors import InputError
from daydream.graph import TaskKind
from daydream.simulate import simulate
from daydream.transforms import Context, apply_spec, parse_spec
from daydream.transforms.distributed import REMOVED_BYTES_KEY, buckets, parse_bytes
from daydream.transforms.optimizations import parse_sweep, with_value
from tests.transforms.graphs import call, graph, kernel, launch_chain

MiB = 2**20


def _step() -> object:
    """fwd(a) 1000 ns, bwd(b) 1000, bwd(a) 1000, optimizer 500; launched 5 ns apart, latency 4, kernel gap 1.

    Without communication: fwd 4-1004, bwd b 1005-2005, bwd a 2006-3006, optimizer 3007-3507.
    """
    tasks, edges = launch_chain(
        [call(), call(), call(), call()],
        [kernel("fwd", 1000, phase="forward", layer="a"), kernel("bwd", 1000, phase="backward", layer="b"),
         kernel("bwd", 1000, phase="backward", layer="a"), kernel("sgd", 500, phase="optimizer")],
    )
    return graph(tasks, edges, layers=["a", "b"])


CONTEXT = Context(gradient_bytes={"a": 3 * MiB, "b": MiB})


def test_ddp_buckets_overlap_backward_and_the_optimizer_waits_for_the_last() -> None:
    g = _step()
    apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), CONTEXT)
    timeline = simulate(g)
    reduces = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    # Two ranks, ring: 2(n-1)/n * S / B = S / 1000 ns. First bucket: b's 1 MiB (the 1 MiB first bucket),
    # then a's 3 MiB. b ready at 2005 -> 2005 + 1049 = 3054; a ready at 3006, after the first -> 3054 + 3146 = 6200.
    assert g.tasks["bytes"][reduces].tolist() == [MiB, 3 * MiB]
    assert timeline.start_ns[reduces].tolist() == [2005, 3054]
    assert timeline.end_ns[reduces].tolist() == [3054, 6200]
    optimizer = int(np.flatnonzero(g.tasks["phase"] == 2)[0])
    assert int(timeline.start_ns[optimizer]) == 6200


def test_ddp_on_one_rank_changes_nothing() -> None:
    g = _step()
    before = simulate(g)
    apply_spec(g, parse_spec("ddp:world=1,bandwidth=1000"), CONTEXT)
    after = simulate(g)
    assert int(after.end_ns.max()) == int(before.end_ns.max()) == 3507


def test_ddp_spreads_a_given_parameter_volume_over_backward_work() -> None:
    g = _step()
    apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0,params=4MiB"), Context())
    reduces = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    assert int(g.tasks["bytes"][reduces].sum()) == 4 * MiB


def test_ddp_without_gradient_sizes_says_what_to_give() -> None:
    with pytest.raises(InputError, match="params=BYTES"):
        apply_spec(_step(), parse_spec("ddp:world=2,bandwidth=10"), Context())


def test_ddp_refuses_a_trace_that_already_communicates() -> None:
    tasks, edges = launch_chain([call(), call()], [kernel("bwd", 100, phase="backward", layer="a"),
                                                   {"kind": TaskKind.COLLECTIVE, "name": "ncclKernel_AllReduce", "duration": 50}])
    with pytest.raises(InputError, match="no-comm"):
        apply_spec(graph(tasks, edges, layers=["a"]), parse_spec("ddp:world=2,bandwidth=10"), CONTEXT)


def _communicating_step() -> object:
    tasks, edges = launch_chain(
        [call(), call(), call()],
        [kernel("bwd", 1000, phase="backward", layer="a"),
         {"kind": TaskKind.COLLECTIVE, "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "duration": 4000},
         kernel("sgd", 500, phase="optimizer")],
    )
    g = graph(tasks, edges, layers=["a"])
    g.tasks["bytes"][4] = 8 * MiB
    return g


def test_no_comm_removes_collectives_and_remembers_the_all_reduce_volume() -> None:
    g = _communicating_step()
    apply_spec(g, parse_spec("no-comm"), Context())
    assert not np.any(g.tasks["kind"] == TaskKind.COLLECTIVE)
    assert g.calibration[REMOVED_BYTES_KEY] == 8 * MiB
    # bwd 4-1004, then (the collective gone) sgd after it: 1005-1505.
    assert int(simulate(g).end_ns.max()) == 1505


def test_comm_factor_and_bandwidth_retime_existing_collectives() -> None:
    g = _communicating_step()
    apply_spec(g, parse_spec("comm:factor=4"), Context())
    assert int(g.tasks["duration_ns"][4]) == 1000
    g = _communicating_step()
    apply_spec(g, parse_spec("comm:bandwidth=100,latency=0,world=4"), Context())
    # ring all-reduce of 8 MiB among 4: 2 * 3/4 * 8388608 B / 100 GB/s = 125829 ns (tree: the same bandwidth term).
    assert int(g.tasks["duration_ns"][4]) == round(2 * 0.75 * 8 * MiB / 100)


def test_comm_needs_the_world_size_when_the_trace_does_not_say() -> None:
    with pytest.raises(InputError, match="world=N"):
        apply_spec(_communicating_step(), parse_spec("comm:bandwidth=100"), Context())


def test_buckets_follow_pytorch_ddp() -> None:
    events = [(1, MiB // 2), (2, MiB // 2), (3, 20 * MiB), (4, 10 * MiB), (5, MiB)]
    # First bucket closes at 1 MiB; then 25 MiB buckets; the rest is the last bucket.
    assert buckets(events, 25 * MiB) == [(2, MiB), (4, 30 * MiB), (5, MiB)]


@pytest.mark.parametrize("text,expected", [("25MB", 25_000_000), ("25MiB", 25 * MiB), ("1e8", 100_000_000), ("512kib", 512 * 1024)])
def test_sizes(text: str, expected: int) -> None:
    assert parse_bytes(text, "bucket") == expected


def test_bad_size_is_an_input_error() -> None:
    with pytest.raises(InputError, match="not a size"):
        parse_bytes("lots", "bucket")


def test_sweep_values_replace_the_parameter_in_specs_that_have_it() -> None:
    assert parse_sweep("world=1,2, 4") == ("world", ["1", "2", "4"])
    assert with_value("ddp:world=8,bandwidth=10", "world", "2") == "ddp:bandwidth=10,world=2"
    assert with_value("amp", "world", "2") == "amp"
    with pytest.raises(InputError):
        parse_sweep("world")
