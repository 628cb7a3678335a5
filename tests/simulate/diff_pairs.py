"""Pairs of traces whose differences are known by construction, for `daydream diff` tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.builders import annotation, op, write_trace
from tests.generator import Program, generate

#: The generator's kernels, renamed to real kernel names of the classes they stand for.
KERNEL_NAMES = {
    "forward_kernel": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                      "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
    "backward_kernel": "volta_sgemm_128x64_nn",
    "optimizer_kernel": "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float>(int)",
}
FORWARD_LAUNCHES, BACKWARD_LAUNCHES, OPTIMIZER_LAUNCHES = 30, 20, 5


def gpu_program(elementwise_ns: int, gemm_ns: int, iterations: int = 3) -> Program:
    """Elementwise kernels hidden behind the host, GEMMs on the critical path.

    Forward: one small elementwise kernel per 65 µs of host work (60 µs of CPU, a 5 µs launch):
    the GPU idles between them, so they may double and stay hidden. Backward: GEMMs of
    100 µs and more launched 10 µs apart; the GPU bounds the phase and the iteration's
    final synchronize waits for the last one, so every ns they gain lands on the iteration.
    """
    return Program(iterations=iterations, forward=[(60_000, elementwise_ns)] * FORWARD_LAUNCHES,
                   backward=[(2_000, gemm_ns)] * BACKWARD_LAUNCHES, optimizer=[(5_000, 5_000)] * OPTIMIZER_LAUNCHES)


def write_gpu_trace(path: Path, program: Program, rank: int | None = None) -> dict[str, Any]:
    """Generate `program`'s trace with real kernel names, write it to `path`; returns the document."""
    document = generate(program)
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = KERNEL_NAMES[event["name"]]
    if rank is not None:
        document["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    path.write_text(json.dumps(document))
    return document


#: CPU-only pair, µs: each iteration runs aten::linear (20 µs of its own around aten::addmm)
#: in layer Net.fc, then aten::relu (30 µs) in layer Net.act, with fixed host gaps between.
LINEAR_OWN_US, RELU_US, START_GAP_US, BETWEEN_US, END_GAP_US = 20, 30, 10, 5, 50


def cpu_iteration_us(addmm_us: int) -> int:
    """The length of one iteration of `write_cpu_trace`, µs."""
    return START_GAP_US + LINEAR_OWN_US + addmm_us + BETWEEN_US + RELU_US + END_GAP_US


def write_cpu_trace(folder: Path, name: str, addmm_us: int, iterations: int, layers: tuple[str, str] = ("Net.fc", "Net.act")) -> Path:
    """A CPU-only trace (no API calls, no GPU) of `iterations` ProfilerStep iterations."""
    events: list[dict[str, Any]] = []
    ext = 0
    start = 1_000
    for step in range(iterations):
        length = cpu_iteration_us(addmm_us)
        events.append(annotation(f"ProfilerStep#{step}", start, length))
        linear_start = start + START_GAP_US
        linear_us = LINEAR_OWN_US + addmm_us
        events.append(annotation(f"daydream.layer::{layers[0]}", linear_start, linear_us))
        events.append(op("aten::linear", linear_start, linear_us, ext := ext + 1))
        events.append(op("aten::addmm", linear_start + LINEAR_OWN_US // 2, addmm_us, ext := ext + 1))
        relu_start = linear_start + linear_us + BETWEEN_US
        events.append(annotation(f"daydream.layer::{layers[1]}", relu_start, RELU_US))
        events.append(op("aten::relu", relu_start, RELU_US, ext := ext + 1))
        start += length
    return write_trace(folder, events, name)
