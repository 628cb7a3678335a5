"""The recorded constants of the compile what-if, from pairs of real CPU traces: eager and torch.compile'd.

    python scripts/compile_costs.py examples/compile        # EXAMPLE-baseline / EXAMPLE-compile, per round-N folder

Per pair (examples/training.py, then the same with --compile, both under daydream trace):

- the compiled wrapper per call, in the host units of the pair's eager trace (cost/host.py; the units a prediction
  converts with): forward, each call of the compiled module less the compiled graphs inside it (`## Call
  CompiledFxGraph`): dynamo's cache lookup and AOTAutograd's runtime wrappers; backward, each CompiledFunctionBackward
  node less its graph; both less the ATen ops the call runs beside its graph. Apart: a module's first call in a phase
  and iteration, and its warm calls (each within transforms/compiler.py `WARM_WITHIN_NS` of the module's last);
- the fused share (cost/compiled.py `FUSED_SHARE`): per phase, the time inside the compiled graphs that is not an
  extern op, over the recorded time of the eager trace's fusible ops (cost/compiled.compiler_view) in the same calls.

The medians over pairs (each pair's own median over its calls) are what `RECORDED_HOST_UNITS` ("compile.forward.cpu",
"compile.forward_warm.cpu", "compile.backward.cpu", "compile.backward_warm.cpu") and `FUSED_SHARE` hold.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daydream.api import open_job  # noqa: E402
from daydream.cost.compiled import EXTERN_OPS, compiler_view  # noqa: E402
from daydream.cost.host import HostCosts  # noqa: E402
from daydream.graph import Graph  # noqa: E402
from daydream.mapping import PHASES  # noqa: E402
from daydream.mapping.linking import innermost_enclosing  # noqa: E402
from daydream.trace import EventKind, Trace  # noqa: E402
from daydream.transforms.compiler import Warmth, compiled_roots, regions  # noqa: E402

FORWARD, BACKWARD = PHASES.index("forward"), PHASES.index("backward")
GRAPH = "## Call CompiledFxGraph"
BACKWARD_NODE = "CompiledFunctionBackward"


def _read(path: Path) -> tuple[Trace, Graph]:
    job = open_job(path, build=True)
    assert job.graphs is not None
    return job.traces[0], job.graphs[0]


def _inside(trace: Trace, rows: np.ndarray, start: int, end: int, track: int) -> np.ndarray:
    keep = (trace.ts_ns[rows] >= start) & (trace.end_ns[rows] <= end) & (trace.track[rows] == track)
    return rows[keep]


def compiled_calls(path: Path, unit: int) -> tuple[dict[tuple[int, bool], list[float]], dict[int, float]]:
    """((phase, warm) -> the compiled wrapper of each call, in host units of `unit` ns; phase -> ns inside the graphs
    that is not an extern op) of a compiled trace. Which calls are warm: transforms/compiler.py `Warmth`."""
    trace, graph = _read(path)
    annotations = trace.indices(EventKind.ANNOTATION)
    graphs = annotations[[trace.name_of(r).startswith(GRAPH) for r in annotations.tolist()]]
    ops = trace.indices(EventKind.CPU_OP)
    externs = ops[np.isin(trace.name[ops], [trace.string_index(n) for n in EXTERN_OPS])]
    aten = ops[[trace.name_of(r).startswith("aten::") for r in ops.tolist()]]
    wrappers: dict[tuple[int, bool], list[float]] = {(p, w): [] for p in (FORWARD, BACKWARD) for w in (False, True)}
    fused = {FORWARD: 0.0, BACKWARD: 0.0}
    tasks = graph.tasks
    warmth = Warmth(graph)

    def record(phase: int, task: int, start: int, end: int, ns: float) -> None:
        wrappers[(phase, warmth.follows(task, phase, start, end))].append(ns / unit)

    for region in regions(graph, compiled_roots(graph, "")):
        first, last = region.tasks[0], region.tasks[-1]
        track = int(trace.track[tasks["event"][first]])
        start, end = int(tasks["measured_start_ns"][first]), int(tasks["measured_end_ns"][last])
        inside = _inside(trace, graphs, start, end, track)
        in_graphs = float(trace.dur_ns[inside].sum())
        for g in inside.tolist():
            mine = _inside(trace, externs, int(trace.ts_ns[g]), int(trace.end_ns[g]), track)
            outermost = mine[~np.isin(mine, _nested(trace, mine))]
            fused[region.phase] += float(trace.dur_ns[g]) - float(trace.dur_ns[outermost].sum())
        if region.phase == FORWARD and inside.size:
            spent = float(tasks["duration_ns"][region.tasks].sum() + tasks["gap_ns"][region.tasks[1:]].sum())
            record(FORWARD, first, start, end, spent - in_graphs - _ops_ns(trace, aten, inside, start, end, track))
        elif region.phase == BACKWARD:
            for task in region.tasks:
                if BACKWARD_NODE in graph.strings[tasks["name"][task]]:
                    node_start, node_end = int(tasks["measured_start_ns"][task]), int(tasks["measured_end_ns"][task])
                    node_graphs = _inside(trace, graphs, node_start, node_end, track)
                    record(BACKWARD, task, node_start, node_end,
                           float(tasks["duration_ns"][task]) - float(trace.dur_ns[node_graphs].sum())
                           - _ops_ns(trace, aten, node_graphs, node_start, node_end, track))
    return wrappers, fused


def _ops_ns(trace: Trace, aten: np.ndarray, graphs: np.ndarray, start: int, end: int, track: int) -> float:
    """The time of the outermost ATen ops in [start, end] on `track` outside `graphs`: tensor work a call does
    beside its compiled graph (a gradient summed into one already there), which the eager trace holds too, not the
    wrapper's."""
    mine = _inside(trace, aten, start, end, track)
    mine = mine[~np.isin(mine, _nested(trace, mine))]
    if graphs.size:
        within = innermost_enclosing(trace, graphs, mine) >= 0
        mine = mine[~within]
    return float(trace.dur_ns[mine].sum())


def _nested(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Of `rows`, those inside another of them."""
    return rows[innermost_enclosing(trace, rows, rows) >= 0]


def eager_fusible(path: Path) -> tuple[dict[int, float], int]:
    """(phase -> recorded ns of the fusible ops in the calls of the (to be) compiled modules, the host unit, ns) of an
    eager trace."""
    trace, graph = _read(path)
    tasks = graph.tasks
    found = regions(graph, compiled_roots(graph, ""))
    rows = np.array([tasks["event"][t] for region in found for t in region.tasks], dtype=np.int64)
    view = compiler_view(trace, rows)
    total = {FORWARD: 0.0, BACKWARD: 0.0}
    for region in found:
        for task in region.tasks:
            total[region.phase] += sum(u.ns for u in view.units.get(int(tasks["event"][task]), []) if not u.extern)
    return total, HostCosts.of(trace).unit_ns


COLUMNS = ((FORWARD, False), (FORWARD, True), (BACKWARD, False), (BACKWARD, True))


def report(folder: Path) -> str:
    """The table of every pair under `folder` (its round-N folders, or itself) and the medians, as markdown."""
    folders = sorted(folder.glob("round-*")) or [folder]
    wrappers: dict[tuple[int, bool], list[float]] = {column: [] for column in COLUMNS}
    shares: list[float] = []
    lines = ["| round | example | forward wrapper, first call (units) | forward, a warm call | backward, first call | "
             "backward, a warm call | fused share forward | backward |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for each in folders:
        for compiled in sorted(each.glob("*-compile.json.gz")):
            example = compiled.name.removesuffix("-compile.json.gz")
            baseline = each / f"{example}-baseline.json.gz"
            if not baseline.exists():
                continue
            eager, unit = eager_fusible(baseline)
            calls, fused = compiled_calls(compiled, unit)
            share = {p: fused[p] / eager[p] if eager[p] else float("nan") for p in (FORWARD, BACKWARD)}
            for column in COLUMNS:
                wrappers[column].append(statistics.median(calls[column]) if calls[column] else float("nan"))
            shares += [s for s in share.values() if s == s]
            lines.append(f"| {each.name} | {example} | " + " | ".join(_median(calls[c]) for c in COLUMNS)
                         + f" | {share[FORWARD]:.2f} | {share[BACKWARD]:.2f} |")
    lines += ["", "median over pairs, units per call: forward " + ", ".join(
        f"{'warm' if warm else 'first'} {_median(wrappers[(FORWARD, warm)])}" for warm in (False, True))
        + "; backward " + ", ".join(f"{'warm' if warm else 'first'} {_median(wrappers[(BACKWARD, warm)])}"
                                    for warm in (False, True))
        + f"; fused share {statistics.median(shares):.2f} (over {len(shares)} phases)"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="round-N folders (or one folder) of EXAMPLE-{baseline,compile} traces")
    print(report(parser.parse_args().folder), end="")
    return 0


def _median(values: list[float]) -> str:
    known = [v for v in values if v == v]
    return f"{statistics.median(known):.0f}" if known else "—"


if __name__ == "__main__":
    sys.exit(main())
