"""The measured tier for `fused-optimizer`: the trace's own `torch.optim` class stepped here, at the
shapes and dtypes of the parameters its backward accumulated gradients for, once as the trace ran
it (a loop over the parameters) and once as the what-if asks (`foreach=True` or `fused=True`).

What a multi-tensor step saves, or costs, on a CPU is not in an eager trace: CPU builds have no
multi-tensor kernels, so `foreach=True` runs the same per-tensor kernels from C++, and some
optimizers' multi-tensor form does more work than their loop. In this project's real runs
(docs/validation-whatif-cpu.md) Adagrad's took longer than its loop, as its step size multiplies
every gradient in a pass of its own (`_foreach_mul`, 3.4 ms of a 21 ms step), and AdamW's took about
as long as its loop; a fixed launch cost removed per kernel, as on a GPU, predicted both faster.

The two forms are stepped in turns on parameters of the same shapes (each its own copy, random
gradients, the optimizer's default settings), and the ratio of their median step times is cached
by (class, form, parameter shapes). Past `MOST_ELEMENTS` parameters, the first ones up to it stand
for all (the ratio of two forms of the same per-parameter work, not a time).

    found = stepped_optimizer(trace, iteration_of_row)  # SteppedOptimizer("Adagrad", (...)) or None
    ratio = step_ratio(measurer, found, "foreach")       # e.g. 1.27; None where it cannot run here

On a GPU the modelled tier times a fused step (`fused=True`) by the bytes it moves: one pass that
reads each gradient and reads and writes each parameter and its state tensors (`fused_step_bytes`),
where the loop over the parameters ran an elementwise kernel per update of each (AdamW: seven, 21
accesses an element in the BERT-size transformer of docs/gpu-validation.md, against 7 fused). The
state tensors per parameter are read from the recording where daydream trace listed the optimizer's
state (`memory_before`), else from the class (`FUSED_STATE`).

    fused_step_bytes(found)                              # bytes per step, None where not known
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.cost.measure import Measurer
from daydream.cost.shapes import ITEM_BYTES, OpShapes, elements
from daydream.trace import EventKind, Trace
from daydream.trace.model import memory_before

#: PyTorch's annotation of an optimizer's step: `Optimizer.step#Adagrad.step`.
STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
#: The autograd node that accumulates a parameter's gradient (its input: the gradient).
ACCUMULATE = "torch::autograd::AccumulateGrad"
#: The forms a what-if may ask for: `torch.optim` keyword set to True.
IMPLEMENTATIONS = ("foreach", "fused")
#: Steps of each form timed in turns. On this project's 2-core machine the same Adagrad's ratio
#: measured 1.32 to 1.89 at seven turns, 1.31 to 1.54 at 21 (five processes); its real traced steps
#: 1.13 to 1.45 (five rounds).
REPETITIONS = 21
#: Parameter types the measured tier steps (torch.profiler's names).
FLOATING_TYPES = ("float", "double", "c10::BFloat16", "c10::Half")
#: Parameters (elements, all together) stepped at most: the first ones up to it stand for all.
MOST_ELEMENTS = 1 << 25
#: The torch.optim classes whose step takes `fused=True` on a GPU (torch 2.x's CUDA kernels).
FUSED_ON_GPU = ("Adam", "AdamW", "SGD")
#: State tensors per parameter of the classes whose count their settings do not change, where the
#: recording does not list the optimizer's state (SGD has a momentum buffer or none: its settings).
FUSED_STATE = {"Adam": 2, "AdamW": 2, "Adagrad": 1}


@dataclass(frozen=True, slots=True)
class SteppedOptimizer:
    """The `torch.optim` class a trace's steps name, and the (shape, type) of each parameter one
    iteration's backward accumulated a gradient for, in the order it did."""

    name: str
    parameters: tuple[tuple[tuple[int, ...], str], ...]
    #: state tensors per parameter (Adam: 2), as recorded or by the class; None where neither says
    state_tensors: int | None = None


def stepped_optimizer(trace: Trace, iteration_of_row: np.ndarray,
                      phase_of_row: np.ndarray | None = None) -> SteppedOptimizer | None:
    """The optimizer of `trace`'s steps and its parameters (`iteration_of_row`: per trace row, its
    iteration, -1 for none); None where no step names a class or no gradient's shape is recorded.
    With `phase_of_row` (per row, its index in mapping.PHASES), gradients accumulated over several
    backward passes in an iteration (micro-batches) count once: those of its largest pass."""
    steps = {i: found.group(1) for i, found in enumerate(STEP.match(s) for s in trace.strings)
             if found}
    rows = trace.indices(EventKind.ANNOTATION, EventKind.CPU_OP)
    named = Counter(steps[n] for n in trace.name[rows].tolist() if n in steps)
    if not named:
        return None
    accumulated = rows[trace.name[rows] == trace.string_index(ACCUMULATE)]
    accumulated = accumulated[iteration_of_row[accumulated] >= 0]
    if accumulated.size == 0:
        return None
    first = accumulated[iteration_of_row[accumulated] == iteration_of_row[accumulated].min()]
    first = first[np.argsort(trace.ts_ns[first], kind="stable")]
    if phase_of_row is not None:
        first = _largest_pass(trace, first, iteration_of_row, phase_of_row)
    shapes = OpShapes(trace)
    parameters = []
    for row in first.tolist():
        tensors = shapes.tensors(row) or []
        if tensors and tensors[0] is not None and tensors[0][1] in FLOATING_TYPES:
            parameters.append((tuple(tensors[0][0]), tensors[0][1]))
    if not parameters:
        return None
    name = named.most_common(1)[0][0]
    state = recorded_state_tensors(trace)
    return SteppedOptimizer(name, tuple(parameters),
                            state if state is not None else FUSED_STATE.get(name))


def recorded_state_tensors(trace: Trace) -> int | None:
    """The optimizer's state tensors per parameter, as daydream trace found them when its warm-up
    ended: the optimizer state's bytes over the weights', on the device that held most weights
    (a step counter per parameter adds bytes, not a tensor); None where not recorded, or where
    there was none."""
    held: list[tuple[int, int]] = []
    for entry in memory_before(trace).values():
        weights, state = entry.get("weights"), entry.get("optimizer state")
        if isinstance(weights, int) and isinstance(state, int) and weights > 0 and state > 0:
            held.append((weights, state))
    if not held:  # none recorded, or none yet (no step in the warm-up; SGD without momentum)
        return None
    weights, state = max(held)
    return int(round(state / weights))


def fused_step_bytes(optimizer: SteppedOptimizer) -> int | None:
    """The bytes one fused step of `optimizer` moves: per parameter, its gradient read, itself and
    each state tensor read and written, at the parameter's type; None where the state tensors per
    parameter are not known."""
    if optimizer.state_tensors is None:
        return None
    accesses = 3 + 2 * optimizer.state_tensors
    return sum(elements(shape) * ITEM_BYTES.get(kind, 4) * accesses
               for shape, kind in optimizer.parameters)


def _largest_pass(trace: Trace, rows: np.ndarray, iteration_of_row: np.ndarray,
                  phase_of_row: np.ndarray) -> np.ndarray:
    """Of one iteration's gradient accumulations `rows` (in time order), those of its backward pass
    that accumulated the most: passes are told apart by the forward ops between them."""
    from daydream.mapping import PHASES

    ops = trace.indices(EventKind.CPU_OP)
    forward = ops[(phase_of_row[ops] == PHASES.index("forward"))
                  & (iteration_of_row[ops] == iteration_of_row[rows[0]])]
    passes = np.searchsorted(np.sort(trace.ts_ns[forward]), trace.ts_ns[rows])
    values, counts = np.unique(passes, return_counts=True)
    return rows[passes == values[int(np.argmax(counts))]]


def step_ratio(measurer: Measurer, optimizer: SteppedOptimizer, implementation: str
               ) -> float | None:
    """The time of `optimizer`'s step in form `implementation` ("foreach" or "fused") over its
    time as a loop over the parameters, both stepped here in turns; None where the class is not
    one of `torch.optim`'s, does not take that form, or cannot step here (or the budget is spent).
    Why not is in `measurer.failed`."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation {implementation!r}: one of {IMPLEMENTATIONS}")
    parameters = _within_size(list(optimizer.parameters))
    return measurer.runs_ratio(_key(optimizer.name, implementation, parameters),
                               _stepper(optimizer.name, {implementation: True}),
                               _stepper(optimizer.name, {"foreach": False}), parameters,
                               repetitions=REPETITIONS)


def step_key(optimizer: SteppedOptimizer, implementation: str) -> str:
    """The measured tier's key for `step_ratio`'s measurement (and for why it failed)."""
    return _key(optimizer.name, implementation, _within_size(list(optimizer.parameters)))


def _key(name: str, implementation: str, parameters: list[tuple[tuple[int, ...], str]]) -> str:
    """The cache key of class `name` stepped in form `implementation` at `parameters`."""
    listed = json.dumps([[list(shape), kind] for shape, kind in parameters])
    digest = hashlib.sha1(listed.encode()).hexdigest()[:16]
    return f"optimizer-step|{name}|{implementation}|{len(parameters)}|{digest}"


def _within_size(parameters: list[tuple[tuple[int, ...], str]]
                 ) -> list[tuple[tuple[int, ...], str]]:
    """The first of `parameters` up to `MOST_ELEMENTS` elements in all (at least one)."""
    kept: list[tuple[tuple[int, ...], str]] = []
    total = 0
    for parameter in parameters:
        total += elements(parameter[0])
        if kept and total > MOST_ELEMENTS:
            break
        kept.append(parameter)
    return kept


def _stepper(name: str, options: dict[str, Any]
             ) -> Callable[[], Callable[[Any, list[Any]], Any] | None]:
    """How to make a runner that steps `torch.optim.<name>(parameters, **options)` once per call
    (the optimizer made, and each parameter given a random gradient, on its first call)."""
    def make() -> Callable[[Any, list[Any]], Any] | None:
        import torch

        kind: Any = getattr(torch.optim, name, None)
        if not (isinstance(kind, type) and issubclass(kind, torch.optim.Optimizer)):
            return None
        made: dict[int, tuple[list[Any], Any]] = {}

        def run(_torch: Any, parameters: list[Any]) -> None:
            if id(parameters) not in made or made[id(parameters)][0] is not parameters:
                for parameter in parameters:
                    parameter.grad = torch.randn_like(parameter)
                made[id(parameters)] = (parameters, kind(parameters, **options))
            made[id(parameters)][1].step()

        return run

    return make
