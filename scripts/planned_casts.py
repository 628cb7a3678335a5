"""The casts `amp` plans from an fp32 trace, against the casts the real autocast run of the same script made.

    python scripts/planned_casts.py DIR [DIR ...]        # folders kept by whatif_truth.py --keep (or their round-N)

For each EXAMPLE-baseline trace in a folder that has an EXAMPLE-amp trace beside it: the casts per iteration that
`amp` plans from the baseline (forward casts and autograd's casts back in backward, transforms/autocast.py), and the
`aten::_to_copy` calls per ProfilerStep the real run made beyond the baseline's, counted from the two files alone.
The device the plan is made for is the baseline's (a trace with GPU kernels: cuda, else cpu). A real count above the
planned one is casts the plan does not see; below, casts it plans that the run did not make. Some of the real run's
copies are an op's own work, not autocast's (a CPU's bf16 attention or pooling copies its input up inside itself):
they count here and are never planned.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = (".json.gz", ".json.xz", ".json")


def copies_per_step(path: Path) -> float:
    """`aten::_to_copy` calls per ProfilerStep of a torch.profiler trace."""
    opener: Any = lzma.open if path.name.endswith(".xz") else gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#"))
    if not steps:
        raise SystemExit(f"planned_casts: {path} has no ProfilerStep annotations: trace it with daydream trace "
                         "(torch backend)")
    copies = [e["ts"] for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::_to_copy"]
    inside = sum(1 for ts in copies if any(start <= ts < end for start, end in steps))
    return inside / len(steps)


def planned_per_iteration(path: Path) -> tuple[float, str]:
    """The casts `amp` plans per iteration from an fp32 trace, and the device type it planned for."""
    sys.path.insert(0, str(REPO))
    from daydream.api import open_job
    from daydream.simulate.whatif import forward_ops_of
    from daydream.trace import EventKind
    from daydream.transforms.autocast import autocast_view, plan_casts

    trace = open_job(path).traces[0]
    device = "cuda" if len(trace.indices(EventKind.KERNEL)) else "cpu"
    facts, _ = forward_ops_of(trace, between=True)
    per = [plan_casts(autocast_view(ops, device), device) for ops in facts.values()]
    if not per:
        return 0.0, device
    return sum(sum(c.forward + c.backward for c in casts) for casts in per) / len(per), device


def pairs(folder: Path) -> list[tuple[str, Path, Path]]:
    """(example, baseline, amp run) for each baseline in `folder` with an amp run beside it."""
    found = []
    for baseline in sorted(folder.iterdir()):
        for suffix in SUFFIXES:
            if baseline.name.endswith("-baseline" + suffix):
                example = baseline.name[:-len("-baseline" + suffix)]
                amp = folder / f"{example}-amp{suffix}"
                if amp.exists():
                    found.append((example, baseline, amp))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders with EXAMPLE-baseline and EXAMPLE-amp traces")
    options = parser.parse_args()
    rows = []
    for folder in options.folders:
        if not folder.is_dir():
            print(f"planned_casts: {folder} is not a folder: give the folder whatif_truth.py --keep wrote",
                  file=sys.stderr)
            return 2
        for example, baseline, amp in pairs(folder):
            planned, device = planned_per_iteration(baseline)
            real = copies_per_step(amp) - copies_per_step(baseline)
            rows.append(f"| {example} | {folder} | {device} | {planned:g} | {real:g} |")
    if not rows:
        print("planned_casts: no EXAMPLE-baseline trace with an EXAMPLE-amp trace beside it in "
              f"{', '.join(map(str, options.folders))}", file=sys.stderr)
        return 2
    print("| example | folder | device | planned casts / iteration | real run's added `aten::_to_copy` / step |")
    print("|---|---|---|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
