"""Distributed what-ifs on hand-built graphs, where every time can be worked out on paper."""

from __future__ import annotations

import numpy as np
import pytest

from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.simulate import simulate
from daydream.simulate.job import simulate_job
from daydream.transforms import Context, apply_spec, parse_spec
from daydream.transforms.distributed import buckets, parse_bytes
from daydream.transforms.specs import parse_sweep, with_value
from tests.transforms.graphs import call, graph, kernel, launch_chain, op

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


def test_ddp_waits_at_the_optimizer_step_not_at_zero_grad_before_forward() -> None:
    # zero_grad (optimizer phase, 100 ns) at the top of the loop, then the step above: zero_grad 4-104, fwd 105-1105,
    # bwd b 1106-2106, bwd a 2107-3107, sgd 3108-3608 without communication. Waiting at zero_grad would be a cycle.
    tasks, edges = launch_chain(
        [call(), call(), call(), call(), call()],
        [kernel("zero_", 100, phase="optimizer"), kernel("fwd", 1000, phase="forward", layer="a"),
         kernel("bwd", 1000, phase="backward", layer="b"), kernel("bwd", 1000, phase="backward", layer="a"),
         kernel("sgd", 500, phase="optimizer")],
    )
    g = graph(tasks, edges, layers=["a", "b"])
    assert int(simulate(g).end_ns.max()) == 3608
    apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), CONTEXT)
    timeline = simulate(g)
    reduces = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    # b ready at 2106 -> 2106 + 1049 = 3155; a ready at 3107, after the first -> 3155 + 3146 = 6301: the step then.
    assert timeline.end_ns[reduces].tolist() == [3155, 6301]
    zero_grad, step = np.flatnonzero(g.tasks["phase"] == 2).tolist()
    assert int(timeline.start_ns[zero_grad]) == 4 and int(timeline.start_ns[step]) == 6301


def test_ddp_with_gradient_accumulation_all_reduces_every_nth_iteration() -> None:
    # Two iterations of fwd a, bwd a, sgd (1000, 1000, 500 ns).
    tasks, edges = launch_chain(
        [call() for _ in range(6)],
        [kernel("fwd", 1000, phase="forward", layer="a"), kernel("bwd", 1000, phase="backward", layer="a"),
         kernel("sgd", 500, phase="optimizer"), kernel("fwd", 1000, phase="forward", layer="a", iteration=1),
         kernel("bwd", 1000, phase="backward", layer="a", iteration=1), kernel("sgd", 500, phase="optimizer", iteration=1)],
    )
    every, second = graph(tasks, edges, layers=["a"]), graph(tasks, edges, layers=["a"])
    context = Context(gradient_bytes={"a": MiB})
    apply_spec(every, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), context)
    notes = apply_spec(second, parse_spec("ddp:world=2,bandwidth=1000,latency=0,accumulate=2"), context)
    reduces = second.tasks["kind"] == TaskKind.COLLECTIVE
    assert int((every.tasks["kind"] == TaskKind.COLLECTIVE).sum()) == 2
    assert second.tasks["iteration"][reduces].tolist() == [1]  # the first runs under no_sync
    assert "1 of 2 iterations all-reduce" in notes[-1]
    # Accumulating: iteration 0 as recorded (sgd 2006-2506); iteration 1's bwd ends 4508, its all-reduce of 1 MiB
    # (1049 ns) 4508-5557, sgd 5557-6057. Every iteration: iteration 0's all-reduce 2005-3054 holds its sgd
    # (3054-3554), iteration 1 runs 3555-5556, its all-reduce 5556-6605, sgd 6605-7105.
    assert int(simulate(second).end_ns.max()) == 6057
    assert int(simulate(every).end_ns.max()) == 7105


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
    communicating = graph(tasks, edges, layers=["a"])
    communicating.tasks["event"][:] = np.arange(communicating.task_count)  # read from a trace, as recorded work is
    with pytest.raises(InputError, match="no-comm"):
        apply_spec(communicating, parse_spec("ddp:world=2,bandwidth=10"), CONTEXT)
    # collectives a what-if put in (tp's, pp's: no trace row) are that what-if's, composed with ddp's
    inserted = graph(tasks, edges, layers=["a"])
    apply_spec(inserted, parse_spec("ddp:world=2,bandwidth=10"), CONTEXT)


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
    assert g.data_parallel.removed_allreduce_bytes == 8 * MiB
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


def test_zero_stage_one_reduce_scatters_shards_the_optimizer_and_gathers_parameters_after_it() -> None:
    g = _step()
    apply_spec(g, parse_spec("zero:stage=1,world=2,bandwidth=1000,latency=0"), CONTEXT)
    timeline = simulate(g)
    collectives = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    names = [g.task_name(int(t)) for t in collectives]
    # Reduce-scatter among 2: 1/2 * S / B. b's 1 MiB: 2005 + 524 = 2529; a's 3 MiB after it: 3006 + 1573 = 4579.
    # The optimizer (500 ns ÷ 2 ranks) starts after the last: 4579-4829; the all-gather of all 4 MiB follows: +2097.
    assert ["reducescatter" in n for n in names] == [True, True, False]
    assert timeline.start_ns[collectives].tolist() == [2005, 3006, 4829]
    assert timeline.end_ns[collectives].tolist() == [2529, 4579, 6926]
    optimizer = int(np.flatnonzero(g.tasks["phase"] == 2)[0])
    assert (int(timeline.start_ns[optimizer]), int(timeline.end_ns[optimizer])) == (4579, 4829)


def test_grad_compression_retimes_ddp_all_reduces_as_selection_sparse_gather_and_accumulation() -> None:
    g = _step()
    apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), CONTEXT)
    apply_spec(g, parse_spec("grad-compression:ratio=4,passes=4,memory_bandwidth=1"), CONTEXT)
    first = int(np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)[0])
    # 1 MiB bucket at 1 GB/s of memory bandwidth: select 4 x 1,048,576 ns; gather 2 ranks x 2 x 1 MiB / 4 = 1 MiB
    # among 2 at 1000 GB/s: 524 ns; accumulate 2 x 524,288 B: 1,048,576 ns.
    assert int(g.tasks["duration_ns"][first]) == 4 * 1_048_576 + 524 + 1_048_576


def _two_iterations() -> object:
    """Iteration 0: fwd a, fwd b, bwd b, bwd a, optimizer; iteration 1: fwd a, fwd b (100 ns each, optimizer 10).

    Recorded schedule: 4-104, 105-205, 206-306, 307-407, 408-418, then 419-519, 520-620.
    """
    tasks, edges = launch_chain(
        [call() for _ in range(7)],
        [kernel("fwd", 100, phase="forward", layer="a"), kernel("fwd", 100, phase="forward", layer="b"),
         kernel("bwd", 100, phase="backward", layer="b"), kernel("bwd", 100, phase="backward", layer="a"),
         kernel("sgd", 10, phase="optimizer"),
         kernel("fwd", 100, phase="forward", layer="a", iteration=1), kernel("fwd", 100, phase="forward", layer="b", iteration=1)],
    )
    return graph(tasks, edges, layers=["a", "b"])


def test_p3_sends_the_slice_the_next_forward_needs_first_and_each_layer_waits_for_its_own() -> None:
    g = _two_iterations()
    apply_spec(g, parse_spec("p3:world=2,bandwidth=5,latency=0,slice=1000B"), Context(gradient_bytes={"a": 1000, "b": 2000}))
    timeline = simulate_job([g])[0]  # a queue-scheduled channel: the event-driven engine
    slices = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    by_layer = {g.task_name(int(t)): (int(timeline.start_ns[t]), int(timeline.end_ns[t])) for t in slices}
    # 1000 B among 2 at 5 GB/s: 200 ns a slice. b's two slices wait from 306, a's one from 407. b's first runs
    # 306-506; then a's (earlier in forward) goes before b's second although b's waited longer: 506-706, 706-906.
    assert by_layer["p3 all-reduce (b, slice 0)"] == (306, 506)
    assert by_layer["p3 all-reduce (a, slice 0)"] == (506, 706)
    assert by_layer["p3 all-reduce (b, slice 1)"] == (706, 906)
    next_forward_a, next_forward_b = np.flatnonzero(g.tasks["iteration"] == 1)[-2:]
    assert int(timeline.start_ns[next_forward_a]) == 706  # a's parameters only, not b's
    assert int(timeline.start_ns[next_forward_b]) == 906


def test_p3_through_parameter_servers_pushes_and_pulls_each_slice() -> None:
    g = _two_iterations()
    apply_spec(g, parse_spec("p3:world=2,bandwidth=5,latency=0,slice=1000B,sync=ps"), Context(gradient_bytes={"a": 1000, "b": 2000}))
    timeline = simulate_job([g])[0]
    slices = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    times = {g.task_name(int(t)): (int(timeline.start_ns[t]), int(timeline.end_ns[t])) for t in slices}
    # Two servers for two workers: a push or pull of 1000 B takes 1000 / 5 GB/s = 200 ns (the worker's link).
    # Pushes: b0 306-506, then a0 (earlier in forward) before b1: 506-706, 706-906. Pulls, each after its push,
    # on their own channel: b0 506-706, a0 706-906, b1 906-1106.
    assert times["p3 push (b, slice 0)"] == (306, 506) and times["p3 pull (b, slice 0)"] == (506, 706)
    assert times["p3 push (a, slice 0)"] == (506, 706) and times["p3 pull (a, slice 0)"] == (706, 906)
    assert times["p3 push (b, slice 1)"] == (706, 906) and times["p3 pull (b, slice 1)"] == (906, 1106)
    next_forward_a, next_forward_b = np.flatnonzero(g.tasks["iteration"] == 1)[-2:]
    assert int(timeline.start_ns[next_forward_a]) == 906 and int(timeline.start_ns[next_forward_b]) == 1106
    # One server for both workers: its link carries twice a worker's bytes, 400 ns a push or pull.
    one = _two_iterations()
    apply_spec(one, parse_spec("p3:world=2,bandwidth=5,latency=0,slice=1000B,sync=ps,servers=1"),
               Context(gradient_bytes={"a": 1000, "b": 2000}))
    assert set(one.tasks["duration_ns"][one.tasks["kind"] == TaskKind.COLLECTIVE].tolist()) == {400}
    with pytest.raises(InputError, match="sync="):
        apply_spec(_two_iterations(), parse_spec("p3:world=2,bandwidth=5,sync=gossip"), Context(gradient_bytes={"a": 1000}))


def test_p3_needs_per_layer_sizes() -> None:
    with pytest.raises(InputError, match="per-layer"):
        apply_spec(_two_iterations(), parse_spec("p3:world=2,bandwidth=5"), Context())


def test_collectives_alone_do_not_make_a_cpu_graph_a_gpu_graph() -> None:
    from tests.transforms.graphs import op

    g = graph([op("aten::addmm", 1000, phase="forward"), op("aten::mm", 3000, phase="backward"),
               {"kind": TaskKind.COLLECTIVE, "name": "gloo:all_reduce", "duration": 500, "phase": "backward"}],
              [(0, 1, DepKind.HOST_ORDER, 0, False)])
    assert not g.has_device_work()
    apply_spec(g, parse_spec("batch-size:factor=2,fixed_percentile=0"), Context())
    # The CPU ops carry the batch (a CPU trace's work), not the collective: fixed cost 1000 ns (the shortest
    # op), so 3000 ns becomes 1000 + 2 x 2000.
    assert g.tasks["duration_ns"].tolist() == [1000, 5000, 500]


def _three_steps() -> object:
    """Three iterations of _step's work behind iteration markers, on a host that never waits (it runs ahead)."""
    tasks: list[dict] = []
    edges: list[tuple[int, int, DepKind, int, bool]] = []
    markers, previous_host, previous_kernel = [], None, None
    for iteration in range(3):
        first = len(tasks)
        tasks.append({"kind": TaskKind.MARKER, "duration": 0, "iteration": iteration})
        calls = [call(iteration=iteration) for _ in range(4)]
        kernels = [kernel("fwd", 1000, phase="forward", layer="a", iteration=iteration),
                   kernel("bwd", 1000, phase="backward", layer="b", iteration=iteration),
                   kernel("bwd", 1000, phase="backward", layer="a", iteration=iteration),
                   kernel("sgd", 500, phase="optimizer", iteration=iteration)]
        tasks += calls
        tasks.append({"kind": TaskKind.MARKER, "duration": 0, "iteration": iteration})
        last = len(tasks) - 1
        tasks += kernels
        host = [first, *range(first + 1, first + 5), last]
        edges += [(a, b, DepKind.HOST_ORDER, 0, False) for a, b in zip(host, host[1:])]
        edges += [(first + 1 + i, last + 1 + i, DepKind.LAUNCH, 4, True) for i in range(4)]
        gpu = list(range(last + 1, last + 5))
        edges += [(a, b, DepKind.STREAM_ORDER, 1, False) for a, b in zip(gpu, gpu[1:])]
        if previous_host is not None:
            edges.append((previous_host, first, DepKind.HOST_ORDER, 0, False))
            edges.append((previous_kernel, gpu[0], DepKind.STREAM_ORDER, 1, False))
        previous_host, previous_kernel = last, gpu[-1]
        markers.append((first, last))
    built = graph(tasks, edges, layers=["a", "b"])
    built.iteration_markers = markers
    return built


def test_the_first_iteration_carries_its_own_all_reduce() -> None:
    from daydream.graph.windows import iteration_windows

    g = _three_steps()
    apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), CONTEXT)
    timeline = simulate(g)
    # By hand (as in _step): iteration 0's GPU work ends with its optimizer at 6700, after both all-reduces (b's
    # 1 MiB 2005-3054, a's 3 MiB 3054-6200). Iteration 1's forward follows at 6701; its b bucket 8702-9751, a bucket
    # 9751-12897, optimizer 12897-13397; iteration 2 the same 6697 ns later.
    windows = [w.duration_ns for w in iteration_windows(g, timeline)]
    assert windows == [6700, 6697, 6697]
    assert max(windows) / min(windows) - 1 < 0.02  # a steady loop: every iteration alike


def test_hierarchical_all_reduce_is_reduce_scatter_inside_all_reduce_across_all_gather_inside() -> None:
    from daydream.interconnect import Interconnect
    from daydream.transforms.distributed import Fabric

    # 16 ranks, 8 per node: NVLink 100 GB/s and 2 µs per step inside, the network 10 GB/s and 10 µs between.
    # 64 MiB: reduce-scatter inside: 7 * 2 µs + 7/8 * S / 100 GB/s; all-reduce of S/8 between the 2 nodes
    # (ring 2 steps vs tree 2 steps: the same): 2 * 10 µs + 2 * 1/2 * (S/8) / 10 GB/s; all-gather as the reduce-scatter.
    size = 64 * MiB
    inside = 7 * 2_000 + 7 / 8 * size / 100
    between = 2 * 10_000 + (size / 8) / 10
    nvlink, network = Interconnect("inside", 100.0, 2.0), Interconnect("between", 10.0, 10.0)
    hierarchical = Fabric(nvlink, 16, "ring", network, 8)
    assert hierarchical.hierarchical and hierarchical.nodes == 2
    assert abs(hierarchical.time_ns("allreduce", size) - (2 * inside + between)) <= 3
    # Flat: one ring of 16 over the network: 2 * 15 * 10 µs + 2 * 15/16 * S / 10 GB/s.
    flat = Fabric(network, 16, "ring")
    assert abs(flat.time_ns("allreduce", size) - (30 * 10_000 + 2 * 15 / 16 * size / 10)) <= 1
    # Within one node there is nothing to split: the hierarchy is the flat ring over the node's link.
    assert Fabric(nvlink, 8, "ring", network, 8).time_ns("allreduce", size) == Fabric(nvlink, 8, "ring").time_ns("allreduce", size)


def test_topology_hierarchical_is_what_ddp_uses_across_nodes() -> None:
    def last_reduce_ns(spec: str) -> int:
        g = _step()
        apply_spec(g, parse_spec(spec), CONTEXT)
        return int(simulate(g).end_ns.max())

    common = "ddp:world=16,gpus_per_node=8,interconnect=auto,network=ib-hdr"
    with pytest.raises(InputError, match="interconnect"):  # the hand-built graph names no GPU: its link inside is unknown
        last_reduce_ns(common + ",topology=hierarchical")
    flat = last_reduce_ns(common)
    assert last_reduce_ns("ddp:world=16,gpus_per_node=8,interconnect=nvlink3,network=ib-hdr,topology=hierarchical") < flat
    with pytest.raises(InputError, match="topology"):
        parse_spec("ddp:world=16,topology=star")


def _forward_backward_optimizer() -> Graph:
    # One iteration: a start marker, fwd a, bwd a, sgd (1000, 1000, 500 ns).
    tasks, edges = launch_chain([call() for _ in range(3)], [kernel("fwd", 1000, phase="forward", layer="a"),
                                                              kernel("bwd", 1000, phase="backward", layer="a"),
                                                              kernel("sgd", 500, phase="optimizer")])
    marker = {"kind": TaskKind.MARKER, "name": "iteration boundary", "duration": 0}
    tasks = [*tasks, marker, dict(marker)]
    edges = [*edges, (6, 0, DepKind.HOST_ORDER, 0, False), (2, 7, DepKind.HOST_ORDER, 0, False)]
    made = graph(tasks, edges, layers=["a"])
    made.iteration_markers = [(6, 7)]
    return made


def _broadcasts(g: Graph) -> list[int]:
    return [t for t in np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE).tolist() if "broadcast" in g.task_name(t)]


def test_ddp_broadcasts_the_buffers_before_each_forward() -> None:
    # With 4,000 bytes of buffers (BatchNorm's running statistics) DDP's forward first waits for rank 0's broadcast of
    # them: world 2 at 1000 GB/s and 50 µs per step, (n - 1)·latency + S/B = 50,000 + 4 ns, on the communication
    # channel, before fwd.
    with_buffers, without = _forward_backward_optimizer(), _forward_backward_optimizer()
    context = Context(gradient_bytes={"a": MiB}, buffers={"float32": 4_000})
    notes = apply_spec(with_buffers, parse_spec("ddp:world=2,bandwidth=1000,latency=50"), context)
    apply_spec(without, parse_spec("ddp:world=2,bandwidth=1000,latency=50,broadcast_buffers=0"), context)
    broadcast = _broadcasts(with_buffers)
    assert len(broadcast) == 1 and int(with_buffers.tasks["duration_ns"][broadcast[0]]) == 50_004
    assert any("1 broadcast(s) of 3.9 KiB of buffers before each forward (one per dtype (float32)" in note for note in notes)
    fwd = 3  # the first kernel: it starts once the broadcast has ended, not at its launch (5 ns + 4 ns latency)
    timed = simulate(with_buffers)
    assert int(timed.start_ns[broadcast[0]]) == int(timed.end_ns[6])  # it starts with the iteration
    assert int(timed.start_ns[fwd]) == int(timed.end_ns[broadcast[0]])
    assert int(simulate(without).start_ns[fwd]) < int(timed.end_ns[6]) + 50_004
    assert not _broadcasts(without)


def _cpu_forward_backward_optimizer() -> Graph:
    """_forward_backward_optimizer on the CPU: host ops fwd a, bwd a, sgd (1000, 1000, 500 ns) between two markers."""
    ops = [op("fwd", 1000, phase="forward", layer="a"), op("bwd", 1000, phase="backward", layer="a"),
           op("sgd", 500, phase="optimizer"), op("iteration boundary", 0, kind=TaskKind.MARKER),
           op("iteration boundary", 0, kind=TaskKind.MARKER)]
    made = graph(ops, [(3, 0, DepKind.HOST_ORDER, 0, False), (0, 1, DepKind.HOST_ORDER, 0, False),
                       (1, 2, DepKind.HOST_ORDER, 0, False), (2, 4, DepKind.HOST_ORDER, 0, False)], layers=["a"])
    made.iteration_markers = [(3, 4)]
    return made


def test_on_a_cpu_host_the_buffers_broadcast_is_rooted_at_rank_0() -> None:
    # Over gloo rank 0 sends the buffers and runs on; the graph is the receivers' view. On a CPU host with contention the
    # broadcasts are marked for the contention pass (their names) and the note says so; a GPU graph's are not.
    context = Context(gradient_bytes={"a": MiB}, buffers={"float32": 4_000, "int64": 8}, host={"cpus": 2, "intra_op_threads": 1})
    cpu = _cpu_forward_backward_optimizer()
    notes = apply_spec(cpu, parse_spec("ddp:world=2,bandwidth=1000,latency=50"), context)
    assert cpu.data_parallel.contention == 2.0
    assert cpu.data_parallel.rooted == {int(cpu.tasks["name"][t]) for t in _broadcasts(cpu)} and len(_broadcasts(cpu)) == 2
    assert any("rank 0 sends them and runs on" in note for note in notes)
    gpu = _forward_backward_optimizer()
    notes = apply_spec(gpu, parse_spec("ddp:world=2,bandwidth=1000,latency=50"), context)
    assert _broadcasts(gpu) and not gpu.data_parallel.rooted
    assert not any("rank 0 sends them and runs on" in note for note in notes)
    # Without contention there is nothing to say about it.
    off = _cpu_forward_backward_optimizer()
    notes = apply_spec(off, parse_spec("ddp:world=2,bandwidth=1000,latency=50,contention=1"), context)
    assert not any("rank 0 sends them and runs on" in note for note in notes)


@pytest.mark.parametrize("buffers,durations,said", [
    # DDP coalesces buffers per dtype: BatchNorm's float32 statistics and its int64 counter are two broadcasts.
    ({"float32": 4_000, "int64": 8}, [50_004, 50_000], "2 broadcast(s) of 3.9 KiB of buffers before each forward "
                                                       "(one per dtype (float32, int64) as DDP coalesces them)"),
    # ... and each dtype in buckets of 250 MiB: 300 MiB is 250 MiB (262,144 ns at 1000 GB/s, + 50 µs) and 50 MiB.
    ({"float32": 300 * MiB}, [50_000 + 262_144, 50_000 + round(50 * MiB / 1000)], "2 broadcast(s) of 307200.0 KiB"),
    # A recording that did not note dtypes: its bytes as one.
    ({"": 4_000}, [50_004], "their dtypes not recorded: counted as one"),
])
def test_ddp_broadcasts_one_bucket_per_dtype(buffers: dict[str, int], durations: list[int], said: str) -> None:
    g = _forward_backward_optimizer()
    notes = apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=50"), Context(gradient_bytes={"a": MiB}, buffers=buffers))
    broadcast = _broadcasts(g)
    assert [int(g.tasks["duration_ns"][t]) for t in broadcast] == durations
    assert any(said in note for note in notes)
    timed = simulate(g)
    assert int(timed.start_ns[3]) == max(int(timed.end_ns[t]) for t in broadcast)  # fwd waits for every one


@pytest.mark.parametrize("tensors,map_bytes,counted", [(3, 12, "3 parameter tensors"),
                                                       (0, 4, "at least 1 parameter tensor(s), one per layer")])
def test_ddp_find_unused_parameters_all_reduces_the_used_map_before_the_optimizer(tensors: int, map_bytes: int,
                                                                                 counted: str) -> None:
    # fwd a, bwd a (1 MiB of gradients in one bucket), sgd. With find_unused=1 DDP also all-reduces one int32 per
    # parameter tensor once the last bucket is ready: world 2 at 1000 GB/s and 50 µs per step, 2·latency + S/B =
    # 100,000 ns (+ 0.01 ns for 12 bytes), after the bucket's 100,000 + 1,048,576 / 1000 = 101,049 ns; sgd waits for it.
    with_map, without = _forward_backward_optimizer(), _forward_backward_optimizer()
    context = Context(gradient_bytes={"a": MiB}, gradient_tensors=tensors)
    notes = apply_spec(with_map, parse_spec("ddp:world=2,bandwidth=1000,latency=50,copies=0,find_unused=1"), context)
    apply_spec(without, parse_spec("ddp:world=2,bandwidth=1000,latency=50,copies=0"), context)
    collectives = np.flatnonzero(with_map.tasks["kind"] == TaskKind.COLLECTIVE).tolist()
    assert [int(with_map.tasks["duration_ns"][t]) for t in collectives] == [101_049, 100_000]
    assert int(with_map.tasks["bytes"][collectives[1]]) == map_bytes
    assert any(f"used-parameter map ({map_bytes} B: {counted}" in note for note in notes)
    sgd, bwd = 5, 4
    timed, before = simulate(with_map), simulate(without)
    assert int(timed.start_ns[collectives[1]]) == int(timed.end_ns[collectives[0]])
    assert int(timed.start_ns[sgd]) == int(timed.end_ns[collectives[1]])
    assert int(timed.start_ns[sgd]) - int(before.start_ns[sgd]) == 100_000
    assert int(timed.end_ns[bwd]) == int(before.end_ns[bwd])


def test_ddp_scales_each_gradient_into_its_bucket_and_copies_the_buckets_back_before_the_optimizer() -> None:
    from daydream.transforms.distributed.copies import CopySpeed
    from tests.transforms.graphs import op

    # Copies at 2 MiB per 1000 ns (read once, written once: 1000 ns per MiB of gradient) + 10 ns per op.
    speed = CopySpeed(10.0, 2**20 / 500, "by hand")
    context = Context(gradient_bytes={"a": 3 * MiB, "b": MiB},
                      derive={"elementwise_gpu": lambda: speed, "elementwise_cpu": lambda: speed})
    # GPU (_step): bwd b 1005-2005, then its copy into the bucket on the stream 2005-3015 (10 + 1000); bwd a after it
    # (kernel gap 1) 3016-4016, its copy 4016-7026 (10 + 3000). b's all-reduce waits for its copy: 3015 + 1049 = 4064;
    # a's 7026 + 3146 = 10172. The copy back (2 ops, 4 MiB: 20 + 4000) then 10172-14192, and sgd 14192-14692.
    g = _step()
    notes = apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), context)
    timeline = simulate(g)
    reduces = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    assert timeline.end_ns[reduces].tolist() == [4064, 10172]
    copies = [t for t in range(g.task_count) if g.task_name(t).startswith("ddp: ")]
    assert [(int(timeline.start_ns[t]), int(timeline.end_ns[t])) for t in copies] == [(2005, 3015), (4016, 7026),
                                                                                     (10172, 14192)]
    sgd = int(np.flatnonzero(g.tasks["name"] == g.strings.index("sgd"))[0])
    assert (int(timeline.start_ns[sgd]), int(timeline.end_ns[sgd])) == (14192, 14692)
    assert any("bucket copies" in n and "+4 µs of backward" in n for n in notes)
    # CPU: the same work as ops on one thread (fwd from 0): bwd b 1000-2000, its copy 2000-3010, bwd a 3010-4010, its
    # copy 4010-7020; all-reduces end 3010 + 1049 = 4059 and 7020 + 3146 = 10166; copy back 10166-14186; sgd after it.
    host = graph([op("fwd", 1000, phase="forward", layer="a"), op("bwd", 1000, phase="backward", layer="b"),
                  op("bwd", 1000, phase="backward", layer="a"), op("sgd", 500, phase="optimizer")],
                 [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(3)], layers=["a", "b"])
    apply_spec(host, parse_spec("ddp:world=2,bandwidth=1000,latency=0"), context)
    timeline = simulate(host)
    reduces = np.flatnonzero(host.tasks["kind"] == TaskKind.COLLECTIVE)
    assert timeline.end_ns[reduces].tolist() == [4059, 10166]
    assert (int(timeline.start_ns[3]), int(timeline.end_ns[3])) == (14186, 14686)
    # bucket_view=1 (gradient_as_bucket_view): the same copies in, none back: sgd right after a's all-reduce, 10172.
    views = _step()
    notes = apply_spec(views, parse_spec("ddp:world=2,bandwidth=1000,latency=0,bucket_view=1"), context)
    timeline = simulate(views)
    assert [int(timeline.end_ns[t]) for t in range(views.task_count) if views.task_name(t).startswith("ddp: ")] == [3015, 7026]
    sgd = int(np.flatnonzero(views.tasks["name"] == views.strings.index("sgd"))[0])
    assert int(timeline.start_ns[sgd]) == 10172
    assert any("+4 µs of backward per iteration) and not copied back (bucket_view=1" in n for n in notes)
    # copies=0, or no speed to time them by (a CPU trace without shapes): the plain model, said in the note.
    plain = _step()
    apply_spec(plain, parse_spec("ddp:world=2,bandwidth=1000,latency=0,copies=0"), context)
    assert simulate(plain).end_ns[np.flatnonzero(plain.tasks["kind"] == TaskKind.COLLECTIVE)].tolist() == [3054, 6200]
    unknown = graph([op("bwd", 1000, phase="backward", layer="a"), op("sgd", 500, phase="optimizer")],
                    [(0, 1, DepKind.HOST_ORDER, 0, False)], layers=["a"])
    notes = apply_spec(unknown, parse_spec("ddp:world=2,bandwidth=1000"), Context(gradient_bytes={"a": MiB}))
    assert any("bucket copies not modelled" in n for n in notes)


def test_the_copy_speed_is_the_traces_own_elementwise_ops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from daydream.trace import read_job
    from daydream.transforms.distributed.copies import elementwise_speed
    from tests.builders import op, write_trace

    # Three small ops (two 256-element float tensors added: 3 KiB moved) of 0.5 µs: the overhead. Three in-place
    # scalings of 1 MiB (2 MiB moved) of 20.5 µs: 2 MiB in 20 µs once the overhead is off, 104.9 bytes per ns.
    small = [op("aten::add", 10 * k, 0.5, ext=k, **{"Input Dims": [[256], [256]], "Input type": ["float", "float"]})
             for k in range(3)]
    large = [op("aten::mul_", 100 + 50 * k, 20.5, ext=10 + k, **{"Input Dims": [[512, 512], []], "Input type": ["float", "Scalar"]})
             for k in range(3)]
    trace = read_job(write_trace(tmp_path, [*small, *large]), cache=False).traces[0]
    speed = elementwise_speed(trace, on_gpu=False)
    assert speed is not None and speed.overhead_ns == 500
    assert abs(speed.bytes_per_ns - 2 * 2**20 / 20_000) < 1e-9
    # A trace whose ops are all small says nothing about the speed.
    only_small = read_job(write_trace(tmp_path, small, name="small.json"), cache=False).traces[0]
    assert elementwise_speed(only_small, on_gpu=False) is None


def test_the_expected_slowest_of_n_normal_draws_and_the_wait_for_it() -> None:
    import math

    from daydream.transforms.distributed.stragglers import expected_max_of_normals, robust_spread_ns, straggler_wait

    # Closed forms: E[max of 2] = 1/sqrt(pi), E[max of 3] = 1.5/sqrt(pi); one rank waits for nobody.
    assert expected_max_of_normals(1) == 0.0
    assert expected_max_of_normals(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max_of_normals(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max_of_normals(8) > expected_max_of_normals(4) > expected_max_of_normals(3)
    # Iterations of 10, 12, 10, 12 and one of 30 ms: median 12, absolute deviations 2, 0, 2, 0, 18 -> median 2 ms,
    # × 1.4826 = 2.9652 ms (the 30 ms one-off left out: their standard deviation is 8.67 ms); two ranks: 1/sqrt(pi)
    # of it, 1.672935 ms.
    recorded = [10_000_000, 12_000_000, 10_000_000, 12_000_000, 30_000_000]
    assert robust_spread_ns(recorded) == pytest.approx(2_965_200)
    waited = straggler_wait("ddp", "auto", recorded, 2)
    assert waited.wait_ns == round(2_965_200 / math.sqrt(math.pi)) == 1_672_935
    assert "waits +1.67 ms for the slowest of 2 ranks" in waited.note
    assert "5 iterations vary by 2.97 ms" in waited.note and "24.7% of the median" in waited.note
    assert "a spread of 25% is more than jitter" in waited.note  # wider than 10% of the median: said
    assert "more than jitter" not in straggler_wait("ddp", "auto", [100, 102, 100, 102, 300], 2).note  # 2.9%
    # Given: 2 ms; under accumulate=4 the ranks drift for 4 steps: × sqrt(4).
    assert straggler_wait("ddp", 2.0, [], 2).wait_ns == round(2e6 / math.sqrt(math.pi)) == 1_128_379
    assert straggler_wait("ddp", 2.0, [], 2, accumulate=4).wait_ns == round(4e6 / math.sqrt(math.pi)) == 2_256_758
    assert straggler_wait("ddp", 0.0, recorded, 8).wait_ns == 0
    short = straggler_wait("ddp", "auto", [10, 12], 2)  # too few iterations to tell
    assert short.wait_ns == 0 and "it records 2, 3 are needed" in short.note
    assert straggler_wait("ddp", "auto", [10, 10, 10], 8).wait_ns == 0  # no spread
    assert straggler_wait("ddp", "auto", [10, 12, 14], 1) == straggler_wait("ddp", 5.0, [], 1)  # one rank: no wait
    # 2 of 8 ranks traced and simulated together: their own differences are in the job's time, so the wait is for the
    # slowest of 8 beyond the slowest of 2: 2 ms × (1.42360 − 0.56419), E[max of 8] as tabulated (Tippett, 1925).
    assert straggler_wait("ddp", 2.0, [], 8, simulated=2).wait_ns == pytest.approx(2e6 * (1.42360 - 1 / math.sqrt(math.pi)),
                                                                                   rel=1e-4)
    everyone = straggler_wait("ddp", 2.0, recorded, 4, simulated=4)
    assert everyone.wait_ns == 0 and "all 4 ranks are simulated together" in everyone.note


def test_ddp_last_bucket_waits_for_the_slowest_rank_after_its_gradients_not_after_the_channel() -> None:
    from daydream.transforms.distributed.stragglers import expected_max_of_normals

    # As in the first test: b's bucket 2005-3054; a's gradients ready at 3006. stragglers=0.001: the ranks' steps
    # vary by 1 µs; two ranks: the last one arrives 0.5642 µs later -> 564 ns. a's bucket starts at 3006 + 564 = 3570
    # (the channel is free since 3054) and ends 3570 + 3146 = 6716; the optimizer waits for it.
    assert round(1000 * expected_max_of_normals(2)) == 564
    g = _step()
    notes = apply_spec(g, parse_spec("ddp:world=2,bandwidth=1000,latency=0,stragglers=0.001"), CONTEXT)
    timeline = simulate(g)
    reduces = np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE)
    assert timeline.start_ns[reduces].tolist() == [2005, 3570]
    assert timeline.end_ns[reduces].tolist() == [3054, 6716]
    optimizer = int(np.flatnonzero(g.tasks["phase"] == 2)[0])
    assert int(timeline.start_ns[optimizer]) == 6716
    assert any("waits +0.000564 ms for the slowest of 2 ranks" in n for n in notes)
    # On the critical path the wait is communication, with the last bucket's own 3146 ns: 3710 ns.
    from daydream.simulate.bound import bound_by
    assert bound_by(g, timeline, 0, optimizer).by_category_ns["communication"] == 564 + 3146
    # A wait shorter than the channel's queue costs nothing: 50 ns -> 28 ns, ready at 3034, the channel at 3054.
    hidden = _step()
    apply_spec(hidden, parse_spec("ddp:world=2,bandwidth=1000,latency=0,stragglers=0.00005"), CONTEXT)
    assert simulate(hidden).end_ns[reduces].tolist() == [3054, 6200]
