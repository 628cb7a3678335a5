"""A generator of Kineto-style traces with exact, known semantics.

It interprets a tiny training program on an idealized machine, event by event,
and writes what a profiler would have recorded. The machine's rules are the
ones daydream's replay model claims real machines follow, implemented here
independently of daydream:

* a launch call's GPU work starts at max(call start + LAUNCH_LATENCY, end of the
  previous work on its stream + KERNEL_GAP, end of recorded work it waits for + KERNEL_GAP);
* a launch blocks while QUEUE_DEPTH launched operations are unfinished: it
  proceeds when the operation QUEUE_DEPTH + 1 launches back has finished;
* cudaStreamSynchronize returns at max(call start + SYNC_OWN, end of the stream's
  last launched work + SYNC_RETURN);
* backward() hands the work to the autograd thread and blocks the main thread
  until that thread is done.

Changing `gpu_scale` or `host_scale` runs the same program on a machine whose GPU
(or host) is that much faster: the ground truth for what-if checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LAUNCH_LATENCY = 4_000  # ns
KERNEL_GAP = 1_000
SYNC_OWN = 3_000
SYNC_RETURN = 2_000
LAUNCH_OWN = 5_000
MAIN, AUTOGRAD = 101, 102


@dataclass
class Program:
    iterations: int = 4
    forward: list[tuple[int, int]] = field(default_factory=list)  # (cpu gap ns, kernel ns) per launch
    backward: list[tuple[int, int]] = field(default_factory=list)
    optimizer: list[tuple[int, int]] = field(default_factory=list)
    side_stream_kernel_ns: int = 0  # >0: a kernel on a second stream, joined with events
    queue_depth: int = 1024


@dataclass
class _Machine:
    gpu_scale: float
    host_scale: float
    queue_depth: int
    events: list[dict[str, Any]] = field(default_factory=list)
    stream_free: dict[int, int] = field(default_factory=dict)
    last_on_stream: dict[int, int] = field(default_factory=dict)  # stream -> end of its last launched work
    launched_ends: list[int] = field(default_factory=list)
    correlation: int = 1000
    pending_wait: dict[int, int] = field(default_factory=dict)  # stream -> end of recorded work it must wait for
    recorded: int = 0

    def host(self, ns: int) -> int:
        return int(round(ns * self.host_scale))

    def call(self, tid: int, name: str, start: int, end: int) -> int:
        self.correlation += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": start / 1000,
                            "dur": (end - start) / 1000, "args": {"correlation": self.correlation, "External id": self.correlation}})
        return self.correlation

    def launch(self, tid: int, now: int, kernel_ns: int, stream: int = 7, name: str = "kernel") -> int:
        """Launch at host time `now`; returns the host time after the call."""
        release = now
        back = self.queue_depth + 1
        if len(self.launched_ends) >= back:
            release = max(now, self.launched_ends[-back])
        end_call = release + self.host(LAUNCH_OWN)
        correlation = self.call(tid, "cudaLaunchKernel", now, end_call)
        start = max(release + LAUNCH_LATENCY, self.stream_free.get(stream, 0) + KERNEL_GAP,
                    self.pending_wait.pop(stream, 0) + KERNEL_GAP)
        duration = int(round(kernel_ns * self.gpu_scale))
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": start / 1000,
                            "dur": duration / 1000, "args": {"correlation": correlation, "External id": correlation,
                                                             "device": 0, "stream": stream}})
        self.stream_free[stream] = start + duration
        self.last_on_stream[stream] = start + duration
        self.launched_ends.append(start + duration)
        return end_call

    def record_and_wait(self, tid: int, now: int, from_stream: int, to_stream: int) -> int:
        end = now + self.host(2_000)
        self.call(tid, "cudaEventRecord", now, end)
        recorded_end = self.last_on_stream.get(from_stream, 0)
        now = end + self.host(1_000)
        end = now + self.host(2_000)
        self.call(tid, "cudaStreamWaitEvent", now, end)
        self.pending_wait[to_stream] = max(self.pending_wait.get(to_stream, 0), recorded_end)
        return end

    def synchronize(self, tid: int, now: int, stream: int = 7) -> int:
        end = max(now + self.host(SYNC_OWN), self.last_on_stream.get(stream, 0) + SYNC_RETURN)
        self.call(tid, "cudaStreamSynchronize", now, end)
        return end


def generate(program: Program, gpu_scale: float = 1.0, host_scale: float = 1.0) -> dict[str, Any]:
    """The trace document (as a dict) of `program` on the idealized machine."""
    machine = _Machine(gpu_scale, host_scale, program.queue_depth)
    now = 1_000_000
    for step in range(program.iterations):
        step_start = now
        now += machine.host(10_000)
        for gap, kernel_ns in program.forward:
            now = machine.launch(MAIN, now + machine.host(gap), kernel_ns, name="forward_kernel")
        if program.side_stream_kernel_ns:
            now = machine.record_and_wait(MAIN, now + machine.host(1_000), 7, 20)
            now = machine.launch(MAIN, now + machine.host(1_000), program.side_stream_kernel_ns, stream=20, name="side_kernel")
            now = machine.record_and_wait(MAIN, now + machine.host(1_000), 20, 7)
        # backward(): the autograd thread takes over; the main thread blocks until it is done.
        worker = now + machine.host(20_000)
        for index, (gap, kernel_ns) in enumerate(program.backward):
            worker += machine.host(gap)
            op_start = worker
            worker = machine.launch(AUTOGRAD, worker + machine.host(2_000), kernel_ns, name="backward_kernel")
            worker += machine.host(1_000)
            machine.events.append({"ph": "X", "cat": "cpu_op", "name": f"autograd::engine::evaluate_function: Backward{index}",
                                   "pid": 1, "tid": AUTOGRAD, "ts": op_start / 1000, "dur": (worker - op_start) / 1000,
                                   "args": {"External id": 10 * step + index}})
        now = worker + machine.host(15_000)
        for gap, kernel_ns in program.optimizer:
            now = machine.launch(MAIN, now + machine.host(gap), kernel_ns, name="optimizer_kernel")
        now = machine.synchronize(MAIN, now + machine.host(5_000))  # loss.item()
        now += machine.host(30_000)
        machine.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": MAIN,
                               "ts": step_start / 1000, "dur": (now - step_start) / 1000, "args": {}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Idealized GPU"}], "traceEvents": machine.events}


def step_times(document: dict[str, Any]) -> list[int]:
    """Recorded ProfilerStep durations, ns."""
    return [round(e["dur"] * 1000) for e in document["traceEvents"] if e["name"].startswith("ProfilerStep#")]
