"""`tp`: tensor parallelism of degree T (Megatron-style) from one rank's trace.

Within each repeated block, the linear layers pair up in the order they run: a column-parallel layer
(its outputs, and so the attention heads or the MLP's hidden units after it, split T ways) and the
row-parallel layer after it (its inputs split, its outputs summed over the ranks). A layer whose
own forward runs two or more linear multiplies and ends back at its input's width
(nn.MultiheadAttention: its packed input projection, then its output projection, which it never
calls as a module) is a pair by itself: split by its heads, its output all-reduced. Per rank:

- **the split work**: the ops of each pair's layers and of the layers that run between them
  (attention's core, the MLP's activation) at 1/T of their work, re-timed by the cost stage (each op
  as the batch-size what-if times it at 1/T: the same FLOPs and bytes as 1/T of its width; the
  shapes differ, see the note);
- **the all-reduces**: the row-parallel layer's output all-reduced after each forward call, and the
  gradient of the column-parallel layer's input after each backward call, each the tensor's whole
  bytes over the fabric; sequence_parallel=1 replaces each by a reduce-scatter and an all-gather
  (before the column layer in forward, before the row layer's backward), and splits the rest of the
  block's work (norms, residual adds) T ways too;
- **on a GPU** each collective runs on a stream of its own, the next kernel waiting for it; **on a
  CPU (gloo)** the host waits for it where it is issued;
- **the optimizer** updates 1/T of the split layers' parameters: its
  work × (the rest + the split share ÷ T).

`layers=REGEX` chooses the linear layers to pair (default: those in the repeated blocks).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from daydream.cost.shapes import ITEM_BYTES, gemm_dims
from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.interconnect import collective_steps
from daydream.mapping.attribution import LayerWork, layer_owners, repeated_blocks
from daydream.transforms.batch import BatchOps, retime_ops
from daydream.transforms.distributed.buckets import (
    BACKWARD,
    FORWARD,
    comm_resource,
    dispatched_optimizer,
    iterations_of,
    no_existing_collectives,
    phase_work,
    true_runs,
)
from daydream.transforms.distributed.contention import (
    CONTENTION_PARAMETER,
    blocking_note,
    blocking_stretch,
    calibrate,
    host_work_ns,
)
from daydream.transforms.distributed.fabric import LINK_PARAMETERS, Fabric, fabric
from daydream.transforms.distributed.pp import graph_layer_work
from daydream.transforms.primitives import launcher_of, splice
from daydream.transforms.registry import MAX_WORLD, Context, Optimization, Parameter, register
from daydream.transforms.reshape import op_layers

#: Attention ops whose first input is (batch, heads, sequence, head width): the heads T must divide.
ATTENTION_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                 "aten::_scaled_dot_product_efficient_attention",
                 "aten::_scaled_dot_product_flash_attention_for_cpu")


@dataclass(slots=True, frozen=True)
class Linear:
    """A linear layer's forward multiply: tokens (the rows), its input
    and output widths, its element bytes; where its forward runs more than one (`closes`: two or
    more, the last back at the first's input width), the last one's input and output widths."""

    layer: int
    tokens: int
    inputs: int
    outputs: int
    item: int
    closes: bool = False
    last_inputs: int = 0
    last_outputs: int = 0

    @property
    def row_inputs(self) -> int:
        """The width its row-parallel multiply splits: its last one's inputs."""
        return self.last_inputs or self.inputs

    @property
    def row_outputs(self) -> int:
        """The width of what its row-parallel multiply all-reduces: its last one's outputs."""
        return self.last_outputs or self.outputs


@dataclass(slots=True, frozen=True)
class Pair:
    """A column-parallel layer and the row-parallel layer after it in one block; `region`: their
    layers and those that run between them (the work split T ways)."""

    block: str
    column: int  # layer index
    row: int
    region: frozenset[int]


def linears(found: BatchOps, layer_of: dict[int, int]) -> dict[int, Linear]:
    """Per layer, its first recorded matrix multiply (its forward's): the layers that are linear.
    The linear multiplies (aten::linear, aten::addmm; not those inside another) after it in the
    layer's first call, up to one like the first again (its next call) or an aten::matmul (attention
    written out by hand), say whether it `closes`."""
    first_call: dict[int, list[tuple[int, int, int, int]]] = {}  # (tokens, inputs, outputs, item)
    ended: set[int] = set()
    for op in sorted(found.ops, key=lambda o: o.start_ns):
        layer = layer_of.get(op.row, -1)
        if (layer < 0 or layer in ended or op.nested
            or op.name not in ("aten::linear", "aten::addmm", "aten::matmul")):
            continue
        dims = gemm_dims(op.name, op.tensors)
        if dims is None:
            continue
        batch, m, n, k = dims
        kind = next((t[1] for t in op.tensors if t is not None), "float")
        seen = first_call.setdefault(layer, [])
        if seen and (op.name == "aten::matmul" or (k, n) == seen[0][1:3]):
            ended.add(layer)
            continue
        seen.append((batch * m, k, n, ITEM_BYTES.get(kind, 4)))
    return {layer: _linear(layer, seen) for layer, seen in first_call.items()}


def _linear(layer: int, seen: list[tuple[int, int, int, int]]) -> Linear:
    tokens, inputs, outputs, item = seen[0]
    if len(seen) >= 2 and seen[-1][2] == inputs:
        return Linear(layer, tokens, inputs, outputs, item, True, seen[-1][1], seen[-1][2])
    return Linear(layer, tokens, inputs, outputs, item)


def tp_pairs(layers: list[str], sizes: dict[str, int], work: LayerWork,
             found_linears: Collection[int], pattern: str,
             closing: Collection[int] = ()) -> tuple[list[Pair], list[str]]:
    """The pairs of the linear layers `found_linears` in each block (the
    repeated blocks, or the blocks or parents of the layers `pattern`
    matches), and the linear layers left whole (an odd one out); each of `closing` (a layer whose
    forward is both a column- and a row-parallel multiply) a pair by itself."""
    if pattern:
        targets, _ = layer_owners(layers, pattern)
        chosen = [k for k in targets if k in found_linears]
        if not chosen:
            some = ", ".join(layers[k] for k in sorted(found_linears)[:4]) or "(none recorded)"
            raise InputError(f"tp: layers={pattern!r} matches no linear layer of the trace — "
                             f"linear layers are e.g. {some}")
        repeated = repeated_blocks(sizes)
        blocks: dict[str, list[int]] = {}
        for k in chosen:
            blocks.setdefault(_block_of(layers[k], repeated) or layers[k].rsplit(".", 1)[0],
                              []).append(k)
    else:
        # each block's linear layers; blocks that are each one linear
        # layer (an MLP's) pair up across the list
        blocks = {}
        for b in repeated_blocks(sizes):
            inside = [k for k in found_linears if layers[k].startswith(b + ".")]
            if inside:
                blocks[b] = inside
            elif any(layers[k] == b for k in found_linears):
                blocks.setdefault(b.rsplit(".", 1)[0],
                                  []).extend(k for k in found_linears if layers[k] == b)
    pairs, whole = [], []
    for block, members in blocks.items():
        ordered = sorted(members, key=lambda k: int(work.first_forward_ns[k]))
        alone = [(k, k) for k in ordered if k in closing]
        rest = [k for k in ordered if k not in closing]
        found = sorted([*alone, *zip(rest[0::2], rest[1::2])],
                       key=lambda pair: int(work.first_forward_ns[pair[0]]))
        for column, row in found:
            low, high = int(work.first_forward_ns[column]), int(work.first_forward_ns[row])
            region = frozenset(k for k, path in enumerate(layers)
                               if path.startswith(block + ".")
                               and low <= int(work.first_forward_ns[k]) <= high
                               and not any(other.startswith(path + ".") for other in layers))
            pairs.append(Pair(block, column, row, region | {column, row}))
        if len(rest) % 2:
            whole.append(layers[rest[-1]])
    return pairs, whole


def _block_of(path: str, blocks: list[str]) -> str | None:
    return next((b for b in blocks if path.startswith(b + ".")), None)


def check_degree(degree: int, pairs: list[Pair], found_linears: dict[int, Linear], heads: list[int],
                 layers: list[str]) -> None:
    """Refuse a degree that does not divide a split layer's width or the attention heads."""
    widths = [(p.column, "outputs", found_linears[p.column].outputs) for p in pairs] \
        + [(p.row, "inputs", found_linears[p.row].row_inputs) for p in pairs]
    for layer, what, width in widths:
        if width % degree:
            raise InputError(f"tp: degree={degree} does not divide {layers[layer]}'s {width} "
                             f"{what} — use a degree that divides "
                             f"{math.gcd(*(w for _, _, w in widths))}")
    for count in heads:
        if count % degree:
            raise InputError(f"tp: degree={degree} does not divide the {count} attention heads — "
                             "use one of "
                             f"{', '.join(str(d) for d in range(1, count + 1) if count % d == 0)}")


def attention_heads(found: BatchOps, layer_of: dict[int, int], region: frozenset[int]) -> list[int]:
    """The head counts of the attention ops in the split work (their first input's second axis)."""
    heads = set()
    for op in found.ops:
        if (op.name in ATTENTION_OPS and layer_of.get(op.row, -1) in region and op.tensors
            and op.tensors[0] is not None):
            shape = op.tensors[0][0]
            if len(shape) == 4:
                heads.add(int(shape[1]))
    return sorted(heads)


@dataclass(slots=True)
class _Collectives:
    """The collectives tp inserts, recorded and put into the graph at once (`apply`)."""

    graph: Graph
    net: Fabric
    resource: int
    contention: float  # the host's contention factor (1 on a GPU)
    call_ns: int
    # (anchor task, operation, bytes, name, before the anchor)
    planned: list[tuple[int, str, int, str, bool]]
    stretch: float = 1.0  # what `apply` stretched each collective by

    def add(self, anchor: int, operation: str, nbytes: int, name: str,
            before: bool = False) -> None:
        self.planned.append((anchor, operation, nbytes, name, before))

    def apply(self, host_to_come_ns: int = 0) -> None:
        """On a GPU each collective after (or before) its anchor kernel on a stream of its own, the
        kernel after it on the anchor's stream waiting for it; on a CPU the host waits for it right
        after (or before) its anchor, stretched by the other ranks' compute beside it
        (`blocking_stretch`; `host_to_come_ns`: host work not yet in the graph)."""
        graph = self.graph
        if not self.planned:
            return
        on_gpu = graph.has_device_work()
        # one at a time on their stream, in the order they are issued
        self.planned.sort(key=lambda p: (int(graph.tasks["measured_start_ns"][p[0]]), not p[4],
                                         p[0]))
        anchors = np.array([p[0] for p in self.planned], dtype=np.int64)
        ends = graph.tasks["measured_end_ns"][anchors]
        alone = [self.net.time_ns(p[1], p[2]) for p in self.planned]
        self.stretch = blocking_stretch(self.contention, host_work_ns(graph) + host_to_come_ns,
                                        sum(alone))
        durations = [int(round(ns * self.stretch)) for ns in alone]
        ids = graph.add_tasks(kind=int(TaskKind.COLLECTIVE), resource=self.resource,
                              name=[graph.string_id(p[3]) for p in self.planned],
                              duration_ns=durations, bytes=[p[2] for p in self.planned],
                              iteration=graph.tasks["iteration"][anchors],
                              phase=graph.tasks["phase"][anchors], measured_start_ns=ends,
                              measured_end_ns=ends)
        graph.add_edges(ids[:-1], ids[1:], DepKind.STREAM_ORDER)
        before = np.array([p[4] for p in self.planned], dtype=bool)
        if on_gpu:
            self._on_gpu(anchors, ids, before)
        else:
            self._on_cpu(anchors, ids, before)

    def _on_gpu(self, anchors: np.ndarray, ids: np.ndarray, before: np.ndarray) -> None:
        graph = self.graph
        stream = graph.edges_of_kind(DepKind.STREAM_ORDER)
        previous = dict(zip(graph.edges["dst"][stream].tolist(),
                            graph.edges["src"][stream].tolist()))
        following = dict(zip(graph.edges["src"][stream].tolist(),
                             graph.edges["dst"][stream].tolist()))
        for anchor, collective, is_before in zip(anchors.tolist(), ids.tolist(), before.tolist()):
            waits_for, waiter = ((previous.get(anchor), anchor) if is_before
                                 else (anchor, following.get(anchor)))
            if waits_for is not None:
                graph.add_edges([waits_for], [collective], DepKind.COMMUNICATION)
            if waiter is not None:
                graph.add_edges([collective], [waiter], DepKind.COMMUNICATION)

    def _on_cpu(self, anchors: np.ndarray, ids: np.ndarray, before: np.ndarray) -> None:
        graph = self.graph
        for is_before in (False, True):
            chosen = np.flatnonzero(before == is_before)
            if chosen.size == 0:
                continue
            names = ([f"tp: {graph.task_name(int(c))} "
                      f"({'issued' if is_before else 'the host waits'})" for c in ids[chosen]])
            calls = splice(graph, anchors[chosen], [self.call_ns] * chosen.size, names,
                           after=not is_before)
            if is_before:  # issued by the call before the anchor, which waits for it
                graph.add_edges(calls, ids[chosen], DepKind.COMMUNICATION)
                graph.add_edges(ids[chosen], anchors[chosen], DepKind.COMMUNICATION)
            else:  # issued after the anchor; the call after it returns once it has ended
                graph.add_edges(anchors[chosen], ids[chosen], DepKind.COMMUNICATION)
                graph.add_edges(ids[chosen], calls, DepKind.COMMUNICATION)


def _runs_of(graph: Graph, iteration: int, phase: int,
             layers: frozenset[int]) -> list[tuple[int, int]]:
    """(first, last) work task of each maximal run of `layers`' work in
    `iteration`'s `phase` (one per call)."""
    work = phase_work(graph, iteration, phase)
    member = np.isin(graph.tasks["layer"][work], sorted(layers))
    return [(int(work[a]), int(work[b])) for a, b in true_runs(member)]


@dataclass(slots=True, frozen=True)
class Split:
    """What tp splits in a trace: its batch ops, each op's layer, the
    linear layers, their pairs, the odd ones left."""

    found: BatchOps
    layer_of: dict[int, int]
    linears: dict[int, Linear]
    pairs: list[Pair]
    whole: list[str]

    @property
    def layers(self) -> frozenset[int]:
        return frozenset().union(*(p.region for p in self.pairs))


def plan_split(graph: Graph, context: Context, pattern: str) -> Split:
    """The pairs tp would split in `graph` (`pattern`: layers=), or an
    InputError that says why none."""
    of_batch = context.batch_ops
    found: BatchOps | None = of_batch(0) if of_batch is not None else None
    if found is None or not found.has_shapes or found.shape is None or context.costs is None:
        raise InputError("tp: the trace records no op shapes, so its linear layers and their "
                         "widths are not known — record it with daydream trace (or torch.profiler "
                         "with record_shapes=True)")
    layer_of = op_layers(graph, found.ops, context)
    work = context.layer_work if context.layer_work is not None else graph_layer_work(graph)
    found_linears = linears(found, layer_of)
    pairs, whole = tp_pairs(graph.layers, context.gradient_bytes, work, found_linears, pattern,
                            {k for k, linear in found_linears.items() if linear.closes})
    if not pairs:
        shown = ", ".join(graph.layers[k] for k in sorted(found_linears)[:4]) or "none recorded"
        raise InputError("tp: no pair of linear layers to split (a column-parallel layer and a "
                         "row-parallel one after it in a block; the trace's linear layers: "
                         f"{shown}) — give layers=REGEX over the linear layers to pair")
    return Split(found, layer_of, found_linears, pairs, whole)


def _tp(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    degree, sequence = int(params["degree"]), bool(int(params["sequence_parallel"]))
    no_existing_collectives(graph, "tp")
    plan = plan_split(graph, context, str(params["layers"]))
    found, layer_of, found_linears, pairs, whole = (plan.found, plan.layer_of, plan.linears,
                                                    plan.pairs, plan.whole)
    costs = context.costs
    assert costs is not None
    split = plan.layers
    check_degree(degree, pairs, found_linears, attention_heads(found, layer_of, split),
                 graph.layers)
    if degree == 1:
        return ["tp: degree=1 splits nothing; the step is unchanged"]
    blocks = frozenset(k for k, path in enumerate(graph.layers) for p in pairs
                       if path == p.block or path.startswith(p.block + "."))
    rows = {row for row, layer in layer_of.items() if layer in (blocks if sequence else split)}
    retimed = retime_ops(graph, found, rows, 1.0 / degree, costs, context)
    net = fabric(params, context, degree)
    factor, source = calibrate(graph, params, context, min(degree, net.per_node))
    host = costs.host
    collectives = _Collectives(graph, net, comm_resource(graph, "tp collectives"),
                               factor if not graph.has_device_work() else 1.0,
                               host.recorded_ns("fsdp.collective") if not graph.has_device_work()
                               else 0, [])
    # (the first task of a split layer's call, host ns, name)
    dtensor: list[tuple[int, int, str]] = []
    for iteration in iterations_of(graph):  # everything planned before anything is inserted
        _plan(graph, collectives, pairs, found_linears, iteration, sequence)
        dtensor += _dtensor_calls(graph, pairs, iteration, host.recorded_ns("tp.forward"),
                                  host.recorded_ns("tp.backward"))
    count = len(collectives.planned)
    collectives.apply(sum(ns for _, ns, _ in dtensor))
    dtensor_calls = _splice_dtensor(graph, dtensor)
    split_bytes = sum(context.gradient_bytes.get(graph.layers[k], 0) for k in split)
    total = max(sum(context.gradient_bytes.values()), 1)
    optimizer_ops = 0
    for iteration in iterations_of(graph):
        # each rank updates the rest and 1/T of the split parameters
        optimizer_ops += dispatched_optimizer(graph, iteration,
                                              1.0 / (
                                                  1.0 - split_bytes / total * (1.0 - 1.0 / degree)),
                                              host.recorded_ns("tp.optimizer_op"))
    graph.data_parallel = replace(graph.data_parallel, link=net.link, contention=factor,
                                  contention_source=source, host_ranks=min(degree, net.per_node),
                                  collective_steps=collective_steps("allreduce", degree, "ring"))
    iterations = max(len(iterations_of(graph)), 1)
    notes = _notes(pairs, whole, degree, sequence, count // iterations, retimed, net, split_bytes,
                   total, (factor, source), graph.layers)
    if collectives.stretch > 1.0:
        notes.append("tp: on a CPU the host waits in each collective; "
                     + blocking_note(collectives.stretch, factor))
    notes.insert(3, f"tp: DTensor's own host work: per iteration {dtensor_calls // iterations} "
                    "calls of the split layers, forward and backward, and "
                    f"{optimizer_ops // iterations} optimizer ops (recorded host units, "
                    "scripts/tp_costs.py)")
    return notes


def _dtensor_calls(graph: Graph, pairs: list[Pair], iteration: int, forward_ns: int,
                   backward_ns: int
                   ) -> list[tuple[int, int, str]]:
    """Per call of each split linear layer in `iteration`, forward and backward: its first task,
    what DTensor's own host work costs there (its parallel style's hooks, the dispatch of its ops on
    DTensors, the conversions to and from local tensors and their backward nodes) and a name."""
    found = []
    for pair in pairs:
        for layer in dict.fromkeys((pair.column, pair.row)):  # a layer paired with itself once
            name = graph.layers[layer]
            calls = _runs_of(graph, iteration, FORWARD, frozenset({layer}))
            found += [(first, forward_ns, f"tp: DTensor (forward, {name})") for first, _ in calls]
            # as in _plan: each call's backward is the first of the layer's backward runs
            found += [(first, backward_ns, f"tp: DTensor (backward, {name})")
                      for first, _ in _runs_of(graph, iteration, BACKWARD,
                                               frozenset({layer}))[:len(calls)]]
    return found


def _splice_dtensor(graph: Graph, planned: list[tuple[int, int, str]]) -> int:
    """DTensor's host work, a host op before each planned call's first task (a GPU's: before the
    host op that launched it). Returns how many."""
    launcher = launcher_of(graph) if graph.has_device_work() else None
    anchors, durations, names = [], [], []
    for task, duration, name in planned:
        host = launcher.get(task) if launcher is not None else task
        if host is not None and duration > 0:
            anchors.append(host)
            durations.append(duration)
            names.append(name)
    splice(graph, anchors, durations, names, after=False)
    return len(anchors)


def _plan(graph: Graph, collectives: _Collectives, pairs: list[Pair],
          found_linears: dict[int, Linear], iteration: int, sequence: bool) -> None:
    """Per call of each pair's layers: the all-reduces (sequence parallel: all-gathers and
    reduce-scatters) of the row layer's output (its tokens × outputs) and of the column layer's
    input gradient (its tokens × inputs)."""
    for pair in pairs:
        row_name, column_name = graph.layers[pair.row], graph.layers[pair.column]
        row, column = found_linears[pair.row], found_linears[pair.column]
        out_bytes, in_bytes = (row.tokens * row.row_outputs * row.item,
                               column.tokens * column.inputs * column.item)
        for first, _ in _runs_of(graph, iteration, FORWARD, frozenset({pair.column})):
            if sequence:
                collectives.add(first, "allgather", in_bytes,
                                f"tp all-gather (forward, before {column_name})", True)
        for _, last in _runs_of(graph, iteration, FORWARD, frozenset({pair.row})):
            operation = "reducescatter" if sequence else "allreduce"
            collectives.add(last, operation, out_bytes,
                            f"tp {operation} (forward, {row_name}'s output)")
        # A layer's backward work comes in more runs than its calls
        # (AccumulateGrad runs apart, once per parameter at the end): each call's
        # backward is the first of them, in the reverse order of the calls.
        row_calls = len(_runs_of(graph, iteration, FORWARD, frozenset({pair.row})))
        column_calls = len(_runs_of(graph, iteration, FORWARD, frozenset({pair.column})))
        for first, _ in _runs_of(graph, iteration, BACKWARD, frozenset({pair.row}))[:row_calls]:
            if sequence:
                collectives.add(first, "allgather", out_bytes,
                                f"tp all-gather (backward, before {row_name})", True)
        for _, last in _runs_of(graph, iteration, BACKWARD,
                                frozenset({pair.column}))[:column_calls]:
            operation = "reducescatter" if sequence else "allreduce"
            collectives.add(last, operation, in_bytes,
                            f"tp {operation} (backward, {column_name}'s input gradient)")


def _notes(pairs: list[Pair], whole: list[str], degree: int, sequence: bool, per_iteration: int,
           retimed: str, net: Fabric, split_bytes: int, total: int, contention: tuple[float, str],
           layers: list[str]) -> list[str]:
    shown = "; ".join(f"{layers[p.column]} → {layers[p.row]}" if p.row != p.column
                      else f"{layers[p.column]} (by its heads)" for p in pairs[:2]) \
        + (f"; … ({len(pairs)} pairs in all)" if len(pairs) > 2 else "")
    notes = [f"tp: degree={degree}, column- then row-parallel: {shown}"
             + (f"; left whole: {', '.join(whole)}" if whole else ""),
             f"tp: the split work at 1/{degree} ("
             + ("the whole blocks: sequence parallel" if sequence
                else "each pair and what runs between") + "): "
             f"{retimed} (each op timed at 1/{degree} of its rows: the FLOPs and bytes of "
             f"1/{degree} of its width)",
             f"tp: per iteration {per_iteration} collectives over {net.describe()} "
             + ("(a reduce-scatter after each row-parallel layer, an all-gather before each "
                "column-parallel one, and their backward)" if sequence
                else "(an all-reduce of each row-parallel layer's output in forward and "
                     "of each column-parallel layer's input gradient in backward)"),
             f"tp: the optimizer's work × {1.0 - split_bytes / total * (1.0 - 1.0 / degree):.3f}: "
             f"{split_bytes / 2**20:.1f} of {total / 2**20:.1f} MiB of parameters split {degree} "
             "ways"]
    factor, source = contention
    notes.append(f"tp: contention ×{factor:.2f} on the collectives ({source})" if factor > 1.0
                 else f"tp: no contention modelled ({source})")
    return notes


register(Optimization(
    "tp",
    "tensor parallelism (Megatron-style column- and row-parallel linear layers) of degree DEGREE",
    "in each block, linear layers paired in the order they run (column- then row-parallel); each "
    "pair's ops and those between them (attention heads, the MLP's activation) at 1/T of their "
    "work, re-timed by the cost stage; an all-reduce of each row-parallel output in forward and "
    "each column-parallel input gradient in backward (sequence_parallel=1: reduce-scatters and "
    "all-gathers instead, the blocks' other work split T ways too); GPU: the collectives on a "
    "stream of their own, the next kernel waiting; CPU (gloo): the host waits for each; the "
    "optimizer's work for the split parameters ÷T; DTensor's own host work per call of a split "
    "layer, forward and backward, and per optimizer op (recorded host units)",
    _tp,
    {"degree": Parameter(int, 2, "tensor-parallel ranks each split layer's work is divided over", 1,
                         MAX_WORLD),
     "layers": Parameter(str, "", "regular expression over the linear layers to split, paired in "
                                  "the order they run (default: those of the repeated blocks)"),
     "sequence_parallel": Parameter(int, 0, "1: reduce-scatter and all-gather instead of "
                                            "all-reduce, and the blocks' norms and residual adds "
                                            "split too (Megatron's sequence parallelism)", 0, 1),
     **LINK_PARAMETERS, "contention": CONTENTION_PARAMETER},
))

__all__ = ["Linear", "Pair", "Split", "check_degree", "linears", "plan_split", "tp_pairs"]
