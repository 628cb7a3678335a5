"""`fsdp`: fully sharded data parallelism over WORLD ranks (PyTorch
FSDP2, `fully_shard`) from one rank's trace.

FSDP2 shards each *unit* (a module `fully_shard` was applied to, and the root for the parameters no
unit holds) across the ranks. Per call of a unit, as torch.distributed.fsdp runs it:

- **forward**: before the unit's first op, its pre-forward hook copies this
  rank's shard into the all-gather buffer (copy-in), all-gathers the unit's
  parameters, and copies them out into the parameters (copy-out); after its
  last op, the post-forward hook frees them again (reshard=1, the default);
- **backward**: the same all-gather before the unit's first backward op (unless reshard=0 kept the
  parameters); with prefetch=1 (FSDP2's default) the unit's pre-backward hook issues the *next*
  unit's all-gather, so it overlaps this unit's backward; after the unit's last backward op its
  gradients are concatenated (chunk_cat) and reduce-scattered, each rank keeping its shard;
- **optimizer**: each rank updates its 1/world shard, on DTensors: each op's device work ÷ world,
  and each op pays DTensor's dispatch on the host.

On a GPU the collectives run on streams of their own: the all-gathers on one, the reduce-scatters on
another, and the compute waits for an all-gather only where it needs the parameters. On a CPU (gloo)
FSDP2 issues every collective synchronously, so the host waits for each where it issues it; and gloo
reduce-scatters a tensor by all-reducing the whole of it (ProcessGroupGloo has no reduce-scatter of
its own), so it is timed as that all-reduce.

Units: `units=REGEX` over layer paths; by default the repeated blocks:
the outermost numbered modules (`blocks.3`, `layers.11`, `h.0`) whose
list holds at least two of them with parameters. The root holds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from daydream.errors import InputError
from daydream.graph import DepKind, Graph, TaskKind
from daydream.interconnect import collective_steps
from daydream.mapping.attribution import layer_owners, repeated_blocks
from daydream.transforms.distributed.buckets import (
    BACKWARD,
    FORWARD,
    comm_resource,
    dispatched_optimizer,
    iterations_of,
    no_existing_collectives,
    optimizer_step,
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
from daydream.transforms.distributed.copies import CopySpeed, copy_speed
from daydream.transforms.distributed.fabric import LINK_PARAMETERS, Fabric, fabric
from daydream.transforms.primitives import launcher_of, splice
from daydream.transforms.registry import MAX_WORLD, Context, Optimization, Parameter, register

ROOT = "(root)"
#: Recorded collectives are named _PENDING, _PENDING - 1, ... until they are added (recorded
#: splices: -1, -2, ...).
_PENDING = -(2**40)
#: On a CPU the collectives' buffers are fresh allocations each time (no caching
#: allocator): a copy into or out of one moves its bytes this many times slower than
#: the trace's own elementwise speed (the pages' first touch), besides its op's own
#: host work ("fsdp.copy" host units). `python scripts/fsdp_costs.py DIR` (torch
#: 2.13 CPU, the 2-core development host): fitted over every copy op of its traces.
FRESH_COPY_SLOWDOWN = 1.41


@dataclass(slots=True, frozen=True)
class Unit:
    """One fully_shard'ed module: its path (ROOT for the root), its
    layers and its parameter bytes."""

    name: str
    layers: frozenset[int]
    bytes: int
    #: its layers that own parameters and hold no other layer: each runs once per call of the unit
    leaves: frozenset[int] = frozenset()


@dataclass(slots=True, frozen=True)
class Run:
    """One call of a unit in one phase: its first and last work task
    (the root's backward: the whole phase)."""

    unit: Unit
    first: int
    last: int


def fsdp_units(layers: list[str], sizes: dict[str, int], pattern: str) -> list[Unit]:
    """The units (the root last) with their layers and parameters;
    `pattern` "" takes the repeated blocks."""
    if pattern:
        targets, _ = layer_owners(layers, pattern)
        if not targets:
            raise InputError(f"fsdp: units={pattern!r} matches no layer of the trace — layers with "
                             "parameters are e.g. "
                             f"{', '.join(sorted(sizes)[:4]) or '(none recorded)'}")
        names = [layers[t] for t in targets]
        names = [n for n in names if not any(n.startswith(o + ".") for o in names if o != n)]
    else:
        names = repeated_blocks(sizes)
    index = {name: k for k, name in enumerate(layers)}
    parents = {name.rsplit(".", 1)[0] for name in layers if "." in name}
    leaves = frozenset(index[path] for path, size in sizes.items() if size > 0 and path in index
                       and path not in parents)
    units, claimed = [], set()
    for name in names:
        inside = [path for path in sizes if path == name or path.startswith(name + ".")]
        owned = frozenset(k for k, path in enumerate(layers) if path == name
                          or path.startswith(name + "."))
        claimed.update(inside)
        size = sum(sizes[p] for p in inside)
        if size > 0 and name in index:
            units.append(Unit(name, owned, size, owned & leaves))
    rest = [path for path, size in sizes.items() if path not in claimed and size > 0]
    if rest:
        owned = frozenset(k for k in range(len(layers)) if not any(k in u.layers for u in units))
        units.append(Unit(ROOT, owned, sum(sizes[p] for p in rest), owned & leaves))
    return units


@dataclass(slots=True)
class _Costs:
    """What FSDP2's hooks, copies and collective calls cost where they run (ns)."""

    copies: CopySpeed | None
    slowdown: float  # per byte, times the trace's elementwise speed
    copy_op_ns: int  # per copy op, its own host work (a CPU's; a GPU's copies are kernels)
    pre_forward_ns: int
    post_forward_ns: int
    pre_backward_ns: int
    post_backward_ns: int
    reduce_ns: int
    issue_ns: int
    optimizer_op_ns: int
    #: a forward call's hooks where its unit is already gathered (pre)
    #: and nothing is resharded after it (post)
    idle_forward_ns: tuple[int, int] = (0, 0)

    def copy_ns(self, nbytes: float) -> int:
        """One copy of `nbytes` into or out of a flat buffer: one op per unit, however many tensors
        it holds (a foreach copy, split_with_sizes_copy, chunk_cat)."""
        if self.copies is None:
            return 0
        if self.copy_op_ns:
            return int(round(self.copy_op_ns
                             + self.slowdown * 2.0 * nbytes / self.copies.bytes_per_ns))
        return self.copies.time_ns(nbytes, 1)


def unit_of_layers(units: list[Unit], layers: int) -> np.ndarray:
    """Per layer, the index in `units` of the unit that holds it (a block's over the root's), -1 for
    none; one more slot, -1, for a task's layer -1."""
    owner = np.full(layers + 1, -1, dtype=np.int64)
    for k in sorted(range(len(units)), key=lambda k: units[k].name != ROOT):
        # the root first, the blocks over it
        owner[sorted(units[k].layers)] = k
    return owner


def unit_runs(graph: Graph, units: list[Unit], iteration: int, phase: int) -> list[Run]:
    """The calls of each unit in `iteration`'s `phase`, in the order they began (the root's before
    its children's). Forward: the maximal runs of consecutive work of the unit's layers, the root's
    the runs of work inside the model at all (forward work outside every layer is outside the model:
    the loss, a rollout's environment). Backward: a unit's calls end only at work of another unit's
    or the root's layers (much of backward's work, autograd's own, is attributed to no layer), and
    the root's is one call over the whole phase (FSDP2 gathers it once for backward). Either way a
    run that comes back to a layer with parameters it already ran is a new call (`_calls`)."""
    work = phase_work(graph, iteration, phase)
    if work.size == 0:
        return []
    of_task = unit_of_layers(units, len(graph.layers))[graph.tasks["layer"][work]]
    position = {int(task): at for at, task in enumerate(work.tolist())}
    attributed = np.flatnonzero(of_task >= 0) if phase != FORWARD else np.arange(work.size)
    seen = of_task[attributed]
    layer_of = graph.tasks["layer"][work[attributed]]
    runs: list[Run] = []
    for k, unit in enumerate(units):
        if unit.name == ROOT and phase != FORWARD:
            runs.append(Run(unit, int(work[0]), int(work[-1])))
            continue
        member = (seen >= 0) if unit.name == ROOT else (seen == k)
        for a, b in true_runs(member):
            for first, last in _calls(layer_of, a, b, unit.leaves):
                runs.append(Run(unit, int(work[attributed[first]]), int(work[attributed[last]])))
    return sorted(runs, key=lambda r: (position[r.first], r.unit.name != ROOT))


def _calls(layer_of: np.ndarray, first: int, last: int,
           leaves: frozenset[int]) -> list[tuple[int, int]]:
    """A run [first, last] of one unit's work cut where a new call begins: where the work comes back
    to one of the unit's `leaves` (its layers with parameters and no layers inside) after leaving
    it: each runs once per call, so the unit was called again with nothing of another unit between
    (the backward of the calls of a rollout)."""
    cuts, seen, previous = [first], set[int](), -1
    for at in range(first, last + 1):
        layer = int(layer_of[at])
        if layer in leaves:
            if layer in seen and layer != previous:
                cuts.append(at)
                seen = set[int]()
            seen.add(layer)
        previous = layer
    return [(start, end - 1) for start, end in zip(cuts, [*cuts[1:], last + 1])]


class _Builder:
    """Records the FSDP2 work of each iteration's calls (the passes)
    and puts it into the graph at the end (`apply`)."""

    def __init__(self, graph: Graph, net: Fabric, costs: _Costs, world: int, reshard: bool,
                 prefetch: bool, forward_prefetch: bool, contention: float) -> None:
        self.graph, self.net, self.costs, self.world = graph, net, costs, world
        # the host's contention factor, and what it stretches each collective by (`apply`)
        self.contention, self.stretch = contention, 1.0
        self.reshard, self.prefetch, self.forward_prefetch = reshard, prefetch, forward_prefetch
        self.on_gpu = graph.has_device_work()
        self.gather = comm_resource(graph, "fsdp all-gather")
        self.reduce = comm_resource(graph, "fsdp reduce-scatter")
        # ((side, anchor), duration, name)
        self.spliced: list[tuple[tuple[str, int], int, str]] = []
        # (resource, after, bytes, name, duration)
        self.collectives: list[tuple[int, int, int, str, int]] = []
        # communication edges between recorded or existing tasks
        self.edges: list[tuple[int, int]] = []
        self.launcher = launcher_of(graph) if self.on_gpu else None
        self.gathers = self.reduces = self.calls = 0
        self.gathered_bytes = self.reduced_bytes = 0

    def host_of(self, task: int) -> int:
        """The host task that runs `task` (itself on a CPU graph; its launch call on a GPU one)."""
        if self.launcher is None:
            return task
        return self.launcher.get(task, task)

    # -- inserting
    # ---------------------------------------------------------------------------------------------
    # What the passes insert is recorded first and put into the graph at the end
    # (`apply`), a few splices and one add_tasks for all of it: inserting one task
    # at a time costs a pass over the graph each. A recorded task is named by a
    # negative number until then (`_PENDING`); existing tasks keep their ids.

    def _before(self, anchor: int, duration_ns: int, name: str) -> int:
        """A host op or kernel right before existing task `anchor`,
        after those recorded before it already."""
        return self._record(("before", anchor), duration_ns, name)

    def _after(self, anchor: int, duration_ns: int, name: str) -> int:
        """A host op or kernel right after `anchor` (an existing task or one recorded), nearer it
        than those recorded after it already."""
        return self._record(("after", anchor), duration_ns, name)

    def _record(self, where: tuple[str, int], duration_ns: int, name: str) -> int:
        self.spliced.append((where, max(duration_ns, 0), name))
        return -len(self.spliced)

    def _collective(self, resource: int, after: int, nbytes: int, name: str,
                    duration_ns: int) -> int:
        """A collective on `resource` once `after` has ended, after the
        one recorded on it before (issue order)."""
        self.collectives.append((resource, after, nbytes, name, duration_ns))
        return _PENDING - len(self.collectives) + 1

    def edge(self, src: int, dst: int) -> None:
        self.edges.append((src, dst))

    def apply(self) -> None:
        """Everything recorded, into the graph: splices round by round,
        then the collectives and their edges."""
        made: dict[int, int] = {}
        before: dict[int, list[int]] = {}
        after: dict[int, list[int]] = {}
        for k, ((side, anchor), _, _) in enumerate(self.spliced):
            (before if side == "before" else after).setdefault(anchor, []).append(k)
        # Before an existing task: its k-th recorded op in round k
        # (each splice puts its op nearest the anchor).
        for position in range(max((len(v) for v in before.values()), default=0)):
            chosen = [(anchor, ks[position]) for anchor, ks in before.items() if position < len(ks)]
            self._splice(chosen, after=False, made=made)
        # After: an op after a recorded op waits until that op is in;
        # ops after one anchor go in the order recorded.
        waiting = dict(after)
        while waiting:
            ready = {a: ks for a, ks in waiting.items() if a >= 0 or (-a - 1) in made}
            self._splice([(anchor, k) for anchor, ks in ready.items() for k in ks], after=True,
                         made=made)
            waiting = {a: ks for a, ks in waiting.items() if a not in ready}
        # each collective stretched by the others' compute beside it (`blocking_stretch`)
        self.stretch = blocking_stretch(self.contention, host_work_ns(self.graph),
                                        sum(c[4] for c in self.collectives))
        self.collectives = [(resource, after, nbytes, name, int(round(duration * self.stretch)))
                            for resource, after, nbytes, name, duration in self.collectives]
        self._apply_collectives(made)

    def _splice(self, chosen: list[tuple[int, int]], after: bool, made: dict[int, int]) -> None:
        if not chosen:
            return
        anchors = [anchor if anchor >= 0 else made[-anchor - 1] for anchor, _ in chosen]
        ids = splice(self.graph, anchors, [self.spliced[k][1] for _, k in chosen],
                     [self.spliced[k][2] for _, k in chosen], after=after)
        made.update({k: int(task) for (_, k), task in zip(chosen, ids.tolist())})

    def _apply_collectives(self, made: dict[int, int]) -> None:
        graph = self.graph
        if not self.collectives:
            return
        first = len(graph.tasks["kind"])

        def resolve(task: int) -> int:
            if task <= _PENDING:
                return first + _PENDING - task
            return made[-task - 1] if task < 0 else task

        after = np.array([resolve(c[1]) for c in self.collectives], dtype=np.int64)
        ends = graph.tasks["measured_end_ns"][after]
        ids = graph.add_tasks(kind=int(TaskKind.COLLECTIVE),
                              resource=[c[0] for c in self.collectives],
                              name=[graph.string_id(c[3]) for c in self.collectives],
                              duration_ns=[c[4] for c in self.collectives],
                              bytes=[c[2] for c in self.collectives],
                              iteration=graph.tasks["iteration"][after],
                              phase=graph.tasks["phase"][after], measured_start_ns=ends,
                              measured_end_ns=ends)
        graph.add_edges(after, ids, DepKind.COMMUNICATION)
        resources = np.array([c[0] for c in self.collectives], dtype=np.int64)
        for resource in np.unique(resources).tolist():
            # one at a time on its stream, in the order they were issued
            mine = ids[resources == resource]
            graph.add_edges(mine[:-1], mine[1:], DepKind.STREAM_ORDER)
        if self.edges:
            graph.add_edges([resolve(s) for s, _ in self.edges],
                            [resolve(d) for _, d in self.edges], DepKind.COMMUNICATION)

    def _issue_gather(self, at: int, unit: Unit, label: str) -> int:
        """At host task position before `at`: copy-in, the all-gather, and (on a CPU) the host's
        wait for it. Returns the all-gather."""
        costs = self.costs
        shard = unit.bytes / self.world
        if self.on_gpu:  # copy-in runs on the all-gather's stream: part of its time
            issue = self._before(at, costs.issue_ns, f"fsdp: all-gather issue ({unit.name})")
            duration = self.net.time_ns("allgather", unit.bytes) + costs.copy_ns(shard)
            collective = self._collective(self.gather, issue, unit.bytes,
                                          f"fsdp all-gather ({label}, {unit.name}, "
                                          f"{unit.bytes / 2**20:.1f} MiB)", duration)
        else:
            copy_in = self._before(at, costs.copy_ns(shard),
                                   f"fsdp: all-gather copy-in ({unit.name})")
            collective = self._collective(self.gather, copy_in, unit.bytes,
                                          f"fsdp all-gather ({label}, {unit.name}, "
                                          f"{unit.bytes / 2**20:.1f} MiB)",
                                          self.net.time_ns("allgather", unit.bytes))
            returned = self._before(at, costs.issue_ns, f"fsdp: all-gather call ({unit.name})")
            self.edge(collective, returned)
        self.gathers += 1
        self.gathered_bytes += unit.bytes
        return collective

    def _copy_out(self, first_work: int, host_at: int, unit: Unit, collective: int) -> None:
        """The gathered parameters copied out before the unit's first work, after its all-gather."""
        duration = self.costs.copy_ns(unit.bytes)
        name = f"fsdp: all-gather copy-out ({unit.name})"
        copy = self._before(first_work if self.on_gpu else host_at, duration, name)
        self.edge(collective, copy)

    # -- the passes
    # --------------------------------------------------------------------------------------------

    def gather_pass(self, runs: list[Run], label: str, prefetch: bool, hook_ns: int, post_ns: int,
                    sharded: dict[str, bool], reshard_after: bool,
                    idle: tuple[int, int] | None = None) -> None:
        """Per call in order: its pre-hook; if its unit is sharded, its all-gather (issued in the
        previous call's hook under `prefetch`) and its copy-out; after its last work, its post-hook,
        which reshards the unit when `reshard_after`. `sharded`: each unit's state, carried from
        call to call. `idle`: what the pre-hook costs where the unit is already gathered and the
        post-hook where it reshards nothing (None: as the others)."""
        issued: dict[int, int] = {}
        idle_pre, idle_post = idle if idle is not None else (hook_ns, post_ns)
        for k, run in enumerate(runs):
            host_first = self.host_of(run.first)
            unit = run.unit
            gathers = sharded.get(unit.name, True)
            self._before(host_first, hook_ns if gathers else idle_pre,
                         f"fsdp: pre-{label} hook ({unit.name})")
            if gathers:
                collective = (issued.pop(k) if k in issued
                              else self._issue_gather(host_first, unit, label))
                self._copy_out(run.first, host_first, unit, collective)
                sharded[unit.name] = False
            if prefetch and k + 1 < len(runs) and sharded.get(runs[k + 1].unit.name, True) \
                    and runs[k + 1].unit.name != unit.name:
                issued[k + 1] = self._issue_gather(host_first, runs[k + 1].unit, label)
            post = post_ns if reshard_after else idle_post
            if post:
                self._after(self.host_of(run.last), post, f"fsdp: post-{label} hook ({unit.name})")
            if reshard_after:
                sharded[unit.name] = True

    def reduce_pass(self, runs: list[Run]) -> int | None:
        """After each unit's last backward call: its reduce hook, chunk_cat, and the reduce-scatter
        (on a CPU, waited for where issued); the root's last. Returns the last reduce-scatter."""
        costs = self.costs
        last_of: dict[str, Run] = {}
        for run in runs:
            last_of[run.unit.name] = run
        order = sorted(last_of.values(), key=lambda r: r.unit.name == ROOT)
        last_collective = None
        operation = "reducescatter" if self.on_gpu else "allreduce"
        for run in order:
            unit = run.unit
            hook = self._after(self.host_of(run.last), costs.reduce_ns,
                               f"fsdp: post-backward reduce ({unit.name})")
            name = f"fsdp reduce-scatter ({unit.name}, {unit.bytes / 2**20:.1f} MiB)"
            duration = self.net.time_ns(operation, unit.bytes)
            if self.on_gpu:
                # chunk_cat runs on the reduce-scatter's stream, after the gradients' last kernel
                collective = self._collective(self.reduce, hook, unit.bytes, name,
                                              duration + costs.copy_ns(unit.bytes))
                self.edge(run.last, collective)
            else:
                cat = self._after(hook, costs.copy_ns(unit.bytes), f"fsdp: chunk_cat ({unit.name})")
                collective = self._collective(self.reduce, cat, unit.bytes, name, duration)
                returned = self._after(cat, costs.issue_ns,
                                       f"fsdp: reduce-scatter call ({unit.name})")
                self.edge(collective, returned)
            self.reduces += 1
            self.reduced_bytes += unit.bytes
            last_collective = collective
        return last_collective


def _costs(graph: Graph, context: Context) -> _Costs:
    speed = copy_speed(graph, context.elementwise_speed(graph.has_device_work()), context.device)
    host = context.costs.host if context.costs is not None else None

    def units(what: str) -> int:
        return host.recorded_ns(f"fsdp.{what}") if host is not None else 0

    on_gpu = graph.has_device_work()
    return _Costs(speed, 1.0 if on_gpu else FRESH_COPY_SLOWDOWN, 0 if on_gpu else units("copy"),
                  units("pre_forward"), units("post_forward"), units("pre_backward"),
                  units("post_backward"), units("reduce"), units("collective"),
                  units("optimizer_op"), (units("pre_forward_idle"), units("post_forward_idle")))


def _fsdp(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    world = int(params["world"])
    no_existing_collectives(graph, "fsdp")
    if not context.gradient_bytes:
        raise InputError("fsdp: the trace lists no per-layer parameters, so its units cannot be "
                         "sized — record it with daydream trace")
    units = fsdp_units(graph.layers, context.gradient_bytes, str(params["units"]))
    if world == 1:
        return ["fsdp: world=1 shards nothing; the step is unchanged"]
    net = fabric(params, context, world)
    costs = _costs(graph, context)
    reshard, prefetch = bool(int(params["reshard"])), bool(int(params["prefetch"]))
    factor, source = calibrate(graph, params, context, min(world, net.per_node))
    # On a CPU host each rank blocks in its collectives while the other ranks on the host, which
    # reach them at other moments, may compute: where they share the CPUs a blocking collective
    # is stretched for the share of the step they compute (`blocking_stretch`).
    builder = _Builder(graph, net, costs, world, reshard, prefetch,
                       bool(int(params["forward_prefetch"])),
                       factor if not graph.has_device_work() else 1.0)
    iterations = iterations_of(graph)
    problems: list[str] = []
    optimizer_ops = 0
    for iteration in iterations:  # every iteration's calls found before anything is inserted
        forward = unit_runs(graph, units, iteration, FORWARD)
        backward = unit_runs(graph, units, iteration, BACKWARD)
        if not forward:
            continue
        builder.calls += len(forward) + len(backward)
        # each unit gathered where it is sharded: every forward call under reshard=1, else its
        # first; after each backward call a block reshards (the root once backward has ended)
        sharded: dict[str, bool] = {}
        builder.gather_pass(forward, "forward", builder.forward_prefetch, costs.pre_forward_ns,
                            costs.post_forward_ns, sharded, reshard, costs.idle_forward_ns)
        builder.gather_pass(backward, "backward", prefetch, costs.pre_backward_ns,
                            costs.post_backward_ns, sharded, True)
        last = builder.reduce_pass(backward)
        if last is not None and builder.on_gpu:
            target, problem = optimizer_step(graph, iteration, backward[-1].last)
            if target is not None:
                builder.edge(last, target)
            if problem and problem not in problems:
                problems.append(problem)
        optimizer_ops += dispatched_optimizer(graph, iteration, world, costs.optimizer_op_ns)
    builder.apply()
    graph.data_parallel = replace(graph.data_parallel, world=world, link=net.link,
                                  contention=factor, contention_source=source,
                                  host_ranks=min(world, net.per_node),
                                  collective_steps=collective_steps("allgather", world, "ring"))
    return _notes(units, builder, len(iterations), optimizer_ops, (factor, source), problems)


def _notes(units: list[Unit], builder: _Builder, iterations: int, optimizer_ops: int,
           contention: tuple[float, str], problems: list[str]) -> list[str]:
    each = max(iterations, 1)
    blocks = [u for u in units if u.name != ROOT]
    shown = (", ".join(u.name for u in blocks[:3])
             + (f", … ({len(blocks)} in all)" if len(blocks) > 3 else ""))
    root = next((u for u in units if u.name == ROOT), None)
    world = builder.world
    notes = [f"fsdp: world={world}, {len(units)} unit{'s' if len(units) != 1 else ''} "
             f"({shown or 'none but the root'}"
             + (f"; the root holds {root.bytes / 2**20:.1f} MiB" if root else "")
             + f") over {builder.net.describe()}", f"fsdp: per iteration {builder.calls // each} "
                                                   "calls of the units, forward and backward, "
             f"{builder.gathers // each} all-gathers ({builder.gathered_bytes / each / 2**20:.1f} "
             f"MiB) and {builder.reduces // each} reduce-scatters "
             f"({builder.reduced_bytes / each / 2**20:.1f} MiB)"
             + ("" if builder.reshard else "; reshard=0: parameters kept from forward to backward")
             + ("; the next unit's all-gather issued in each pre-backward hook (prefetch)"
                if builder.prefetch else "")]
    if not builder.on_gpu:
        notes.append("fsdp: on a CPU (gloo) each collective is waited for where it is issued, and "
                     "a reduce-scatter is an all-reduce of the unit's whole gradients (gloo has no "
                     "reduce-scatter of its own)"
                     + (f"; {blocking_note(builder.stretch, builder.contention)}"
                        if builder.stretch > 1.0 else ""))
    costs = builder.costs
    if costs.copies is None:
        notes.append("fsdp: the trace has no elementwise ops with recorded shapes, so the copies "
                     "in and out of the collectives' buffers are not timed")
    else:
        notes.append("fsdp: copies into and out of the collectives' buffers at "
                     f"{costs.copies.bytes_per_ns:.1f} GB/s + {costs.copies.overhead_ns / 1e3:.1f} "
                     f"µs per op ({costs.copies.source}); hooks "
                     f"{costs.pre_forward_ns / 1e3:.0f}/{costs.post_forward_ns / 1e3:.0f} µs "
                     "(pre/post forward), "
                     f"{costs.pre_backward_ns / 1e3:.0f}/{costs.post_backward_ns / 1e3:.0f} µs "
                     f"(pre/post backward) per call, {costs.reduce_ns / 1e3:.0f} µs per reduce, "
                     "from host units measured on FSDP2 runs (cost/host.py)")
    notes.append(f"fsdp: the optimizer's device work ÷{world}; {optimizer_ops // each} of its host "
                 f"ops per iteration each +{costs.optimizer_op_ns / 1e3:.0f} µs of DTensor "
                 "dispatch")
    factor, source = contention
    notes.append(f"fsdp: contention ×{factor:.2f} where collectives overlap compute ({source})"
                 if factor > 1.0
                 else f"fsdp: no contention modelled ({source})")
    return notes + problems


register(Optimization(
    "fsdp", "fully sharded data parallelism (PyTorch FSDP2, fully_shard) over WORLD ranks, from a "
            "one-rank trace",
    "per call of a unit (units=REGEX, default the repeated blocks; the root holds the rest), "
    "before its forward and (reshard=1) its backward: a copy-in, an all-gather of its parameters "
    "and a copy-out; prefetch=1 issues the next unit's all-gather in each pre-backward hook "
    "(forward_prefetch=1 in each pre-forward hook too); after its last backward call, a chunk_cat "
    "and a reduce-scatter of its gradients; the optimizer's device work ÷world, each of its host "
    "ops plus DTensor's dispatch; the hooks' host time from host units measured on FSDP2 runs. "
    "GPU: collectives on an all-gather and a reduce-scatter stream, the compute waits where it "
    "needs them; CPU (gloo): each collective waited for where issued, a reduce-scatter timed as "
    "gloo's all-reduce of the whole buffer",
    _fsdp,
    {"world": Parameter(int, 8, "data-parallel ranks the model is sharded over", 1, MAX_WORLD),
     **LINK_PARAMETERS, "units": Parameter(str, "", "regular expression over layer paths: the "
                                                    "modules fully_shard wraps (default: the "
                                                    "repeated blocks)"),
     "reshard": Parameter(int, 1, "1: parameters freed after each unit's forward and gathered "
                                  "again for its backward (reshard_after_forward=True); 0: kept", 0,
                          1),
     "prefetch": Parameter(int, 1, "1: each unit's pre-backward hook issues the next unit's "
                                   "all-gather (FSDP2's default); 0: each unit gathers its own", 0,
                           1),
     "forward_prefetch": Parameter(int, 0, "1: each pre-forward hook issues the next unit's "
                                           "all-gather too (set_modules_to_forward_prefetch); 0: "
                                           "not (the default)", 0, 1),
     "contention": CONTENTION_PARAMETER},
))

__all__ = ["ROOT", "Unit", "fsdp_units", "unit_of_layers"]
