"""CUDA-graph capture ranges: a trace of the capture alone has launches and no execution, and what-ifs refuse it;
a trace that captures once and then replays the graph is an execution like any other. Counts by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.mapping.capture import captures
from daydream.trace import read_job
from tests.builders import annotation, kernel, op, runtime, write_trace


def _capture_events(steps: int, launches: int) -> list[dict]:
    """`steps` iterations, each capturing `launches` kernel launches (no GPU work: captured, not run)."""
    events, at, correlation = [], 0.0, 1
    for step in range(steps):
        events.append(annotation(f"ProfilerStep#{step}", at, 100.0 * (launches + 2)))
        events.append(runtime("cudaStreamBeginCapture", at + 1, 2, correlation, ext=0))
        correlation += 1
        for index in range(launches):
            events.append(runtime("cudaLaunchKernel", at + 10 + 100 * index, 5, correlation, ext=0))
            correlation += 1
        events.append(runtime("cudaStreamEndCapture", at + 10 + 100 * launches, 2, correlation, ext=0))
        correlation += 1
        at += 100.0 * (launches + 2)
    return events


def test_a_trace_of_a_capture_alone_is_refused_by_whatifs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path, _capture_events(steps=3, launches=4))
    found = captures(read_job(path).traces[0])
    assert (found.ranges, found.launches_captured, found.launches, found.capture_only) == (3, 12, 12, True)
    assert main(["whatif", str(path), "--opt", "cuda-graphs"]) == 2
    error = capsys.readouterr().err
    assert "records a CUDA-graph capture and no execution" in error and len(error.strip().splitlines()) == 1
    assert main(["inspect", "--json", str(path)]) == 0
    assert "what-ifs refuse it" in json.loads(capsys.readouterr().out)["ranks"][0]["capture"]


def test_a_capture_then_its_replays_is_an_execution(tmp_path: Path) -> None:
    events = _capture_events(steps=1, launches=4)
    at = 1000.0
    for step in range(3):  # three replays of the graph: one launch call, two kernels each
        correlation = 100 + step
        events += [annotation(f"ProfilerStep#{step + 1}", at, 500), op("aten::copy_", at + 1, 5, ext=50 + step),
                   runtime("cudaGraphLaunch", at + 10, 20, correlation, ext=0),
                   kernel("void graph_kernel_a()", at + 40, 100, correlation, ext=0),
                   kernel("void graph_kernel_b()", at + 150, 100, correlation, ext=0)]
        at += 500
    path = write_trace(tmp_path, events)
    found = captures(read_job(path).traces[0])
    assert (found.ranges, found.launches_captured, found.graph_launches_run, found.capture_only) == (1, 4, 3, False)


def test_a_trace_without_captures_has_none(tmp_path: Path) -> None:
    path = write_trace(tmp_path, [annotation("ProfilerStep#1", 0, 100), runtime("cudaLaunchKernel", 10, 5, 1, ext=0),
                                  kernel("void k()", 20, 50, 1, ext=0)])
    assert captures(read_job(path).traces[0]).ranges == 0
