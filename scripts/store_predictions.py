#!/usr/bin/env python3
"""Store every corpus trace's predictions, so that a change meant to leave them alone can prove it did.

    python scripts/store_predictions.py                # writes tests/simulate/stored_predictions.json
    python scripts/store_predictions.py --out -        # prints it
    python scripts/store_predictions.py --compare      # recomputes and lists what differs (exit 1 if anything does)

For each trace of the corpus (`../shared/traces`, or DAYDREAM_CORPUS) and each what-if in WHATIFS: every
rank's simulated baseline and predicted mean iteration (ns) and the predicted time of each iteration, or the
error's message where the what-if does not apply to that trace. The simulator is deterministic, so the test
(tests/simulate/test_stored_predictions.py) compares to the nanosecond. A change that is meant to move
predictions regenerates the file, and its commit says which moved and why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _generated import write_or_print  # noqa: E402

from daydream.cost import CostOptions  # noqa: E402
from daydream.errors import DaydreamError  # noqa: E402
from daydream.simulate.whatif import predict_traces  # noqa: E402

CORPUS = Path(os.environ.get("DAYDREAM_CORPUS", REPO.parent / "shared" / "traces"))
STORED = REPO / "tests" / "simulate" / "stored_predictions.json"
#: One what-if per time model, with parameters that apply to traces without layer sizes.
WHATIFS: list[list[str]] = [
    ["amp"],
    ["fused-optimizer"],
    ["cuda-graphs"],
    ["fuse-elementwise"],
    ["batch-size:factor=2"],
    ["no-host-overhead"],
    ["faster-host:factor=2"],
    ["faster-gpu:factor=2"],
    ["gpu:target=H100 SXM"],
    ["gpu:target=MI300X,host=1.5"],
    ["comm:factor=2"],
    ["no-comm"],
    ["no-comm", "ddp:world=8,interconnect=nvlink3,params=100MB"],
    ["no-comm", "ddp:world=64,gpus_per_node=8,params=100MB,bandwidth=12.5"],
    ["no-comm", "zero:stage=2,world=8,interconnect=nvlink3,params=100MB"],
    ["no-comm", "ddp:world=8,interconnect=ib-hdr,params=100MB", "grad-compression:ratio=100"],
]


def traces() -> list[Path]:
    return sorted(CORPUS.glob("**/*.gz"))


def predictions_of(path: Path) -> dict[str, Any]:
    from daydream.api import open_job

    job = open_job(path)
    found: dict[str, Any] = {}
    for specs in WHATIFS:
        key = " + ".join(specs)
        try:
            ranks = predict_traces(job.traces, specs, None, cost_options=CostOptions(measure=False))
        except (DaydreamError, ValueError) as exc:
            found[key] = {"error": str(exc).splitlines()[0][:200]}
            continue
        found[key] = [{"simulated_ns": p.simulated_ns, "predicted_ns": p.predicted_ns,
                       "iterations_ns": [int(row["predicted_ns"]) for row in p.per_iteration]} for p in ranks]
    return found


def compute() -> dict[str, Any]:
    return {str(path.relative_to(CORPUS)): predictions_of(path) for path in traces()}


def differences(stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    lines = []
    for trace in sorted(set(stored) | set(now)):
        before, after = stored.get(trace, {}), now.get(trace, {})
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                lines.append(f"{trace} [{key}]: {json.dumps(before.get(key))[:160]} -> {json.dumps(after.get(key))[:160]}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(STORED), help="where to write (- for stdout)")
    parser.add_argument("--compare", action="store_true", help="compare with the stored file instead of writing it")
    options = parser.parse_args()
    if not (CORPUS / "MANIFEST.json").is_file():
        print(f"store_predictions: no trace corpus at {CORPUS} — set DAYDREAM_CORPUS", file=sys.stderr)
        return 2
    now = compute()
    if options.compare:
        changed = differences(json.loads(STORED.read_text()), now)
        print("\n".join(changed) if changed else f"all {len(now)} traces' predictions as stored")
        return 1 if changed else 0
    text = json.dumps(now, indent=1, sort_keys=True) + "\n"
    write_or_print(text, options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
