"""`pp`: pipeline parallelism over STAGES ranks
(torch.distributed.pipelining) from one rank's trace.

The model is cut at block boundaries into S stages, each on a rank of its own, and the batch into M
micro-batches. From one iteration of the trace, per stage and micro-batch:

- **the stage's work**: its forward (and backward) tasks are those of its layers' work, with the
  work no layer owns (the loss, autograd's own) taking the stage of the work before it on its thread
  (a kernel: its launch's); each is copied once per micro-batch, re-timed at 1/M of the batch by the
  cost stage (the `batch-size` what-if at factor 1/M), onto the stage's own threads and streams;
- **between stages**: a forward's activations are sent to the next stage and a backward's input
  gradients to the one before, each a send/recv over the fabric the receiving chunk waits for;
- **the schedule**: each stage runs its chunks in the schedule's order (`gpipe`: every forward, then
  every backward; `1f1b`: S - 1 - s forwards, then one forward and one backward in turn, then the
  remaining backwards), each after the one before on each of its threads and streams; the bubbles
  come out of the simulation;
- **the rest of the step**: the work before the forward (making the batch) stays on stage 0; each
  stage runs the optimizer for its own parameters (the optimizer's work × the stage's share of the
  parameters); the iteration ends when every stage has stepped.

Stages are balanced by the trace's time: the cut between blocks that makes the slowest stage
fastest, the layers before the first block (embeddings) on the first stage, those after the last
(the head, the loss) on the last.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from daydream.cost.shapes import tensor_bytes
from daydream.errors import InputError
from daydream.graph import DepKind, Graph, Resource, ResourceKind, TaskKind
from daydream.graph.model import GPU_WORK, HOST_TASKS
from daydream.mapping.attribution import LayerWork, repeated_blocks, work_by_layer
from daydream.transforms.distributed.buckets import (
    BACKWARD,
    FORWARD,
    OPTIMIZER,
    iterations_of,
    no_existing_collectives,
)
from daydream.transforms.distributed.fabric import LINK_PARAMETERS, fabric
from daydream.transforms.primitives import launcher_of, remove
from daydream.transforms.registry import Context, Optimization, Parameter, register
from daydream.transforms.reshape import op_layers

SCHEDULES = ("gpipe", "1f1b")
#: Edges that say the order of work on one thread or stream: a chunk's
#: copy gets its own, in its recorded order.
PROGRAM_ORDER = (int(DepKind.HOST_ORDER), int(DepKind.STREAM_ORDER))
CHUNK_KINDS = [int(k) for k in (*HOST_TASKS, *GPU_WORK) if k != TaskKind.MARKER]


@dataclass(slots=True, frozen=True)
class Stage:
    """One pipeline stage: its blocks (module paths), every layer it
    holds, and its parameter bytes."""

    index: int
    blocks: tuple[str, ...]
    layers: frozenset[int]
    bytes: int


def schedule(kind: str, stages: int, microbatches: int, stage: int) -> list[tuple[int, int]]:
    """Stage `stage`'s chunks in the order it runs them: (phase, micro-batch), FORWARD or BACKWARD.

    >>> schedule("1f1b", 2, 3, 0)  # one forward in flight before the first backward reaches stage 0
    [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (1, 2)]
    """
    if kind == "gpipe":
        return ([(FORWARD, m) for m in range(microbatches)]
                + [(BACKWARD, m) for m in range(microbatches)])
    warmup = min(stages - 1 - stage, microbatches)
    order = [(FORWARD, m) for m in range(warmup)]
    for m in range(warmup, microbatches):
        order += [(FORWARD, m), (BACKWARD, m - warmup)]
    return order + [(BACKWARD, m) for m in range(microbatches - warmup, microbatches)]


def balanced_cuts(costs: list[int], stages: int) -> list[int]:
    """Where to cut `costs` (per block, in order) into `stages` runs so the largest sum is smallest:
    the index of each stage's first block. Ties go to the earliest cut."""
    count = len(costs)
    prefix = np.concatenate([[0], np.cumsum(costs)]).tolist()
    best = [[float("inf")] * (count + 1) for _ in range(stages + 1)]
    choice = [[0] * (count + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for s in range(1, stages + 1):
        for end in range(s, count + 1):
            for start in range(s - 1, end):
                value = max(best[s - 1][start], prefix[end] - prefix[start])
                if value < best[s][end]:
                    best[s][end], choice[s][end] = value, start
    cuts, end = [], count
    for s in range(stages, 0, -1):
        cuts.append(choice[s][end])
        end = choice[s][end]
    return cuts[::-1]


def pipeline_stages(layers: list[str], sizes: dict[str, int], stages: int,
                    work: LayerWork) -> list[Stage]:
    """The model's repeated blocks cut into `stages`, balanced by each block's forward and backward
    work (`work`); the layers outside every block on the first stage if their forward ran before the
    first block's, else on the last. The blocks' holders (the model, its ModuleList) are on none:
    their work goes where the work around it does."""
    blocks = repeated_blocks(sizes)
    if len(blocks) < stages:
        raise InputError(f"pp: stages={stages} but the model has {len(blocks)} repeated blocks to "
                         f"cut between ({', '.join(blocks[:4]) or 'none found'}) — use "
                         f"stages=1..{max(len(blocks), 1)}")
    inside = [frozenset(k for k, p in enumerate(layers) if p == b or p.startswith(b + "."))
              for b in blocks]
    cuts = balanced_cuts([int(work.work_ns[sorted(members)].sum()) if members else 0
                          for members in inside], stages)
    ends = [*cuts[1:], len(blocks)]
    held = [set().union(*inside[start:end]) for start, end in zip(cuts, ends)]
    starts = [int(work.first_forward_ns[k]) for k in inside[0] if work.first_forward_ns[k] >= 0]
    first_block = min(starts, default=0)
    claimed = set().union(*inside)
    holders = {p for b in blocks for p in _ancestors(b)}
    for k, path in enumerate(layers):
        if k not in claimed and path not in holders:
            held[0 if 0 <= work.first_forward_ns[k] < first_block else -1].add(k)
    return [Stage(s, tuple(blocks[start:end]), frozenset(mine),
                  sum(sizes.get(layers[k], 0) for k in mine))
            for s, (start, end, mine) in enumerate(zip(cuts, ends, held))]


def graph_layer_work(graph: Graph) -> LayerWork:
    """LayerWork from a graph's tasks: the forward's and backward's
    durations per layer, the first forward start."""
    tasks = graph.tasks
    return work_by_layer(tasks["layer"], tasks["phase"], tasks["duration_ns"].astype(np.float64),
                         tasks["measured_start_ns"], len(graph.layers))


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def stage_of_tasks(graph: Graph, tasks: np.ndarray, layer_stage: np.ndarray, default: int,
                   launcher: dict[int, int]
                   ) -> np.ndarray:
    """Per task of `tasks` (one phase of one iteration), its stage: its layer's, else the stage of
    the task before it on its thread or stream (`default` for none), a kernel without a layer its
    launch's (`launcher`: primitives.launcher_of)."""
    stage = layer_stage[graph.tasks["layer"][tasks]]
    resource = graph.tasks["resource"][tasks]
    order = np.lexsort((tasks, graph.tasks["measured_start_ns"][tasks]))
    position = {int(t): k for k, t in enumerate(tasks.tolist())}
    current: dict[int, int] = {}
    for k in order.tolist():
        if stage[k] >= 0:
            current[int(resource[k])] = int(stage[k])
            continue
        source = launcher.get(int(tasks[k]))
        if source is not None and source in position and stage[position[source]] >= 0:
            stage[k] = stage[position[source]]
        else:
            stage[k] = current.get(int(resource[k]), default)
        current[int(resource[k])] = int(stage[k])
    return stage


@dataclass(slots=True)
class _Copy:
    """One chunk's copy: original task -> its copy, and per resource
    its first and last copied task."""

    ids: dict[int, int]
    first: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)


class _Pipeline:
    """Builds the pipelined graph: chunk copies per stage, on each
    stage's resources, chained in schedule order."""

    def __init__(self, graph: Graph, durations: np.ndarray, stages: list[Stage],
                 microbatches: int) -> None:
        self.graph, self.durations, self.stages, self.microbatches = (
            graph, durations, stages, microbatches)
        # (stage, original resource) -> the stage's resource
        self.resources: dict[tuple[int, int], int] = {}
        self.last_on: dict[int, int] = {}  # resource -> the last task placed on it
        self.pending_edges: list[tuple[int, int, int]] = []  # (src, dst, kind)
        self.removed: list[np.ndarray] = []
        self.launcher = launcher_of(graph)  # before any copy: the recorded launches
        self.sends = 0

    def resource(self, stage: int, original: int) -> int:
        if stage == 0:
            return original
        key = (stage, original)
        if key not in self.resources:
            base = self.graph.resources[original]
            self.graph.resources.append(replace(base, label=f"{base.label} (pp stage {stage})"))
            self.resources[key] = len(self.graph.resources) - 1
        return self.resources[key]

    def copy(self, tasks: np.ndarray, stage: int, edges: np.ndarray, scale: float = 1.0,
             keep_delays: bool = False
             ) -> _Copy:
        """`tasks` (in recorded order) copied onto `stage`'s resources, their edges among them
        (`edges`: the iteration's edges inside `tasks`' chunk) and program order on each resource,
        chained after what the resource ran before."""
        graph = self.graph
        source = {name: graph.tasks[name][tasks] for name in graph.tasks}
        columns = dict(source)
        columns["resource"] = np.array([self.resource(stage, int(r))
                                        for r in source["resource"].tolist()],
                                       dtype=np.int64)
        columns["duration_ns"] = np.rint(self.durations[tasks] * scale).astype(np.int64)
        # a collective another layout put into the step (tp's) carries
        # 1/M of its bytes per micro-batch
        inserted = source["kind"] == TaskKind.COLLECTIVE
        columns["duration_ns"][inserted] //= self.microbatches
        columns["bytes"] = np.where(inserted, source["bytes"] // self.microbatches, source["bytes"])
        columns["event"] = np.full(tasks.size, -1)
        if not keep_delays:
            columns["delay_ns"] = np.zeros(tasks.size, dtype=np.int64)
            columns["delay_span_ns"] = np.zeros(tasks.size, dtype=np.int64)
            columns["unexplained"] = np.zeros(tasks.size, dtype=bool)
        ids = graph.add_tasks(**columns)
        mapping = dict(zip(tasks.tolist(), ids.tolist()))
        made = _Copy(mapping)
        if edges.size:
            kinds = graph.edges["kind"][edges]
            keep = ~np.isin(kinds, PROGRAM_ORDER)
            src = [mapping[int(s)] for s in graph.edges["src"][edges][keep]]
            dst = [mapping[int(d)] for d in graph.edges["dst"][edges][keep]]
            for kind in np.unique(kinds[keep]).tolist():
                chosen = kinds[keep] == kind
                graph.add_edges(np.array(src)[chosen], np.array(dst)[chosen], DepKind(kind),
                                latency_ns=graph.edges["latency_ns"][edges][keep][chosen])
        for new in ids.tolist():
            resource = int(graph.tasks["resource"][new])
            made.first.setdefault(resource, new)
            made.last[resource] = new
            before = self.last_on.get(resource)
            if before is not None:
                self.pending_edges.append((before, new, self._order_kind(resource)))
            self.last_on[resource] = new
        return made

    def _order_kind(self, resource: int) -> int:
        kind = self.graph.resources[resource].kind
        return int(DepKind.HOST_ORDER if kind == ResourceKind.HOST_THREAD else DepKind.STREAM_ORDER)

    def send(self, resource: int, sender: _Copy, receiver: _Copy, nbytes: int, duration_ns: int,
             name: str, iteration: int, phase: int) -> None:
        """A send/recv once the sender's chunk has ended on each of its resources, which the
        receiving chunk's first task on each of its resources waits for."""
        graph = self.graph
        end = int(graph.tasks["measured_end_ns"][max(sender.last.values())])
        (task,) = graph.add_tasks(kind=int(TaskKind.COLLECTIVE), resource=resource,
                                  name=graph.string_id(name), duration_ns=duration_ns, bytes=nbytes,
                                  iteration=iteration, phase=phase, measured_start_ns=end,
                                  measured_end_ns=end).tolist()
        before = self.last_on.get(resource)
        if before is not None:
            self.pending_edges.append((before, task, int(DepKind.STREAM_ORDER)))
        self.last_on[resource] = task
        for last in sender.last.values():
            self.pending_edges.append((last, task, int(DepKind.COMMUNICATION)))
        for first in receiver.first.values():
            self.pending_edges.append((task, first, int(DepKind.COMMUNICATION)))
        self.sends += 1

    def flush(self) -> None:
        if not self.pending_edges:
            return
        table = np.array(self.pending_edges, dtype=np.int64)
        for kind in np.unique(table[:, 2]).tolist():
            mine = table[table[:, 2] == kind]
            self.graph.add_edges(mine[:, 0], mine[:, 1], DepKind(kind))
        self.pending_edges = []


def _edges_within(graph: Graph, members: np.ndarray) -> np.ndarray:
    inside = np.zeros(graph.task_count, dtype=bool)
    inside[members] = True
    return np.flatnonzero(inside[graph.edges["src"]] & inside[graph.edges["dst"]])


def _recorded_order(graph: Graph, tasks: np.ndarray) -> np.ndarray:
    return tasks[np.lexsort((tasks, graph.tasks["measured_start_ns"][tasks]))]


def _microbatch_durations(graph: Graph, microbatches: int, context: Context, fixed_percentile: float
                          ) -> tuple[np.ndarray, list[str]]:
    """Each task's duration at 1/`microbatches` of the batch, by the
    batch-size what-if on a copy."""
    from daydream.transforms.registry import OPTIMIZATIONS

    resized = graph.copy()
    batch = OPTIMIZATIONS["batch-size"]
    params = {**batch.defaults(), "factor": 1.0 / microbatches,
              "fixed_percentile": fixed_percentile}
    notes = batch.apply(resized, params, context)
    if resized.task_count != graph.task_count:
        raise AssertionError("batch-size added or removed tasks")
    return (resized.tasks["duration_ns"].copy(),
            [n.replace("batch-size", "pp: each micro-batch", 1) for n in notes])


def _activation_bytes(context: Context, graph: Graph, stages: list[Stage],
                      microbatches: int) -> int | None:
    """The bytes one micro-batch's activations take between stages: the
    first batch-carrying input of the second stage's first op with recorded
    shapes, at 1/M of the batch; None where the trace records no shapes."""
    of_batch = context.batch_ops
    found = of_batch(0) if of_batch is not None else None
    if found is None or found.batch is None or not found.ops or len(stages) < 2:
        return None
    layer_of_row = op_layers(graph, found.ops, context)
    second = stages[1].layers
    for op in sorted(found.ops, key=lambda o: o.start_ns):
        if layer_of_row.get(op.row, -1) in second:
            for tensor in op.tensors:
                if (tensor is not None and found.shape is not None
                    and found.shape.axis(tensor[0]) is not None):
                    return int(tensor_bytes(tensor) / microbatches)
    return None


def _pp(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    stages_count, microbatches, kind = (int(params["stages"]), int(params["microbatches"]),
                                        str(params["schedule"]))
    if kind not in SCHEDULES:
        raise InputError(f"pp: schedule={kind!r} is not one daydream simulates — use one of "
                         f"{', '.join(SCHEDULES)}")
    no_existing_collectives(graph, "pp")
    if not context.gradient_bytes:
        raise InputError("pp: the trace lists no per-layer parameters, so the model cannot be cut "
                         "into stages — record it with daydream trace")
    batch = _recorded_batch(context)
    if batch is not None and batch % microbatches:
        raise InputError(f"pp: microbatches={microbatches} does not divide the trace's batch of "
                         f"{batch} — use one of "
                         f"{', '.join(str(d) for d in range(1, batch + 1) if batch % d == 0)}")
    work = context.layer_work if context.layer_work is not None else graph_layer_work(graph)
    stages = pipeline_stages(graph.layers, context.gradient_bytes, stages_count, work)
    if stages_count == 1 and microbatches == 1:
        return ["pp: stages=1, microbatches=1 is the step as recorded"]
    durations, notes = _microbatch_durations(graph, microbatches, context,
                                             float(params["fixed_percentile"]))
    net = fabric(params, context, 2)
    activation = _activation_bytes(context, graph, stages, microbatches)
    pipeline = _Pipeline(graph, durations, stages, microbatches)
    layer_stage = np.full(len(graph.layers) + 1, -1, dtype=np.int64)
    for stage in stages:
        layer_stage[sorted(stage.layers)] = stage.index
    total_bytes = max(sum(s.bytes for s in stages), 1)
    links = {(s, d): _link(graph, s, d) for s in range(stages_count) for d in (s - 1, s + 1)
             if 0 <= d < stages_count}
    for iteration in iterations_of(graph):
        _pipeline_iteration(pipeline, graph, iteration, layer_stage, kind, links, activation or 0,
                            net.time_ns(
            "sendrecv", activation or 0) if activation else 0, total_bytes)
    pipeline.flush()
    if pipeline.removed:
        remove(graph, np.concatenate(pipeline.removed))
    graph.data_parallel = replace(graph.data_parallel, host_ranks=stages_count)
    return _notes(stages, microbatches, kind, pipeline, activation, net.describe(),
                  len(iterations_of(graph))) + notes


def _link(graph: Graph, sender: int, receiver: int) -> int:
    graph.resources.append(Resource(ResourceKind.COMM_CHANNEL,
                                    f"pp send stage {sender} -> {receiver}"))
    return len(graph.resources) - 1


def _recorded_batch(context: Context) -> int | None:
    of_batch = context.batch_ops
    found = of_batch(0) if of_batch is not None else None
    return found.batch if found is not None else None


def _pipeline_iteration(pipeline: _Pipeline, graph: Graph, iteration: int, layer_stage: np.ndarray,
                        kind: str, links: dict[tuple[int, int], int], activation: int, send_ns: int,
                        total_bytes: int) -> None:
    tasks = graph.tasks
    in_iteration = (tasks["iteration"] == iteration) & np.isin(tasks["kind"], CHUNK_KINDS)
    stages = pipeline.stages
    count = len(stages)
    chunks: dict[tuple[int, int], np.ndarray] = {}
    for phase, default in ((FORWARD, 0), (BACKWARD, count - 1)):
        members = _phase_members(graph, in_iteration, phase)
        if members.size == 0:
            return
        stage = stage_of_tasks(graph, members, layer_stage, default, pipeline.launcher)
        for s in range(count):
            chunks[(phase, s)] = _recorded_order(graph, members[stage == s])
    every = np.concatenate(list(chunks.values()))
    chunk_edges = {key: _edges_within(graph, members) for key, members in chunks.items()}
    outside_in, outside_out = _boundary_edges(graph, every)
    copies: dict[tuple[int, int, int], _Copy] = {}
    for step in _interleaved(kind, count, pipeline.microbatches):
        phase, s, m = step
        members = chunks[(phase, s)]
        if members.size == 0:
            continue
        made = pipeline.copy(members, s, chunk_edges[(phase, s)],
                             keep_delays=(m == 0 and phase == FORWARD))
        copies[step] = made
        neighbour = s - 1 if phase == FORWARD else s + 1
        if 0 <= neighbour < count and (phase, neighbour, m) in copies:
            pipeline.send(links[(neighbour, s)], copies[(phase, neighbour, m)], made, activation,
                          send_ns,
                          f"pp send ({'activations' if phase == FORWARD else 'gradients'}, stage "
                          f"{neighbour} -> {s}, micro-batch {m})", iteration, phase)
    _reconnect(pipeline, graph, copies, outside_in, outside_out)
    _optimizers(pipeline, graph, iteration, total_bytes)
    _iteration_end(pipeline, graph, iteration)
    pipeline.removed.append(every)


def _iteration_end(pipeline: _Pipeline, graph: Graph, iteration: int) -> None:
    """The iteration ends once every stage's threads and streams have done its last task."""
    if iteration >= len(graph.iteration_markers):
        return
    end = graph.iteration_markers[iteration][1]
    for (stage, _), resource in pipeline.resources.items():
        last = pipeline.last_on.get(resource)
        if last is not None and stage > 0:
            pipeline.pending_edges.append((last, end, int(DepKind.CROSS_THREAD)))


def _phase_members(graph: Graph, in_iteration: np.ndarray, phase: int) -> np.ndarray:
    """The tasks of `phase` in the iteration (`in_iteration`), with the work
    of no phase that ran between the forward's first task and the backward's
    (the loss: the last stage's forward) or within the backward."""
    tasks = graph.tasks
    start = tasks["measured_start_ns"]
    forward = np.flatnonzero(in_iteration & (tasks["phase"] == FORWARD))
    backward = np.flatnonzero(in_iteration & (tasks["phase"] == BACKWARD))
    if forward.size == 0 or backward.size == 0:
        return np.empty(0, dtype=np.int64)
    if phase == FORWARD:
        low, high = int(start[forward].min()), int(start[backward].min())
        own = forward
    else:
        low, high = int(start[backward].min()), int(tasks["measured_end_ns"][backward].max()) + 1
        own = backward
    between = (in_iteration & ~np.isin(tasks["phase"],
                                       [FORWARD, BACKWARD,
                                        OPTIMIZER]) & (start >= low) & (start < high))
    return np.union1d(own, np.flatnonzero(between))


def _interleaved(kind: str, count: int, microbatches: int) -> list[tuple[int, int, int]]:
    """Every stage's chunks (phase, stage, micro-batch) in an order where each comes after what it
    waits for: its stage's chunk before it and its neighbour's chunk that sends to it."""
    orders = [schedule(kind, count, microbatches, s) for s in range(count)]
    done: set[tuple[int, int, int]] = set()
    at = [0] * count
    result = []
    while any(at[s] < len(orders[s]) for s in range(count)):
        progressed = False
        for s in range(count):
            if at[s] >= len(orders[s]):
                continue
            phase, m = orders[s][at[s]]
            neighbour = s - 1 if phase == FORWARD else s + 1
            if 0 <= neighbour < count and (phase, neighbour, m) not in done:
                continue
            if phase == BACKWARD and (FORWARD, s, m) not in done:
                continue
            done.add((phase, s, m))
            result.append((phase, s, m))
            at[s] += 1
            progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocks")
    return result


def _boundary_edges(graph: Graph, every: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges into the iteration's chunks from outside them, and out of them to outside."""
    inside = np.zeros(graph.task_count, dtype=bool)
    inside[every] = True
    src_in, dst_in = inside[graph.edges["src"]], inside[graph.edges["dst"]]
    return np.flatnonzero(~src_in & dst_in), np.flatnonzero(src_in & ~dst_in)


def _reconnect(pipeline: _Pipeline, graph: Graph, copies: dict[tuple[int, int, int], _Copy],
               outside_in: np.ndarray, outside_out: np.ndarray) -> None:
    """What led into a chunk leads into its first copy; what left it leaves
    its last copy (stage 0's the work before the forward and the optimizer;
    the same holds for the iteration's markers on every stage)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for (_phase, _s, m), made in copies.items():
        for old, new in made.ids.items():
            if m == 0:
                first[old] = new
            if m == pipeline.microbatches - 1:
                last[old] = new
    edges = graph.edges
    for index in outside_in.tolist():
        dst = first.get(int(edges["dst"][index]))
        if dst is not None:
            pipeline.pending_edges.append((int(edges["src"][index]), dst,
                                           int(edges["kind"][index])))
    for index in outside_out.tolist():
        src = last.get(int(edges["src"][index]))
        if src is not None:
            pipeline.pending_edges.append((src, int(edges["dst"][index]),
                                           int(edges["kind"][index])))


def _optimizers(pipeline: _Pipeline, graph: Graph, iteration: int, total_bytes: int) -> None:
    """Stage 0 keeps the optimizer's tasks at its share of the parameters; each other stage runs a
    copy at its own, and the iteration's end waits for it."""
    tasks = graph.tasks
    optimizer = _recorded_order(graph,
                                np.flatnonzero((tasks["iteration"] == iteration) & (
                                    tasks["phase"] == OPTIMIZER)
                                                      & np.isin(tasks["kind"], CHUNK_KINDS)))
    if optimizer.size == 0:
        return
    edges = _edges_within(graph, optimizer)
    share = [stage.bytes / total_bytes for stage in pipeline.stages]
    for stage in pipeline.stages[1:]:
        pipeline.copy(optimizer, stage.index, edges, scale=share[stage.index])
    tasks["duration_ns"][optimizer] = np.rint(tasks["duration_ns"][optimizer] * share[0]).astype(
        np.int64)


def _notes(stages: list[Stage], microbatches: int, kind: str, pipeline: _Pipeline,
           activation: int | None, link: str, iterations: int) -> list[str]:
    shown = "; ".join(f"stage {s.index}: {s.blocks[0]}"
                      + (f"…{s.blocks[-1]}" if len(s.blocks) > 1 else "")
                      + f" ({s.bytes / 2**20:.1f} MiB)" for s in stages)
    notes = [f"pp: {len(stages)} stages × {microbatches} micro-batches, schedule {kind} ({shown})",
             "pp: each chunk's work copied per micro-batch onto its stage's threads and streams; "
             "the iteration ends when every stage has stepped its optimizer (its share of the "
             "parameters)"]
    if activation is None:
        notes.append("pp: the trace records no op shapes, so the activations sent between stages "
                     "are not sized: the sends take no time")
    else:
        notes.append(f"pp: per iteration {pipeline.sends // max(iterations, 1)} sends of "
                     f"{activation / 2**20:.2f} MiB between stages (a micro-batch's activations "
                     f"forward, their gradients back) over {link}")
    return notes


register(Optimization(
    "pp", "pipeline parallelism (torch.distributed.pipelining) over STAGES ranks and MICROBATCHES "
          "micro-batches",
    "the model cut at block boundaries into stages balanced by the trace's time; each stage's "
    "forward and backward work copied per micro-batch onto the stage's own threads and streams, "
    "re-timed at 1/M of the batch by the cost stage (batch-size:factor=1/M); activations and their "
    "gradients sent between stages over the fabric; each stage runs its chunks in the schedule's "
    "order (gpipe or 1f1b), the bubbles from the simulation; the optimizer per stage at its share "
    "of the parameters",
    _pp,
    {"stages": Parameter(int, 2,
                         "pipeline stages (ranks), each a run of the model's repeated blocks", 1,
                         1024),
     "microbatches": Parameter(int, 4, "micro-batches the batch is split into", 1, 65536),
     "schedule": Parameter(str, "1f1b", "gpipe or 1f1b"),
     "fixed_percentile": Parameter(float, 10.0, "where the trace records no op shapes: the "
                                                "percentile of durations "
                                   "taken as a task's fixed cost when it runs at 1/M of the batch",
                                   0.0, 100.0),
     "memory_stage": Parameter(int, -1, "with --memory: the stage whose rank's memory is predicted "
                                        "(-1: the stage with the largest peak)", -1, 1023),
     **LINK_PARAMETERS},
))

__all__ = ["SCHEDULES", "Stage", "balanced_cuts", "graph_layer_work", "pipeline_stages", "schedule",
           "stage_of_tasks"]
