"""What-if memory: the peak each optimization would leave, and whether it fits a device.

The allocations of the trace (sizes, lifetimes, categories, layers) are rewritten the
way the optimization changes them, the peak is recomputed by a sweep over the new
lifetimes, and the caching-allocator model turns the allocations into reserved memory.

Each optimization's memory model is one of the `*_memory` functions here, listed by the
optimization's name in `MEMORY_MODELS` (the one table `whatif --list` and `whatif --memory` both
read); its docstring is the model as `whatif --list` shows it.

Memory the trace shows only as a recorded total (allocated before the window) is kept
as it is, except where an optimization says otherwise about weights.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream.cost.shapes import encoded_ratio
from daydream.devices import Device
from daydream.errors import InputError
from daydream.mapping.attribution import (
    BACKWARD,
    FORWARD,
    OPTIMIZER,
    LayerWork,
    layer_owners,
    layers_chosen,
    parameter_ratio,
)
from daydream.mapping.parameters import LayerParameters, Widened, widened
from daydream.memory.timeline import CATEGORIES, NEVER, DeviceMemory

#: An optimization's memory model: rewrites the allocations in place, returns its note.
MemoryModel = Callable[["Allocations", dict[str, Any], "ModelFacts"], str]
STATE_TENSORS = {"sgd": 0, "sgd-momentum": 1, "adagrad": 1, "adam": 2, "adamw": 2, "rmsprop": 1}
_OPTIMIZER_NAME = re.compile(r"Optimizer\.step#(\w+)\.step")
ACT, TMP, GRAD, OPT, WEIGHTS, OTHER, WORKSPACE = (
    CATEGORIES.index(c) for c in ("activations", "temporaries", "gradients", "optimizer state",
                                  "weights", "other", "workspace")
)


@dataclass(slots=True)
class MemoryPrediction:
    device: str
    measured_peak_bytes: int
    predicted_peak_bytes: int
    predicted_reserved_bytes: int | None
    capacity_bytes: int | None
    notes: list[str]

    @property
    def fits(self) -> bool | None:
        if self.capacity_bytes is None:
            return None
        return (self.predicted_reserved_bytes or self.predicted_peak_bytes) <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> int | None:
        if self.capacity_bytes is None:
            return None
        return self.capacity_bytes - (self.predicted_reserved_bytes or self.predicted_peak_bytes)


@dataclass(slots=True)
class Allocations:
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    category: np.ndarray
    layer: np.ndarray
    phase: np.ndarray
    iteration: np.ndarray
    baseline_times: np.ndarray  # memory from before the window, as a step function
    baseline_bytes: np.ndarray

    def copy(self) -> Allocations:
        return Allocations(*(getattr(self, name).copy() for name in self.__slots__))


@dataclass(slots=True, frozen=True)
class ModelFacts:
    """What a memory model may consult besides the allocations: the layer names the allocations'
    `layer` indexes, the optimizer the trace ran, each layer's own parameter bytes (where the trace
    records them), and the memory's device ("cuda:0", "cpu")."""

    layers: list[str]
    current_optimizer: str | None
    layer_bytes: dict[str, int]
    device: str = ""
    #: per layer, its forward's and backward's work (mapping.attribution.LayerWork), where known:
    #: what pipeline stages balance
    layer_work: LayerWork | None = None
    #: per layer, its module type ("Linear"; "" where not recorded): what tensor parallelism splits
    layer_types: tuple[str, ...] = ()
    #: the GPU the memory is on, as the device table has it (None where not known)
    gpu: Device | None = None
    #: the bytes of tensors that hold the batch twice (a contrastive loss's similarity of every
    #: sample with every other: `daydream.transforms.batch.pairwise_products`), at each type seen
    pair_bytes: frozenset[int] = frozenset()
    #: per layer, its type and own parameters' shapes, where the recording lists them (what a
    #: wider model grows: mapping/parameters.py)
    layer_parameters: dict[str, LayerParameters] = field(default_factory=dict)


def predict_memory(memory: DeviceMemory, specs: list[tuple[str, dict[str, Any]]], layers: list[str],
                   current_optimizer: str | None, device: Device | None,
                   layer_bytes: dict[str, int] | None = None, layer_work: LayerWork | None = None,
                   layer_types: tuple[str, ...] = (),
                   pair_bytes: frozenset[int] = frozenset(),
                   layer_parameters: dict[str, LayerParameters] | None = None) -> MemoryPrediction:
    """`layer_bytes`: each layer's own parameter bytes, where the trace records them (what depth and
    width scale); `layer_work`: each layer's work (what pipeline stages balance); `layer_types`:
    each layer's module type; `pair_bytes`: the sizes of tensors that hold the batch twice;
    `layer_parameters`: each layer's own parameters' shapes, where recorded (what width grows)."""
    allocations = _from(memory)
    model = ModelFacts(layers, current_optimizer, layer_bytes or {}, memory.device, layer_work,
                       layer_types, device, pair_bytes, layer_parameters or {})
    notes: list[str] = []
    for name, params in specs:
        memory_model = MEMORY_MODELS.get(name)
        if memory_model is None:
            notes.append(f"{name}: no memory model; allocations unchanged")
            continue
        notes.append(memory_model(allocations, params, model))
    peak = peak_bytes(allocations)
    reserved = _reserved(allocations) if memory.peak_reserved_bytes else None
    capacity = int(device.memory_gib * 2**30) if device is not None else None
    return MemoryPrediction(memory.device, memory.peak_allocated_bytes, peak, reserved, capacity,
                            notes)


def largest_batch_factor(memory: DeviceMemory, specs: list[tuple[str, dict[str, Any]]],
                         layers: list[str], current_optimizer: str | None, device: Device,
                         layer_bytes: dict[str, int] | None = None,
                         layer_work: LayerWork | None = None,
                         layer_types: tuple[str, ...] = (),
                         pair_bytes: frozenset[int] = frozenset(),
                         layer_parameters: dict[str, LayerParameters] | None = None
                         ) -> float | None:
    """The largest batch-size factor (with `specs` applied) whose predicted peak fits `device`; None
    if even 1/64 does not."""
    def fits(factor: float) -> bool:
        prediction = predict_memory(memory, [*specs, ("batch-size", {"factor": factor})], layers,
                                    current_optimizer, device, layer_bytes, layer_work, layer_types,
                                    pair_bytes, layer_parameters)
        return bool(prediction.fits)

    low, high = 1 / 64, 1.0
    if not fits(low):
        return None
    while fits(high) and high < 4096:
        low, high = high, high * 2
    for _ in range(20):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def current_optimizer_of(names: list[str]) -> str | None:
    for name in names:
        match = _OPTIMIZER_NAME.search(name)
        if match:
            return match.group(1).lower()
    return None


def peak_bytes(allocations: Allocations) -> int:
    """The largest sum of live allocations plus the pre-window memory, over the timeline."""
    times = np.unique(np.concatenate([allocations.start, allocations.end[allocations.end != NEVER],
                                      allocations.baseline_times]))
    delta = np.zeros(times.size + 1, dtype=np.float64)
    np.add.at(delta, np.searchsorted(times, allocations.start), allocations.size)
    freed = allocations.end != NEVER
    np.add.at(delta, np.searchsorted(times, allocations.end[freed]), -allocations.size[freed])
    live = np.cumsum(delta)[:-1]
    position = np.searchsorted(allocations.baseline_times, times, side="right") - 1
    baseline = np.where(position >= 0, allocations.baseline_bytes[np.maximum(position, 0)], 0)
    return int((live + baseline).max()) if times.size else 0


def _from(memory: DeviceMemory) -> Allocations:
    a = memory.allocations
    return Allocations(a["size"].astype(np.float64), a["start"].copy(), a["end"].copy(),
                       a["category"].copy(),
                        a["layer"].copy(), a["phase"].copy(), a["iteration"].copy(),
                       memory.times_ns.copy(),
                        memory.by_category.get("before the trace",
                                               np.zeros(memory.times_ns.size)).astype(np.float64))


def _reserved(allocations: Allocations) -> int | None:
    try:
        from daydream.memory.allocator import replay_events
    except ImportError:  # pragma: no cover - the allocator model ships with daydream
        return None
    # In time order; at the same instant frees first, as the allocator would have seen them, except
    # the free of an allocation made at that same instant (a what-if that ends an allocation where
    # it starts), which follows it.
    starts = allocations.start.tolist()
    allocs = [(int(t), 1, i) for i, t in enumerate(starts)]
    frees = [(int(t), 2 if t <= starts[i] else 0, i) for i, t in enumerate(allocations.end.tolist())
             if t != NEVER]
    sizes = allocations.size.tolist()
    stream = ((handle, int(sizes[handle]) if kind == 1 else -1)
              for _, kind, handle in sorted(allocs + frees))
    # none made: none freed
    peaks = replay_events((handle, size) for handle, size in stream if int(sizes[handle]) != 0)
    baseline = int(allocations.baseline_bytes.max()) if allocations.baseline_bytes.size else 0
    return int(peaks.peak_reserved_bytes) + baseline


def _batch_proportional(a: Allocations) -> np.ndarray:
    """Activations, and temporaries or unclassified tensors made in
    forward or backward (outputs, logits, losses)."""
    return (a.category == ACT) | (np.isin(a.category,
                                          [TMP, WORKSPACE,
                                           OTHER]) & np.isin(a.phase, [FORWARD, BACKWARD]))


def batch_size_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """activations, and temporaries and workspaces of forward and backward, × factor; those the
    size of a tensor that holds the batch twice (every sample's similarity with every other)
    × factor²"""
    factor = float(params["factor"])
    # a pair-sized tensor holds the batch wherever in the step it is made (SimCLR's loss, outside
    # the model's forward, makes its similarity in the step's other work)
    pairs = (_pair_sized(a.size, model.pair_bytes, model.device.startswith("cuda"))
             & np.isin(a.category, [ACT, TMP, WORKSPACE, OTHER]))
    chosen = _batch_proportional(a) | pairs
    a.size[chosen & ~pairs] *= factor
    a.size[pairs] *= factor * factor
    twice = (f"; {int(pairs.sum())} of them the size of a tensor that holds the batch twice "
             f"× {factor * factor:g}" if pairs.any() else "")
    return (f"batch-size: {int(chosen.sum())} activation and other forward/backward allocations × "
            f"{factor:g}{twice}")


#: The caching allocator of CUDA rounds a block up to a multiple of this many bytes.
BLOCK_ROUNDING = 512


def _pair_sized(size: np.ndarray, pair_bytes: frozenset[int], rounded: bool) -> np.ndarray:
    """Which allocations of `size` are as large as a tensor of `pair_bytes`: as asked for, or also
    (`rounded`: a GPU's) as its caching allocator rounds it."""
    if not pair_bytes:
        return np.zeros(size.shape, dtype=bool)
    exact = np.array(sorted(pair_bytes), dtype=np.float64)
    found = np.isin(size, exact)
    if rounded:
        found |= np.isin(size, np.ceil(exact / BLOCK_ROUNDING) * BLOCK_ROUNDING)
    return found


def amp_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """activations and forward/backward temporaries × 0.5 (16-bit); a
    16-bit copy of the weights during each forward"""
    chosen = _batch_proportional(a)
    a.size[chosen] *= 0.5
    weights = float(a.size[a.category == WEIGHTS].sum())
    forward = a.phase == FORWARD
    if weights and forward.any():
        start, end = int(a.start[forward].min()), int(a.start[forward].max())
        _add(a, weights * 0.5, start, end, TMP)
    copies = weights * 0.5 / 2**20
    return (f"amp: {int(chosen.sum())} activation/temporary allocations halved; fp16 weight copies "
            f"({copies:.1f} MiB) during forward")


def checkpoint_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the matching layers' activations freed when the layer's forward
    ends, allocated again before its backward"""
    targets, moved = _park(a, model, str(params["layers"]))
    return (f"checkpoint: {moved} activation allocations of {len(targets)} layer(s) freed after "
            "their forward and recomputed before their backward")


def offload_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the matching layers' activations leave the device when the layer's forward ends and return
    before its backward (prefetch=1: when the backward of the matching layer before it in backward
    order begins); host memory not counted"""
    if model.device == "cpu":
        return "offload: the memory is host memory already (a CPU trace); allocations unchanged"
    if str(params.get("stream", "copy")) == "compute" and not int(params.get("prefetch", 1)):
        targets, moved = _park_each(a, model, str(params["layers"]))
        return (f"offload: {moved} activation allocations of {len(targets)} layer(s) in host "
                "memory between their forward and their backward, each on the device only while "
                "the ops that make and read it run (as save_on_cpu packs and unpacks them; pinned "
                "host memory is not device memory: not counted)")
    targets, moved = _park(a, model, str(params["layers"]),
                           early=bool(int(params.get("prefetch", 1))))
    return (f"offload: {moved} activation allocations of {len(targets)} layer(s) in host memory "
            "between their forward and their backward (pinned host memory is not device memory: "
            "not counted)")


def gist_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the matching layers' activations, between the layer's forward and its backward, kept encoded:
    × 1/32 (binarize, fp32), (1 - sparsity) × 5/4 (csr, fp32), × 1/4 (fp8, fp32); decoded to full
    size again before its backward"""
    format_name, sparsity = (str(params.get("format", "binarize")),
                             float(params.get("sparsity", 0.5)))
    ratio = encoded_ratio(format_name, 4, sparsity)
    targets, moved = _park(a, model, str(params["layers"]), kept=ratio)
    return (f"gist: {moved} activation allocations of {len(targets)} layer(s) kept "
            f"{format_name}-encoded (×{ratio:.3g}) between their forward and their backward")


def _park(a: Allocations, model: ModelFacts, pattern: str, kept: float = 0.0,
          early: bool = False) -> tuple[list[int], int]:
    """The matching layers' activations leave the device when the layer's forward ends (a `kept`
    share of each stays: an encoded copy) and come back, full size, when its backward begins until
    each one's original free; `early`: when the backward of the matching layer whose forward came
    next begins (one layer ahead). Returns (the matching layers, the allocations moved)."""
    targets, member = layers_chosen(model.layers, pattern, model.layer_bytes)
    owner = member[a.layer]
    # Chosen before any returned allocation is appended.
    selections = [(np.flatnonzero((owner == target) & (a.category == ACT)),
                   np.flatnonzero((owner == target) & (a.phase == BACKWARD))) for target in targets]
    parked = []  # (iteration, forward end, backward start, the allocations), layer by layer
    for chosen, backward_allocations in selections:
        for iteration in np.unique(a.iteration[chosen]).tolist():
            mine = chosen[a.iteration[chosen] == iteration]
            freed = mine[a.end[mine] != NEVER]
            if freed.size == 0:
                continue
            # The layer's activations die when its forward ends; they come back when the layer's
            # backward begins (its first backward allocation, else its first free of them) until
            # each one's original free.
            backward_mine = backward_allocations[a.iteration[backward_allocations] == iteration]
            backward_start = int(min(a.end[freed].min(), a.start[backward_mine].min()
                                     if backward_mine.size else NEVER))
            parked.append((iteration, int(a.start[mine].max()), backward_start, freed))
    returns = [backward_start for _, _, backward_start, _ in parked]
    if early:
        # the backward of the layer whose forward came next in the same
        # iteration runs right before this one's
        for position, (iteration, forward_end, backward_start, _) in enumerate(parked):
            following = [other for other in parked if other[0] == iteration
                         and other[1] > forward_end]
            if following:
                nearest = min(following, key=lambda other: other[1])
                returns[position] = max(forward_end, min(nearest[2], backward_start))
    moved = 0
    for (_, forward_end, _, freed), back in zip(parked, returns):
        sizes, ends = a.size[freed].copy(), a.end[freed].copy()
        a.end[freed] = np.maximum(forward_end, a.start[freed])
        for size, finish in zip(sizes.tolist(), ends.tolist()):
            if kept:
                _add(a, size * kept, forward_end, back, ACT)
            _add(a, size, back, int(finish), ACT)
        moved += freed.size
    return targets, moved


def _park_each(a: Allocations, model: ModelFacts, pattern: str) -> tuple[list[int], int]:
    """The activations the matching layers' ops save, each on the device only while the ops that
    use it run, as `save_on_cpu` has them. An activation is saved by the op whose backward reads it
    last: the one that made the last backward allocation before its original free (a block's input,
    made by the layer before, is saved by the block's first ops). Its forward references go when
    the op that reads it has made its output (freed at the start of the forward allocation after
    the next one, or the forward's last), and the backward op that reads it copies it back as it
    runs (from that last backward allocation to its original free). The trace does not say which
    ops read a tensor: one read again later in forward (a residual) leaves early here, and one read
    by two backward ops comes back once. Returns (the matching layers, the allocations moved)."""
    targets, member = layers_chosen(model.layers, pattern, model.layer_bytes)
    moved = 0
    for iteration in np.unique(a.iteration[a.iteration >= 0]).tolist():
        forward = np.sort(a.start[(a.iteration == iteration) & (a.phase == FORWARD)])
        if forward.size == 0:  # nothing to say when a tensor's forward readers are done
            continue
        backward = np.flatnonzero((a.iteration == iteration) & (a.phase == BACKWARD))
        backward = backward[np.argsort(a.start[backward], kind="stable")]
        mine = np.flatnonzero((a.iteration == iteration) & (a.category == ACT) & (a.end != NEVER))
        reader = np.searchsorted(a.start[backward], a.end[mine], side="left") - 1
        mine, reader = mine[reader >= 0], backward[reader[reader >= 0]]
        saved_here = member[a.layer[reader]] >= 0
        mine, reader = mine[saved_here], reader[saved_here]
        after = np.searchsorted(forward, a.start[mine], side="right") + 1
        left = np.where(after < forward.size, forward[np.minimum(after, forward.size - 1)],
                        forward[-1])
        left = np.maximum(left, a.start[mine])
        ends = a.end[mine].copy()
        back = np.minimum(np.maximum(a.start[reader], left), ends)
        a.end[mine] = left
        _add_many(a, a.size[mine].copy(), back, ends, ACT)
        moved += mine.size
    return targets, moved


def bn_restructure_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the matching (BatchNorm) layers' forward allocations that are freed
    before the backward begins (the normalized output only the ReLU after
    it reads) are never made: normalization and ReLU write one output"""
    targets, member = layer_owners(model.layers, str(params["layers"]))
    owner = member[a.layer]
    removed = 0
    for iteration in np.unique(a.iteration[a.iteration >= 0]).tolist():
        backward = (a.iteration == iteration) & (a.phase == BACKWARD)
        backward_start = int(a.start[backward].min()) if backward.any() else NEVER
        chosen = (
            (owner >= 0) & (a.iteration == iteration) & (a.phase == FORWARD) & (a.end != NEVER)
                  & (a.end <= backward_start) & np.isin(a.category, [ACT, TMP, OTHER]))
        a.size[chosen] = 0
        removed += int(chosen.sum())
    return (f"bn-restructure: {removed} forward-only allocations of {len(targets)} BatchNorm "
            "layer(s) never made")


def optimizer_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """optimizer state = state tensors per parameter (SGD 0, momentum/Adagrad/RMSprop 1, Adam/AdamW
    2) × the gradients' bytes"""
    name = str(params["name"]).lower()
    if name not in STATE_TENSORS:
        raise InputError(f"--opt optimizer:name={name}: unknown optimizer (known: "
                         f"{', '.join(STATE_TENSORS)})")
    # One iteration's gradients are the parameters' size.
    gradient_bytes = float(a.size[a.category == GRAD].sum()) / max(1, _passes(a, GRAD))
    state = a.category == OPT
    old = float(a.size[state].sum())
    new = STATE_TENSORS[name] * gradient_bytes
    a.size[state] = 0
    if new:
        _add(a, new, int(a.start.min()), NEVER, OPT)
    return (f"optimizer: state {old / 2**20:.1f} MiB ({model.current_optimizer or 'unknown'}) -> "
            f"{new / 2**20:.1f} MiB ({name}: {STATE_TENSORS[name]} tensor(s) per parameter × "
            f"{gradient_bytes / 2**20:.1f} MiB of gradients)")


def _passes(a: Allocations, category: int) -> int:
    """How many iterations made allocations of `category`."""
    chosen = a.iteration[(a.category == category) & (a.iteration >= 0)]
    return max(1, int(np.unique(chosen).size))


def zero_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """optimizer state ÷ world (stage ≥ 1), gradients ÷ world (stage ≥
    2), weights ÷ world (stage 3)"""
    stage, world = int(params["stage"]), int(params["world"])
    if stage not in (1, 2, 3) or world < 1:
        raise InputError(f"--opt zero:stage={stage},world={world}: stage is 1, 2 or 3 and world at "
                         "least 1")
    shard = [OPT] + ([GRAD] if stage >= 2 else []) + ([WEIGHTS] if stage == 3 else [])
    chosen = np.isin(a.category, shard)
    a.size[chosen] /= world
    return (f"zero: stage {stage} over {world} ranks shards "
            f"{', '.join(CATEGORIES[c] for c in shard)} (÷{world})")


def fsdp_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """weights, gradients and optimizer state ÷ world (each rank's shards); per unit, as FSDP2 holds
    them: its gathered parameters (the whole unit) while its forward runs and again while its
    backward runs (reshard=0: from its forward to its backward's end); each backward gather's output
    from the all-gather's issue to the copy-out in the unit's pre-backward hook (prefetch=1: issued
    in the hook of the unit before it in backward order, after that unit's copy-out); each gradient
    the unit's backward makes whole until the unit's reduce-scatter at its backward's end, its shard
    after; the reduce-scatter's input (the unit's gradients) from then until the next unit's
    reduce-scatter (FSDP2 frees it only when it issues the next one); on a CPU (gloo) each
    all-gather also stages a copy of the unit while it runs, and each reduce-scatter works on a
    clone of the unit's gradients"""
    from daydream.transforms.distributed.fsdp import ROOT, fsdp_units, unit_of_layers

    world = int(params["world"])
    if world <= 1:
        return "fsdp: world=1 shards nothing; allocations unchanged"
    if not model.layer_bytes:
        return ("fsdp: the trace records no parameter sizes, so the units' gathered parameters are "
                "not counted")
    units = fsdp_units(model.layers, model.layer_bytes, str(params.get("units", "")))
    a.size[np.isin(a.category, [WEIGHTS, GRAD, OPT])] /= world
    owner = unit_of_layers(units,
                           len(model.layers))[np.where(a.layer >= 0, a.layer, len(model.layers))]
    root = next((k for k, u in enumerate(units) if u.name == ROOT), None)
    sizes = [float(u.bytes) for u in units]
    gather = _Gathers(bool(int(params.get("reshard", 1))), bool(int(params.get("prefetch", 1))),
                      2.0 if model.device == "cpu" else 1.0)
    passes = 0
    # the spans of every iteration taken before any allocation is added
    every = [(i, _unit_spans(a, owner, i, len(units), root))
             for i in np.unique(a.iteration[a.iteration >= 0]).tolist()]
    for iteration, spans in every:
        _whole_until_reduced(a, owner, iteration, spans, root, world)
        passes += gather.add(a, spans, sizes)
    return (f"fsdp: weights, gradients and optimizer state ÷{world}; {len(units)} units' gathered "
            f"parameters ({sum(sizes) / 2**20:.1f} MiB in all, the largest "
            f"{max(sizes) / 2**20:.1f} MiB) while each runs"
            + ("" if gather.reshard else " (reshard=0: from forward to backward)")
            + f", each unit's gradients whole until its reduce-scatter ({passes} unit passes)")


#: a unit's forward and backward span in one iteration (`_unit_spans`)
_Spans = tuple[tuple[int, int] | None, tuple[int, int] | None]


@dataclass(slots=True, frozen=True)
class _Gathers:
    """How FSDP2 holds a unit's gathered parameters and its gradients' buffers (`fsdp_memory`)."""

    reshard: bool
    prefetch: bool
    #: the all-gather's output over the unit's size while it runs: 2 on a CPU, where gloo stages a
    #: copy of it
    staged: float

    def add(self, a: Allocations, spans: list[_Spans], sizes: list[float]) -> int:
        """One iteration's gathers and reduce-scatters; how many units had a backward."""
        order = sorted((span[1][0], k) for k, span in enumerate(spans) if span[1] is not None)
        reduced = sorted(span[1][1] for span in spans if span[1] is not None)
        for position, (start, k) in enumerate(order):
            forward, backward = spans[k]
            assert backward is not None
            size = sizes[k]
            if forward is not None:
                # the gather's output (and its staging) at the copy-out, then the parameters
                _add(a, size * self.staged, forward[0], forward[0] + 1, TMP)
                _add(a, size, forward[0], forward[1] if self.reshard else backward[1], WEIGHTS)
            if self.reshard or forward is None:
                # The pre-backward hook runs just before the unit's first allocation: the copy-out
                # (the output and the parameters both there), then the next unit's gather issued
                # (prefetch=1); without prefetch a unit's own hook issues its gather first.
                issued = (order[position - 1][0] - 1 if self.prefetch and position > 0
                          else start - 3)
                _add(a, size * (self.staged - 1), issued, issued + 1, TMP)
                _add(a, size, issued, start - 1, TMP)
                _add(a, size, start - 2, backward[1], WEIGHTS)
            if self.staged > 1:
                # gloo reduce-scatters a clone of the unit's gradients, beside them while it runs
                _add(a, size, backward[1] - 1, backward[1], TMP)
            # the reduce-scatter's input, freed when the next unit's reduce-scatter is issued
            later = [end for end in reduced if end > backward[1]]
            if later:
                _add(a, size, backward[1], later[0], TMP)
        return len(order)


def _whole_until_reduced(a: Allocations, owner: np.ndarray, iteration: int, spans: list[_Spans],
                         root: int | None, world: int) -> None:
    """Each gradient a unit's backward makes in `iteration`: whole (it was divided by `world` with
    the rest) from when it is made until the unit's reduce-scatter at its backward's end."""
    # the trace's own allocations (`owner`'s), not those added before
    start = a.start[:owner.size]
    mine = (a.category[:owner.size] == GRAD) & (a.iteration[:owner.size] == iteration)
    for k, (_, backward) in enumerate(spans):
        if backward is None:
            continue
        owned = (owner == k) | (owner < 0) if k == root else owner == k
        rows = np.flatnonzero(mine & owned & (start >= backward[0]) & (start < backward[1]))
        ends = np.minimum(a.end[rows], backward[1])
        kept = ends > start[rows]
        _add_many(a, a.size[rows][kept] * (world - 1), start[rows][kept], ends[kept], GRAD)


def _unit_spans(a: Allocations, owner: np.ndarray, iteration: int, count: int, root: int | None
                ) -> list[_Spans]:
    """Per unit, its forward's and its backward's span in `iteration` (the
    root's: the whole phase's): from its first allocation's start to just
    after its last's (what it holds then is held at that allocation)."""
    found: list[_Spans] = []
    mine = a.iteration == iteration
    for k in range(count):
        spans: list[tuple[int, int] | None] = []
        for phase in (FORWARD, BACKWARD):
            chosen = mine & (a.phase == phase) & ((owner == k) if k != root else True)
            starts = a.start[chosen]
            spans.append((int(starts.min()), int(starts.max()) + 1) if starts.size else None)
        found.append((spans[0], spans[1]))
    return found


def pp_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """per stage: its layers' weights, gradients and optimizer state (those no layer
    owns by its share of the parameters); its layers' forward activations of the
    micro-batches in flight at once (gpipe: all M; 1f1b: S − s at stage s, counting from
    0), each at 1/M of the batch, and from the second backward on the stage's gradients
    alive with them (gpipe: M − 1 in flight then); its other forward and backward
    allocations at 1/M (one micro-batch's at a time); forward and backward allocations
    no layer owns on the stage of the one before them. The peak: the largest stage's"""
    from daydream.transforms.distributed.pp import pipeline_stages

    count, microbatches, kind = (int(params["stages"]), int(params["microbatches"]),
                                 str(params["schedule"]))
    if not model.layer_bytes or model.layer_work is None:
        return ("pp: the trace records no parameter sizes or layers, so the stages' memory is not "
                "modelled")
    stages = pipeline_stages(model.layers, model.layer_bytes, count, model.layer_work)
    layer_stage = np.full(len(model.layers) + 1, -1, dtype=np.int64)
    for stage in stages:
        layer_stage[sorted(stage.layers)] = stage.index
    stage_of = _allocation_stages(a, layer_stage, count)
    total = max(sum(s.bytes for s in stages), 1)
    parameters = np.isin(a.category, [WEIGHTS, GRAD, OPT])
    work = np.isin(a.phase, [FORWARD, BACKWARD]) & ~parameters
    activations = work & (a.category == ACT)
    peaks: list[tuple[int, Allocations]] = []
    for stage in stages:
        mine = stage_of == stage.index
        b = a.copy()
        b.size[parameters & (a.layer >= 0) & ~mine] = 0
        b.size[parameters & (a.layer < 0)] *= stage.bytes / total
        b.size[work & ~mine] = 0
        b.size[work & ~activations & mine] /= microbatches
        first = microbatches if kind == "gpipe" else min(count - stage.index, microbatches)
        peaks.append(max(_stage_peaks(b, activations & mine, first, microbatches, kind),
                         key=lambda found: found[0]))
    wanted = int(params.get("memory_stage", -1))
    if wanted >= count:
        raise InputError(f"pp: memory_stage={wanted} but there are {count} stages — use "
                         f"0..{count - 1}, or -1 for the stage with the largest peak")
    chosen = wanted if wanted >= 0 else max(range(len(peaks)), key=lambda k: peaks[k][0])
    for name in Allocations.__slots__:
        setattr(a, name, getattr(peaks[chosen][1], name))
    shown = ", ".join(f"{peak / 2**20:.1f}" for peak, _ in peaks)
    return ("pp: per stage its own parameters and its activations of the micro-batches in flight "
            f"({kind}, {microbatches} micro-batches); stage peaks {shown} MiB: stage {chosen}'s is "
            + ("the rank's asked for" if wanted >= 0 else "the largest"))


def tp_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the split layers' weights, gradients and optimizer state ÷T (those no layer owns by the split
    layers' share of the parameters); the forward and backward allocations of each pair's layers and
    those between them ÷T (sequence_parallel=1: of the whole blocks)"""
    from daydream.transforms.distributed.tp import tp_pairs

    degree, sequence = int(params["degree"]), bool(int(params.get("sequence_parallel", 0)))
    linear = [k for k, kind in enumerate(model.layer_types) if kind == "Linear"]
    # attention whose projections run inside it (not as modules of their own): a pair by itself
    closing = [k for k, kind in enumerate(model.layer_types) if kind == "MultiheadAttention"]
    if degree <= 1:
        return "tp: degree=1 splits nothing; allocations unchanged"
    if not (linear or closing) or model.layer_work is None or not model.layer_bytes:
        return ("tp: the trace does not record which layers are linear, so the split is not "
                "modelled (record it with daydream trace)")
    pairs, _ = tp_pairs(model.layers, model.layer_bytes, model.layer_work, linear + closing,
                        str(params.get("layers", "")), closing)
    split = sorted(frozenset().union(*(p.region for p in pairs))) if pairs else []
    blocks = [k for k, path in enumerate(model.layers) for p in pairs if path == p.block
              or path.startswith(p.block + ".")]
    share = sum(model.layer_bytes.get(model.layers[k], 0)
                for k in split) / max(sum(model.layer_bytes.values()), 1)
    parameters = np.isin(a.category, [WEIGHTS, GRAD, OPT])
    a.size[parameters & np.isin(a.layer, split)] /= degree
    a.size[parameters & (a.layer < 0)] *= 1.0 - share * (1.0 - 1.0 / degree)
    layers = blocks if sequence else split
    work = np.isin(a.phase, [FORWARD, BACKWARD]) & ~parameters & np.isin(a.layer, layers)
    a.size[work] /= degree
    return (f"tp: {len(pairs)} pairs of linear layers split {degree} ways: their parameters' share "
            f"({share:.0%}) ÷{degree}, and {int(work.sum())} forward and backward allocations of "
            + ("the blocks" if sequence else "the split layers") + f" ÷{degree}")


def layout_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """tp's, then pp's, then ddp's memory model, each with the parameters layout gives it"""
    from daydream.transforms.distributed.layout import layout_specs

    notes = [MEMORY_MODELS[name](a, values, model) for name, values in layout_specs(params)]
    return ("; ".join(notes) if notes
            else "layout: dp=1, tp=1, pp=1 is the step as recorded; allocations unchanged")


def _stage_peaks(b: Allocations, activations: np.ndarray, first: int, microbatches: int, kind: str
                 ) -> list[tuple[int, Allocations]]:
    """A stage's peak at its first backward (`first` micro-batches' activations alive, no gradients
    yet) and, where a backward is followed by more forwards or backwards while activations remain
    (micro-batches > 1), at a later one: the stage's gradients, made by its first backward, alive
    with the activations of the micro-batches still in flight (gpipe: M − 1; 1f1b: as many as at the
    first, a forward having followed each backward)."""
    at_first = b.copy()
    at_first.size[activations] *= first / microbatches
    found = [(peak_bytes(at_first), at_first)]
    later = first - 1 if kind == "gpipe" or first >= microbatches else first
    if microbatches > 1 and later > 0:
        after = b.copy()
        after.size[activations] *= later / microbatches
        gradients = np.flatnonzero(after.category == GRAD)
        for iteration in np.unique(after.iteration[gradients]).tolist():
            backward = (after.iteration == iteration) & (after.phase == BACKWARD)
            if backward.any():
                mine = gradients[after.iteration[gradients] == iteration]
                after.start[mine] = np.minimum(after.start[mine], int(after.start[backward].min()))
        found.append((peak_bytes(after), after))
    return found


def _allocation_stages(a: Allocations, layer_stage: np.ndarray, count: int) -> np.ndarray:
    """Each allocation's stage: its layer's; a forward or backward one
    without a layer, the stage of the one made before it in its phase
    (the first stage's in forward, the last's in backward); others -1."""
    stage = layer_stage[np.where(a.layer >= 0, a.layer, len(layer_stage) - 1)]
    for phase, default in ((FORWARD, 0), (BACKWARD, count - 1)):
        chosen = np.flatnonzero(a.phase == phase)
        chosen = chosen[np.argsort(a.start[chosen], kind="stable")]
        current = default
        for k in chosen.tolist():
            if stage[k] >= 0:
                current = int(stage[k])
            else:
                stage[k] = current
    return stage


def ddp_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """one more copy of the gradients for the whole run: DDP's flat bucket buffers (bucket_view=1:
    the gradients are views of the buckets, which hold them for the whole run)"""
    # the trace's own (ids stay valid as allocations are added)
    gradients = np.flatnonzero(a.category == GRAD)
    gradient_bytes = float(a.size[gradients].sum()) / max(1, _passes(a, GRAD))
    if not gradient_bytes:
        return "ddp: no gradient allocations in the trace, so its bucket buffers are not counted"
    _add(a, gradient_bytes, int(a.start.min()), NEVER, GRAD)
    if int(params.get("bucket_view", 0)):
        # Each new gradient is copied into its bucket and freed at once; the buckets are the
        # gradients from then on.
        a.size[gradients] = 0
        return (f"ddp: bucket_view=1: the buckets hold the gradients ({gradient_bytes / 2**20:.1f} "
                "MiB) for the whole run, in place of the trace's gradients of each iteration (each "
                "is freed once copied into its bucket)")
    return ("ddp: gradient buckets hold one more copy of the gradients "
            f"({gradient_bytes / 2**20:.1f} MiB; "
            "DistributedDataParallel(gradient_as_bucket_view=True), bucket_view=1, avoids it)")


def _add(a: Allocations, size: float, start: int, end: int, category: int) -> None:
    """One allocation of no layer, phase or iteration (`_add_many` of one)."""
    _add_many(a, np.array([size]), np.array([start]), np.array([end]), category)


def _add_many(a: Allocations, sizes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              category: int) -> None:
    """`_add` of several allocations of one category at once."""
    count = sizes.size
    a.size = np.concatenate([a.size, sizes.astype(a.size.dtype)])
    a.start = np.concatenate([a.start, starts.astype(a.start.dtype)])
    a.end = np.concatenate([a.end, ends.astype(a.end.dtype)])
    a.category = np.concatenate([a.category, np.full(count, category, dtype=a.category.dtype)])
    for name in ("layer", "phase", "iteration"):
        column = getattr(a, name)
        setattr(a, name, np.concatenate([column, np.full(count, -1, dtype=column.dtype)]))


def depth_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the matching blocks' activations × factor; weights, gradients
    and optimizer state by the parameters added"""
    factor = int(params["factor"])
    targets, owner = layers_chosen(model.layers, str(params["layers"]), model.layer_bytes)
    if not targets or factor <= 1:
        return "depth: no matching layer or factor 1; allocations unchanged"
    copies = np.flatnonzero(_in_layers(a, owner, model) & (a.category == ACT))
    for _ in range(factor - 1):
        for name in a.__slots__:
            if name in ("baseline_times", "baseline_bytes"):
                continue
            column = getattr(a, name)
            setattr(a, name, np.concatenate([column, column[copies]]))
    note = (f"depth: the activations of {len(targets)} block(s) ×{factor} ({copies.size} "
            "allocations each)")
    return note + _grow_parameters(a, model, targets, factor)


def width_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the matching layers' activations × factor, and those of the layers outside them that write
    their width (forward) or read it (backward); weights, gradients and optimizer state by every
    parameter's growth along its axes that hold a hidden size (mapping/parameters.py), or, where the
    recording lists no parameter shapes, by the matching layers' parameters × factor²"""
    factor = float(params["factor"])
    targets, owner = layers_chosen(model.layers, str(params["layers"]), model.layer_bytes)
    if not targets:
        return "width: no matching layer; allocations unchanged"
    inside = _in_layers(a, owner, model)
    grows = np.isin(a.category, [ACT, TMP, WORKSPACE])
    a.size[inside & grows] *= factor
    note = f"width: the activations of {len(targets)} layer(s) ×{factor:g}"
    wider = widened(model.layer_parameters, model.layers, [model.layers[t] for t in targets],
                    factor)
    if wider.ratio is None or not wider.sizes:
        return note + _grow_parameters(a, model, targets, factor ** 2)
    edges, count = _edge_allocations(a, model, owner, wider)
    a.size[edges & grows & ~inside] *= factor
    state = np.isin(a.category, [WEIGHTS, GRAD, OPT])
    # the optimizer's own temporaries (Adam's denominator) have its parameters' sizes
    a.size[state | ((a.phase == OPTIMIZER) & ~inside)] *= wider.ratio
    listed = "/".join(str(s) for s in sorted(wider.sizes))
    return (f"{note}, and those of {count} layer(s) outside them that write or read a hidden size "
            f"({listed}); weights, gradients, optimizer state and the optimizer's temporaries "
            f"×{wider.ratio:.2f} (each parameter grown along its axes that hold one)")


def _edge_allocations(a: Allocations, model: ModelFacts, owner: np.ndarray,
                      wider: Widened) -> tuple[np.ndarray, int]:
    """Per allocation: made in the forward of a layer outside the matching ones that writes a
    hidden size (an embedding of the blocks' width), or in the backward of one that reads it (the
    head: its input's gradient); and how many such layers there are."""
    writes = np.zeros(len(model.layers) + 1, dtype=bool)
    reads = np.zeros(len(model.layers) + 1, dtype=bool)
    for index, path in enumerate(model.layers):
        if owner[index] < 0:
            writes[index], reads[index] = path in wider.writes, path in wider.reads
    at = np.where(a.layer >= 0, a.layer, len(model.layers))
    found = (writes[at] & (a.phase == FORWARD)) | (reads[at] & (a.phase == BACKWARD))
    return found, int((writes | reads).sum())


def _in_layers(a: Allocations, owner: np.ndarray, model: ModelFacts) -> np.ndarray:
    """Per allocation: made by one of the matched layers (`owner` from
    layer_owners; allocations without a layer: no)."""
    return owner[np.where(a.layer >= 0, a.layer, len(model.layers))] >= 0


def _grow_parameters(a: Allocations, model: ModelFacts, targets: list[int], factor: float) -> str:
    """Weights, gradients and optimizer state × the parameter ratio of `targets` grown `factor`
    times; the note's end."""
    ratio = parameter_ratio(model.layer_bytes, model.layers, targets, factor)
    if ratio is None:
        return ("; weights, gradients and optimizer state unchanged (the trace records no "
                "parameter sizes)")
    a.size[np.isin(a.category, [WEIGHTS, GRAD, OPT])] *= ratio
    return f"; weights, gradients and optimizer state ×{ratio:.2f}"


#: PyTorch's cuBLAS workspace per (handle, stream), CUBLAS_WORKSPACE_CONFIG unset (ATen's
#: CublasHandlePool): 4096 KiB x 8 on compute capability 9 and later, else 4096 KiB x 2 +
#: 16 KiB x 8.
CUBLAS_WORKSPACE_BYTES = (4096 * 8 * 1024, 4096 * 1024 * 2 + 16 * 1024 * 8)
#: The device table's NVIDIA GPUs of compute capability 9 or later (Hopper, Blackwell), by the
#: start of their key.
_HOPPER_OR_LATER = ("H100", "H200", "H20", "GH200", "B200", "B300", "GB200", "GB300", "RTX 5090")


def cuda_graphs_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """as recorded, plus a cuBLAS workspace for each of the two streams the capture recipe adds
    (its warm-up side stream and the capture stream): PyTorch keeps one per stream, 32 MiB on
    Hopper and later, 8.1 MiB before"""
    gpu = model.gpu
    if not model.device.startswith("cuda") or gpu is None or gpu.vendor != "nvidia":
        return ("cuda-graphs: allocations as recorded (the cuBLAS workspaces of the capture's "
                "streams are known for a named NVIDIA GPU only)")
    later = (gpu.key or gpu.name).startswith(_HOPPER_OR_LATER)
    size = CUBLAS_WORKSPACE_BYTES[0 if later else 1]
    _add(a, 2 * size, int(a.start.min()) if a.start.size else 0, NEVER, WORKSPACE)
    return (f"cuda-graphs: allocations as recorded, plus 2 cuBLAS workspaces of "
            f"{size / 2**20:.1f} MiB ({gpu.key or gpu.name}) for the warm-up and capture streams")


def gpu_memory(a: Allocations, params: dict[str, Any], model: ModelFacts) -> str:
    """the same allocations, checked against the target's capacity"""
    return (f"gpu: the same allocations on the {params.get('target') or 'target'}, checked against "
            "its capacity")


#: The memory model of each optimization that changes memory, by its name in the registry
#: (daydream.transforms.OPTIMIZATIONS); the others leave the allocations as they are.
MEMORY_MODELS: dict[str, MemoryModel] = {
    "amp": amp_memory,
    "batch-size": batch_size_memory,
    "bn-restructure": bn_restructure_memory,
    "checkpoint": checkpoint_memory,
    "cuda-graphs": cuda_graphs_memory,
    "ddp": ddp_memory,
    "fsdp": fsdp_memory,
    "depth": depth_memory,
    "gist": gist_memory,
    "gpu": gpu_memory,
    "offload": offload_memory,
    "optimizer": optimizer_memory,
    "layout": layout_memory,
    "pp": pp_memory,
    "tp": tp_memory,
    "width": width_memory,
    "zero": zero_memory,
}


def memory_model_words(name: str) -> str:
    """The memory model of optimization `name` in words (its function's docstring)."""
    found = MEMORY_MODELS.get(name)
    if found is None:
        return "none: allocations unchanged"
    return " ".join((found.__doc__ or "modelled").split())
