"""Comparing two traces of the same model (A before a change, B after)
and explaining the difference.

    comparison = diff_traces(trace_a, trace_b)
    comparison.measured_b_ns - comparison.measured_a_ns     # the change of the iteration time, ns
    [(c.name, c.change_ns, c.explains_ns) for c in comparison.classes]

Both traces are cut into *work*: per GPU kernel, copy, memset and collective inside an
iteration (or, for a CPU-only trace, per CPU op's self time inside an iteration), with
its kernel class (`daydream.mapping.classes`), phase and layer. Totals are means per
iteration, so the traces may hold different numbers of iterations.

The explanation is simulated: A's dependency graph is replayed, then A's work of one
class (or phase, or the host's own time) is rescaled to B's total for it and the graph
replayed again; the change of the simulated iteration time is what that difference
*explains*. Work that grew off the critical path explains little. All differences
applied at once give `together_ns`; the measured change minus that is not explained by
rescaling A's work (new kinds of work, changed dependencies, replay error).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from daydream.graph import Graph, TaskKind, build_graph
from daydream.graph.job import tie_collectives
from daydream.graph.model import GPU_WORK, HOST_WORK
from daydream.mapping import PHASES, attribute, find_iterations, link
from daydream.mapping.attribution import self_time_ns
from daydream.mapping.classes import CLASSES, classes_of
from daydream.mapping.collectives import match_collectives
from daydream.mapping.iterations import completed
from daydream.mapping.linking import innermost_enclosing
from daydream.simulate.job import simulate_job
from daydream.simulate.replay import Replay, measure_replay
from daydream.trace import EventKind, Trace
from daydream.transforms.primitives import scale

#: GPU task kinds whose class is their kind, whatever their name says.
_CLASS_OF_KIND = {int(TaskKind.MEMCPY): "memory", int(TaskKind.MEMSET): "memory",
                  int(TaskKind.COLLECTIVE): "communication"}
OTHER_PHASE = PHASES.index("other")
#: Below this share of common layers (of the larger layer set), A and B look like different models.
COMMON_LAYER_SHARE = 0.5


@dataclass(slots=True)
class Work:
    """The work of one rank's iterations, one row per piece; totals via `per_iteration`.

    `basis` is "gpu" (rows are GPU tasks, `ns` their durations) or "cpu" (rows are CPU ops
    of a CPU-only trace, `ns` their self time, `task` the top-level op's task holding them).
    `host_tasks` are the host tasks inside iterations whose own CPU time is "the host":
    their gaps, and on a GPU trace their durations too.
    """

    basis: str
    task: np.ndarray
    ns: np.ndarray
    klass: np.ndarray  # index into CLASSES
    phase: np.ndarray  # index into PHASES
    layer: np.ndarray  # index into `layers`, -1 for none
    layers: list[str]
    iterations: int
    host_tasks: np.ndarray
    host_ns: float  # per iteration

    def per_iteration(self, groups: np.ndarray, count: int) -> np.ndarray:
        """Work per iteration (ns, float) of each group 0..count-1;
        rows with group -1 are left out."""
        keep = groups >= 0
        return np.bincount(groups[keep], weights=self.ns[keep],
                           minlength=count)[:count] / self.iterations


@dataclass(slots=True)
class Change:
    """One class, phase, layer or the host: work per iteration in A and
    B (ns) and what the change explains.

    `explains_ns` is the simulated change of A's iteration time when A's work of this kind
    is rescaled to B's total; None where nothing was simulated (layers, or work A lacks).
    """

    name: str
    a_ns: int
    b_ns: int
    explains_ns: int | None = None

    @property
    def change_ns(self) -> int:
        return self.b_ns - self.a_ns


@dataclass(slots=True)
class Comparison:
    """One rank of A against the same rank of B; times are means per iteration, ns."""

    rank: int | None
    basis: tuple[str, str]
    iterations: tuple[int, int]
    measured_a_ns: int
    measured_b_ns: int
    simulated_a_ns: int
    classes: list[Change]
    host: Change
    phases: list[Change]
    layers: list[Change]  # every layer of either, largest absolute change first
    layers_in_common: tuple[int, int, int]  # (layers with work in A, in B, in both)
    together_ns: int  # simulated change with every class and the host rescaled at once
    notes: list[str] = field(default_factory=list)

    @property
    def measured_change_ns(self) -> int:
        return self.measured_b_ns - self.measured_a_ns

    @property
    def not_explained_ns(self) -> int:
        return self.measured_change_ns - self.together_ns


def diff_traces(trace_a: Trace, trace_b: Trace) -> Comparison:
    """Compare one rank's trace A with B's, and explain the change by
    simulating A's graph rescaled."""
    return diff_pairs([trace_a], [trace_b])[0]


def diff_pairs(traces_a: list[Trace], traces_b: list[Trace]) -> list[Comparison]:
    """Compare rank by rank (the caller checks that both hold the same ranks, in the same order).

    A's ranks are replayed together, as `daydream replay` does, so that a change on one rank
    reaches the others through the collectives they share.
    """
    graphs_a = [build_graph(trace) for trace in traces_a]
    # Work is measured before tying collectives, which shortens them to the transfer alone.
    works_a = [measure_work(trace, graph) for trace, graph in zip(traces_a, graphs_a)]
    tie_collectives(graphs_a, match_collectives(traces_a))
    works_b = [measure_work(trace, build_graph(trace)) for trace in traces_b]
    explainer = _Explainer(traces_a, graphs_a, works_a)
    comparisons = [_compare(*args)
                   for args in zip(traces_a, traces_b, works_a, works_b, explainer.baseline)]
    _explain(explainer, comparisons)
    return comparisons


def _compare(trace_a: Trace, trace_b: Trace, work_a: Work, work_b: Work,
             replay: Replay) -> Comparison:
    """The tables of one rank, without the simulated explanation."""
    classes = _changes(work_a, work_b, work_a.klass, work_b.klass, CLASSES)
    layers, common = _layer_changes(work_a, work_b)
    return Comparison(
        rank=trace_a.meta.rank, basis=(work_a.basis, work_b.basis),
        iterations=(work_a.iterations, work_b.iterations),
        measured_a_ns=_mean([it.measured_ns for it in replay.iterations]),
        measured_b_ns=_mean([it.measured_ns
                             for it in completed(trace_b, find_iterations(trace_b),
                                                 link(trace_b).launch)]),
        simulated_a_ns=_mean([it.simulated_ns for it in replay.iterations]), classes=classes,
        host=Change("host", round(work_a.host_ns), round(work_b.host_ns)),
        phases=_changes(work_a, work_b, work_a.phase, work_b.phase, PHASES), layers=layers,
        layers_in_common=common, together_ns=0,
        notes=_notes(trace_a, trace_b, work_a, work_b, classes, common),
    )


def _explain(explainer: _Explainer, comparisons: list[Comparison]) -> None:
    """Fill in what each class, phase and the host explains, and all of them at once."""
    works = explainer.works
    for index, name in enumerate(CLASSES):
        _explain_group(explainer, [_named(c.classes, name) for c in comparisons],
                       [w.klass == index for w in works])
    for index, name in enumerate(PHASES):
        _explain_group(explainer, [_named(c.phases, name) for c in comparisons],
                       [w.phase == index for w in works])
    host_factors = [_factor(c.host) for c in comparisons]
    for comparison, effect in zip(comparisons,
                                  explainer.rescaled([None] * len(works), host_factors)):
        comparison.host.explains_ns = effect
    together = [_class_factors(c.classes)[w.klass] for c, w in zip(comparisons, works)]
    for comparison, effect in zip(comparisons, explainer.rescaled(together, host_factors)):
        comparison.together_ns = effect or 0


def _explain_group(explainer: _Explainer, changes: list[Change | None],
                   rows: list[np.ndarray]) -> None:
    """Per rank, rescale A's `rows` (a mask over its work) to B's
    total; what it does to the iteration."""
    factors: list[np.ndarray | None] = []
    for change, mask in zip(changes, rows):
        factor = _factor(change) if change is not None else None
        factors.append(None if factor is None else np.where(mask, factor, 1.0))
    for change, effect in zip(changes, explainer.rescaled(factors)):
        if change is not None:
            change.explains_ns = effect


# ---------------------------------------------------------------------------- work


def measure_work(trace: Trace, graph: Graph) -> Work:
    """The work of `trace`'s iterations: GPU tasks if the graph has any, else CPU ops' self time."""
    iterations = max(len(find_iterations(trace)), 1)
    if graph.has_device_work():
        return _gpu_work(graph, iterations)
    return _cpu_work(trace, graph, iterations)


def _gpu_work(graph: Graph, iterations: int) -> Work:
    """GPU tasks inside iterations; the host is every host task's own
    time and the gaps before it."""
    tasks = graph.tasks
    in_iteration = tasks["iteration"] >= 0
    gpu = np.flatnonzero(np.isin(tasks["kind"], [int(k) for k in GPU_WORK]) & in_iteration)
    klass = classes_of(tasks["name"][gpu], graph.strings)
    for kind, name in _CLASS_OF_KIND.items():
        klass[tasks["kind"][gpu] == kind] = CLASSES.index(name)
    host = _host_tasks(graph, HOST_WORK)
    return Work(basis="gpu", task=gpu, ns=tasks["duration_ns"][gpu].astype(np.float64), klass=klass,
                phase=_phases(tasks["phase"][gpu]), layer=tasks["layer"][gpu].astype(np.int64),
                layers=list(graph.layers), iterations=iterations, host_tasks=host,
                host_ns=float(tasks["gap_ns"][host].sum()
                              + tasks["duration_ns"][host].sum()) / iterations)


def _cpu_work(trace: Trace, graph: Graph, iterations: int) -> Work:
    """CPU ops' self time, each inside the top-level op that is its host task (CPU-only traces).

    The host is the time between top-level ops (their gaps): Python and framework time.
    """
    tasks = graph.tasks
    top_tasks = np.flatnonzero((tasks["kind"] == TaskKind.HOST_OP) & (tasks["event"] >= 0))
    task_of_row = np.full(len(trace), -1, dtype=np.int64)
    task_of_row[tasks["event"][top_tasks]] = top_tasks
    ops = trace.indices(EventKind.CPU_OP)
    top = innermost_enclosing(trace, tasks["event"][top_tasks], ops)
    task = np.where(task_of_row[ops] >= 0, task_of_row[ops],
                    np.where(top >= 0, task_of_row[np.maximum(top, 0)], -1))
    inside = task >= 0
    inside[inside] = tasks["iteration"][task[inside]] >= 0
    ops, task = ops[inside], task[inside]
    attribution = attribute(trace)
    host = _host_tasks(graph, (TaskKind.HOST_OP,))
    return Work(basis="cpu", task=task, ns=self_time_ns(trace, ops),
                klass=classes_of(trace.name[ops], trace.strings),
                phase=_phases(attribution.phase[ops]),
                layer=attribution.layer[ops].astype(np.int64), layers=list(attribution.layers),
                iterations=iterations, host_tasks=host,
                host_ns=float(tasks["gap_ns"][host].sum()) / iterations)


def _host_tasks(graph: Graph, kinds: tuple[TaskKind, ...]) -> np.ndarray:
    """Host tasks of `kinds` inside iterations, and the marker ending each iteration.

    The end marker's gap is the host time before the boundary: it belongs to the iteration
    that ends there, not to the next one, which the marker's own start places it in.
    """
    tasks = graph.tasks
    chosen = np.isin(tasks["kind"], [int(k) for k in kinds]) & (tasks["iteration"] >= 0)
    chosen[[end for _, end in graph.iteration_markers]] = True
    return np.flatnonzero(chosen)


def _phases(phase: np.ndarray) -> np.ndarray:
    """Phase index per row; work without one counts as "other"."""
    phase = phase.astype(np.int64)
    return np.where(phase >= 0, phase, OTHER_PHASE)



# ---------------------------------------------------------------------------- changes


def _changes(work_a: Work, work_b: Work, groups_a: np.ndarray, groups_b: np.ndarray,
             names: tuple[str, ...]) -> list[Change]:
    a = work_a.per_iteration(groups_a, len(names))
    b = work_b.per_iteration(groups_b, len(names))
    return [Change(name, round(a[i]), round(b[i])) for i, name in enumerate(names) if a[i] or b[i]]


def _layer_changes(work_a: Work, work_b: Work) -> tuple[list[Change], tuple[int, int, int]]:
    a = dict(zip(work_a.layers, work_a.per_iteration(work_a.layer, len(work_a.layers))))
    b = dict(zip(work_b.layers, work_b.per_iteration(work_b.layer, len(work_b.layers))))
    with_a = {name for name, ns in a.items() if ns}
    with_b = {name for name, ns in b.items() if ns}
    changes = [Change(name, round(a.get(name, 0.0)), round(b.get(name, 0.0)))
               for name in _ordered(work_a.layers, work_b.layers)
               if name in with_a | with_b]
    changes.sort(key=lambda c: -abs(c.change_ns))
    return changes, (len(with_a), len(with_b), len(with_a & with_b))


def _ordered(*lists: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(name for names in lists for name in names))


def _factor(change: Change) -> float | None:
    """B's work over A's; None when A has none to rescale."""
    return change.b_ns / change.a_ns if change.a_ns else None


def _named(changes: list[Change], name: str) -> Change | None:
    return next((change for change in changes if change.name == name), None)


def _class_factors(classes: list[Change]) -> np.ndarray:
    """B's work over A's for every class in CLASSES; 1 for classes A
    lacks (nothing to rescale) or neither has."""
    factors = np.ones(len(CLASSES))
    for change in classes:
        factors[CLASSES.index(change.name)] = _factor(change) or 1.0
    return factors


def _notes(trace_a: Trace, trace_b: Trace, work_a: Work, work_b: Work, classes: list[Change],
           common: tuple[int, int, int]) -> list[str]:
    notes = []
    if work_a.basis != work_b.basis:
        notes.append(f"A's work is {work_a.basis.upper()} time and B's is {work_b.basis.upper()} "
                     "time: the per-class and per-phase changes compare different things")
    with_a, with_b, both = common
    if with_a or with_b:
        if both < COMMON_LAYER_SHARE * max(with_a, with_b):
            notes.append(f"A and B have {both} layers in common (A has {with_a}, B {with_b}): they "
                         "look like different models, so the changes compare different work")
    else:
        notes.append("neither trace names layers (record with daydream trace, or the profiler's "
                     "with_stack=True): no per-layer comparison")
    new = [c.name for c in classes if not c.a_ns and c.b_ns]
    if new:
        notes.append(f"work only B has ({', '.join(new)}) cannot be simulated by rescaling A: it "
                     "is part of what is not explained")
    if work_a.iterations != work_b.iterations:
        notes.append(f"A has {work_a.iterations} iterations and B has {work_b.iterations}: means "
                     "per iteration are compared")
    if trace_a.gpu_names != trace_b.gpu_names:
        notes.append(f"A ran on {', '.join(trace_a.gpu_names) or 'no GPU'} and B on "
                     f"{', '.join(trace_b.gpu_names) or 'no GPU'}")
    return notes


def _mean(values: list[int]) -> int:
    return round(float(np.mean(values))) if values else 0


# ---------------------------------------------------------------------------- simulation


class _Explainer:
    """Replays copies of A's graphs (all ranks together) with some of A's work rescaled.

    Results are per rank: the change of the mean simulated iteration (ns) from the baseline.
    """

    def __init__(self, traces: list[Trace], graphs: list[Graph], works: list[Work]) -> None:
        self.traces, self.graphs, self.works = traces, graphs, works
        self.baseline = self._replay(graphs)
        self.baseline_ns = [_mean([it.simulated_ns for it in r.iterations]) for r in self.baseline]

    def rescaled(self, row_factors: list[np.ndarray | None],
                 host_factors: list[float | None] | None = None) -> list[int | None]:
        """Per rank: the simulated change when each work row is multiplied by its factor and the
        host's time by the host factor. None for a rank with nothing to rescale (its work of this
        kind is new in B); 0, without simulating, when no factor differs from 1.
        """
        host_factors = host_factors if host_factors is not None else [None] * len(row_factors)
        rescalable = [rows is not None or host is not None
                      for rows, host in zip(row_factors, host_factors)]
        moves = [(rows is not None and bool(np.any(rows != 1.0)))
                 or (host is not None and host != 1.0)
                 for rows, host in zip(row_factors, host_factors)]
        if not any(moves):
            return [0 if ok else None for ok in rescalable]
        graphs = [graph.copy() for graph in self.graphs]
        for graph, work, rows, host in zip(graphs, self.works, row_factors, host_factors):
            if rows is not None:
                _scale_rows(graph, work, rows)
            if host is not None and host != 1.0:
                _scale_host(graph, work, host)
        replays = self._replay(graphs)
        return [_mean([it.simulated_ns for it in replay.iterations]) - base if ok else None
                for replay, base, ok in zip(replays, self.baseline_ns, rescalable)]

    def _replay(self, graphs: list[Graph]) -> list[Replay]:
        return ([measure_replay(trace, graph, timeline)
                 for trace, graph, timeline in zip(self.traces, graphs, simulate_job(graphs))])


def _scale_rows(graph: Graph, work: Work, row_factors: np.ndarray) -> None:
    """Each task holding work is scaled by the work-weighted mean factor of its rows.

    A GPU task holds one row, so it takes that row's factor; a top-level CPU op grows by
    (factor - 1) times the self time of each op inside it.
    """
    weight = np.bincount(work.task, weights=work.ns, minlength=graph.task_count)
    weighted = np.bincount(work.task, weights=work.ns * row_factors, minlength=graph.task_count)
    ids = np.flatnonzero((weight > 0) & (weighted != weight))
    factors = weighted[ids] / weight[ids]
    scale(graph, ids, function=lambda _graph, _ids: factors)


def _scale_host(graph: Graph, work: Work, factor: float) -> None:
    ids = work.host_tasks
    if work.basis == "gpu":
        scale(graph, ids, factor=factor, gaps=True)
        return
    # On a CPU-only trace the ops' durations are the classified work;
    # the host is the time between them.
    gaps = graph.tasks["gap_ns"]
    gaps[ids] = np.rint(gaps[ids] * factor).astype(np.int64)
