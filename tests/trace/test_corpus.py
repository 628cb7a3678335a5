"""Every real trace of the corpus against facts counted straight from the files (MANIFEST.json)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from daydream.api import open_job
from daydream.cli import main
from daydream.report.summary import summarize_job
from daydream.trace import EventKind
from tests.builders import load_raw, ns
from tests.conftest import CORPUS

_summaries: dict[str, dict[str, Any]] = {}


def _manifest_keys() -> list[str]:
    path = CORPUS / "MANIFEST.json"
    return sorted(json.loads(path.read_text())) if path.is_file() else ["<corpus missing>"]


def _rank_summary(corpus: Path, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(rank summary, job summary) for a manifest key ('file' or 'archive::member')."""
    file, _, member = key.partition("::")
    if file not in _summaries:
        _summaries[file] = summarize_job(open_job(corpus / file, cache=False))
    job = _summaries[file]
    ranks = job["ranks"]
    if member:
        matches = [r for r in ranks if r["source"].endswith("::" + member)]
        assert len(matches) == 1, f"{member} not read from {file}"
        return matches[0], job
    assert len(ranks) == 1
    return ranks[0], job


@pytest.mark.parametrize("key", _manifest_keys())
def test_counts_and_steps_match_manifest(corpus: Path, manifest: dict[str, Any], key: str) -> None:
    expected = manifest[key]
    rank, _ = _rank_summary(corpus, key)
    assert rank["kernels"] == expected["kernels"]
    assert rank["events"]["in_file"] == expected["events"]
    assert rank["events"]["skipped_malformed"] == 0
    assert rank["kinds"]["memory"] == expected["memory_events"]
    assert rank["gpu"] == expected["gpu"]
    assert rank["rank"] == expected["rank"]
    assert rank["world_size"] == expected["world_size"]
    steps = rank["profiler_steps"]
    assert [s["name"] for s in steps] == [s["name"] for s in expected["profiler_steps"]]
    for ours, theirs in zip(steps, expected["profiler_steps"]):
        assert abs(ours["measured_ns"] - theirs["dur_us"] * 1000) <= 1000, ours["name"]


@pytest.mark.parametrize("key", _manifest_keys())
def test_categories_read_as_listed(corpus: Path, manifest: dict[str, Any], key: str) -> None:
    file, _, member = key.partition("::")
    job = open_job(corpus / file, cache=False)
    traces = [t for t in job.traces if not member or t.meta.source.endswith("::" + member)]
    assert len(traces) == 1
    assert traces[0].meta.categories == manifest[key]["categories"]


def test_archive_ranks_come_in_rank_order(corpus: Path) -> None:
    job = open_job(corpus / "param/et_replay_inputs/dlrm_kineto.tar.gz", cache=False)
    assert [t.meta.rank for t in job.traces] == list(range(8))
    assert job.world_size == 8
    # Each rank's file name carries its worker number; rank order must follow distributedInfo.
    assert all(f"worker{t.meta.rank}_" in t.meta.source for t in job.traces)


def test_folder_of_rank_files(corpus: Path, tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (1, 0):  # written out of order on purpose
        name = f"sampled_rank-{rank}.json.gz"
        (folder / f"z{rank}-{name}").write_bytes((corpus / "hta/trace_filter" / name).read_bytes())
    job = open_job(folder, cache=False)
    assert [t.meta.rank for t in job.traces] == [0, 1]
    assert [t.count(EventKind.KERNEL, EventKind.COMMUNICATION) for t in job.traces] == [1154, 1104]


def test_resnet_without_profiler_steps_has_30_sgd_iterations(corpus: Path) -> None:
    path = corpus / "param/et_replay_inputs/resnet_kineto.json.gz"
    raw = load_raw(path)["traceEvents"]
    step_ends = sorted(
        ns(e["ts"]) + ns(e["dur"])
        for e in raw
        if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#SGD.step")
    )
    rank, _ = _rank_summary(corpus, "param/et_replay_inputs/resnet_kineto.json.gz")
    iterations = rank["iterations"]
    assert rank["iteration_source"] == "optimizer_step"
    assert len(iterations) == 30 == len(step_ends)
    ends = [it["host_start_ns"] + it["host_ns"] for it in iterations]
    assert ends == step_ends
    assert all(it["start_ns"] + it["measured_ns"] >= end for it, end in zip(iterations, ends))  # to completion
    # Iterations (to their completion) tile the timeline: each starts where the previous one ended.
    assert all(b["start_ns"] == a["start_ns"] + a["measured_ns"] for a, b in zip(iterations, iterations[1:]))


def test_inspect_json_contract_via_cli(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", "--json", str(corpus / "hta/nccl_parser_config/nccl_data.json.gz")])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    rank = document["ranks"][0]
    assert {"rank", "gpu", "kernels", "iterations"} <= rank.keys()
    assert rank["rank"] == 0 and rank["gpu"] == ["NVIDIA A100-PG509-200"] and rank["kernels"] == 2700
    assert [it["name"] for it in rank["iterations"]] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert all(isinstance(it["measured_ns"], int) for it in rank["iterations"])


def test_rocm_and_cuda_runtime_versions_are_read_from_the_envelope(corpus: Path) -> None:
    for key, vendor, fields in (
        ("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz", "AMD ROCm", ("hip_runtime_version", "roctracer_version")),
        ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "NVIDIA CUDA", ("cuda_runtime_version", "cupti_version")),
    ):
        raw = json.loads(gzip.decompress((corpus / key).read_bytes()))
        trace = open_job(corpus / key, cache=False).traces[0]
        assert trace.meta.runtime["vendor"] == vendor
        for field in fields:
            assert trace.meta.runtime[field] == raw[field]
        assert trace.gpu_names == [device["name"] for device in raw["deviceProperties"]]
