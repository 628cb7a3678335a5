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
  until that thread is done (in the 2021 format the main thread records nothing
  meanwhile: its wait is a bare gap);
* a collective (NCCL) runs on its own stream once its inputs are ready and the
  other ranks have arrived; they arrive PEER_LAG[i] x the time since the ranks
  last met after this rank did (iteration i), and every rank runs the same
  program on the same machine, so that lag scales with the work;
* cudaEventSynchronize returns at max(call start + SYNC_OWN, end of the recorded
  work + SYNC_RETURN); the record call names no stream (as in CUDA 13 traces).

`vendor="hip"` writes HIP names (hipLaunchKernel, ...) with numbers as strings
("stream": "0x7"), as ROCm builds of the profiler do; `legacy=True` writes the 2021
format (Operator/Runtime/Kernel categories, "stream 7" GPU tids).

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
    collective_ns: int = 0  # >0: one all-reduce per iteration after backward (its transfer time, ns)
    peer_lag: tuple[float, ...] = (0.0, 0.3, 0.1, 0.5)  # per iteration: the other ranks' lag / time since the ranks last met
    event_sync: bool = False  # a short side-stream kernel recorded by an event and synchronized on later
    vendor: str = "cuda"  # or "hip"
    legacy: bool = False  # the 2021 format


HIP_NAMES = {"cudaLaunchKernel": "hipLaunchKernel", "cudaStreamSynchronize": "hipStreamSynchronize",
             "cudaEventRecord": "hipEventRecord", "cudaEventRecordWithFlags": "hipEventRecord",
             "cudaStreamWaitEvent": "hipStreamWaitEvent", "cudaEventSynchronize": "hipEventSynchronize"}
LEGACY_CATEGORIES = {"cuda_runtime": "Runtime", "kernel": "Kernel", "cpu_op": "Operator", "user_annotation": "Operator"}


@dataclass
class _Machine:
    gpu_scale: float
    host_scale: float
    queue_depth: int
    vendor: str = "cuda"
    events: list[dict[str, Any]] = field(default_factory=list)
    stream_free: dict[int, int] = field(default_factory=dict)
    last_on_stream: dict[int, int] = field(default_factory=dict)  # stream -> end of its last launched work
    launched_ends: list[int] = field(default_factory=list)
    correlation: int = 1000
    pending_wait: dict[int, int] = field(default_factory=dict)  # stream -> end of recorded work it must wait for
    recorded: int = 0

    def host(self, ns: int) -> int:
        return int(round(ns * self.host_scale))

    def call(self, tid: int, name: str, start: int, end: int, stream: int | None = None) -> int:
        self.correlation += 1
        args: dict[str, Any] = {"correlation": self.correlation, "External id": self.correlation}
        if self.vendor == "hip":
            name = HIP_NAMES.get(name, name)
            if stream is not None:
                args["stream"] = hex(stream)  # ROCm writes numbers as strings
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": start / 1000,
                            "dur": (end - start) / 1000, "args": args})
        return self.correlation

    def launch(self, tid: int, now: int, kernel_ns: int, stream: int = 7, name: str = "kernel") -> int:
        """Launch at host time `now`; returns the host time after the call."""
        release = now
        back = self.queue_depth + 1
        if len(self.launched_ends) >= back:
            release = max(now, self.launched_ends[-back])
        end_call = release + self.host(LAUNCH_OWN)
        correlation = self.call(tid, "cudaLaunchKernel", now, end_call, stream)
        start = max(release + LAUNCH_LATENCY, self.stream_free.get(stream, 0) + KERNEL_GAP,
                    self.pending_wait.pop(stream, 0) + KERNEL_GAP)
        duration = int(round(kernel_ns * self.gpu_scale)) + self.peer_wait(name, start)
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": start / 1000,
                            "dur": duration / 1000, "args": {"correlation": correlation, "External id": correlation,
                                                             "device": 0, "stream": stream}})
        self.stream_free[stream] = start + duration
        self.last_on_stream[stream] = start + duration
        self.launched_ends.append(start + duration)
        return end_call

    #: The collective in flight: (time the ranks last met, this iteration's lag factor); set by `collective`.
    meeting: tuple[int, float] = (0, 0.0)

    def peer_wait(self, name: str, start: int) -> int:
        """How long a collective starting at `start` spins until the other ranks arrive."""
        if not name.startswith("ncclKernel"):
            return 0
        last_met, lag = self.meeting
        return int(round(lag * (start - last_met)))

    def collective(self, tid: int, now: int, transfer_ns: int, lag: float) -> int:
        """An all-reduce on stream 30 between stream 7's work and the optimizer (events both ways)."""
        now = self.record_and_wait(tid, now, 7, 30)
        self.meeting = (self.meeting[0], lag)
        now = self.launch(tid, now + self.host(1_000), transfer_ns, stream=30, name="ncclKernel_AllReduce_RING_LL_Sum_float")
        self.meeting = (self.last_on_stream[30], 0.0)
        return self.record_and_wait(tid, now + self.host(1_000), 30, 7)

    def record(self, tid: int, now: int, stream: int) -> tuple[int, int]:
        """cudaEventRecordWithFlags (no stream named, as CUDA 13 traces write it): (host time after, recorded end)."""
        end = now + self.host(2_000)
        self.call(tid, "cudaEventRecordWithFlags", now, end)
        return end, self.last_on_stream.get(stream, 0)

    def event_synchronize(self, tid: int, now: int, recorded_end: int) -> int:
        end = max(now + self.host(SYNC_OWN), recorded_end + SYNC_RETURN)
        self.call(tid, "cudaEventSynchronize", now, end)
        return end

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
    machine = _Machine(gpu_scale, host_scale, program.queue_depth, program.vendor)
    now = 1_000_000
    machine.meeting = (now, 0.0)
    for step in range(program.iterations):
        step_start = now
        now += machine.host(10_000)
        recorded_end = -1
        for index, (gap, kernel_ns) in enumerate(program.forward):
            if program.event_sync and index == 2:
                now = machine.launch(MAIN, now + machine.host(gap), 3_000, stream=20, name="side_kernel")
                now, recorded_end = machine.record(MAIN, now + machine.host(1_000), 20)
            now = machine.launch(MAIN, now + machine.host(gap), kernel_ns, name="forward_kernel")
        if recorded_end >= 0:
            # Long done by now, while stream 7 (the thread's current stream) is still busy.
            now = machine.event_synchronize(MAIN, now + machine.host(2_000), recorded_end)
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
            # The 2021 format names the autograd thread's ops after the backward functions themselves.
            op_name = f"Addmm{index}Backward" if program.legacy else f"autograd::engine::evaluate_function: Backward{index}"
            machine.events.append({"ph": "X", "cat": "cpu_op", "name": op_name,
                                   "pid": 1, "tid": AUTOGRAD, "ts": op_start / 1000, "dur": (worker - op_start) / 1000,
                                   "args": {"External id": 10 * step + index}})
        now = worker + machine.host(15_000)
        if program.collective_ns:
            now = machine.collective(MAIN, now, program.collective_ns, program.peer_lag[step % len(program.peer_lag)])
        for gap, kernel_ns in program.optimizer:
            now = machine.launch(MAIN, now + machine.host(gap), kernel_ns, name="optimizer_kernel")
        now = machine.synchronize(MAIN, now + machine.host(5_000))  # loss.item()
        now += machine.host(30_000)
        machine.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": MAIN,
                               "ts": step_start / 1000, "dur": (now - step_start) / 1000, "args": {}})
    events = _legacy(machine.events) if program.legacy else machine.events
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Idealized GPU"}], "traceEvents": events}


def _legacy(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The 2021 format: Operator/Runtime/Kernel categories, lowercase "external id", "stream N" GPU tids."""
    written = []
    for event in events:
        event = dict(event, cat=LEGACY_CATEGORIES.get(event["cat"], event["cat"]))
        args = dict(event.get("args", {}))
        if "External id" in args:
            args["external id"] = args.pop("External id")
        if event["cat"] == "Kernel":
            event["tid"] = f"stream {event['tid']}"
            args.pop("stream", None)
        event["args"] = args
        written.append(event)
    return written


def step_times(document: dict[str, Any]) -> list[int]:
    """Recorded ProfilerStep durations, ns."""
    return [round(e["dur"] * 1000) for e in document["traceEvents"] if e["name"].startswith("ProfilerStep#")]
