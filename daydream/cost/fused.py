"""The measured tier for torch.compile's fused loops: a run of recorded ops between two extern ops,
compiled here with inductor and timed against the same ops run one by one.

How fast inductor's loops are, relative to the eager ops they replace, depends on the pattern and on
the CPU: in this project's runs (docs/validation-whatif-cpu.md) a batch norm, ReLU and max-pooling
run took 0.2 of its eager time compiled, a temporal network's batch norm, padding, dropout and ReLU
2.8 times it. An eager trace does not show it; running the run here does.

A run is rebuilt from the trace as a program of *steps*, each a recorded op (the outermost ATen op
of a unit: `aten::batch_norm` itself, or the `aten::threshold_backward` inside a `ReluBackward0`
node) with its recorded arguments. Data flows along the run: a step's first tensor argument is the
previous step's first output where their shapes and dtypes agree (found by running the steps once),
and every other tensor is an input from outside the run. The compiled program returns what leaves
the run: every output no later step reads (a value the next step reads stays inside the fused loop,
as it does in the compiled graph). Where the compiled region holds convolutions, inductor lays its
images out channels-last, so the fused loops read them that way: the compiled program's image inputs
are channels-last, the eager one's as recorded.

    steps = fused_steps(run, view)            # None where a unit cannot be re-run
    ratio = measure_fused(measurer, steps, channels_last=True)   # compiled / eager, or None
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daydream.cost.compiled import CompilerView, Unit
from daydream.cost.measure import (
    RATIO_SCALE,
    TORCH_TYPES,
    Measurer,
    keyword_only,
    make_tensor,
)

#: Steps a fused run may hold before it is left to the ratio (a run of hundreds of recorded ops
#: is one an eager trace of a decomposed layer, not one fused loop).
MOST_STEPS = 64

Step = tuple[str, list[Any]]


@dataclass(slots=True)
class _Plan:
    """What a program of steps reads: per step and argument, where each tensor comes from."""

    steps: list[Step]
    chained: list[bool]  # per step: its first tensor argument is the previous step's first output
    made: list[Any]  # the tensors from outside the run, in the order the steps read them


def fused_steps(run: list[Unit], view: CompilerView) -> list[Step] | None:
    """The steps of fused `run`: per unit, its outermost ATen ops with their recorded arguments;
    None where any has no recorded arguments, or the run is longer than MOST_STEPS."""
    steps: list[Step] = []
    for unit in run:
        for row in unit.calls:
            arguments = view.shapes.arguments(row)
            if arguments is None:
                return None
            steps.append((view.name(row), arguments))
    return steps if 0 < len(steps) <= MOST_STEPS else None


def fused_key(steps: list[Step], channels_last: bool) -> str:
    listed = [[name, [[a[0], *[list(v) if isinstance(v, tuple) else v for v in a[1:]]]
                      for a in arguments]] for name, arguments in steps]
    return f"fused|{'cl|' if channels_last else ''}{json.dumps(listed)}"


def measure_fused(measurer: Measurer, steps: list[Step], channels_last: bool) -> float | None:
    """The compiled run's time over its eager time, both run here in turns (cached as parts per
    million); None where it cannot be compiled or run, or the compile budget is spent."""
    key = fused_key(steps, channels_last)
    if key in measurer.cache:
        return measurer.cache[key] / RATIO_SCALE
    if key in measurer.failed:
        return None
    if measurer.compile_spent_s >= measurer.compile_budget_s:
        measurer.failed[key] = "over the compiling budget"
        return None
    started = time.perf_counter()
    try:
        compiled_ns, eager_ns = _measure(measurer, steps, channels_last)
    except Exception as exc:  # a run inductor or ATen cannot take here falls back to the ratio
        measurer.failed[key] = type(exc).__name__
        return None
    finally:
        measurer.compile_spent_s += time.perf_counter() - started
    measurer.remember(key, max(1, int(round(compiled_ns / eager_ns * RATIO_SCALE))))
    return measurer.cache[key] / RATIO_SCALE


def _measure(measurer: Measurer, steps: list[Step], channels_last: bool) -> tuple[int, int]:
    import torch

    with torch.no_grad():
        plan = _plan(torch, steps)
        laid_out = [_channels_last(torch, t) if channels_last else t for t in plan.made]
    eager = _program(torch, plan)
    torch._dynamo.reset()  # each run its own graph: not a recompilation of the last one
    compiled = torch.compile(_program(torch, plan), backend="inductor", dynamic=False)
    with torch.no_grad():
        compiled(*laid_out)  # compiles
    times = measurer.time_in_turns([(lambda _t, _xs: compiled(*laid_out), []),
                                    (lambda _t, _xs: eager(*plan.made), [])])
    return times[0], times[1]


def _plan(torch: Any, steps: list[Step]) -> _Plan:
    """Which tensors of `steps` come from the previous step, found by running them once, and the
    tensors from outside the run they were run on."""
    chained: list[bool] = []
    made: list[Any] = []
    previous: Any = None
    for name, arguments in steps:
        tensors = [(a[1], a[2], a[3] if len(a) > 3 else None) for a in arguments
                   if a[0] == "tensor"]
        first = tensors[0] if tensors else None
        link = (first is not None and previous is not None
                and tuple(previous.shape) == tuple(first[0]) and _type_of(previous) == first[1])
        chained.append(link)
        values = ([previous] if link else []) + [make_tensor(torch, *t)
                                                 for t in (tensors[1:] if link else tensors)]
        _realistic_indices(torch, name, arguments, values)
        made.extend(values[1:] if link else values)
        previous = _first_tensor(_call(torch, name, arguments, values))
    return _Plan(steps, chained, made)


def _realistic_indices(torch: Any, name: str, arguments: list[Any], values: list[Any]) -> None:
    """Index tensors `values` (the step's tensors in order) as the op would meet them: a max-pool's
    backward the indices its forward finds, an embedding's rows spread over the table. Random
    zeros and ones would send every gradient to two places and every lookup to two rows."""
    constants = [a[1] for a in arguments if a[0] == "value"]
    if name in ("aten::max_pool2d_with_indices_backward",
                "aten::max_pool3d_with_indices_backward") and len(values) == 3:
        pool = getattr(torch.ops.aten, name.split("::", 1)[1].removesuffix("_backward"))
        values[2] = pool(values[1], *constants[:5])[1]
    elif name == "aten::embedding" and len(values) == 2:
        values[1] = torch.randint(0, max(1, values[0].shape[0]), values[1].shape,
                                  dtype=values[1].dtype)
    elif name == "aten::embedding_dense_backward" and len(values) == 2 and constants:
        values[1] = torch.randint(0, max(1, int(constants[0])), values[1].shape,
                                  dtype=values[1].dtype)


def _program(torch: Any, plan: _Plan) -> Callable[..., Any]:
    """The steps as one function of the run's inputs, returning every output no later step reads.
    Each step's overload and argument layout are resolved here, outside the function, so that
    dynamo traces it as one graph: plain calls of ATen overloads."""
    calls = [_resolved(torch, name, arguments) for name, arguments in plan.steps]

    def program(*inputs: Any) -> tuple[Any, ...]:
        given = iter(inputs)
        left: list[Any] = []  # what leaves the run
        previous, at = None, -1  # the previous step's first output, its place in `left`
        for (overload, layout, keywords), link in zip(calls, plan.chained):
            if link:
                left[at] = None  # read by this step: it stays inside the fused loop
            first = [previous] if link else []
            values = [(first.pop() if first else next(given)) if kind == "tensor" else value
                      for kind, value in layout]
            result = overload(*[v for i, v in enumerate(values) if i not in keywords],
                              **{name: values[i] for i, name in keywords.items()})
            outputs = [r for r in (result if isinstance(result, (tuple, list)) else (result,))
                       if isinstance(r, torch.Tensor)]
            previous, at = (outputs[0], len(left)) if outputs else (None, -1)
            left.extend(outputs)
        return tuple(value for value in left if value is not None)

    return program


def _resolved(torch: Any, name: str,
              arguments: list[Any]) -> tuple[Any, list[tuple[str, Any]], dict[int, str]]:
    """(the overload that takes `arguments` as recorded, per argument ("tensor", None) or
    ("value", its value), position -> name of those passed by name)."""
    overload = _overload(getattr(torch.ops.aten, name.split("::", 1)[1]), arguments)
    layout = [("tensor", None) if a[0] == "tensor" else ("value", None if a[0] == "none" else a[1])
              for a in arguments]
    return overload, layout, keyword_only(overload)


def _call(torch: Any, name: str, arguments: list[Any], tensors: list[Any]) -> Any:
    overload, layout, keywords = _resolved(torch, name, arguments)
    given = iter(tensors)
    values = [next(given) if kind == "tensor" else value for kind, value in layout]
    return overload(*[v for i, v in enumerate(values) if i not in keywords],
                    **{name: values[i] for i, name in keywords.items()})


def _overload(op: Any, arguments: list[Any]) -> Any:
    """The overload of `op` whose schema takes `arguments` as recorded (as many, tensors where
    tensors were recorded): `aten::add_` with two tensors and a scalar is `add_.Tensor`, whose
    `alpha` is passed by name."""
    for name in op.overloads():
        overload = getattr(op, name)
        schema = overload._schema.arguments
        if len(schema) == len(arguments) and all(
                (a[0] == "tensor") == str(s.type).startswith("Tensor")
                for a, s in zip(arguments, schema) if a[0] != "none"):
            return overload
    return op


def _first_tensor(result: Any) -> Any:
    for value in (result if isinstance(result, (tuple, list)) else (result,)):
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            return value
    return None


def _type_of(tensor: Any) -> str:
    spelled = str(tensor.dtype).removeprefix("torch.")
    return next((kind for kind, name in TORCH_TYPES.items() if name == spelled), spelled)


def _channels_last(torch: Any, tensor: Any) -> Any:
    """A floating image (4 or 5 dims) laid out channels-last, as inductor lays out a graph's images
    where it holds convolutions; anything else as it is."""
    if tensor.dim() not in (4, 5) or not tensor.is_floating_point():
        return tensor
    layout = torch.channels_last if tensor.dim() == 4 else torch.channels_last_3d
    return tensor.contiguous(memory_format=layout).requires_grad_(tensor.requires_grad)
