"""The recorded constants of the tp what-if: DTensor's own host work, from pairs of real CPU traces: one process, and a
rank of tensor parallelism.

    python scripts/tp_costs.py DIR                # DIR/round-N/transformer-baseline.json.gz and transformer-tp-rankR.json.gz
    python scripts/tp_costs.py DIR --run 3        # first run three calibration rounds into DIR (about a minute each)

A round: `examples/transformer.py` traced alone (the trace the what-if starts from), then its two ranks under
`--tp` (ColwiseParallel and RowwiseParallel, gloo) traced by `daydream trace` at once; `--threads 1`,
OMP_NUM_THREADS=1, the flags of scripts/validate_parallel.py. Per rank trace and iteration, the own host time (nested
ops taken out) of DTensor's machinery: `PythonSubclass` (its dispatch of each op on a DTensor), `_FromTorchTensor`,
`_ToTorchTensor`, `Redistribute`, `NestedRedistribute` and their backward nodes (the collectives they issue are the
what-if's own collectives, not counted here), by phase:

- forward and backward: per split linear layer call (one `_FromTorchTensor` in forward per call: the parallel
  style's input hook), in host units (cost/host.py) of the one-process trace of the pair;
- the optimizer: per optimizer op of the one-process trace (the top-level ops of its `Optimizer.step`), in host units:
  what each op pays on average once the split layers' parameters are DTensors.

The medians over traces are what `RECORDED_HOST_UNITS` ("tp.*") holds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_costs import _optimizer_ops, _read, _steps  # noqa: E402

from daydream.cost.host import HostCosts, exclusive_host_ns  # noqa: E402
from daydream.mapping import attribute  # noqa: E402
from daydream.mapping.attribution import BACKWARD, FORWARD, OPTIMIZER  # noqa: E402
from daydream.trace import EventKind  # noqa: E402

EXAMPLE = "transformer"
#: DTensor's own ops (and their backward nodes, and the autograd engine's frames around them).
DTENSOR = re.compile(r"^(autograd::engine::evaluate_function: )?"
                     r"(PythonSubclass|_FromTorchTensor|_ToTorchTensor|Redistribute|NestedRedistribute)(Backward\d*)?$")
KINDS = ("forward", "backward", "optimizer_op")


def measure(baseline: Path, ranked: Path) -> dict[str, float]:
    """One rank's constants: host units per split layer call (forward, backward) and per optimizer op."""
    base, trace = _read(baseline), _read(ranked)
    unit = HostCosts.of(base).unit_ns
    rows, own = exclusive_host_ns(trace)
    names = np.array([trace.name_of(r) for r in rows.tolist()], dtype=object)
    mine = np.array([bool(DTENSOR.match(n)) for n in names], dtype=bool)
    phase = attribute(trace).phase[rows]
    base_ops = base.indices(EventKind.CPU_OP)
    optimizer_ops = statistics.median(_optimizer_ops(base, s, base_ops).size for s in _steps(base)) or 1
    per: dict[str, list[float]] = {k: [] for k in KINDS}
    for start, end in _steps(trace):
        inside = (trace.ts_ns[rows] >= start) & (trace.ts_ns[rows] < end)
        calls = int((inside & (names == "_FromTorchTensor") & (phase == FORWARD)).sum()) or 1
        for kind, which, count in (("forward", FORWARD, calls), ("backward", BACKWARD, calls),
                                   ("optimizer_op", OPTIMIZER, optimizer_ops)):
            per[kind].append(float(own[inside & mine & (phase == which)].sum()) / count / unit)
    return {k: statistics.median(v) for k, v in per.items()}


def report(folder: Path) -> str:
    lines = ["| round | rank | forward per split call | backward per split call | per optimizer op |",
             "|---|---|---:|---:|---:|"]
    found: dict[str, list[float]] = {k: [] for k in KINDS}
    for baseline in sorted(folder.glob(f"round-*/{EXAMPLE}-baseline.json.gz")):
        for ranked in sorted(baseline.parent.glob(f"{EXAMPLE}-tp-rank*.json.gz")):
            costs = measure(baseline, ranked)
            for key in KINDS:
                found[key].append(costs[key])
            rank = ranked.name.removesuffix(".json.gz").rpartition("-")[2]
            lines.append(f"| {baseline.parent.name} | {rank} | " + " | ".join(f"{costs[k]:.0f}" for k in KINDS) + " |")
    if not found["forward"]:
        raise SystemExit(f"{folder}: no round-N/{EXAMPLE}-baseline.json.gz with {EXAMPLE}-tp-rankR.json.gz beside it — "
                         "run the rounds first (--run N)")
    lines.append("| **median** | | " + " | ".join(f"**{statistics.median(found[k]):.0f}**" for k in KINDS) + " |")
    return "\n".join(lines)


def run_rounds(folder: Path, count: int) -> None:
    from validate_parallel import CONFIGURATIONS, EXAMPLES, trace_alone, trace_ranks

    for index in range(count):
        where = folder / f"round-{index + 1}"
        where.mkdir(parents=True, exist_ok=True)
        print(f"round {index + 1}", file=sys.stderr, flush=True)
        trace_alone(EXAMPLES[EXAMPLE], where / f"{EXAMPLE}-baseline.json.gz")
        trace_ranks(EXAMPLES[EXAMPLE], where, f"{EXAMPLE}-tp", CONFIGURATIONS["tp"][0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--run", type=int, default=0, metavar="N", help="first run N calibration rounds into FOLDER")
    args = parser.parse_args()
    if args.run:
        run_rounds(args.folder, args.run)
    print(report(args.folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
