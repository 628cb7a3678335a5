"""fsdp (FSDP2) on hand-built graphs and allocations, where every time and byte can be worked out on paper."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.mapping.attribution import repeated_blocks
from daydream.memory.whatif import Allocations, ModelFacts, fsdp_memory, peak_bytes
from daydream.simulate import simulate
from daydream.transforms import Context, apply_spec, parse_spec
from daydream.transforms.distributed.contention import blocking_stretch
from daydream.transforms.distributed.fsdp import ROOT, fsdp_units
from tests.transforms.graphs import NEVER, call, graph, kernel, op, two_block_allocations

MiB = 2**20
#: Two blocks of 1 MiB each, nothing else: two units, no root. Over 1000 GB/s (1000 bytes/ns) without latency, among
#: 2 ranks, an all-gather of 1 MiB takes (n-1)/n · S/B = 524 ns; an all-reduce twice that, 1049 ns.
CONTEXT = Context(gradient_bytes={"blocks.0": MiB, "blocks.1": MiB})
LINK = "bandwidth=1000,latency=0"


def _collectives(g: Graph, word: str) -> list[int]:
    return [t for t in np.flatnonzero(g.tasks["kind"] == TaskKind.COLLECTIVE).tolist() if word in g.task_name(t)]


def _gpu_step() -> Graph:
    """Host calls 5 ns each, each launching one kernel (latency 4): fwd blocks.0, fwd blocks.1, bwd blocks.1 (1000 ns
    each), then a synchronize that waits for bwd blocks.1's kernel, then bwd blocks.0 (1000) and sgd (500). The host
    runs ahead of the GPU until the synchronize; after it, it is behind: bwd blocks.0 is launched only once bwd
    blocks.1 has ended.

    Without FSDP: fwd 4-1004, fwd 1005-2005, bwd blocks.1 2006-3006; the synchronize returns its 5 ns after the
    kernel it waits for (3011), bwd blocks.0's call runs 3011-3016 and its kernel 3015-4015, sgd 4016-4516."""
    calls = [call(), call(), call(), call("cudaStreamSynchronize"), call(), call()]
    kernels = [kernel("fwd", 1000, phase="forward", layer="blocks.0"), kernel("fwd", 1000, phase="forward", layer="blocks.1"),
               kernel("bwd", 1000, phase="backward", layer="blocks.1"), kernel("bwd", 1000, phase="backward", layer="blocks.0"),
               kernel("sgd", 500, phase="optimizer")]
    launching = [0, 1, 2, 4, 5]
    edges = [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(5)]
    edges += [(c, 6 + k, DepKind.LAUNCH, 4, True) for k, c in enumerate(launching)]
    edges += [(6 + k, 7 + k, DepKind.STREAM_ORDER, 1, False) for k in range(4)]
    edges.append((8, 3, DepKind.SYNC, 0, False))  # the synchronize completes when bwd blocks.1 has
    return graph([*calls, *kernels], edges, layers=["blocks.0", "blocks.1"])


def test_the_unsharded_step_is_as_the_docstring_says() -> None:
    timeline = simulate(_gpu_step())
    assert timeline.start_ns[6:].tolist() == [4, 1005, 2006, 3015, 4016]
    assert timeline.end_ns[6:].tolist() == [1004, 2005, 3006, 4015, 4516]


def test_prefetch_overlaps_the_next_units_all_gather_with_this_units_backward() -> None:
    # Forward: both all-gathers are issued while the host runs ahead (at 0 and 5): 0-524 and 524-1048 on the all-gather
    # stream; fwd blocks.0 waits for the first (524-1524), fwd blocks.1 follows (1525-2525).
    # Backward under prefetch=1: blocks.1's pre-backward hook (its call at 10) issues blocks.1's all-gather and then
    # blocks.0's: 1048-1572 and 1572-2096, both hidden behind the forward; bwd blocks.1 2526-3526. After the
    # synchronize (3526) bwd blocks.0's call is at 3526-3531 and its kernel at 3530: its parameters are there already.
    g = _gpu_step()
    apply_spec(g, parse_spec(f"fsdp:world=2,{LINK}"), CONTEXT)
    timeline = simulate(g)
    gathers = _collectives(g, "all-gather")
    assert len(gathers) == 4
    assert timeline.start_ns[gathers].tolist() == [0, 524, 1048, 1572]
    assert timeline.end_ns[gathers].tolist() == [524, 1048, 1572, 2096]
    backward_b0 = 9
    assert int(timeline.start_ns[backward_b0]) == 3535
    # Reduce-scatters after each unit's last backward kernel (3526 and 4535; 1 MiB among 2: 524 ns), the optimizer
    # after the last.
    scatters = _collectives(g, "reduce-scatter")
    assert timeline.start_ns[scatters].tolist() == [3526, 4535]
    assert int(timeline.start_ns[10]) == 4535 + 524


def test_without_prefetch_the_unit_gathers_only_once_its_own_backward_is_launched() -> None:
    # prefetch=0: blocks.0's backward all-gather is issued by its own pre-backward hook, on the host after the
    # synchronize (3531): 3531-4055 on the all-gather stream, so bwd blocks.0 waits for it: from 4055.
    g = _gpu_step()
    apply_spec(g, parse_spec(f"fsdp:world=2,prefetch=0,{LINK}"), CONTEXT)
    timeline = simulate(g)
    gathers = _collectives(g, "all-gather")
    assert (int(timeline.start_ns[gathers[-1]]), int(timeline.end_ns[gathers[-1]])) == (3531, 4055)
    assert int(timeline.start_ns[9]) == 4055


def test_reshard_0_keeps_the_parameters_from_forward_to_backward() -> None:
    # No backward all-gathers: bwd blocks.0 runs right after the synchronize, as without FSDP but 520 ns later (the
    # first kernel waited for the first all-gather, 524 ns, instead of its launch, 4): 3015 + 520 = 3535.
    g = _gpu_step()
    apply_spec(g, parse_spec(f"fsdp:world=2,reshard=0,{LINK}"), CONTEXT)
    timeline = simulate(g)
    assert len(_collectives(g, "all-gather")) == 2
    assert int(timeline.start_ns[9]) == 3535


def _cpu_step() -> Graph:
    """CPU ops 1000 ns each: fwd blocks.0, fwd blocks.1, bwd blocks.1, bwd blocks.0, then sgd 500; 0-4500 unsharded."""
    ops = [op("fwd", 1000, phase="forward", layer="blocks.0"), op("fwd", 1000, phase="forward", layer="blocks.1"),
           op("bwd", 1000, phase="backward", layer="blocks.1"), op("bwd", 1000, phase="backward", layer="blocks.0"),
           op("sgd", 500, phase="optimizer")]
    return graph(ops, [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(4)], layers=["blocks.0", "blocks.1"])


def test_on_a_cpu_each_collective_blocks_the_host_and_a_reduce_scatter_is_an_all_reduce() -> None:
    # Over gloo the host waits for each collective where it issues it: 4 all-gathers of 524 ns, and 2 reduce-scatters
    # timed as all-reduces of the whole unit (1049 ns): the step grows from 4500 by 4·524 + 2·1049 = 4194 ns, and the
    # optimizer's work halves (500 -> 250): 8444 ns.
    g = _cpu_step()
    apply_spec(g, parse_spec(f"fsdp:world=2,{LINK}"), CONTEXT)
    timeline = simulate(g)
    assert [int(g.tasks["duration_ns"][t]) for t in _collectives(g, "reduce-scatter")] == [1049, 1049]
    assert int(timeline.end_ns.max()) == 4500 + 4 * 524 + 2 * 1049 - 250
    # With 2 ranks of 1 compute thread on 2 CPUs (contention ×2), a blocking collective runs at half speed while the
    # other rank computes: for the share of the step its host work fills, H / T, with H = 4 · 1000 + 250 = 4250 and
    # T = H + C · s (C = 4194 alone). The stretch s = 1 + (2 - 1) · H / (H + C · s), found here by iterating it:
    # 1.41696..., so the all-gathers take round(524 · s) = 742 ns and the reduce-scatters round(1049 · s) = 1486 ns.
    contended = _cpu_step()
    notes = apply_spec(contended, parse_spec(f"fsdp:world=2,{LINK}"),
                       Context(gradient_bytes=CONTEXT.gradient_bytes, host={"cpus": 2, "intra_op_threads": 1}))
    stretch = 2.0
    for _ in range(200):
        stretch = 1 + 4250 / (4250 + 4194 * stretch)
    assert stretch == pytest.approx(1.41696, abs=1e-5)
    assert [int(contended.tasks["duration_ns"][t]) for t in _collectives(contended, "all-gather")] == [742] * 4
    assert [int(contended.tasks["duration_ns"][t]) for t in _collectives(contended, "reduce-scatter")] == [1486] * 2
    assert int(simulate(contended).end_ns.max()) == 4250 + 4 * round(524 * stretch) + 2 * round(1049 * stretch)
    assert any("×1.42" in note and "42% of the step" in note and "waits in it" in note for note in notes)
    # Ranks that only compute would take the whole factor; with no host work, none.
    assert blocking_stretch(2.0, 1000.0, 1e-9) == pytest.approx(2.0)
    assert blocking_stretch(2.0, 0.0, 1000.0) == 1.0


def test_a_unit_called_twice_in_a_row_gathers_for_each_call() -> None:
    # blocks.0 (layers a and b, each with parameters) runs a, b, a, b in forward: it came back to a, so it was called
    # twice (a rollout, a shared block); blocks.1 once. Backward mirrors it. Under reshard=1 each call gathers: 6.
    ops = [op("fwd", 10, phase="forward", layer=layer) for layer in ("blocks.0.a", "blocks.0.b", "blocks.0.a",
                                                                     "blocks.0.b", "blocks.1.a")]
    ops += [op("bwd", 10, phase="backward", layer=layer) for layer in ("blocks.1.a", "blocks.0.b", "blocks.0.a",
                                                                       "blocks.0.b", "blocks.0.a")]
    g = graph([*ops, op("sgd", 10, phase="optimizer")], [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(10)],
              layers=["blocks.0", "blocks.0.a", "blocks.0.b", "blocks.1", "blocks.1.a"])
    context = Context(gradient_bytes={"blocks.0.a": MiB, "blocks.0.b": MiB, "blocks.1.a": MiB})
    apply_spec(g, parse_spec(f"fsdp:world=2,{LINK}"), context)
    named = [g.task_name(t).split(", ")[1] for t in _collectives(g, "all-gather")]
    assert named == ["blocks.0", "blocks.0", "blocks.1", "blocks.1", "blocks.0", "blocks.0"]
    # reshard=0: gathered at its first forward call; each backward call but the last reshards it after itself.
    kept = graph([*ops, op("sgd", 10, phase="optimizer")], [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(10)],
                 layers=["blocks.0", "blocks.0.a", "blocks.0.b", "blocks.1", "blocks.1.a"])
    apply_spec(kept, parse_spec(f"fsdp:world=2,reshard=0,{LINK}"), context)
    assert [kept.task_name(t).split(", ")[1] for t in _collectives(kept, "all-gather")] == ["blocks.0", "blocks.1",
                                                                                          "blocks.0"]


def test_a_forward_call_whose_unit_is_still_gathered_pays_the_idle_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    # As above: blocks.0 called twice in forward, blocks.1 once. Hooks of 100 ns (pre-forward, gathering), 10 (pre-
    # forward, the unit still gathered), 7 (post-forward, resharding) and 3 (post-forward, resharding nothing).
    # reshard=1: every call gathers and reshards; reshard=0: blocks.0's second call finds it gathered, and no call
    # reshards after forward.
    from daydream.cost import CostModel
    from daydream.cost.host import HostCosts

    costs = {"fsdp.pre_forward": 100, "fsdp.pre_forward_idle": 10, "fsdp.post_forward": 7, "fsdp.post_forward_idle": 3}
    monkeypatch.setattr(HostCosts, "recorded_ns", lambda self, what: costs.get(what, 0))
    model = CostModel(host=HostCosts(unit_ns=0), on_gpu=False)
    context = Context(gradient_bytes={"blocks.0.a": MiB, "blocks.0.b": MiB, "blocks.1.a": MiB},
                      derive={"costs": lambda: model})

    def hooks(reshard: int) -> list[tuple[str, int]]:
        ops = [op("fwd", 10, phase="forward", layer=layer) for layer in ("blocks.0.a", "blocks.0.b", "blocks.0.a",
                                                                         "blocks.0.b", "blocks.1.a")]
        g = graph([*ops, op("sgd", 10, phase="optimizer")], [(i, i + 1, DepKind.HOST_ORDER, 0, False) for i in range(5)],
                  layers=["blocks.0", "blocks.0.a", "blocks.0.b", "blocks.1", "blocks.1.a"])
        apply_spec(g, parse_spec(f"fsdp:world=2,reshard={reshard},{LINK}"), context)
        order = np.argsort(simulate(g).start_ns, kind="stable")
        return [(g.task_name(int(t)).split(" (")[0], int(g.tasks["duration_ns"][t])) for t in order
                if "forward hook" in g.task_name(int(t))]

    pre, post = "fsdp: pre-forward hook", "fsdp: post-forward hook"
    assert hooks(1) == [(pre, 100), (post, 7)] * 3
    assert hooks(0) == [(pre, 100), (post, 3), (pre, 10), (post, 3), (pre, 100), (post, 3)]


def test_world_1_changes_nothing() -> None:
    g = _cpu_step()
    assert "shards nothing" in apply_spec(g, parse_spec("fsdp:world=1"), CONTEXT)[0]
    assert not _collectives(g, "")


def test_units_are_the_outermost_repeated_blocks_and_the_root_holds_the_rest() -> None:
    sizes = {"m.embed": 10, "m.layers.0.attn.q": 4, "m.layers.0.attn.heads.0.w": 1, "m.layers.0.attn.heads.1.w": 1,
             "m.layers.1.attn.q": 4, "m.stage.0.w": 3, "m.head": 7}
    assert repeated_blocks(sizes) == ["m.layers.0", "m.layers.1"]  # m.stage holds one: not repeated
    layers = sorted({".".join(p.split(".")[:n]) for p in sizes for n in range(1, p.count(".") + 2)})
    units = fsdp_units(layers, sizes, "")
    assert [(u.name, u.bytes) for u in units] == [("m.layers.0", 6), ("m.layers.1", 4), (ROOT, 20)]
    chosen = fsdp_units(layers, sizes, r"attn\.heads\.\d+$")
    assert [(u.name, u.bytes) for u in chosen] == [("m.layers.0.attn.heads.0", 1), ("m.layers.0.attn.heads.1", 1),
                                                   (ROOT, 28)]


def test_a_units_regex_that_matches_nothing_says_what_would() -> None:
    with pytest.raises(InputError, match=r"units='decoder' matches no layer .* e\.g\. blocks\.0, blocks\.1"):
        apply_spec(_cpu_step(), parse_spec("fsdp:world=2,units=decoder"), CONTEXT)
    with pytest.raises(InputError, match="no per-layer parameters"):
        apply_spec(_cpu_step(), parse_spec("fsdp:world=2"), Context())


def test_a_cpu_trace_without_a_link_is_asked_for_one() -> None:
    # no GPU named, no bandwidth given: the ranks' link (gloo) cannot be looked up; the message says what to give
    with pytest.raises(InputError, match=r"names no GPU .* give bandwidth=GB/s and latency=µs"):
        apply_spec(_cpu_step(), parse_spec("fsdp:world=2"), CONTEXT)
    with pytest.raises(InputError, match="GPU is not in the device table"):
        apply_spec(_cpu_step(), parse_spec("fsdp:world=2"), Context(gradient_bytes=CONTEXT.gradient_bytes,
                                                                     device_name="Mystery GPU"))


def _allocations(device: str = "cuda:0") -> tuple[Allocations, ModelFacts]:
    """Weights 8, optimizer state 16 (from before the window); blocks.0's activation (100) made at 0 in forward,
    blocks.1's (200) at 10; blocks.1's backward allocates its gradient (4 bytes) at 60, blocks.0's at 90; the
    activations freed at 80 and 100. Recorded peak: 8 + 16 + 100 + 200 + 4 = 328 at 60."""
    a = two_block_allocations([8, 16, 100, 200, 4, 4], [-1, -1, 0, 10, 60, 90], [NEVER, NEVER, 100, 80, NEVER, NEVER])
    return a, ModelFacts(["blocks.0", "blocks.1"], None, {"blocks.0": 4, "blocks.1": 4}, device)


def _live(a: Allocations, at: int) -> float:
    """Bytes of the allocations alive at `at` (the hand-made window has no memory from before it)."""
    return float(a.size[(a.start <= at) & (a.end > at)].sum())


def test_memory_per_rank_is_the_shards_plus_the_gathered_units_in_flight() -> None:
    a, facts = _allocations()
    assert peak_bytes(a) == 328
    # ÷2: weights 4, state 8, gradients 2 each. blocks.1's pre-backward hook runs just before its first allocation
    # (60): its all-gather issued at 57, the copy-out at 58 (output and parameters both there), the output freed at
    # 59, when the hook prefetches blocks.0 (its output, 4, until blocks.0's own copy-out at 88). At 60: the
    # activations (300), blocks.1's parameters (4), blocks.0's prefetched output (4), blocks.1's gradient whole
    # (2 + 2) until its reduce-scatter at its backward's end (61). In forward, at 10: 12 + 300 + 4 + 4 = 320.
    fsdp_memory(a, {"world": 2}, facts)
    assert peak_bytes(a) == 4 + 8 + 300 + 4 + 4 + 2 + 2
    assert [_live(a, t) for t in (57, 58, 59)] == [12 + 300 + 4, 12 + 300 + 4 + 4, 12 + 300 + 4 + 4]
    # After blocks.1's reduce-scatter, at 70: its gradient's shard (2, the rest gone) and the reduce-scatter's input
    # (4), which FSDP2 frees only at the next reduce-scatter (blocks.0's, at 91), beside blocks.0's prefetched output.
    assert _live(a, 70) == 12 + 300 + 2 + 4 + 4
    # Without prefetch blocks.0 is gathered only in its own hook (at 87), after blocks.1's activation is freed: at
    # 60 the same less its output.
    a, facts = _allocations()
    fsdp_memory(a, {"world": 2, "prefetch": 0}, facts)
    assert peak_bytes(a) == 4 + 8 + 300 + 4 + 2 + 2


def test_on_a_cpu_gloo_stages_each_all_gather_and_clones_the_gradients_it_reduce_scatters() -> None:
    # As above, and each all-gather's staging copy (4) while it runs (blocks.0's prefetch: at 59, beside blocks.1's
    # parameters and blocks.0's output); and the clone of blocks.1's gradients (4) that its reduce-scatter works on,
    # at the end of its backward (60, its only allocation): the peak, 324 of the GPU case and the clone. The clone
    # is gone after it: nothing is added that stays.
    a, facts = _allocations("cpu")
    fsdp_memory(a, {"world": 2}, facts)
    assert _live(a, 59) == 12 + 300 + 4 + 4 + 4
    assert peak_bytes(a) == 4 + 8 + 300 + 4 + 4 + 2 + 2 + 4
    assert int((a.end == NEVER).sum()) == 4  # the weights, the state and the two gradients, as recorded: no clone stays


REPO = Path(__file__).resolve().parents[2]
KEPT = REPO / "examples" / "fsdp"
ROUND = KEPT / "round-2"


def _per_step(trace: Path, name: str) -> list[int]:
    """How many events named `name` each ProfilerStep of a raw trace holds (on any thread)."""
    with gzip.open(trace, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    return [sum(1 for e in events if e["name"] == name and start <= e["ts"] < end) for start, end in _steps(events)]


def _steps(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Each ProfilerStep's (start, end) in a raw trace's events, µs."""
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]


def test_the_what_if_issues_the_collectives_the_real_fsdp2_run_did() -> None:
    # The kept calibration round: the transformer traced alone, and rank 0 of the same run under FSDP2 (gloo). The
    # what-if from the first issues per iteration as many all-gathers and reduce-scatters as the second's steps ran.
    from daydream.api import predict_job

    gathers = set(_per_step(ROUND / "transformer-fsdp-rank0.json.gz", "gloo:all_gather"))
    scatters = set(_per_step(ROUND / "transformer-fsdp-rank0.json.gz", "gloo:all_reduce"))
    assert len(gathers) == 1 and len(scatters) == 1  # every step alike
    [prediction] = predict_job(ROUND / "transformer-baseline.json.gz", ["fsdp:world=2,bandwidth=1,latency=1000"])
    [said] = [n for n in prediction.notes if "all-gathers" in n]
    assert f"{gathers.pop()} all-gathers" in said and f"{scatters.pop()} reduce-scatters" in said


def test_a_ranks_recording_counts_its_shards_not_the_whole_model() -> None:
    # daydream trace records what the model and optimizer hold when the first traced iteration begins: under FSDP2 the
    # parameters are DTensors, and a rank holds its shard of them (and of the optimizer state), half of the whole.
    def held(path: Path) -> dict[str, int]:
        with gzip.open(path, "rt") as handle:
            recorded = json.load(handle)["daydream"]["memory_before"]["cpu"]
        return {c: int(recorded[c]) for c in ("weights", "optimizer state")}

    whole, shard = held(ROUND / "transformer-baseline.json.gz"), held(ROUND / "transformer-fsdp-rank0.json.gz")
    assert whole["weights"] > 0 and whole["optimizer state"] > 0
    # The weights split exactly; AdamW's step counters (one scalar per parameter) are not sharded.
    assert shard["weights"] * 2 == whole["weights"]
    assert shard["optimizer state"] == pytest.approx(whole["optimizer state"] / 2, rel=1e-3)


def test_the_predicted_peak_per_rank_is_the_real_fsdp2_ranks_steady_peak() -> None:
    # The real rank's steady peak read straight from its file: the lowest of its steps' highest "Total Allocated"
    # (the profiler's count, which grows from step to step by blocks gloo frees where the profiler does not see it),
    # plus what the rank held before the trace as daydream trace recorded it. The what-if from the one-process
    # trace predicts it (the old model, a flat block of unsharded gradients from each backward's start and the
    # next gather at the same instant as a copy-out, said +17%).
    from daydream.api import open_job
    from daydream.memory.job import predict_memory_for

    steady = []
    for rank in (0, 1):
        with gzip.open(ROUND / f"transformer-fsdp-rank{rank}.json.gz", "rt") as handle:
            document = json.load(handle)
        events = document["traceEvents"]
        totals = [(e["ts"], e["args"]["Total Allocated"]) for e in events if e.get("name") == "[memory]"]
        lowest = min(max(total for at, total in totals if start <= at < end) for start, end in _steps(events))
        steady.append(lowest + sum(int(v) for v in document["daydream"]["memory_before"]["cpu"].values()))
    [predicted] = predict_memory_for(open_job(ROUND / "transformer-baseline.json.gz").traces,
                                     ["fsdp:world=2,bandwidth=1,latency=1000"])
    for measured in steady:
        assert int(predicted["predicted_peak_bytes"]) == pytest.approx(measured, rel=0.03)


def test_the_pages_calibration_rows_of_the_kept_round_are_what_the_script_gives() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    import fsdp_costs

    rows = [line for line in fsdp_costs.report(KEPT).splitlines() if line.startswith("| round-")]
    page = (REPO / "docs" / "validation-parallel.md").read_text()
    assert len(rows) == 2  # both ranks of the kept round
    assert all(row in page for row in rows)


def test_the_recorded_constants_are_the_pages_medians() -> None:
    # The page's table of constants ends with the medians over its calibration rounds: what cost/host.py and fsdp.py hold.
    from daydream.cost.host import RECORDED_HOST_UNITS
    from daydream.transforms.distributed.fsdp import FRESH_COPY_SLOWDOWN

    page = (REPO / "docs" / "validation-parallel.md").read_text()
    # (the fsdp table's median row: 12 cells; tp's table follows it)
    [median] = [line for line in page.splitlines() if line.startswith("| **median** |") and line.count("|") == 13]
    cells = [cell.strip().strip("*") for cell in median.strip("|").split("|")][3:]
    keys = ["pre_forward", "post_forward", "pre_backward", "post_backward", "reduce", "collective", "copy"]
    assert [float(c) for c in cells[:7]] == [RECORDED_HOST_UNITS[f"fsdp.{k}"] for k in keys]
    assert float(cells[7]) == FRESH_COPY_SLOWDOWN and float(cells[8]) == RECORDED_HOST_UNITS["fsdp.optimizer_op"]


def test_the_idle_hooks_rows_of_the_kept_round_are_the_scripts_and_the_constants_their_medians() -> None:
    from daydream.cost.host import RECORDED_HOST_UNITS

    sys.path.insert(0, str(REPO / "scripts"))
    import fsdp_costs

    table = (KEPT / "idle-calibration.md").read_text()
    rows = [line for line in fsdp_costs.idle_report(KEPT).splitlines() if line.startswith("| round-")]
    assert len(rows) == 2 and all(row in table for row in rows)  # the kept round's two reshard=0 transformer ranks
    [median] = [line for line in table.splitlines() if line.startswith("| **median** |")]
    cells = [float(cell.strip().strip("*")) for cell in median.strip().strip("|").split("|")[3:]]
    assert cells == [RECORDED_HOST_UNITS["fsdp.pre_forward_idle"], RECORDED_HOST_UNITS["fsdp.post_forward_idle"]]
