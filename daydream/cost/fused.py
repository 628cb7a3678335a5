"""The measured tier for torch.compile's fused loops: a run of recorded ops between two extern ops,
compiled here with inductor and timed.

How fast inductor's loops are, against the eager ops they replace, depends on the pattern, on the
CPU and on what the training graph keeps for backward: in this project's real runs
(docs/validation-compile-cpu.md) a batch norm, ReLU and max-pooling run took 0.2 of its eager time
compiled, a dcgan's leaky ReLU thirty times it (its forward also stores a bool mask for backward,
and that loop is slow on this CPU). An eager trace does not show it; compiling the run here does.

A run is rebuilt from the trace as a program of *steps*, each a recorded op (the outermost ATen op
of a unit: `aten::batch_norm` itself, or the `aten::threshold_backward` inside a `ReluBackward0`
node) with its recorded arguments. Data flows along the run: a step's first tensor argument is the
previous step's first output where their shapes and dtypes agree (found by running the steps once),
and every other tensor is an input from outside the run, index tensors made as the op would meet
them. The program returns what leaves the run: every output no later step reads. A forward run is
compiled with gradients on, as AOTAutograd's forward graph is, and with the extern op it feeds
(`consumer`), since what the forward keeps for backward depends on it; a backward run without
either. Where the compiled call holds convolutions, inductor lays its images out channels-last, and
so do the programs. What is timed is what the real compiled step's fused loops are timed by
(scripts/compile_costs.py): the profiler's compiled-graph call, less the extern ops it calls;
cold (each call profiled alone) and warm (one call among many), for a call that finds the host's
caches cold or follows a call of the same module closely.

    steps = fused_steps(run, view)     # None where a unit cannot be re-run
    fused_times(measurer, steps, channels_last=True, training=True, consumer=conv)  # or None
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daydream._quiet import quiet_stderr
from daydream.cost.compiled import EXTERN_OPS, CompilerView, Unit
from daydream.cost.measure import (
    REPETITIONS,
    TORCH_TYPES,
    WARMUP,
    Measurer,
    invoke,
    keyword_only,
    lacks_argument,
    make_tensor,
    overload_of,
    unrecorded,
)
from daydream.cost.shapes import FLOATING, elements

#: The profiler's name for a call of an inductor-compiled graph.
GRAPH = "## Call CompiledFxGraph"
#: The cache keys' prefix (a warm time's key adds `|warm`).
KEY = "fused-loops"
#: Calls of a compiled run timed warm, in one profiler session (`_warm_ns`).
SESSION_CALLS = 20
#: Steps a fused run may hold before it is left to the ratio (a run of hundreds of recorded ops
#: is one an eager trace of a decomposed layer, not one fused loop).
MOST_STEPS = 64

Step = tuple[str, list[Any]]


@dataclass(slots=True)
class _Plan:
    """What a program of steps reads: per step and argument, where each tensor comes from."""

    steps: list[Step]
    # per step: which of its tensors is the previous step's first output (-1: none), and the
    # shape it reads it at (None: as it is)
    chained: list[tuple[int, tuple[int, ...] | None]]
    made: list[Any]  # the tensors from outside the run, in the order the steps read them
    trainable: list[bool]  # per tensor of `made`: whether a training step's requires grad


def fused_steps(run: list[Unit], view: CompilerView) -> list[Step] | None:
    """The steps of fused `run`: per unit, its outermost ATen ops with their recorded arguments;
    None where any has no recorded arguments, or the run is longer than MOST_STEPS."""
    steps: list[Step] = []
    for unit in run:
        mine = _unit_steps(unit, view)
        if mine is None:
            return None
        steps += mine
    return _bounded(steps)


def _unit_steps(unit: Unit, view: CompilerView) -> list[Step] | None:
    """A unit's outermost ATen ops with their recorded arguments; None where one has none."""
    steps: list[Step] = []
    for row in unit.calls:
        arguments = view.shapes.arguments(row, lists=True)
        if arguments is None:
            return None
        steps.append((view.name(row), arguments))
    return steps


def _bounded(steps: list[Step] | None) -> list[Step] | None:
    return steps if steps is not None and 0 < len(steps) <= MOST_STEPS else None


def pieces(run: list[Unit], view: CompilerView) -> list[tuple[list[Unit], list[Step] | None]]:
    """`run` cut around its units that cannot be called again from their recorded arguments
    (`_lacks`: an index by a list of tensors, which the profiler does not record; an op sized by
    its values, such as a packed sequence's padding), in order: (piece, its steps as
    `fused_steps` gives them; None for such a unit, and as there). The pieces between are compiled
    and timed on their own; such a unit keeps a share of its recorded time (inductor fuses a
    gather). Needs torch (the ops' schemas); the whole run as one piece where it is missing."""
    try:
        import torch
    except ImportError:
        return [(run, fused_steps(run, view))]
    # (units, their steps: None where one has no recorded arguments, whether it can be re-run)
    cut: list[tuple[list[Unit], list[Step] | None, bool]] = []
    for unit in run:
        mine = _unit_steps(unit, view)
        runnable = mine is None or not any(_lacks(torch, name, arguments)
                                           for name, arguments in mine)
        if runnable and cut and cut[-1][2]:
            units, steps, _ = cut[-1]
            cut[-1] = (units + [unit], None if steps is None or mine is None else steps + mine,
                       True)
        else:
            cut.append(([unit], mine, runnable))
    return [(units, _bounded(steps) if runnable else None) for units, steps, runnable in cut]


def _lacks(torch: Any, name: str, arguments: list[Any]) -> bool:
    """Whether the op `name` cannot be called again from its recorded `arguments`: it reads sizes
    from its values (`SIZED_BY_VALUES`), or `lacks_argument`, remembered by the op and its
    arguments' kinds, all the answer depends on (a run holds the same ops again and again)."""
    if name in SIZED_BY_VALUES:
        return True
    if not name.startswith("aten::"):
        return False
    key = (name, tuple(str(a[0]) for a in arguments))
    if key not in _LACKING:
        packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
        _LACKING[key] = packet is not None and lacks_argument(packet, arguments)
    return _LACKING[key]


#: `_lacks`'s answers: (op name, its arguments' kinds) -> whether it lacks one.
_LACKING: dict[tuple[str, tuple[str, ...]], bool] = {}


#: Ops not run here: their integer inputs give the sizes or offsets of their other inputs
#: (a packed sequence's batch sizes, a bag's offsets, repeat counts), which made-up values get
#: wrong and ATen does not check: `_pad_packed_sequence` on made-up batch sizes wrote past its
#: output and took the process down (an nn.GRU over packed sequences). `pieces` cuts a run around
#: them, as around an op it cannot call again; `fused_times` runs none.
SIZED_BY_VALUES = frozenset(f"aten::{op}" for op in (
    "_pack_padded_sequence", "_pack_padded_sequence_backward", "_pad_packed_sequence",
    "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only", "_embedding_bag_backward",
    "_embedding_bag_dense_backward", "_embedding_bag_sparse_backward",
    "_embedding_bag_per_sample_weights_backward", "segment_reduce", "_segment_reduce_backward",
    "repeat_interleave"))


def fused_key(steps: list[Step], channels_last: bool, training: bool = False) -> str:
    listed = [[name, [[a[0], *[list(v) if isinstance(v, tuple) else v for v in a[1:]]]
                      for a in arguments]] for name, arguments in steps]
    return (f"{KEY}|{'train|' if training else ''}{'cl|' if channels_last else ''}"
            f"{json.dumps(listed)}")


@dataclass(slots=True, frozen=True)
class FusedTimes:
    """A compiled run's fused loops (the compiled graph's call less the extern ops it calls), per
    call, ns: `cold`, each call profiled alone (the profiler's start leaves the call's code and
    data as cold as a call that follows other work: a step's one call of its model), and `warm`, a
    call among many in one session (a call that follows a call of the same module closely, as
    a2c's rollout calls its policy). a2c's tanh on [64, 128] with the multiply it feeds: 42-45 µs
    cold, 21-34 µs warm; the dcgan's 5 ms leaky ReLU the same either way."""

    cold: int
    warm: int


def fused_times(measurer: Measurer, steps: list[Step], channels_last: bool,
                training: bool = False, consumer: Step | None = None) -> FusedTimes | None:
    """The run compiled here with inductor and timed, cold and warm (cached); None where it cannot
    be compiled or run, or the compile budget is spent. `training`: a forward run, compiled and run
    with gradients on, as a training step's forward is (AOTAutograd's forward graph, which keeps
    what backward needs); else without. `consumer`: the extern op the run feeds, compiled with it
    where it reads the run's output (what the forward keeps for backward depends on it: a ReLU
    whose output a convolution keeps anyway needs no mask of its own; in the dcgan's generator,
    0.7 ms with its convolution against 5.4 ms alone)."""
    key = fused_key(steps + ([consumer] if consumer and training else []), channels_last, training)
    held = sorted({name for name, _ in steps if name in SIZED_BY_VALUES})
    if held:
        measurer.failed[key] = f"{held[0]} reads sizes from its values, which are not recorded"
        return None
    return _timed(measurer, key, lambda: _measure(measurer, steps, channels_last, training,
                                                   consumer if training else None))


def _timed(measurer: Measurer, key: str,
           measure: Callable[[], tuple[int, int]]) -> FusedTimes | None:
    """The (cold, warm) times `measure` gives, cached under `key` and `key|warm` (measured again
    where not `settled`, within the compile budget); None where it fails (and why in
    `measurer.failed`) or the budget is spent, and nothing is cached."""
    warm_key = f"{key}|warm"
    if warm_key in measurer.cache and measurer.settled(key, compiling=True):
        return FusedTimes(measurer.cached(key), measurer.cached(warm_key))
    if key not in measurer.failed and measurer.compile_spent_s >= measurer.compile_budget_s:
        measurer.failed[key] = "over the compiling budget"
    if key not in measurer.failed:
        started = time.perf_counter()
        try:
            cold, warm = measure()
            measurer.remember(key, max(1, cold))
            measurer.remember(warm_key, max(1, warm))
        except Exception as exc:  # a run inductor or ATen cannot take here falls back to the ratio
            measurer.failed[key] = type(exc).__name__
        finally:
            measurer.compile_spent_s += time.perf_counter() - started
    cold_ns, warm_ns = measurer.kept(key), measurer.kept(warm_key)
    return None if cold_ns is None or warm_ns is None else FusedTimes(cold_ns, warm_ns)


#: The cache key of `graph_floor`.
FLOOR_KEY = f"{KEY}|floor"


def graph_floor(measurer: Measurer) -> FusedTimes | None:
    """What a compiled graph's call costs with next to no loop in it (one add on a one-element
    tensor), timed as a run is, cold and warm, ns (cached); None where it cannot be compiled or the
    compile budget is spent. Each run timed alone pays it once, where the runs of a real compiled
    call share one graph and pay it once between them (about 7 µs cold and 3 µs warm here: a call
    of a small model holds eight runs or so)."""

    def measure() -> tuple[int, int]:
        import torch

        torch._dynamo.reset()
        compiled = torch.compile(lambda x: x + 1, backend="inductor", dynamic=False)
        tensor = torch.zeros(1)
        return _both(measurer, torch, lambda: compiled(tensor))

    return _timed(measurer, FLOOR_KEY, measure)


def _measure(measurer: Measurer, steps: list[Step], channels_last: bool, training: bool,
             consumer: Step | None) -> tuple[int, int]:
    """The compiled run's fused loops, their median time per call, cold and warm, ns."""
    import torch

    with torch.no_grad():
        plan = _plan(torch, steps + [consumer] if consumer else steps, consumer is not None)
        if consumer is not None and plan.chained[-1][0] < 0:
            plan = _plan(torch, steps)  # the consumer reads something else: left out
    with torch.set_grad_enabled(training):
        # a training step's activations and weights require grad, its buffers (running
        # statistics, counters) do not; each is a non-leaf, as an activation is, so that an
        # in-place op may write it; images channels-last where inductor lays them out so
        inputs = [t.detach().requires_grad_(True).clone() if training and wants else t.detach()
                  for t, wants in zip(plan.made, plan.trainable)]
        inputs = [_channels_last(torch, t) if channels_last else t for t in inputs]
    torch._dynamo.reset()  # each run its own graph: not a recompilation of the last one
    compiled = torch.compile(_program(torch, plan), backend="inductor", dynamic=False)

    def run() -> Any:
        with torch.set_grad_enabled(training):
            return compiled(*inputs)

    return _both(measurer, torch, run)


def _both(measurer: Measurer, torch: Any, run: Callable[[], Any]) -> tuple[int, int]:
    return (measurer.within(lambda: _graph_ns(torch, run)),
            measurer.within(lambda: _warm_ns(torch, run)))


def _graph_ns(torch: Any, run: Callable[[], Any]) -> int:
    """`run` (a compiled program) warmed up, then profiled `REPETITIONS` times, each call in a
    session of its own: per call, the time inside its compiled graphs less the extern ops they
    call, ns; the median. So a run is timed as the real compiled step's fused loops are
    (scripts/compile_costs.py): without the compiled wrapper's own work, which the what-if adds
    once per call, and without the extern op it feeds. Its input is what the extern op before it
    just wrote; its code and data are as the profiler's start leaves them, cold. Timed hot as
    whole calls (the wrapper included), the fused runs of the dcgan's discriminator took 5.65,
    0.23, 0.12 and 0.09 ms, where its real compiled step's loops took 4.6-5.5, 0.23, 0.07 and 0.07
    (with the caches emptied first: 5.8, 0.44, 0.31, 0.24)."""
    for _ in range(WARMUP):  # the first compiles
        run()
    calls = []
    for _ in range(REPETITIONS):
        with quiet_stderr(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            run()
        calls.append(sum(_loops_us(profile.events())))
    return int(round(statistics.median(calls) * 1000))


def _warm_ns(torch: Any, run: Callable[[], Any]) -> int:
    """`run` called `SESSION_CALLS` times in one profiler session: per call, its fused loops as
    `_graph_ns` reads them, ns; the median. The first few calls after the profiler's start are
    cold (a2c's tanh and multiply: 81, 29, 49, 40, 23, 23, 22 µs), the rest warm."""
    with quiet_stderr(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(SESSION_CALLS):
            run()
    loops = _loops_us(profile.events())
    per_call = len(loops) // SESSION_CALLS or 1
    calls = [sum(loops[i:i + per_call]) for i in range(0, len(loops), per_call)]
    return int(round(statistics.median(calls) * 1000))


def _loops_us(events: Any) -> list[float]:
    """Per compiled graph's call among the profiler's `events`: its time less the extern ops it
    calls, µs."""
    graphs = [e for e in events if e.name.startswith(GRAPH)]
    if not graphs:
        raise RuntimeError("no compiled graph ran")
    return [e.time_range.elapsed_us() - sum(c.time_range.elapsed_us() for c in e.cpu_children
                                            if c.name in EXTERN_OPS) for e in graphs]


def _plan(torch: Any, steps: list[Step], consumer: bool = False) -> _Plan:
    """Which tensors of `steps` come from the previous step, found by running them once, and the
    tensors from outside the run they were run on. `consumer`: the last step is the extern op the
    run feeds, which reads the run's output at whichever input has its shape (or its size: a
    linear layer reads an activation flattened to a matrix)."""
    chained: list[tuple[int, tuple[int, ...] | None]] = []
    made: list[Any] = []
    trainable: list[bool] = []
    previous: Any = None
    for index, (name, arguments) in enumerate(steps):
        tensors = _specs(arguments)
        link = _link(previous, tensors, any_input=consumer and index == len(steps) - 1)
        chained.append(link)
        values = [previous.reshape(t[0]) if i == link[0] else make_tensor(torch, *t)
                  for i, t in enumerate(tensors)]
        _realistic_indices(torch, name, arguments, values)
        made.extend(v for i, v in enumerate(values) if i != link[0])
        trainable.extend(w for i, w in enumerate(_trainable(torch, name, arguments))
                         if i != link[0])
        previous = _first_tensor(_call(torch, name, arguments, values))
    return _Plan(steps, chained, made, trainable)


def _specs(arguments: list[Any]) -> list[tuple[tuple[int, ...], str, tuple[int, ...] | None]]:
    """(shape, type, order) of each tensor a step reads, in order: a list's elements one by one."""
    found: list[tuple[tuple[int, ...], str, tuple[int, ...] | None]] = []
    for argument in arguments:
        if argument[0] == "tensor":
            found.append((argument[1], argument[2], argument[3] if len(argument) > 3 else None))
        elif argument[0] == "tensors":
            found.extend((shape, argument[2], None) for shape in argument[1])
    return found


def _link(previous: Any, tensors: list[Any],
          any_input: bool) -> tuple[int, tuple[int, ...] | None]:
    """(which of `tensors` is the previous step's output, -1 for none; the shape it is read at
    where that differs). A step reads it first; the consumer wherever shape and type agree, or
    where only the size does, reshaped."""
    if previous is None or not tensors:
        return -1, None
    shape, kind = tuple(previous.shape), _type_of(previous)
    candidates = range(len(tensors)) if any_input else range(1)
    for index in candidates:
        if tuple(tensors[index][0]) == shape and tensors[index][1] == kind:
            return index, None
    for index in candidates if any_input else ():
        if elements(tensors[index][0]) == elements(shape) and tensors[index][1] == kind:
            return index, tuple(tensors[index][0])
    return -1, None


def _trainable(torch: Any, name: str, arguments: list[Any]) -> list[bool]:
    """Per tensor argument of the step: whether a training step's tensor there requires grad.
    Floating ones do, except those the op writes (its schema's `(a!)`) and running statistics."""
    overload, _, _ = _resolved(torch, name, arguments)
    schema = overload._schema.arguments
    found = []
    for index, argument in enumerate(arguments):
        if argument[0] not in ("tensor", "tensors"):
            continue
        formal = schema[index] if index < len(schema) else None
        written = formal is not None and (formal.name.startswith("running_") or (
            formal.alias_info is not None and formal.alias_info.is_write))
        wants = argument[2] in FLOATING and not written
        found.extend([wants] * (len(argument[1]) if argument[0] == "tensors" else 1))
    return found


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
        previous: Any = None  # the previous step's first output
        at = -1  # its place in `left`
        for (overload, layout, keywords), (link, shape) in zip(calls, plan.chained):
            if link >= 0:
                left[at] = None  # read by this step: it stays inside the fused loop
            values, tensor = [], 0
            for kind, value in layout:
                if kind in ("tensor", "tensors"):
                    taken = []
                    for _ in range(value if kind == "tensors" else 1):
                        taken.append((previous if shape is None else previous.reshape(shape))
                                     if tensor == link else next(given))
                        tensor += 1
                    value = taken if kind == "tensors" else taken[0]
                values.append(value)
            result = invoke(overload, values, keywords)
            outputs = [r for r in (result if isinstance(result, (tuple, list)) else (result,))
                       if isinstance(r, torch.Tensor)]
            previous, at = (outputs[0], len(left)) if outputs else (None, -1)
            left.extend(outputs)
        return tuple(value for value in left if value is not None)

    return program


def _resolved(torch: Any, name: str,
              arguments: list[Any]) -> tuple[Any, list[tuple[str, Any]], dict[int, str]]:
    """(the overload that takes `arguments` as recorded, per argument ("tensor", None),
    ("tensors", how many) or ("value", its value), position -> name of those passed by name)."""
    overload = overload_of(getattr(torch.ops.aten, name.split("::", 1)[1]), arguments)
    defaults = unrecorded(overload)
    layout = [("tensor", None) if a[0] == "tensor" else ("tensors", len(a[1])) if a[0] == "tensors"
              else ("value", defaults.get(i) if a[0] == "none" else a[1])
              for i, a in enumerate(arguments)]
    return overload, layout, keyword_only(overload)


def _call(torch: Any, name: str, arguments: list[Any], tensors: list[Any]) -> Any:
    overload, layout, keywords = _resolved(torch, name, arguments)
    given = iter(tensors)
    values = [next(given) if kind == "tensor" else [next(given) for _ in range(value)]
              if kind == "tensors" else value for kind, value in layout]
    return invoke(overload, values, keywords)


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
