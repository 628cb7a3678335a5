"""The host costs daydream/cost/host.py records in host units, measured from pairs of real traces.

    python scripts/host_costs.py examples/h200 examples/h200/realistic/round-*   # the checkpoint wrapper, from
                                                                                 # EXAMPLE-{baseline,checkpoint}
    OMP_NUM_THREADS=1 python scripts/host_costs.py --measure   # the same on this machine's CPU, with torch
    python scripts/host_costs.py --fit DIR/round-*  --examples mlp,cnn,transformer,speech   # units per saved tensor

Per folder and example, the baseline and the checkpointed run of the same script (torch.utils.checkpoint on every
block), recorded one after the other on one machine: each phase's host time per iteration (median over iterations,
the phase's annotation), in the baseline's host units (`HostCosts.unit_ns`), then per checkpointed call:

- forward: (checkpointed forward - baseline forward) / calls;
- backward: (checkpointed backward - baseline backward - the recomputed blocks' baseline forward, each call up to the
  last tensor it saves, where torch's early stop ends its recomputation) / calls.

Both runs are read in the baseline's unit: the checkpointed run's own unit comes out higher in every pair (its cheap
ops run slower beside the wrapper's hooks), so dividing by it would take part of the wrapper's cost away. The median
over the pairs is what `RECORDED_HOST_UNITS` holds. `--measure` times the wrapper on this machine
instead: checkpointed and plain calls of blocks of 1, 4 and 16 tanh (each saves one tensor for backward), interleaved
rounds, forward and backward apart (the recomputation, one plain forward, taken out of backward), a line through the
block sizes: a part per call and a part per saved tensor (daydream/cost/saved.py), in the units of a profile of cheap
ops on the same host. Each timed under the profiler as `daydream trace` records (shapes and memory), as the traces
the units are used with and the unit itself are.

`--fit` reads rounds of real pairs instead (`whatif_truth.py --whatifs checkpoint --keep DIR`): per example its median
units per call over the rounds and the tensors a call saves (cost/saved.py), and the units per saved tensor, forward and
backward, as the least-squares slope through the examples with the part per call held at the recorded one. The
microbenchmark's slope per tensor is not the wrapper's: run with checkpointed backward passes between them, its
checkpointed forward calls slow (a block of 16 tanh, 440 to 650 µs on the development host), while the training runs'
recurrent models pay about a third of it forward and twice it backward.

    OMP_NUM_THREADS=1 python scripts/host_costs.py --loader    # receiving a DataLoader worker's batch, this CPU

`--loader` times what the training thread spends in `next()` on a DataLoader of one worker whose batch is ready
(transforms/loading.py): per batch and per tensor, in the same units.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from whatif_truth import kept  # noqa: E402  (beside this script)

from daydream.api import open_trace  # noqa: E402
from daydream.cost.host import RECORDED_HOST_UNITS, HostCosts  # noqa: E402
from daydream.cost.saved import saved_tensors_of  # noqa: E402
from daydream.cost.shapes import top_level_ops  # noqa: E402
from daydream.trace import EventKind, Trace, discover  # noqa: E402

BLOCK = re.compile(r"^daydream\.layer::.*\.blocks\.\d+$")


def annotations(trace: Trace) -> tuple[np.ndarray, list[str]]:
    rows = trace.indices(EventKind.ANNOTATION)
    return rows, [trace.name_of(r) for r in rows]


def per_iteration(trace: Trace) -> dict[str, float]:
    """Median per iteration of: each phase's host time, the blocks' forward time up to where their recomputation stops
    (`recomputed`) and the blocks' calls (ns, count)."""
    rows, names = annotations(trace)
    steps = [r for r, n in zip(rows, names) if n.startswith("ProfilerStep#")]
    found: dict[str, list[float]] = {"forward": [], "backward": [], "blocks": [], "calls": []}
    ops = top_level_ops(trace, trace.indices(EventKind.CPU_OP))
    last_pack = saved_tensors_of(trace, ops).last_pack_ns
    for step in steps:
        start, end = trace.ts_ns[step], trace.end_ns[step]
        inside = [(r, n) for r, n in zip(rows, names) if start <= trace.ts_ns[r] < end]
        for phase in ("forward", "backward"):
            found[phase].append(float(sum(trace.dur_ns[r] for r, n in inside if n == f"daydream.phase::{phase}")))
        blocks = forward_blocks(trace, inside)
        found["blocks"].append(float(sum(recomputed_ns(trace, block, ops, last_pack) for block in blocks)))
        found["calls"].append(float(len(blocks)))
    return {key: statistics.median(values) for key, values in found.items() if values}


def recomputed_ns(trace: Trace, block: int, ops: np.ndarray, last_pack: np.ndarray) -> float:
    """What the recomputation of a block's forward call runs again: its span up to the last tensor its top-level ops
    (`ops`, with their `last_pack`) save, where torch.utils.checkpoint's early stop ends it (cost/saved.py); all of it
    where none is counted."""
    within = ((trace.ts_ns[ops] >= trace.ts_ns[block]) & (trace.ts_ns[ops] < trace.end_ns[block])
              & (trace.track[ops] == trace.track[block]))
    stop = int(last_pack[within].max()) if within.any() else -1
    return float(min(stop, int(trace.end_ns[block])) - trace.ts_ns[block] if stop >= 0 else trace.dur_ns[block])


def forward_blocks(trace: Trace, annotated: list[tuple[int, str]]) -> list[int]:
    """Of the annotations `annotated` (row, name), the blocks' calls in forward: the block layers that begin outside
    every backward phase among them (a checkpointed block's recomputation runs in backward)."""
    backward = [(trace.ts_ns[r], trace.end_ns[r]) for r, n in annotated if n == "daydream.phase::backward"]
    return [r for r, n in annotated if BLOCK.match(n) and not any(lo <= trace.ts_ns[r] < hi for lo, hi in backward)]


def saved_per_call(trace: Trace) -> float:
    """The tensors autograd saves for backward in one checkpointed call (cost/saved.py): those of the top-level ops
    inside the blocks' forward spans, over the blocks' forward calls."""
    blocks = forward_blocks(trace, list(zip(*annotations(trace))))
    ops = top_level_ops(trace, trace.indices(EventKind.CPU_OP))
    starts = trace.ts_ns[ops]
    inside = np.zeros(ops.size, dtype=bool)
    for block in blocks:
        inside |= ((starts >= trace.ts_ns[block]) & (starts < trace.end_ns[block])
                   & (trace.track[ops] == trace.track[block]))
    return float(saved_tensors_of(trace, ops[inside]).tensors.sum()) / max(len(blocks), 1)


def fit_tensors(folders: list[Path], examples: list[str],
                per_call: tuple[float, float] | None) -> tuple[list[tuple[str, float, float, float]], dict[str, float]]:
    """Per example, the saved tensors per checkpointed call and the medians over `folders` (rounds) of its forward and
    backward units per call; and, each side, the units per saved tensor: the least-squares slope through the examples
    with the part per call held at `per_call` (forward, backward: what `--measure` times), or, where `per_call` is
    None, the least-squares line through them: its intercept the part per call, its slope the part per tensor."""
    rows = []
    for example in examples:
        pairs = [(checkpoint_units(folder, example), folder) for folder in folders]
        found = [(units, folder) for units, folder in pairs if units is not None]
        if not found:
            continue
        saved = saved_per_call(open_trace(discover(kept(found[0][1], f"{example}-baseline"))[0]))
        rows.append((example, saved, statistics.median(u[0] for u, _ in found), statistics.median(u[1] for u, _ in found)))
    if len({round(r[1]) for r in rows}) < 2:
        raise SystemExit("host_costs: --fit needs pairs of at least two examples that save different numbers of tensors")
    fitted: dict[str, float] = {}
    saved = [r[1] for r in rows]
    for side, column in (("forward", 2), ("backward", 3)):
        units = [r[column] for r in rows]
        if per_call is None:
            slope, intercept = np.polyfit(np.asarray(saved, dtype=np.float64), np.asarray(units, dtype=np.float64), 1)
            fitted[f"{side}.call"], fitted[f"{side}.tensor"] = float(intercept), float(slope)
        else:
            held = per_call[0] if side == "forward" else per_call[1]
            fitted[f"{side}.call"] = held
            fitted[f"{side}.tensor"] = per_tensor(saved, units, held)
    return rows, fitted


def per_tensor(saved: list[float], units: list[float], per_call: float) -> float:
    """The units per saved tensor of calls that save `saved` tensors and cost `units` each, the part per call held at
    `per_call`: the least-squares slope through the origin of (units - per_call) on saved."""
    x, y = np.asarray(saved, dtype=np.float64), np.asarray(units, dtype=np.float64) - per_call
    return float(x @ y / (x @ x))


def checkpoint_units(folder: Path, example: str) -> tuple[float, float, int] | None:
    """(forward, backward) host units per checkpointed call and the calls per iteration; None without the pair."""
    paths = [kept(folder, f"{example}-{v}") for v in ("baseline", "checkpoint")]
    if not all(path.exists() for path in paths):
        return None
    base, checkpointed = (open_trace(discover(path)[0]) for path in paths)
    unit = HostCosts.of(base).unit_ns
    a, b = per_iteration(base), per_iteration(checkpointed)
    calls = int(a["calls"])
    if calls == 0:  # no block named as BLOCK names them: nothing checkpointed to read
        return None
    forward = (b["forward"] - a["forward"]) / unit / calls
    backward = (b["backward"] - a["backward"] - a["blocks"]) / unit / calls
    return forward, backward, calls


def _as_traced() -> Any:
    """A CPU profile as `daydream trace` records one (shapes and memory): the costs it adds to the wrapper's own ops
    (the recomputation detaches each tensor it saves) are in the traces the units are used with, as the unit is."""
    import torch

    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                  profile_memory=True)


def _forward_ns(block: Any, checkpointed: bool, calls: int) -> float:
    """Mean ns of one forward call of `block` (checkpointed or plain)."""
    import time

    import torch
    import torch.utils.checkpoint

    x = torch.randn(4, 8, requires_grad=True)
    with _as_traced():
        start = time.perf_counter_ns()
        for _ in range(calls):
            torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        return (time.perf_counter_ns() - start) / calls


def _backward_ns(block: Any, checkpointed: bool, calls: int) -> float:
    """Mean ns of the backward of one call of `block` (checkpointed or plain)."""
    import time

    import torch
    import torch.utils.checkpoint

    x, spent = torch.randn(4, 8, requires_grad=True), 0
    with _as_traced():
        for _ in range(calls):
            loss = (torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)).sum()
            start = time.perf_counter_ns()
            loss.backward()
            spent += time.perf_counter_ns() - start
    return spent / calls


def measure(rounds: int = 7, calls: int = 300, blocks: tuple[int, ...] = (1, 4, 16)) -> dict[str, float]:
    """Units per checkpointed call and per tensor its ops save, forward and backward, on this machine, and the unit
    (ns): checkpointed and plain calls of blocks of 1, 4 and 16 `tanh` (each saves one tensor), interleaved rounds,
    a line fitted through the medians of (checkpointed - plain) over the block sizes; backward less the
    recomputation (one plain forward of the block)."""
    import torch

    torch.set_num_threads(1)
    made = {size: torch.nn.Sequential(*(torch.nn.Tanh() for _ in range(size))) for size in blocks}
    for block in made.values():  # warm-up
        for checkpointed in (False, True):
            _forward_ns(block, checkpointed, calls), _backward_ns(block, checkpointed, calls)
    extra: dict[str, list[float]] = {"forward": [], "backward": []}
    units = []  # the unit measured between the rounds, as the machine's speed drifts
    for block in made.values():
        forward, backward = [], []
        for _ in range(rounds):
            plain = _forward_ns(block, False, calls)
            forward.append(_forward_ns(block, True, calls) - plain)
            backward.append(_backward_ns(block, True, calls) - _backward_ns(block, False, calls) - plain)
            units.append(unit_ns())
        extra["forward"].append(statistics.median(forward))
        extra["backward"].append(statistics.median(backward))
    unit = statistics.median(units)
    found: dict[str, float] = {"unit": float(unit)}
    for side, values in extra.items():
        per_tensor, per_call = np.polyfit(list(blocks), values, 1)
        found[f"{side}.call"], found[f"{side}.tensor"] = per_call / unit, per_tensor / unit
    return found


def unit_ns() -> int:
    """This machine's host unit (HostCosts.unit_ns) from a profile of cheap ops, as daydream trace records them."""
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "unit.json"
        with torch.profiler.profile(record_shapes=True) as profile:  # as daydream trace records
            for _ in range(200):
                a = torch.empty(4)
                a.view(2, 2).t().detach()
                a.as_strided((2,), (1,))
                torch.empty_strided((2,), (1,))
        profile.export_chrome_trace(str(path))
        return HostCosts.of(open_trace(discover(path)[0], cache=False)).unit_ns


def measure_loader(rounds: int = 5, batches: int = 40, counts: tuple[int, ...] = (1, 2, 4, 8)) -> tuple[float, float, int]:
    """(per batch, per tensor) units the training thread spends receiving a ready batch from a DataLoader worker on
    this machine, and the unit (ns): `next()` on a loader of one worker that is given time to have the batch ready
    (a pause between batches), batches of 1, 2, 4 and 8 small tensors, a line fitted through the medians."""
    import time

    import torch
    import torch.utils.data

    torch.set_num_threads(1)

    class Ready(torch.utils.data.Dataset):
        def __init__(self, tensors: int) -> None:
            self.sample = tuple(torch.randn(3, 32, 32) for _ in range(tensors))

        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, index: int) -> tuple:
            return self.sample

    def received_ns(tensors: int) -> float:
        loader = torch.utils.data.DataLoader(Ready(tensors), batch_size=16, num_workers=1, persistent_workers=True)
        batches_of = iter(loader)
        next(batches_of)
        spent = []
        for _ in range(batches):
            time.sleep(0.02)  # the worker has the next batch (and the one after) ready
            start = time.perf_counter_ns()
            next(batches_of)
            spent.append(time.perf_counter_ns() - start)
        del batches_of, loader
        return statistics.median(spent)

    medians = {count: statistics.median(received_ns(count) for _ in range(rounds)) for count in counts}
    per_tensor, per_batch = np.polyfit(list(medians), list(medians.values()), 1)
    unit = unit_ns()
    return max(per_batch, 0.0) / unit, max(per_tensor, 0.0) / unit, unit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="*", help="folders of EXAMPLE-baseline / EXAMPLE-checkpoint traces")
    parser.add_argument("--examples", default="mlp,cnn,transformer,resnet", help="the pairs to look for in each folder")
    parser.add_argument("--measure", action="store_true", help="time the wrapper on this machine's CPU instead")
    parser.add_argument("--fit", action="store_true",
                        help="with folders of rounds: per example the median units per call, and the units per saved "
                             "tensor through the examples, the part per call held at RECORDED_HOST_UNITS")
    parser.add_argument("--with-call", action="store_true",
                        help="with --fit: fit the part per call too (the least-squares line through the examples)")
    parser.add_argument("--loader", action="store_true",
                        help="time receiving a batch from a DataLoader worker on this machine's CPU")
    options = parser.parse_args()
    if options.loader:
        batch, tensor, unit = measure_loader()
        print(f"this host: a DataLoader batch received in {batch:.1f} units + {tensor:.1f} units per tensor (unit {unit} ns)")
        return 0
    if options.measure:
        found = measure()
        print(f"this host: forward {found['forward.call']:.1f} units per call + {found['forward.tensor']:.1f} per saved "
              f"tensor, backward {found['backward.call']:.1f} + {found['backward.tensor']:.1f} (unit {found['unit']:.0f} ns)")
        return 0
    if not options.folders:
        parser.error("give folders of EXAMPLE-baseline / EXAMPLE-checkpoint traces, or --measure")
    if options.fit:
        held = (None if options.with_call else
                (RECORDED_HOST_UNITS["checkpoint.forward.cpu"], RECORDED_HOST_UNITS["checkpoint.backward.cpu"]))
        fitted_rows, fitted = fit_tensors(options.folders, options.examples.split(","), held)
        print("| example | saved tensors per call | forward (units per call, median) | backward (units per call, median) |")
        print("|---|---:|---:|---:|")
        for example, saved, forward, backward in fitted_rows:
            print(f"| {example} | {saved:.2f} | {forward:.1f} | {backward:.1f} |")
        print(f"\nper call {'fitted' if options.with_call else 'held (RECORDED_HOST_UNITS)'}: forward "
              f"{fitted['forward.call']:.1f}, backward {fitted['backward.call']:.1f} units; per saved tensor, fitted: "
              f"forward {fitted['forward.tensor']:.2f}, backward {fitted['backward.tensor']:.2f} units")
        return 0
    rows = []
    print("| folder | example | checkpointed calls | forward (units per call) | backward (units per call) |")
    print("|---|---|---:|---:|---:|")
    for folder in options.folders:
        for example in options.examples.split(","):
            found = checkpoint_units(folder, example)
            if found is None:
                continue
            forward, backward, calls = found
            rows.append((forward, backward))
            print(f"| {folder} | {example} | {calls} | {forward:.1f} | {backward:.1f} |")
    if not rows:
        parser.error(f"no EXAMPLE-baseline / EXAMPLE-checkpoint pair of {options.examples} in {', '.join(map(str, options.folders))}")
    print(f"\nmedian: forward {statistics.median(r[0] for r in rows):.1f}, backward {statistics.median(r[1] for r in rows):.1f} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
