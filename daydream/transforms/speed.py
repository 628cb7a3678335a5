"""A faster host, no host at all, a faster GPU or faster kernels of a class; and what-ifs whose time
this version does not model (their memory it does)."""

from __future__ import annotations

from typing import Any

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.graph.model import GPU_WORK, HOST_TASKS
from daydream.mapping.classes import CLASSES
from daydream.transforms.kernels import kernel_classes
from daydream.transforms.primitives import scale, select
from daydream.transforms.registry import (
    FACTOR_RANGE,
    Apply,
    Context,
    Optimization,
    Parameter,
    register,
)


def _faster_host(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    if factor <= 0:
        raise InputError(f"--opt faster-host:factor={factor:g}: the factor must be positive")
    host = select(graph, kind=HOST_TASKS)
    scale(graph, host, factor=1 / factor, gaps=True)
    return [f"faster-host: {host.size} host tasks and the CPU time between them ÷{factor:g}"]


def _no_host_overhead(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if select(graph, kind=GPU_WORK).size == 0:
        raise InputError("no-host-overhead: the trace holds no GPU work, so all of its time is "
                         "host work and an infinitely fast host would take no time at all — for a "
                         "faster CPU, try faster-host:factor=2")
    host = select(graph, kind=HOST_TASKS)
    scale(graph, host, factor=0.0, gaps=True)
    return [f"no-host-overhead: {host.size} host tasks and the CPU time between them set to zero"]


register(Optimization(
    "faster-host", "a faster host (CPU, Python, framework)",
    "every host call and CPU op, and the CPU time between them, ÷factor; GPU work and waits "
    "unchanged",
    _faster_host, {"factor": Parameter(float, 2.0, "host speed-up", **FACTOR_RANGE)},
))
register(Optimization(
    "no-host-overhead", "an infinitely fast host: is the step launch-bound?",
    "every host call and CPU op, and the CPU time between them, take no time; GPU work and waits "
    "unchanged",
    _no_host_overhead,
))


def _faster_gpu(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    factor = float(params["factor"])
    if factor <= 0:
        raise InputError(f"--opt faster-gpu:factor={factor:g}: the factor must be positive")
    chosen = str(params["kernels"])
    if chosen in CLASSES:  # a kernel class of mapping/classes.py, e.g. kernels=gemm
        work = select(graph, kind=GPU_WORK)
        work = work[kernel_classes(graph, work) == CLASSES.index(chosen)]
        what = f"of class {chosen}"
    else:
        work = select(graph, kind=GPU_WORK, name=chosen or None)
        what = f"matching {chosen!r}" if chosen else "(all)"
    scale(graph, work, factor=1 / factor)
    return [f"faster-gpu: {work.size} GPU tasks {what} ÷{factor:g}"]


register(Optimization(
    "faster-gpu", "a faster (factor > 1) or slower (factor < 1) GPU, or faster matching kernels",
    "GPU kernels, copies and memsets (or only those whose name matches `kernels`) ÷factor; host "
    "unchanged",
    _faster_gpu,
    {"factor": Parameter(float, 2.0, "GPU speed-up", **FACTOR_RANGE),
     "kernels": Parameter(str, "", "a kernel class (gemm, convolution, attention, ...) or a "
                                   "regular expression over kernel names")},
))


def _memory_only(name: str) -> Apply:
    def apply(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
        return ([f"{name}: time unchanged — this version models its memory only (daydream whatif "
                 "--memory)"])

    return apply


register(Optimization(
    "optimizer", "another optimizer (SGD, SGD with momentum, Adam, AdamW, Adagrad, RMSprop)",
    "unchanged in this version: another optimizer's step time is not modelled (its memory is)",
    _memory_only("optimizer"),
    {"name": Parameter(str, "adam", "sgd, sgd-momentum, adam, adamw, adagrad or rmsprop")},
))
