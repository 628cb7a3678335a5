"""Blocking calls on hand-made traces (times in µs): HIP twins, calls that did not wait, work after the wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.graph import TaskKind, build_graph
from daydream.simulate import simulate
from daydream.trace import read_job
from daydream.trace.runtime_api import CallRole, role_of
from tests.builders import annotation, kernel, runtime, write_trace


@pytest.mark.parametrize("cuda, hip, role", [
    ("cudaLaunchKernel", "hipLaunchKernel", CallRole.LAUNCH),
    ("cuLaunchKernelEx", "hipExtModuleLaunchKernel", CallRole.LAUNCH),
    ("cudaGraphLaunch", "hipGraphLaunch", CallRole.GRAPH_LAUNCH),
    ("cudaDeviceSynchronize", "hipDeviceSynchronize", CallRole.DEVICE_SYNC),
    ("cudaStreamSynchronize", "hipStreamSynchronize", CallRole.STREAM_SYNC),
    ("cudaEventSynchronize", "hipEventSynchronize", CallRole.EVENT_SYNC),
    ("cudaMemcpy", "hipMemcpyWithStream", CallRole.BLOCKING_COPY),
    ("cudaEventRecordWithFlags", "hipEventRecord", CallRole.EVENT_RECORD),
    ("cudaStreamWaitEvent", "hipStreamWaitEvent", CallRole.STREAM_WAIT),
    ("cudaFree", "hipFree", CallRole.DEVICE_SYNC),
    ("cudaGetDevice", "hipGetDevicePropertiesR0600", CallRole.OTHER),
])
def test_hip_calls_play_the_role_of_their_cuda_twins(cuda: str, hip: str, role: CallRole) -> None:
    assert role_of(cuda) is role and role_of(hip) is role


def _graph(tmp_path: Path, free_ts: float, free_dur: float):  # type: ignore[no-untyped-def]
    # A 100 µs kernel launched at 10, running 15-115; then a hipFree; then another launch.
    events = [
        annotation("ProfilerStep#1", 0, 400),
        runtime("hipLaunchKernel", 10, 5, correlation=1, ext=1),
        kernel("k1", 15, 100, correlation=1, ext=1),
        runtime("hipFree", free_ts, free_dur, correlation=2, ext=2),
        runtime("hipLaunchKernel", free_ts + free_dur + 2, 5, correlation=3, ext=3),
        kernel("k2", free_ts + free_dur + 7, 10, correlation=3, ext=3),
    ]
    trace = read_job(write_trace(tmp_path, events), cache=False).traces[0]
    graph = build_graph(trace)
    return graph, [graph.task_name(t) for t in range(graph.task_count)]


def test_a_free_that_returned_while_the_gpu_worked_did_not_wait(tmp_path: Path) -> None:
    graph, names = _graph(tmp_path, free_ts=20, free_dur=2)  # returns at 22, k1 runs until 115
    assert graph.calibration.blocking_calls_not_waiting == 1
    assert not (graph.tasks["kind"] == TaskKind.COMPLETION).any()
    timeline = simulate(graph)
    assert timeline.start_ns[names.index("hipFree")] == 20_000  # not held behind k1


def test_what_a_free_does_after_its_wait_is_its_own_host_work(tmp_path: Path) -> None:
    # Called at 20, k1 ends at 115, the call returns at 5115: 5 ms of unmapping after the wait.
    graph, names = _graph(tmp_path, free_ts=20, free_dur=5095)
    completions = graph.tasks["kind"] == TaskKind.COMPLETION
    assert completions.sum() == 1
    completion = int(completions.argmax())
    # The return latency defaults to 5 µs (no pure synchronize call to calibrate it); the rest is own work.
    assert graph.tasks["duration_ns"][completion] == 5_000_000 - 5_000
    timeline = simulate(graph)
    assert timeline.end_ns[completion] == 5_115_000
    graph.tasks["duration_ns"][names.index("k1")] //= 2  # a faster GPU moves the whole tail with it
    assert simulate(graph).end_ns[completion] == 5_115_000 - 50_000
