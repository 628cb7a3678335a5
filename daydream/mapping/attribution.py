"""Layer and phase of every event: which model layer it belongs to, and whether it is
forward, backward, optimizer or other work.

What the trace has decides how (`Attribution.source` says which):

* traces `daydream trace` recorded carry `daydream.layer::<module path>` and
  `daydream.phase::<phase>` ranges;
* traces recorded with `with_stack=True` carry `nn.Module: <name>` spans;
* many carry `## forward ##` / `## backward ##` / `## optimizer ##` annotations, and
  PyTorch's own `Optimizer.step#...` / `Optimizer.zero_grad#...` annotations;
* backward work runs inside `autograd::engine::evaluate_function: XBackward0` ops whose
  autograd sequence number is that of the forward op that made the node: backward
  work is attributed to the layer of that forward op. Traces of 2021 and before have no
  engine ops: the autograd node itself (`CudnnConvolutionBackward`,
  `torch::autograd::AccumulateGrad`) is the top-level op on the autograd thread, and
  stands for the engine op;
* where no phase annotation or layer range says what is forward, the forward ops are the
  ones whose sequence number a backward node carries, with what they enclose and the work
  between two of them on their thread that no backward work interrupts.

A host event takes the innermost phase range and the innermost layer range around it;
GPU work takes those of the API call that launched it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from daydream._regex import user_regex
from daydream.errors import InputError
from daydream.mapping.classes import MAX_NAME_CHARS
from daydream.mapping.linking import Links, innermost_enclosing, link
from daydream.trace import API_KINDS, GPU_ACTIVITY_KINDS, NO_VALUE, EventKind, Trace
from daydream.trace.collect.hooks import LAYER_PREFIX, PHASE_PREFIX
from daydream.trace.kineto import MODULE_SPAN_PREFIX
from daydream.trace.model import recorded_fact

PHASES = ("forward", "backward", "optimizer", "other")
FORWARD, BACKWARD, OPTIMIZER, OTHER = range(4)
AUTOGRAD_ENGINE_PREFIX = "autograd::engine::evaluate_function"
#: An autograd node as the profiler names it: `AddmmBackward0`,
#: `CudnnConvolutionBackward` (no version suffix before 2021's renaming),
#: `torch::autograd::AccumulateGrad`, a Python Function's `MyFunctionBackward`.
_AUTOGRAD_NODE = (re.compile(r"(?:struct "
                             r")?(?:torch::autograd::)?(?:[A-Z]\w*Backward\w*|AccumulateGrad|"
                             r"GraphRoot|CopySlices)"))
_PHASE_ANNOTATIONS = {
    "## forward ##": FORWARD,
    "## backward ##": BACKWARD,
    "## optimizer ##": OPTIMIZER,
}


@dataclass(slots=True)
class Attribution:
    """Per event: `phase` (index into PHASES; -1 for events that are not work) and `layer`
    (index into `layers`; -1 for none)."""

    phase: np.ndarray
    layer: np.ndarray
    layers: list[str]
    leaf: np.ndarray  # per layer: a module with no child module
    source: str


def attribute(trace: Trace, links: Links | None = None) -> Attribution:
    """Layer and phase of every CPU op, API call and GPU activity of `trace`."""
    links = links if links is not None else link(trace)
    names = trace.strings
    annotations = trace.indices(EventKind.ANNOTATION, EventKind.CPU_OP)
    label = trace.name[annotations]
    layer_name = np.array([_layer_name(s) for s in names], dtype=object)
    phase_code = np.array([_phase_of_name(s) for s in names], dtype=np.int8)
    layer_rows = annotations[np.array([n is not None for n in layer_name], dtype=bool)[label]]
    phase_rows = annotations[phase_code[label] >= 0]
    engine_rows = _engine_rows(trace)

    work = trace.indices(EventKind.CPU_OP, *API_KINDS)
    phase = np.full(len(trace), NO_VALUE, dtype=np.int8)
    layer = np.full(len(trace), NO_VALUE, dtype=np.int32)
    layers, layer_ids = _layer_ids(trace, layer_rows, layer_name)

    enclosing_phase = innermost_enclosing(trace, np.concatenate([phase_rows, engine_rows]), work)
    phase[work] = OTHER
    has = enclosing_phase >= 0
    codes = np.where(np.isin(enclosing_phase[has], engine_rows), BACKWARD,
                     phase_code[trace.name[enclosing_phase[has]]])
    phase[work[has]] = codes
    # The engine op itself is backward work too.
    phase[engine_rows] = BACKWARD

    enclosing_layer = innermost_enclosing(trace, layer_rows, work)
    has = enclosing_layer >= 0
    layer[work[has]] = layer_ids[enclosing_layer[has]]
    _backward_layers(trace, work, engine_rows, enclosing_layer, layer, layer_ids)

    # Module work that no phase annotation claims is forward work (inference, or a training
    # trace recorded without phase annotations); backward work was claimed by its engine op.
    unclaimed = work[(phase[work] == OTHER) & (layer[work] >= 0)]
    phase[unclaimed] = FORWARD
    _phases_from_nodes(trace, work, engine_rows, phase_rows, phase_code, phase, enclosing_phase)

    gpu = trace.indices(*GPU_ACTIVITY_KINDS)
    launched = links.launch[gpu]
    ok = launched >= 0
    phase[gpu] = OTHER
    phase[gpu[ok]] = phase[launched[ok]]
    layer[gpu[ok]] = layer[launched[ok]]
    leaf = _leaves(trace, layers, layer_rows, layer_ids)
    source = _source(layer_rows, names, trace, phase_rows, engine_rows)
    return Attribution(phase=phase, layer=layer, layers=layers, leaf=leaf, source=source)


def _phases_from_nodes(trace: Trace, work: np.ndarray, engine_rows: np.ndarray,
                       phase_rows: np.ndarray, phase_code: np.ndarray, phase: np.ndarray,
                       enclosing_phase: np.ndarray) -> None:
    """Where no range says what is forward (or backward), the autograd nodes do: the forward runs
    from one op that recorded a node to the next until backward work starts, the backward from one
    node to the next until forward work starts (a gradient summed between two nodes on the autograd
    thread is backward work)."""
    recorded = phase_code[trace.name[phase_rows]]
    forward_recorded, backward_recorded = (bool(np.any(recorded == FORWARD)),
                                           bool(np.any(recorded == BACKWARD)))
    if forward_recorded and backward_recorded:
        # a daydream recording, or one with ## forward ## / ## backward ##
        return
    forward_ops = _forward_ops(trace, work, engine_rows)
    if forward_ops.size == 0:
        return
    loose = (phase[work] == OTHER) & (enclosing_phase < 0)
    if not forward_recorded:
        phase[work[loose & _runs(trace, work, forward_ops, engine_rows)]] = FORWARD
    if not backward_recorded:
        loose &= phase[work] == OTHER
        phase[work[loose & _runs(trace, work, engine_rows,
                                 np.union1d(forward_ops, phase_rows))]] = BACKWARD


def _engine_rows(trace: Trace) -> np.ndarray:
    """The ops that run one autograd node: the engine's `evaluate_function` ops, and where a trace
    has none around them (2021 and before), the nodes themselves."""
    names = trace.strings
    ops = trace.indices(EventKind.CPU_OP)
    op_names = np.unique(trace.name[ops]).tolist()  # not the kernels' names, which can be many more
    engine = [i for i in op_names if names[i].startswith(AUTOGRAD_ENGINE_PREFIX)]
    node = [i for i in op_names if _AUTOGRAD_NODE.fullmatch(names[i][:MAX_NAME_CHARS]) is not None]
    engine_rows = ops[np.isin(trace.name[ops], engine)]
    node_rows = ops[np.isin(trace.name[ops], node)]
    node_rows = node_rows[innermost_enclosing(trace, engine_rows, node_rows) < 0]
    node_rows = node_rows[innermost_enclosing(trace, node_rows, node_rows) < 0]
    return np.union1d(engine_rows, node_rows)


def _forward_ops(trace: Trace, work: np.ndarray, engine_rows: np.ndarray) -> np.ndarray:
    """The ops of `work` whose sequence number a backward node carries:
    the forward ops that recorded a node."""
    sequence = trace.sequence
    wanted = np.unique(sequence[engine_rows])
    wanted = wanted[wanted != NO_VALUE]
    return work[np.isin(sequence[work], wanted) & (trace.kind[work] == EventKind.CPU_OP)]


def _runs(trace: Trace, work: np.ndarray, anchors: np.ndarray, breakers: np.ndarray) -> np.ndarray:
    """Per row of `work`: whether it lies in a run of `anchors` on its thread.

    A run goes from an anchor's start to the latest end of the anchors after it on the same thread,
    up to where one of `breakers` (any thread) starts between two anchors.
    """
    inside_any = np.zeros(work.size, dtype=bool)
    ts, end, track = trace.ts_ns, trace.end_ns, trace.track
    breaker_starts = np.sort(ts[breakers])
    for thread in np.unique(track[anchors]).tolist():
        mine = anchors[track[anchors] == thread]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        breaks = np.flatnonzero(np.diff(np.searchsorted(breaker_starts, ts[mine],
                                                        side="right")) != 0) + 1
        firsts = np.r_[0, breaks]
        starts, ends = ts[mine][firsts], np.maximum.reduceat(end[mine], firsts)
        candidates = np.flatnonzero(track[work] == thread)
        run = np.searchsorted(starts, ts[work[candidates]], side="right") - 1
        candidates, run = candidates[run >= 0], run[run >= 0]
        inside_any[candidates[ts[work[candidates]] < ends[run]]] = True
    return inside_any


def _layer_name(name: str) -> str | None:
    if name.startswith(LAYER_PREFIX):
        return name[len(LAYER_PREFIX):]
    if name.startswith(MODULE_SPAN_PREFIX):
        return name[len(MODULE_SPAN_PREFIX):]
    return None


def _phase_of_name(name: str) -> int:
    if name.startswith(PHASE_PREFIX):
        return (PHASES.index(name[len(PHASE_PREFIX):]) if name[len(PHASE_PREFIX):] in PHASES
                else OTHER)
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return OPTIMIZER
    return _PHASE_ANNOTATIONS.get(name, NO_VALUE)


def _layer_ids(trace: Trace, layer_rows: np.ndarray,
               layer_name: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Layer names in order of first appearance, and the layer id of each layer-span row."""
    ids = np.full(len(trace), NO_VALUE, dtype=np.int32)
    index: dict[str, int] = {}
    for row in layer_rows.tolist():
        name = layer_name[int(trace.name[row])]
        ids[row] = index.setdefault(name, len(index))
    return list(index), ids


def _backward_layers(trace: Trace, work: np.ndarray, engine_rows: np.ndarray,
                     enclosing_layer: np.ndarray, layer: np.ndarray, layer_ids: np.ndarray) -> None:
    """Backward work takes the layer of the forward op with the same autograd sequence number."""
    if engine_rows.size == 0:
        return
    sequence = trace.sequence
    forward_ops = trace.indices(EventKind.CPU_OP)
    forward_ops = forward_ops[(sequence[forward_ops] != NO_VALUE) & (layer[forward_ops] >= 0)]
    forward_ops = forward_ops[~np.isin(forward_ops, engine_rows)]
    # The first forward op with a sequence number is the one that recorded the autograd node.
    if forward_ops.size == 0:
        return
    order = np.lexsort((trace.ts_ns[forward_ops], sequence[forward_ops]))
    forward_ops = forward_ops[order]
    first = np.r_[True, sequence[forward_ops][1:] != sequence[forward_ops][:-1]]
    forward_ops = forward_ops[first]
    keys = sequence[forward_ops]
    wanted = sequence[engine_rows]
    position = np.searchsorted(keys, wanted)
    found = (position < keys.size) & (wanted != NO_VALUE)
    found[found] = keys[position[found]] == wanted[found]
    engine_layer = np.full(engine_rows.size, NO_VALUE, dtype=np.int32)
    engine_layer[found] = layer[forward_ops[position[found]]]
    layer[engine_rows] = engine_layer
    # Work inside an engine op takes its layer unless a layer range nested inside that op
    # (e.g. recomputation under activation checkpointing) encloses it more tightly.
    enclosing_engine = innermost_enclosing(trace, engine_rows, work)
    inside = enclosing_engine >= 0
    engine_start = np.full(work.size, np.iinfo(np.int64).min)
    engine_start[inside] = trace.ts_ns[enclosing_engine[inside]]
    span_start = np.where(enclosing_layer >= 0, trace.ts_ns[np.maximum(enclosing_layer, 0)],
                          np.iinfo(np.int64).min)
    use_engine = inside & (span_start < engine_start)
    engine_index = np.searchsorted(engine_rows, enclosing_engine[use_engine])
    layer[work[use_engine]] = engine_layer[engine_index]


def _leaves(trace: Trace, layers: list[str], layer_rows: np.ndarray,
            layer_ids: np.ndarray) -> np.ndarray:
    """Leaf modules: from the recorder's module table when there is
    one, else layers with no layer inside."""
    listed = recorded_fact(trace, "layers")
    if isinstance(listed, dict) and listed:
        return np.array([bool(listed.get(name, {}).get("leaf", True)) for name in layers],
                        dtype=bool)
    leaf = np.ones(len(layers), dtype=bool)
    parents = innermost_enclosing(trace, layer_rows, layer_rows)
    has = parents >= 0
    leaf[np.unique(layer_ids[parents[has]])] = False
    return leaf


def _source(layer_rows: np.ndarray, names: list[str], trace: Trace, phase_rows: np.ndarray,
            engine_rows: np.ndarray) -> str:
    if layer_rows.size:
        first = names[int(trace.name[layer_rows[0]])]
        return "daydream markers" if first.startswith(LAYER_PREFIX) else "nn.Module spans"
    if phase_rows.size or engine_rows.size:
        return "phase annotations only"
    return "none"


@dataclass(slots=True)
class PhaseLayerTimes:
    """Mean time per iteration, ns, by phase and by layer (exclusive: a layer's own work only)."""

    basis: str  # "gpu": GPU activity time; "cpu": CPU op self time (CPU-only traces)
    phases: dict[str, int]
    layers: list[dict[str, object]]
    forward_layer_share: float  # of forward time, the share attributed to some layer
    forward_leaf_share: float  # ... to a leaf module
    backward_layer_share: float


def phase_layer_times(trace: Trace, attribution: Attribution,
                      iteration_spans: list[tuple[int, int]],
                      links: Links | None = None) -> PhaseLayerTimes:
    """Where an iteration's work goes, by phase and by layer, averaged
    over `iteration_spans` (ns)."""
    links = links if links is not None else link(trace)
    rows, weights, when, basis = _work_and_weights(trace, links)
    count = max(len(iteration_spans), 1)
    inside = within_any(when, iteration_spans)
    rows, weights = rows[inside], weights[inside]
    phase = attribution.phase[rows].astype(np.int64)
    valid = phase >= 0
    per_phase = np.bincount(phase[valid], weights=weights[valid], minlength=len(PHASES))
    layer = attribution.layer[rows].astype(np.int64)
    layers = []
    forward_per_layer = _per_layer(layer, weights, phase == FORWARD, len(attribution.layers))
    backward_per_layer = _per_layer(layer, weights, phase == BACKWARD, len(attribution.layers))
    types = layer_types(trace, attribution.layers)
    for index, name in enumerate(attribution.layers):
        layers.append({"name": name, "type": types[index], "leaf": bool(attribution.leaf[index]),
                       "forward_ns": int(forward_per_layer[index] / count),
                       "backward_ns": int(backward_per_layer[index] / count)})
    forward = phase == FORWARD
    backward = phase == BACKWARD
    leaf_layer = np.zeros(rows.size, dtype=bool)
    has_layer = layer >= 0
    leaf_layer[has_layer] = attribution.leaf[layer[has_layer]]
    return PhaseLayerTimes(
        basis=basis,
        phases={name: int(per_phase[i] / count) for i, name in enumerate(PHASES)},
        layers=layers,
        forward_layer_share=_share(weights, forward, has_layer),
        forward_leaf_share=_share(weights, forward, leaf_layer),
        backward_layer_share=_share(weights, backward, has_layer),
    )


@dataclass(slots=True, frozen=True)
class LayerWork:
    """Per layer (index into `Attribution.layers`): its forward's and backward's work (ns; the
    trace's GPU work where it has any, else its CPU ops' own time), and when its first forward work
    began (ns; -1 for never)."""

    work_ns: np.ndarray
    first_forward_ns: np.ndarray


def layer_work(trace: Trace, attribution: Attribution, links: Links | None = None) -> LayerWork:
    """Each layer's work and the start of its forward, over the whole
    trace (what a pipeline's stages balance)."""
    rows, weights, when, _ = _work_and_weights(trace, links if links is not None else link(trace))
    return work_by_layer(attribution.layer[rows], attribution.phase[rows], weights, when,
                         len(attribution.layers))


def work_by_layer(layer: np.ndarray, phase: np.ndarray, weights: np.ndarray, when: np.ndarray,
                  count: int) -> LayerWork:
    """LayerWork of pieces of work (each its layer, -1 for none; its phase; its time, ns; its start,
    ns) over `count` layers."""
    layer = layer.astype(np.int64)
    work = _per_layer(layer, weights, (phase == FORWARD) | (phase == BACKWARD), count)
    forward = (phase == FORWARD) & (layer >= 0)
    first = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, layer[forward], when[forward])
    return LayerWork(work.astype(np.int64), np.where(first == np.iinfo(np.int64).max, -1, first))


def _work_and_weights(trace: Trace, links: Links) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(rows, time of each, host time that places it in an iteration, basis)."""
    gpu = trace.indices(*GPU_ACTIVITY_KINDS)
    if gpu.size:
        launched = links.launch[gpu]
        when = np.where(launched >= 0, trace.ts_ns[np.maximum(launched, 0)], trace.ts_ns[gpu])
        return gpu, trace.dur_ns[gpu].astype(np.float64), when, "gpu"
    ops = trace.indices(EventKind.CPU_OP)
    return ops, self_time_ns(trace, ops), trace.ts_ns[ops], "cpu"


def self_time_ns(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Each of the CPU ops `ops`: its duration less that of the CPU ops
    directly inside it (ns, float)."""
    every = trace.indices(EventKind.CPU_OP)
    parent = innermost_enclosing(trace, every, every)
    children = np.zeros(len(trace), dtype=np.float64)
    has = parent >= 0
    np.add.at(children, parent[has], trace.dur_ns[every[has]])
    return np.maximum(trace.dur_ns[ops] - children[ops], 0).astype(np.float64)


def _per_layer(layer: np.ndarray, weights: np.ndarray, mask: np.ndarray, count: int) -> np.ndarray:
    chosen = mask & (layer >= 0)
    return (np.bincount(layer[chosen], weights=weights[chosen], minlength=count) if count
            else np.zeros(0))


def within_any(times: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Whether each time falls in one of the spans [start, end): one
    sorted pass, not one mask per span."""
    if not spans:
        return np.zeros(times.size, dtype=bool)
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    # overlapping spans too
    reach = np.maximum.accumulate(np.array([e for _, e in spans], dtype=np.int64)[order])
    # the latest span starting at or before each time
    last = np.searchsorted(starts, times, side="right") - 1
    return (last >= 0) & (times < reach[np.maximum(last, 0)])


def layer_types(trace: Trace, layers: list[str]) -> list[str]:
    """The module type of each layer (Conv2d, Linear, ...) where the
    trace records it ('' where not).

    `daydream trace` writes each module path's type in the trace's `daydream.layers`.
    """
    listed = recorded_fact(trace, "layers")
    if not isinstance(listed, dict):
        return [""] * len(layers)
    types = []
    for name in layers:
        info = listed.get(name)
        kind = info.get("type") if isinstance(info, dict) else None
        types.append(kind if isinstance(kind, str) else "")
    return types


def layer_label(layer: dict[str, object]) -> str:
    """'Net.features.3 (Conv2d)' for a layer dict with a known type, else its name."""
    kind = layer.get("type")
    return f"{layer['name']} ({kind})" if kind else str(layer["name"])


def _share(weights: np.ndarray, population: np.ndarray, attributed: np.ndarray) -> float:
    total = float(weights[population].sum())
    return float(weights[population & attributed].sum()) / total if total else 0.0


def repeated_blocks(sizes: dict[str, int]) -> list[str]:
    """The outermost numbered modules (path `parent.N`) with parameters
    whose parent holds at least two of them."""
    holders: dict[str, set[str]] = {}
    for path, size in sizes.items():
        if size <= 0:
            continue
        parts = path.split(".")
        end = next((end for end in range(1, len(parts)) if parts[end].isdigit()), None)
        if end is not None:  # the outermost numbered module on the path, under its parent
            holders.setdefault(".".join(parts[:end]), set()).add(".".join(parts[:end + 1]))
    found = sorted(block for members in holders.values() if len(members) >= 2 for block in members)
    return [b for b in found if not any(b.startswith(other + ".") for other in found if other != b)]


def blocks_of(layers: list[str], sizes: dict[str, int]) -> list[str]:
    """The repeated blocks among the layers with parameters (`sizes`: parameter bytes per layer
    path), or among all the layers where the trace records no parameters."""
    if any(size > 0 for size in sizes.values()):
        return repeated_blocks(sizes)
    return repeated_blocks(dict.fromkeys(layers, 1))


def layer_owners(layers: list[str], pattern: str) -> tuple[list[int], np.ndarray]:
    """The layers whose path matches `pattern`, and which of them contains each layer.

    Returns (matching layer ids, owner) where `owner[i]` is the first matching layer
    that is layer i or one of its ancestors by module path, else -1; `owner` has one
    more slot, -1, so that indexing it with a task's layer -1 ("none") gives -1.
    """
    regex = user_regex(pattern, "layers=", example="'blocks\\.\\d+$'")
    return _owners(layers, [i for i, name in enumerate(layers) if regex.search(name)])


def _owners(layers: list[str], targets: list[int]) -> tuple[list[int], np.ndarray]:
    owner = np.full(len(layers) + 1, NO_VALUE, dtype=np.int64)
    for target in targets:
        prefix = layers[target]
        for i, name in enumerate(layers):
            if owner[i] < 0 and (name == prefix or name.startswith(prefix + ".")):
                owner[i] = target
    return targets, owner


def layers_chosen(layers: list[str], pattern: str,
                  sizes: dict[str, int]) -> tuple[list[int], np.ndarray]:
    """`layer_owners` of `pattern`; "" (the default of the what-ifs that act on a model's blocks)
    chooses the repeated blocks (`blocks_of`), none where the model has none."""
    if pattern:
        return layer_owners(layers, pattern)
    blocks = set(blocks_of(layers, sizes))
    return _owners(layers, [i for i, name in enumerate(layers) if name in blocks])


def choose_layers(layers: list[str], pattern: str, sizes: dict[str, int],
                  option: str) -> tuple[list[int], np.ndarray, str]:
    """`layers_chosen`, and how a note names the choice; an InputError saying what would work
    where nothing is chosen."""
    targets, owner = layers_chosen(layers, pattern, sizes)
    if targets:
        chosen = [layers[t] for t in targets]
        said = (f"matching {pattern!r}" if pattern else
                f"of the repeated blocks ({_listed(chosen)})")
        return targets, owner, said
    if not layers:
        raise InputError(f"--opt {option}: the trace names no layers (module paths) to choose from "
                         "— record it with daydream trace, which marks each module")
    if not pattern:
        raise InputError(f"--opt {option}: the trace's layers hold no repeated blocks (numbered "
                         "modules under one parent, such as blocks.0 and blocks.1), which it "
                         "chooses by default — give layers=REGEX over the layer paths that "
                         "daydream inspect lists")
    blocks = blocks_of(layers, sizes)
    hint = (f"the trace's repeated blocks are {_listed(blocks)}: leave layers= out to choose them"
            if blocks else "see the layers in daydream inspect")
    raise InputError(f"--opt {option}:layers={pattern}: no layer matches; {hint}")


def _listed(paths: list[str]) -> str:
    return ", ".join(paths) if len(paths) <= 3 else f"{paths[0]} … {paths[-1]}, {len(paths)} in all"


def parameter_ratio(layer_bytes: dict[str, int], layers: list[str], targets: list[int],
                    factor: float) -> float | None:
    """(all parameter bytes + (factor - 1) x the matching layers' own and
    their children's) / all; None if unknown. The time models of depth and
    width (transforms.model_size) grow the optimizer's work by it too."""
    total = sum(layer_bytes.values())
    if total <= 0:
        return None
    prefixes = [layers[t] for t in targets]
    matched = sum(size for path, size in layer_bytes.items()
                  if any(path == prefix or path.startswith(prefix + ".") for prefix in prefixes))
    return (total + (factor - 1) * matched) / total
