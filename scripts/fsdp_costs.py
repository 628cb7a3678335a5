"""The recorded constants of the fsdp what-if, from pairs of real CPU traces: one process, and a rank of FSDP2.

    python scripts/fsdp_costs.py DIR       # DIR/round-N/EXAMPLE-baseline.json.gz and EXAMPLE-fsdp-rankR.json.gz

Per FSDP2 rank trace (examples/training.py --fsdp under torchrun, gloo, traced by daydream trace), per iteration:

- the hooks' own host time per unit, in host units (cost/host.py) of the one-process trace of the pair (the one a
  what-if starts from; the ranks' traces run slower dispatch, DTensor's and the other rank's share of the CPUs):
  each top-level `FSDP::` range on the training thread less the CPU ops nested in it and the time a gloo collective
  ran meanwhile (what the hook waited for): pre-forward (with the root's), post-forward, pre-backward, post-backward
  (accumulate, reshard, reduce and the root's callback);
- a collective call's own host time (each `c10d::` op less the gloo collective beside it), in host units;
- the copies into and out of the collectives' buffers (`fsdp::all_gather_copy_in`, `fsdp::split_with_sizes_copy`,
  `fsdp::chunk_cat`): their time over what the baseline's own elementwise speed gives for their bytes (copy-in a
  shard, copy-out the whole unit, chunk_cat the whole unit's gradients): the fresh buffers' first touch on a CPU;
- the optimizer's DTensor dispatch: per optimizer op, the FSDP trace's op time less the baseline's ÷ world, in host
  units.

The medians over traces are what `RECORDED_HOST_UNITS` ("fsdp.*") and fsdp.py's `FRESH_COPY_SLOWDOWN` hold.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daydream.api import open_job  # noqa: E402
from daydream.cost.elementwise import CopySpeed, elementwise_speed  # noqa: E402
from daydream.cost.host import HostCosts  # noqa: E402
from daydream.intervals import Coverage  # noqa: E402
from daydream.simulate.whatif import gradient_bytes_of  # noqa: E402
from daydream.trace import EventKind, Trace  # noqa: E402
from daydream.transforms.distributed.fsdp import ROOT, fsdp_units  # noqa: E402

HOOKS = {"FSDP::pre_forward": "pre_forward", "FSDP::root_pre_forward": "pre_forward",
         "FSDP::post_forward": "post_forward", "FSDP::pre_backward": "pre_backward",
         "FSDP::post_backward_accumulate": "post_backward", "FSDP::post_backward_reshard": "post_backward",
         "FSDP::post_backward_reduce": "reduce", "FSDP::post_backward_rs_wait": "reduce",
         "FSDP::root_post_backward_callback": "reduce"}
KINDS = ("pre_forward", "post_forward", "pre_backward", "post_backward", "reduce")
#: What each kind's own time is divided by: the calls it ran for (a hook per call, a reduce per unit).
COUNTED = {"pre_forward": "FSDP::pre_forward", "post_forward": "FSDP::post_forward", "pre_backward": "FSDP::pre_backward",
           "post_backward": "FSDP::post_backward_reshard", "reduce": "FSDP::post_backward_reduce"}
COPIES = ("fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat")
OPTIMIZER = "Optimizer.step#"


@dataclass(slots=True)
class Costs:
    """One FSDP2 trace's constants: host units per unit and iteration, the copies' slowdown, DTensor units per op."""

    hooks: dict[str, float]
    collective: float
    copies: list[tuple[float, float]]  # per copy op: (host units it took, host units the baseline's speed gives its bytes)
    optimizer_op: float


def _read(path: Path) -> Trace:
    return open_job(path).traces[0]


def _steps(trace: Trace) -> list[tuple[int, int]]:
    rows = trace.indices(EventKind.ANNOTATION)
    return sorted((int(trace.ts_ns[r]), int(trace.end_ns[r])) for r in rows.tolist()
                  if trace.name_of(r).startswith("ProfilerStep#"))


def _top(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Those of `rows` not nested in another of them on the same thread."""
    order = rows[np.lexsort((-trace.end_ns[rows], trace.ts_ns[rows]))]
    kept, end = [], -1
    for row in order.tolist():
        if trace.ts_ns[row] >= end:
            kept.append(row)
            end = int(trace.end_ns[row])
    return np.asarray(kept, dtype=np.int64)


def _optimizer_ops(trace: Trace, step: tuple[int, int], ops: np.ndarray) -> np.ndarray:
    names = [trace.name_of(r) for r in trace.indices(EventKind.ANNOTATION).tolist()]
    annotations = trace.indices(EventKind.ANNOTATION)
    steps = [r for r, n in zip(annotations.tolist(), names) if n.startswith(OPTIMIZER)
             and step[0] <= trace.ts_ns[r] < step[1]]
    if not steps:
        return np.zeros(0, dtype=np.int64)
    start, end = int(trace.ts_ns[steps[0]]), int(trace.end_ns[steps[0]])
    inside = ops[(trace.ts_ns[ops] > start) & (trace.end_ns[ops] < end)]
    return _top(trace, inside)


def measure(baseline: Path, ranked: Path, world: int) -> Costs:
    base, trace = _read(baseline), _read(ranked)
    ts, te = trace.ts_ns, trace.end_ns  # computed columns: taken once
    unit = HostCosts.of(base).unit_ns  # the unit the what-if converts with: the one-process trace's
    speed = elementwise_speed(base, on_gpu=False)
    if speed is None:
        raise SystemExit(f"{baseline}: no elementwise ops with recorded shapes to time copies by")
    ops = trace.indices(EventKind.CPU_OP)
    annotations = trace.indices(EventKind.ANNOTATION)
    names = np.array([trace.name_of(r) for r in annotations.tolist()], dtype=object)
    op_names = np.array([trace.name_of(r) for r in ops.tolist()], dtype=object)
    gloo = trace.indices(EventKind.HOST_COMMUNICATION)
    waits = Coverage(ts[gloo], te[gloo])
    main = int(trace.track[annotations[[n.startswith("ProfilerStep#") for n in names]][0]])
    hooks_rows = annotations[[n.split(" ")[0] in HOOKS for n in names] & (trace.track[annotations] == main)]
    per_iteration: dict[str, list[float]] = {k: [] for k in set(HOOKS.values())}
    collective, copies, measured_copies, optimizer = [], [], [], []
    copies_seen: list[tuple[float, float]] = []
    sizes = _unit_bytes(base)
    base_steps = _steps(base)
    base_ops = base.indices(EventKind.CPU_OP)
    base_optimizer = [float(base.dur_ns[_optimizer_ops(base, s, base_ops)].sum()) for s in base_steps]
    for step in _steps(trace):
        totals = dict.fromkeys(per_iteration, 0.0)
        mine = hooks_rows[(ts[hooks_rows] >= step[0]) & (ts[hooks_rows] < step[1])]
        for row in _top(trace, mine).tolist():
            start, end = int(ts[row]), int(te[row])
            nested = ops[(ts[ops] >= start) & (te[ops] <= end) & (trace.track[ops] == main)]
            busy = Coverage(np.r_[ts[nested], ts[gloo]], np.r_[te[nested], te[gloo]])
            own = (end - start) - busy.share_of_each(np.array([start]), np.array([end]))[0] * (end - start)
            totals[HOOKS[trace.name_of(row).split(" ")[0]]] += own
        calls = ops[[n.startswith("c10d::") for n in op_names] & (ts[ops] >= step[0]) & (ts[ops] < step[1])]
        for row in calls.tolist():
            start, end = int(ts[row]), int(te[row])
            collective.append((end - start) * (1 - waits.share_of_each(np.array([start]), np.array([end]))[0]) / unit)
        copy_rows = ops[np.isin(op_names, COPIES) & (ts[ops] >= step[0]) & (ts[ops] < step[1])]
        measured_copies.append(float(trace.dur_ns[copy_rows].sum()))
        optimizer_rows = _optimizer_ops(trace, step, ops)
        optimizer.append(float(trace.dur_ns[optimizer_rows].sum()))
        in_step = annotations[(ts[annotations] >= step[0]) & (ts[annotations] < step[1])
                              & (trace.track[annotations] == main)]
        step_names = [trace.name_of(r) for r in in_step.tolist()]
        for key, value in totals.items():
            count = sum(name.split(" ")[0] == COUNTED[key] for name in step_names)
            per_iteration[key].append(value / max(count, 1) / unit)
        copies_seen += _copies(trace, copy_rows, in_step, sizes, speed, world, unit)
        copies.append(optimizer_rows.size)
    op_count = statistics.median(copies) or 1
    base_median = statistics.median(base_optimizer) if base_optimizer else 0.0
    return Costs({k: statistics.median(v) for k, v in per_iteration.items()}, statistics.median(collective),
                 copies_seen,
                 (statistics.median(optimizer) - base_median / world) / op_count / unit)


def _unit_bytes(base: Trace) -> dict[str, int]:
    """Parameter bytes of each FSDP2 unit as its ranges name it ("blocks.0"; "" for the root), from the one-process
    trace's layers: the repeated blocks the examples shard, the root the rest."""
    layers = gradient_bytes_of(base)
    modules = sorted({".".join(path.split(".")[:end]) for path in layers for end in range(1, path.count(".") + 2)})
    units = fsdp_units(modules, layers, "")
    return {("" if u.name == ROOT else u.name.split(".", 1)[1]): u.bytes for u in units}


def _copies(trace: Trace, rows: np.ndarray, ranges: np.ndarray, sizes: dict[str, int], speed: CopySpeed, world: int,
            unit: int) -> list[tuple[float, float]]:
    """Per copy op: (its time, what the baseline's elementwise speed gives its bytes without the per-op overhead), in
    host units. Its bytes: its unit's (named by the FSDP range around it): a shard copied in, the whole unit copied out
    or concatenated."""
    found = []
    starts, ends = trace.ts_ns, trace.end_ns  # each a computed column: taken once
    kinds = ("FSDP::all_gather", "FSDP::all_gather_copy_out", "FSDP::post_backward_reduce")
    ranges = np.array([r for r in ranges.tolist() if trace.name_of(r).split(" ")[0] in kinds], dtype=np.int64)
    for row in rows.tolist():
        start, end = int(starts[row]), int(ends[row])
        around = ranges[(starts[ranges] <= start) & (ends[ranges] >= end)]
        if around.size == 0:
            continue
        name = trace.name_of(int(around[np.argmax(starts[around])]))
        unit_name = name.partition(" ")[2].strip("()")
        if unit_name not in sizes:
            continue
        size = sizes[unit_name] / (world if trace.name_of(row) == "fsdp::all_gather_copy_in" else 1)
        found.append((float(trace.dur_ns[row]) / unit, 2.0 * size / speed.bytes_per_ns / unit))
    return found


def fit_copies(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """(host units per copy op, times the baseline's per-byte time) fitted to (took, per-byte) samples, least squares
    in relative error."""
    took = np.array([t for t, _ in samples])
    design = np.column_stack([np.ones(took.size), np.array([b for _, b in samples])]) / took[:, None]
    (fixed, slowdown), *_ = np.linalg.lstsq(design, np.ones(took.size), rcond=None)
    return float(fixed), float(slowdown)


def report(folder: Path, world: int = 2) -> str:
    rows = []
    found: list[Costs] = []
    for baseline in sorted(folder.glob("round-*/*-baseline.json.gz")):
        example = baseline.name.removesuffix("-baseline.json.gz")
        for ranked in sorted(baseline.parent.glob(f"{example}-fsdp-rank*.json.gz")):
            costs = measure(baseline, ranked, world)
            found.append(costs)
            fixed, slowdown = fit_copies(costs.copies)
            rows.append(f"| {baseline.parent.name} | {example} | {ranked.name.removesuffix('.json.gz').rsplit('-', 1)[1]} | "
                        + " | ".join(f"{costs.hooks[k]:.0f}" for k in KINDS)
                        + f" | {costs.collective:.0f} | {fixed:.0f} | {slowdown:.2f} | {costs.optimizer_op:.0f} |")
    if not found:
        raise SystemExit(f"{folder}: no round-*/EXAMPLE-baseline.json.gz with EXAMPLE-fsdp-rankR.json.gz beside it")
    median = Costs({k: statistics.median(c.hooks[k] for c in found) for k in found[0].hooks},
                   statistics.median(c.collective for c in found), [s for c in found for s in c.copies],
                   statistics.median(c.optimizer_op for c in found))
    fixed, slowdown = fit_copies(median.copies)
    head = ["| round | example | rank | pre-forward | post-forward | pre-backward | post-backward | reduce | "
            "collective call | copy op | copy slowdown | DTensor per optimizer op |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    tail = ["| **median** | | | " + " | ".join(f"**{median.hooks[k]:.0f}**" for k in KINDS)
            + f" | **{median.collective:.0f}** | **{fixed:.0f}** | **{slowdown:.2f}** | **{median.optimizer_op:.0f}** |"]
    return "\n".join(head + rows + tail)


IDLE = ("pre_forward_idle", "post_forward_idle")


def idle_hooks(baseline: Path, ranked: Path) -> dict[str, float]:
    """On a rank of FSDP2 without resharding after forward: the own host time (as `measure` takes it) of a
    pre-forward hook that issues no collective (its unit still gathered from an earlier call) and of a post-forward
    hook (which then reshards nothing), in host units of the one-process trace; the medians over the hooks."""
    base, trace = _read(baseline), _read(ranked)
    unit = HostCosts.of(base).unit_ns
    ts, te = trace.ts_ns, trace.end_ns
    ops = trace.indices(EventKind.CPU_OP)
    gloo = trace.indices(EventKind.HOST_COMMUNICATION)
    calls = ops[[trace.name_of(r).startswith("c10d::") for r in ops.tolist()]]
    found: dict[str, list[float]] = {k: [] for k in IDLE}
    for row in trace.indices(EventKind.ANNOTATION).tolist():
        kind = {"FSDP::pre_forward": IDLE[0], "FSDP::post_forward": IDLE[1]}.get(trace.name_of(row).split(" ")[0])
        start, end = int(ts[row]), int(te[row])
        if kind is None or (kind == IDLE[0] and ((ts[calls] >= start) & (te[calls] <= end)).any()):
            continue
        nested = ops[(ts[ops] >= start) & (te[ops] <= end) & (trace.track[ops] == trace.track[row])]
        busy = Coverage(np.r_[ts[nested], ts[gloo]], np.r_[te[nested], te[gloo]])
        found[kind].append((end - start) * (1 - busy.share_of_each(np.array([start]), np.array([end]))[0]) / unit)
    return {k: statistics.median(v) if v else float("nan") for k, v in found.items()}


def idle_report(folder: Path) -> str:
    """The idle hooks of every reshard=0 rank in `folder`'s rounds, and their medians."""
    lines = ["| round | example | rank | idle pre-forward | post-forward without reshard |", "|---|---|---|---:|---:|"]
    found: dict[str, list[float]] = {k: [] for k in IDLE}
    for baseline in sorted(folder.glob("round-*/*-baseline.json.gz")):
        example = baseline.name.removesuffix("-baseline.json.gz")
        for ranked in sorted(baseline.parent.glob(f"{example}-fsdp-reshard0-rank*.json.gz")):
            costs = idle_hooks(baseline, ranked)
            for key in IDLE:
                if costs[key] == costs[key]:  # a rank whose every forward call gathered has no idle pre-forward hook
                    found[key].append(costs[key])
            lines.append(f"| {baseline.parent.name} | {example} | {ranked.name.removesuffix('.json.gz').rsplit('-', 1)[1]} | "
                         + " | ".join("—" if costs[k] != costs[k] else f"{costs[k]:.0f}" for k in IDLE) + " |")
    if not found[IDLE[1]]:
        raise SystemExit(f"{folder}: no round-*/EXAMPLE-baseline.json.gz with EXAMPLE-fsdp-reshard0-rankR.json.gz")
    lines.append("| **median** | | | " + " | ".join(f"**{statistics.median(found[k]):.0f}**" if found[k] else "—"
                                                for k in IDLE) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--idle", action="store_true",
                        help="the hooks of calls that gather or reshard nothing, from the rounds' reshard=0 ranks")
    args = parser.parse_args()
    print(idle_report(args.folder) if args.idle else report(args.folder, args.world))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
