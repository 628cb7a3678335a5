"""What-ifs that change what the forward keeps for the backward: `offload` (vDNN) and `gist` (Gist).

Both trade time for memory, so each has a time model here and a memory model in
`daydream.memory.whatif`.

- `offload`: each saved activation of the matching layers is copied to host memory after the layer's
  forward and back before its backward (vDNN, Rhu et al., MICRO 2016;
  `torch.autograd.graph.save_on_cpu` in PyTorch). The copies run on copy streams beside the compute
  (`stream=copy`, vDNN) or on the compute stream itself (`stream=compute`, as `save_on_cpu` issues
  them); with `prefetch=1` the copy back is issued when the backward of the matching layer before it
  (in backward order) begins, else when its own begins. Each copy is timed by the host link (PCIe of
  the device table's GPU, or `link=`).
- `gist`: each ReLU output the matching layers save is encoded right after the ReLU
  in forward and decoded right before its layer's backward (Gist, Jain et al., ISCA
  2018): `binarize` keeps one bit per element (what ReLU's backward needs), `csr` the
  non-zeros with a one-byte index, `fp8` one byte per element. Encode and decode are
  streaming passes timed by the cost stage at this trace's own elementwise speed.

What an op saves for its backward is read from its recorded inputs: ops save their first
floating-point tensor input (the activation; a parameter it also saves is not an activation), except
ops autograd saves nothing for (views, reshapes, additions, copies). `save_on_cpu`
(`stream=compute`) copies every tensor autograd saves, not only the activation: a GEMM or
convolution also saves its other matrix operand (the weight; a 1-D bias is not saved), an attention
op its key, value and output, a max pool its indices, each copied out and back as its own tensor
(`saved_beside`). A trace without recorded shapes (`record_shapes`) changes nothing, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream.cost import Tier
from daydream.cost.model import CAST_CHAIN_UNITS
from daydream.cost.shapes import (
    FLOATING,
    ITEM_BYTES,
    Tensor,
    elements,
    encoded_ratio,
    tensor_bytes,
)
from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.graph.model import GPU_WORK, HOST_WORK, Resource, ResourceKind
from daydream.mapping.attribution import BACKWARD, FORWARD, choose_layers
from daydream.transforms.autocast import ForwardOp
from daydream.transforms.primitives import HostSpans, Spans, launched_by, splice
from daydream.transforms.registry import Context, Optimization, Parameter, bandwidth, register

#: Ops autograd saves no activation for: views and reshapes, additions
#: and subtractions, copies, concatenation.
SAVES_NOTHING = frozenset({
    "aten::view", "aten::reshape", "aten::flatten", "aten::unflatten", "aten::squeeze",
    "aten::unsqueeze", "aten::transpose", "aten::permute", "aten::t", "aten::expand",
    "aten::contiguous", "aten::select", "aten::slice", "aten::narrow", "aten::split", "aten::chunk",
    "aten::unbind", "aten::alias", "aten::detach", "aten::add", "aten::add_", "aten::sub",
    "aten::sub_", "aten::cat", "aten::stack", "aten::copy_", "aten::clone", "aten::to",
    "aten::_to_copy", "aten::empty", "aten::zeros", "aten::ones", "aten::zeros_like",
    "aten::ones_like", "aten::empty_like", "aten::size",
    "aten::dropout",  # dropout: eval mode or p=0 runs nothing
})
#: ReLU as the aten ops that run it: what Gist encodes.
RELU_OPS = frozenset({"aten::relu", "aten::relu_", "aten::threshold", "aten::threshold_"})

#: Host links GPU <-> host memory: 80% of PCIe's peak per direction (128b/130b encoding and packet
#: overheads), pinned memory; GB/s. PCIe 3.0 x16 15.75, 4.0 31.5, 5.0 63, 6.0 126 GB/s peak per
#: direction (PCI-SIG base specifications).
HOST_LINKS = {"pcie3": 12.6, "pcie4": 25.2, "pcie5": 50.4, "pcie6": 100.8}
#: The host link of the device table's GPUs, by the start of their key (their vendors' data sheets).
DEVICE_HOST_LINK = (("V100", "pcie3"), ("T4", "pcie3"), ("RTX 2080", "pcie3"), ("A100", "pcie4"),
                    ("A10", "pcie4"), ("L4", "pcie4"), ("L40", "pcie4"), ("RTX 3090", "pcie4"),
                    ("RTX 4090", "pcie4"), ("MI2", "pcie4"), ("H100", "pcie5"), ("H200", "pcie5"),
                    ("B200", "pcie5"), ("B300", "pcie5"), ("RTX 5090", "pcie5"), ("MI3", "pcie5"))
#: Without a known GPU: the link most training GPUs of the table have.
DEFAULT_HOST_LINK = "pcie4"
#: A copy's own set-up on the copy engine, beside its bytes (an assumed order of magnitude of
#: cudaMemcpyAsync's latency over PCIe; no measurement in this project yet), ns.
COPY_SETUP_NS = 2_000


@dataclass(slots=True, frozen=True)
class Stash:
    """One activation a forward op saves for its backward: the op
    (trace row), its own layer, the tensor."""

    row: int
    layer: int
    shape: tuple[int, ...]
    type: str
    also: int = 0  # bytes of the other tensors the op saves, where they are copied too

    @property
    def bytes(self) -> int:
        return elements(self.shape) * ITEM_BYTES.get(self.type, 4) + self.also


def saved_tensor(op: ForwardOp) -> Tensor | None:
    """What `op` saves for its backward: its first floating-point
    tensor input; None for ops that save nothing."""
    if op.name in SAVES_NOTHING:
        return None
    for tensor in op.inputs:
        if tensor is not None and tensor[1] in FLOATING and tensor[0]:
            return tensor
    return None


#: Ops whose backward keeps each matrix operand (rank 2 or more: the weight beside the activation).
_MATRIX_OPS = frozenset({
    "aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
    "aten::cudnn_convolution", "aten::conv_transpose2d"})
#: Attention ops: their backward keeps query, key and value and the output (query's shape).
_ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention")


def saved_beside(op: ForwardOp) -> list[Tensor]:
    """The tensors `op` saves for its backward beside `saved_tensor(op)`: a GEMM's or
    convolution's other operands of rank 2 or more (its weight), an attention op's key, value and
    output, a max pool's indices; none for other ops (a norm's weight and statistics are small next
    to its input)."""
    floating = [t for t in op.inputs if t is not None and t[1] in FLOATING and t[0]]
    if op.name in SAVES_NOTHING or not floating:
        return []
    if op.name in _MATRIX_OPS:
        return [t for t in floating[1:] if len(t[0]) >= 2]
    if any(part in op.name for part in _ATTENTION):
        return [t for t in floating[1:3] if len(t[0]) >= 2] + [floating[0]]
    if "max_pool" in op.name:
        indices = pool_output(op.arguments)
        return [(indices, "long int")] if indices else []
    return []


def pool_output(arguments: list[Any] | None) -> tuple[int, ...] | None:
    """The output shape of a pooling op called with `arguments` (input, kernel_size, stride,
    padding, dilation, ceil_mode, as recorded; stride empty: the kernel's), or None where they were
    not recorded."""
    if not arguments or arguments[0][0] != "tensor" or len(arguments) < 2:
        return None
    values = [a[1] if a[0] == "value" else None for a in arguments[1:6]]
    kernel, stride, padding, dilation, ceil = (values + [None] * 5)[:5]
    if not isinstance(kernel, list) or not kernel:
        return None
    shape, n = tuple(arguments[0][1]), len(kernel)
    stride = stride if isinstance(stride, list) and len(stride) == n else kernel
    padding = padding if isinstance(padding, list) and len(padding) == n else [0] * n
    dilation = dilation if isinstance(dilation, list) and len(dilation) == n else [1] * n
    if len(shape) <= n:
        return None
    sizes = []
    for size, k, st, pad, dil in zip(shape[-n:], kernel, stride, padding, dilation):
        span = size + 2 * pad - dil * (k - 1) - 1
        sizes.append((-(-span // st) if ceil else span // st) + 1)
    return shape[:-n] + tuple(sizes)


def stashes(facts: dict[int, list[ForwardOp]], owner: np.ndarray,
            names: frozenset[str] | None = None, everything: bool = False
            ) -> dict[tuple[int, int], list[Stash]]:
    """Per (iteration, matching layer: `owner` from layer_owners), the activations its forward ops
    save, in program order; only ops named in `names` where given; with `everything`, each with
    the bytes of the other tensors its op saves (`saved_beside`)."""
    found: dict[tuple[int, int], list[Stash]] = {}
    for iteration, ops in facts.items():
        for op in ops:
            target = int(owner[op.layer]) if op.layer >= 0 else -1
            if target < 0 or (names is not None and op.name not in names):
                continue
            tensor = saved_tensor(op)
            if tensor is not None:
                also = sum(tensor_bytes(t) for t in saved_beside(op)) if everything else 0
                found.setdefault((iteration, target),
                                 []).append(Stash(op.row, op.layer, tensor[0], tensor[1], also))
    return found


@dataclass(slots=True)
class LayerWork:
    """One layer's work in one iteration: the last host task and GPU task of its forward, the first
    of its backward (-1 where none), and when the last host task of its forward began (recorded: the
    layers' forward order)."""

    forward_host: int = -1
    forward_gpu: int = -1
    backward_host: int = -1
    backward_gpu: int = -1
    forward_start_ns: int = 0


def layer_work(graph: Graph, layer_of_task: np.ndarray) -> dict[tuple[int, int], LayerWork]:
    """Per (iteration, layer as `layer_of_task` gives it per task), where its forward ends and its
    backward begins, on the host and on the GPU; only tasks read from the trace."""
    tasks = graph.tasks
    found: dict[tuple[int, int], LayerWork] = {}
    read = (tasks["event"] >= 0) & (tasks["iteration"] >= 0) & (layer_of_task >= 0)
    for kinds, last, first in ((HOST_WORK, "forward_host", "backward_host"),
                               (GPU_WORK, "forward_gpu", "backward_gpu")):
        chosen = np.flatnonzero(read & np.isin(tasks["kind"], [int(k) for k in kinds]))
        for phase, attribute, latest in ((FORWARD, last, True), (BACKWARD, first, False)):
            mine = chosen[tasks["phase"][chosen] == phase]
            key = tasks["measured_end_ns"][mine] if latest else -tasks["measured_start_ns"][mine]
            mine = mine[np.argsort(key, kind="stable")]  # the chosen one last
            for task in mine.tolist():
                work = found.setdefault((int(tasks["iteration"][task]), int(layer_of_task[task])),
                                        LayerWork())
                setattr(work, attribute, task)
    for work in found.values():
        if work.forward_host >= 0:
            work.forward_start_ns = int(tasks["measured_start_ns"][work.forward_host])
    return found


def _recorded(context: Context) -> dict[int, list[ForwardOp]]:
    recorded = context.forward_ops
    facts = recorded[0] if recorded is not None else {}
    return facts if any(op.inputs for ops in facts.values() for op in ops) else {}


# --------------------------------------------------------------------------- offload


def host_link(text: str, context: Context) -> tuple[float, str]:
    """(GB/s, where from) of the GPU <-> host link: `text` a HOST_LINKS name or a bandwidth
    ('25GB/s'); empty: the device table's GPU's PCIe, else DEFAULT_HOST_LINK."""
    name = text.strip().lower()
    if not name:
        key = context.device.key if context.device is not None else ""
        name = next((link for prefix, link in DEVICE_HOST_LINK if key.startswith(prefix)),
                    DEFAULT_HOST_LINK)
        where = (f"the {context.device.name}'s host link" if context.device is not None and key
                 else "no GPU known: default")
        return HOST_LINKS[name], f"{name}, {HOST_LINKS[name]:g} GB/s ({where})"
    if name in HOST_LINKS:
        return HOST_LINKS[name], f"{name}, {HOST_LINKS[name]:g} GB/s"
    try:
        speed = bandwidth(text)
    except ValueError:
        raise InputError(f"--opt offload:link={text}: not a host link ({', '.join(HOST_LINKS)}) or "
                         "a bandwidth such as 25GB/s") from None
    if speed <= 0:
        raise InputError(f"--opt offload:link={text}: the bandwidth must be positive")
    return speed, f"{speed:g} GB/s (link=)"


def _offload(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    if not graph.has_device_work():
        return (["offload: the trace has no GPU work: its activations are in host memory already; "
                 "nothing changed"])
    pattern, prefetch, on_copy = (str(params["layers"]), bool(params["prefetch"]),
                                  str(params["stream"]) == "copy")
    if str(params["stream"]) not in ("copy", "compute"):
        raise InputError(f"--opt offload:stream={params['stream']}: write stream=copy or "
                         "stream=compute")
    targets, owner, chosen = choose_layers(graph.layers, pattern, context.gradient_bytes,
                                           "offload")
    facts = _recorded(context)
    if not facts:
        return ["offload: the trace recorded no op shapes (record_shapes), so the activations' "
                "sizes are unknown; nothing changed"]
    speed, link = host_link(str(params["link"]), context)
    found = stashes(facts, owner, everything=not on_copy)
    work = layer_work(graph, owner[graph.tasks["layer"]])
    costs = context.costs
    host_ns = (int(round(CAST_CHAIN_UNITS * costs.host.unit_ns)) + costs.host.launch_ns
               if costs is not None else 0)
    plan = _offload_plan(found, work, prefetch)
    if not plan:
        return [f"offload: no activation of the layers {chosen} has both a forward and "
                "a backward on the GPU; nothing changed"]
    tensors = {} if on_copy else _tensors_saved(plan, context)
    copies = _insert_copies(graph, plan, speed, host_ns, on_copy, context.forward_ops[1], tensors)
    if costs is not None:
        costs.count(Tier.MODELLED, 2 * copies)
    iterations = max(1, len({key[0] for key in found}))
    moved = sum(item.bytes for items, *_ in plan for item in items) / iterations
    how = ("on two copy streams beside the compute (vDNN)" if on_copy
           else "on the compute stream, each after the op that saves it with the host waiting for "
                "it (as save_on_cpu)")
    when = ("prefetched one matching layer ahead" if prefetch
            else "fetched when its layer's backward begins")
    activations = sum(len(items) for items, *_ in plan) // iterations
    what = (f"{activations} saved activations ({moved / 2**20:.1f} MiB)" if on_copy else
            f"{copies // iterations} tensors saved for backward ({moved / 2**20:.1f} MiB: "
            f"{activations} activations with the weights, keys, values, outputs and indices their "
            "GEMMs, convolutions, attention and max pools save; the norms' weights and statistics "
            "counted by cost/saved.py, their bytes not)")
    return [f"offload: {what} of {len(targets)} layer(s) per iteration copied to host memory "
            f"after their layer's forward and back before its backward ({when}), {how}, over "
            f"{link} plus {COPY_SETUP_NS / 1e3:g} µs per copy; each copy's host work "
            f"{host_ns / 1e3:.1f} µs (a copy's dispatch chain and launch at this trace's host "
            "unit)"]


def _tensors_saved(plan: Plan, context: Context) -> dict[int, int]:
    """Per op row of `plan`, the tensors autograd saves in it (cost/saved.py, at least its
    activation): save_on_cpu copies each of them, weights included."""
    count = context.saved_tensors
    rows = np.array([item.row for items, *_ in plan for item in items], dtype=np.int64)
    if count is None or rows.size == 0:
        return {}
    found = count(rows)
    return {int(row): max(1, int(n)) for row, n in zip(rows.tolist(), found.tensors.tolist())}


#: One layer's offload in one iteration: its activations, its work, and where the copy back is
#: issued (the host task it is issued before, the GPU task it may start with, or -1).
Plan = list[tuple[list[Stash], LayerWork, int, int]]


def _offload_plan(found: dict[tuple[int, int], list[Stash]], work: dict[tuple[int, int], LayerWork],
                  prefetch: bool
                  ) -> Plan:
    plan: Plan = []
    for iteration in sorted({key[0] for key in found}):
        layers = [(work[key].forward_start_ns, key) for key in found if key[0] == iteration
                  and key in work]
        ordered = [key for _, key in sorted(layers)]
        ordered = [key for key in ordered if min(work[key].forward_gpu, work[key].backward_gpu,
                                                 work[key].forward_host,
                                                 work[key].backward_host) >= 0]
        for position, key in enumerate(ordered):
            mine = work[key]
            issue_host, issue_gpu = mine.backward_host, -1
            if prefetch and position + 1 < len(ordered):
                # the next layer's backward runs right before this one's
                before = work[ordered[position + 1]]
                issue_host, issue_gpu = before.backward_host, before.backward_gpu
            plan.append((found[key], mine, issue_host, issue_gpu))
    return plan


def _insert_copies(graph: Graph, plan: Plan, speed_gbs: float, host_ns: int, on_copy: bool,
                   spans: Spans, tensors: dict[int, int]) -> int:
    """The copies out after each layer's forward and back before its backward, with their host
    work: per activation one copy, or (`tensors`: per op row) as many as its op saves; the count."""
    sizes = [sum(item.bytes for item in items) for items, *_ in plan]
    copies = [sum(tensors.get(item.row, 1) for item in items) for items, *_ in plan]
    durations = [int(round(n * COPY_SETUP_NS + size / speed_gbs)) for n, size in zip(copies, sizes)]
    calls = [n * host_ns for n in copies]
    unpacks = splice(graph, [issue for *_, issue, _ in plan], calls, "offload: unpack (host)",
                     after=False)
    latency = graph.calibration.launch_latency_ns
    if on_copy:
        packs = splice(graph, [w.forward_host for _, w, _, _ in plan], calls,
                       "offload: pack (host)", after=True)
        out = _on_stream(graph, "offload: device to host copies", [w for _, w, _, _ in plan],
                         durations, sizes)
        # Back in backward order: each iteration's layers last to first.
        iteration = [int(graph.tasks["iteration"][w.forward_gpu]) for _, w, _, _ in plan]
        order = sorted(range(len(plan)), key=lambda i: (iteration[i], -i))
        made = _on_stream(graph, "offload: host to device copies", [plan[i][1] for i in order],
                          [durations[i] for i in order], [sizes[i] for i in order])
        back = np.empty_like(made)
        back[order] = made
        graph.add_edges([w.forward_gpu for _, w, _, _ in plan], out, DepKind.EVENT_WAIT)
        graph.add_edges(out, back, DepKind.EVENT_WAIT)
        early = [(b, issue) for b, (*_, issue) in zip(back.tolist(), plan) if issue >= 0]
        if early:
            graph.add_edges([issue for _, issue in early], [b for b, _ in early],
                            DepKind.EVENT_WAIT, from_start=True)
        graph.add_edges(back, [w.backward_gpu for _, w, _, _ in plan], DepKind.EVENT_WAIT)
    else:
        packs, out = _blocking_copies_out(graph, plan, speed_gbs, host_ns, spans, tensors)
        back = splice(graph, [w.backward_gpu for _, w, _, _ in plan], durations,
                      "offload: host to device copy", after=False)
        graph.tasks["kind"][back] = int(TaskKind.MEMCPY)
        graph.tasks["bytes"][back] = sizes
    graph.add_edges(packs, out, DepKind.LAUNCH, latency_ns=latency, from_start=True)
    graph.add_edges(unpacks, back, DepKind.LAUNCH, latency_ns=latency, from_start=True)
    return sum(copies)


def _blocking_copies_out(graph: Graph, plan: Plan, speed_gbs: float, host_ns: int,
                         spans: Spans, tensors: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """save_on_cpu's copies out, one per tensor an op saves (`tensors`: per op row), packed when
    the op has run (`spans`: its recorded span; its layer's forward where that is not known) and
    copied on the compute stream after the op's GPU work: the pack copies into pinned memory with
    a blocking copy_, so the host waits for each copy (and all the stream ran before it) before it
    goes on. Each op's copies as one: their set-ups and the activation's bytes. Returns (the
    packs, the copies), pairwise."""
    items = [(w, item) for stashed, w, _, _ in plan for item in stashed]
    holding, launched = HostSpans(graph), launched_by(graph)
    hosts, gpus = [], []
    for w, item in items:
        inside = holding.within(spans.get(item.row))
        work = [k for task in inside.tolist() for k in launched.get(task, [])]
        usable = inside.size > 0 and bool(work)
        hosts.append(int(inside[-1]) if usable else w.forward_host)
        gpus.append(max(work, key=lambda k: int(graph.tasks["measured_start_ns"][k]))
                    if usable else w.forward_gpu)
    copies = [tensors.get(item.row, 1) for _, item in items]
    packs = splice(graph, hosts, [n * host_ns for n in copies], "offload: pack (host)", after=True)
    out = splice(graph, gpus, [int(round(n * COPY_SETUP_NS + item.bytes / speed_gbs))
                               for n, (_, item) in zip(copies, items)],
                 "offload: device to host copy", after=True)
    graph.tasks["kind"][out] = int(TaskKind.MEMCPY)
    graph.tasks["bytes"][out] = [item.bytes for _, item in items]
    waits = splice(graph, packs, 0, "offload: wait for the copy out (host)", after=True)
    graph.add_edges(out, waits, DepKind.SYNC, latency_ns=graph.calibration.sync_return_ns)
    return packs, out


def _on_stream(graph: Graph, label: str, work: list[LayerWork], durations: list[int],
               sizes: list[int]) -> np.ndarray:
    """Copies on a new copy stream, one after another in the order
    given, each of its layer's iteration."""
    graph.resources.append(Resource(ResourceKind.GPU_STREAM, label))
    resource = len(graph.resources) - 1
    iteration = [int(graph.tasks["iteration"][w.forward_gpu]) for w in work]
    made = graph.add_tasks(kind=int(TaskKind.MEMCPY), resource=resource, duration_ns=durations,
                           bytes=sizes, name=graph.string_id(label.replace("copies", "copy")),
                           iteration=iteration)
    graph.add_edges(made[:-1], made[1:], DepKind.STREAM_ORDER)
    return made


register(Optimization(
    "offload",
    "activations offloaded to host memory between forward and backward (vDNN, save_on_cpu)",
    "each activation the matching layers' forward ops save (their first floating-point input, from "
    "the recorded shapes) copied to host memory after the layer's forward and back before its "
    "backward: on two copy streams beside the compute (stream=copy, as vDNN) or on the compute "
    "stream (stream=compute, as torch.autograd.graph.save_on_cpu issues them: one per tensor "
    "autograd saves, weights included (cost/saved.py), right after the op that saves it, the host "
    "waiting for each, as its copy into pinned memory blocks); the copy back "
    "issued when the backward of the matching layer before it in backward order begins "
    "(prefetch=1) or its own (prefetch=0), and the layer's backward waits for it; each copy takes "
    "its bytes over the host link (80% of the PCIe peak of the device table's GPU, or link=) plus "
    "2 µs of set-up, and each costs the host a copy's dispatch chain and launch (cost stage, this "
    "trace's host unit)",
    _offload,
    {"layers": Parameter(str, "", "regular expression over layer paths (default: the model's "
                                  "repeated blocks, such as blocks.0, blocks.1, ...)"),
     "prefetch": Parameter(int, 1, "1: copy back one matching layer ahead; 0: when the layer's "
                                   "backward begins", 0, 1),
     "stream": Parameter(str, "copy",
                         "copy: copy streams beside the compute; compute: the compute stream"),
     "link": Parameter(str, "",
                       "pcie3, pcie4, pcie5, pcie6 or a bandwidth (25GB/s); empty: the GPU's own")},
))


# --------------------------------------------------------------------------- gist

def _gist(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    pattern, format_name, sparsity = (str(params["layers"]), str(params["format"]),
                                      float(params["sparsity"]))
    encoded_ratio(format_name, 4, sparsity)  # an unknown format is refused before anything changes
    targets, owner, chosen = choose_layers(graph.layers, pattern, context.gradient_bytes,
                                           "gist")
    facts = _recorded(context)
    costs = context.costs
    if not facts or costs is None:
        return ["gist: the trace recorded no op shapes (record_shapes), so the activations' sizes "
                "are unknown; nothing changed"]
    found = [item for items in stashes(facts, owner, RELU_OPS).values() for item in items]
    work = layer_work(graph, graph.tasks["layer"])
    iteration_of = {op.row: iteration for iteration, ops in facts.items() for op in ops}
    spans = context.forward_ops[1]
    empty = LayerWork()
    encoded = [(item, work.get((iteration_of[item.row], item.layer), empty)) for item in found]
    encoded = [(item, w) for item, w in encoded if w.backward_host >= 0]
    if not encoded:
        return [f"gist: no ReLU of the layers {chosen} saves an activation that its "
                "backward reads; nothing changed"]
    sizes = np.array([item.bytes for item, _ in encoded], dtype=np.float64)
    ratios = np.array([encoded_ratio(format_name, ITEM_BYTES.get(item.type, 4), sparsity)
                       for item, _ in encoded])
    passes = np.array([costs.stream_ns(moved) for moved in sizes * (1 + ratios)], dtype=np.int64)
    costs.count(Tier.MODELLED, 2 * len(encoded))
    added = _add_passes(graph, [item.row for item, _ in encoded], [w for _, w in encoded], spans,
                        passes, costs.host.launch_ns)
    iterations = max(1, len({iteration_of[item.row] for item, _ in encoded}))
    saved = float((sizes * (1 - ratios)).sum()) / iterations
    return [f"gist: {len(encoded) // iterations} ReLU outputs per iteration of {len(targets)} "
            f"layer(s) encoded ({format_name}, {saved / 2**20:.2f} MiB fewer stashed) after the "
            f"ReLU and decoded before its layer's backward: {added} tasks, each pass timed by its "
            "bytes at this trace's elementwise speed (cost stage)"]


def _add_passes(graph: Graph, rows: list[int], work: list[LayerWork], spans: Spans,
                durations: np.ndarray, launch_ns: int) -> int:
    """An encode pass after each op (trace row) and a decode pass before
    its layer's backward: on a CPU graph host ops, on a GPU graph kernels
    on the op's stream with their launches. Returns the tasks added."""
    holding = HostSpans(graph)
    within = [holding.within(spans[row]) for row in rows]
    after_host = np.array([tasks[-1] if tasks.size else -1 for tasks in within], dtype=np.int64)
    usable = after_host >= 0
    before_host = np.array([w.backward_host for w in work], dtype=np.int64)
    if not graph.has_device_work():
        encode = splice(graph, after_host[usable], durations[usable], "gist: encode", after=True)
        decode = splice(graph, before_host[usable], durations[usable], "gist: decode", after=False)
        return int(encode.size + decode.size)
    launched = launched_by(graph)
    after_gpu = np.array([launched[task][-1] if task in launched else -1
                          for task in after_host.tolist()], dtype=np.int64)
    before_gpu = np.array([w.backward_gpu for w in work], dtype=np.int64)
    usable &= (after_gpu >= 0) & (before_gpu >= 0)
    calls = splice(graph, np.concatenate([after_host[usable], before_host[usable]]), launch_ns,
                   "gist: launch (host)", after=False)
    encode = splice(graph, after_gpu[usable], durations[usable], "gist: encode", after=True)
    decode = splice(graph, before_gpu[usable], durations[usable], "gist: decode", after=False)
    graph.add_edges(calls, np.concatenate([encode, decode]), DepKind.LAUNCH,
                    latency_ns=graph.calibration.launch_latency_ns, from_start=True)
    return int(calls.size + encode.size + decode.size)


register(Optimization(
    "gist", "ReLU outputs stashed encoded between forward and backward (Gist)",
    "each ReLU output (aten::relu, threshold) of the matching layers that its backward reads gets "
    "an encode pass right after the ReLU and a decode pass right before its layer's backward, each "
    "a streaming pass over the activation and its encoded form timed at this trace's own "
    "elementwise speed (cost stage; on a GPU trace a kernel on the ReLU's stream with its launch); "
    "formats: binarize (1 bit per element: ReLU's backward needs the sign only), csr (the "
    "non-zeros with a 1-byte index, at `sparsity` zeros), fp8 (1 byte per element)",
    _gist,
    {"layers": Parameter(str, "relu",
                         "regular expression over layer paths (match the ReLU modules)"),
     "format": Parameter(str, "binarize", "binarize, csr or fp8"),
     "sparsity": Parameter(float, 0.5, "share of zeros in the ReLU outputs (csr)", 0.0, 1.0)},
))
