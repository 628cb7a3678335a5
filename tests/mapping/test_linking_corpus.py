"""Linking on real traces, checked against independent brute-force readings of the raw JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from daydream.api import open_job
from daydream.mapping import EXTERNAL_ID, TIME_NESTING, link
from daydream.trace import API_KINDS, GPU_ACTIVITY_KINDS, Trace
from tests.builders import load_raw, ns

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def _open(path: Path) -> Trace:
    return open_job(path, cache=False).traces[0]


def _raw(path: Path) -> list[dict[str, Any]]:
    return [e for e in load_raw(path)["traceEvents"] if isinstance(e, dict)]


def test_h100_orphans_are_gpu_work_launched_before_the_window(corpus: Path) -> None:
    path = corpus / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    raw = _raw(path)
    host_correlations = {e["args"]["correlation"] for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    first_host = min(host_correlations)
    gpu = [e for e in raw if e.get("cat") in GPU_CATS]
    expected_orphans = sum(1 for e in gpu if e["args"]["correlation"] < first_host)
    assert expected_orphans == 509  # as SOURCES.md documents
    trace = _open(path)
    links = link(trace)
    rows = trace.indices(*GPU_ACTIVITY_KINDS)
    assert int(links.orphan[rows].sum()) == expected_orphans
    assert int((links.launch[rows] >= 0).sum()) == len(gpu) - expected_orphans
    assert links.convention == EXTERNAL_ID


def test_graph_launch_covers_many_kernels(corpus: Path) -> None:
    path = corpus / "hta/negative_queue_length_values_check/rank0.json.gz"
    raw = _raw(path)
    graph_correlations = {e["args"]["correlation"] for e in raw if e.get("name") == "cudaGraphLaunch"}
    graph_gpu = [e for e in raw if e.get("cat") in GPU_CATS and e["args"].get("correlation") in graph_correlations]
    trace = _open(path)
    links = link(trace)
    rows = trace.indices(*GPU_ACTIVITY_KINDS)
    launch = links.launch[rows]
    launched_by_graph = launch[launch >= 0]
    graph_name = trace.string_index("cudaGraphLaunch")
    by_graph = launched_by_graph[trace.name[launched_by_graph] == graph_name]
    assert len(graph_correlations) == 70 and len(graph_gpu) == 345  # SOURCES.md
    assert by_graph.size == len(graph_gpu)
    assert np.unique(by_graph).size == len({e["args"]["correlation"] for e in graph_gpu})


def test_external_id_convention_matches_the_ops_external_id(corpus: Path) -> None:
    path = corpus / "hta/nccl_parser_config/nccl_data.json.gz"
    raw = _raw(path)
    op_name_by_external = {e["args"]["External id"]: e["name"] for e in raw if e.get("cat") == "cpu_op"}
    expected = sorted(
        (ns(e["ts"]), op_name_by_external[e["args"]["External id"]])
        for e in raw
        if e.get("cat") == "kernel"
    )
    trace = _open(path)
    links = link(trace)
    assert links.convention == EXTERNAL_ID
    rows = trace.indices(*GPU_ACTIVITY_KINDS)
    kernels = rows[np.isin(trace.kind[rows], [3, 10])]
    ours = sorted((int(trace.ts_ns[r]), trace.name_of(int(links.op[r]))) for r in kernels)
    assert ours == expected


def test_time_nesting_convention_matches_brute_force(corpus: Path) -> None:
    path = corpus / "param/et_replay_inputs/resnet_kineto.json.gz"
    raw = _raw(path)
    runtime_by_corr = {e["args"]["correlation"]: e for e in raw if e.get("cat") == "cuda_runtime"}
    ops_by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in raw:
        if e.get("cat") == "cpu_op":
            ops_by_tid.setdefault(e["tid"], []).append(e)
    kernels = [e for e in raw if e.get("cat") == "kernel"][::40]  # a spread-out sample

    def innermost(call: dict[str, Any]) -> str | None:
        start, end = call["ts"], call["ts"] + call["dur"]
        enclosing = [o for o in ops_by_tid.get(call["tid"], []) if o["ts"] <= start and end <= o["ts"] + o["dur"]]
        return min(enclosing, key=lambda o: o["dur"])["name"] if enclosing else None

    expected = sorted((ns(k["ts"]), innermost(runtime_by_corr[k["args"]["correlation"]])) for k in kernels)
    trace = _open(path)
    links = link(trace)
    assert links.convention == TIME_NESTING
    wanted = {ts for ts, _ in expected}
    rows = trace.indices(*GPU_ACTIVITY_KINDS)
    ours = sorted(
        (int(trace.ts_ns[r]), trace.name_of(int(links.op[r])) if links.op[r] >= 0 else None)
        for r in rows
        if int(trace.ts_ns[r]) in wanted and trace.kind[r] == 3
    )
    assert ours == expected


def test_every_linked_launch_is_a_host_api_call(corpus: Path) -> None:
    trace = _open(corpus / "hta/df_index_resolver/df_index_resolver.json.gz")
    links = link(trace)
    launched = links.launch[links.launch >= 0]
    assert np.isin(trace.kind[launched], [int(k) for k in API_KINDS]).all()
    rows = np.flatnonzero(links.launch >= 0)
    assert (trace.correlation[rows] == trace.correlation[links.launch[rows]]).all()


def test_fast_nesting_agrees_with_the_reference_sweep(corpus: Path) -> None:
    from daydream.mapping.linking import link_by_nesting_reference, link_calls_to_ops

    for name in ("param/et_replay_inputs/resnet_kineto.json.gz", "hta/trace_filter/sampled_rank-0.json.gz"):
        trace = _open(corpus / name)
        fast = link_calls_to_ops(trace, TIME_NESTING)
        reference = link_by_nesting_reference(trace, trace.indices(*API_KINDS))
        assert np.array_equal(fast, reference), name
