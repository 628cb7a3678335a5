"""docs/gpu-validation.md from the folder `scripts/gpu_check.sh` worked in (or kept with GPU_CHECK_KEEP).

    python scripts/gpu_summary.py WORK [--out docs/gpu-validation.md]

WORK holds, per example and backend, EXAMPLE-BACKEND.json.gz (and its .log), `device.txt`
(the GPU, torch and CUDA on the first line, the date on the second) and `whatif.md` (the table of
scripts/whatif_truth.py). `inspect` and `replay` of each trace run here when their JSON is not
there yet, so a kept folder can be summarised again on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from whatif_truth import kept  # beside this script

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("mlp", "cnn", "transformer")
BACKENDS = ("cupti", "torch")


def _json_of(command: str, trace: Path, saved: Path) -> dict | None:
    """`daydream COMMAND --json TRACE`, read from `saved` or run (and saved) when missing; None if it fails."""
    if not saved.exists() or not saved.stat().st_size:
        done = subprocess.run([sys.executable, "-m", "daydream", command, "--json", str(trace)], capture_output=True,
                              text=True, cwd=REPO, check=False)
        if done.returncode != 0:
            return None
        saved.write_text(done.stdout)
    try:
        return json.loads(saved.read_text())
    except json.JSONDecodeError:
        return None


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    return lines[-1][:120] if lines else "no log"


def collector_rows(work: Path) -> list[str]:
    rows = []
    for example in EXAMPLES:
        for backend in BACKENDS:
            base = work / f"{example}-{backend}"
            trace = kept(work, base.name)  # .json.gz, or .json.xz as kept in examples/h200
            inspect = _json_of("inspect", trace, base.with_suffix(".inspect.json")) if trace.exists() else None
            replay = _json_of("replay", trace, base.with_suffix(".replay.json")) if inspect else None
            if not inspect or not replay:
                rows.append(f"| {example} | {backend} | — | — | — | — | — | failed: {_last_line(base.with_suffix('.log'))} |")
                continue
            rank = inspect["ranks"][0]
            errors = [it["error"] for it in replay["ranks"][0]["iterations"]]
            linking = rank["linking"]
            share = rank["attribution"]["forward_leaf_share"]
            rows.append(f"| {example} | {backend} | {rank['kernels']} | {len(rank['iterations'])} | {share:.0%} | "
                        f"{max(errors) * 100:.2f}% | {linking['linked_to_launch']}/{linking['gpu_activities']} | "
                        f"{linking['linked_to_op']}/{linking['gpu_activities']} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "gpu-validation.md")
    options = parser.parse_args()
    work: Path = options.work
    device_lines = (work / "device.txt").read_text().splitlines() if (work / "device.txt").exists() else []
    device = device_lines[0] if device_lines else "an unnamed GPU"
    day = device_lines[1] if len(device_lines) > 1 else "an unrecorded date"
    whatif = work / "whatif.md"
    text = "\n".join([
        "# GPU validation",
        "",
        f"`bash scripts/gpu_check.sh` on {device}, {day}. Each example traced with `--warmup 3 --iterations 5`.",
        "The CUPTI backend records no framework ops (only the runtime calls, layers and phases), so its kernels",
        "are linked to their launches and none to an op; the torch backend links both.",
        "",
        "| example | backend | kernels | iterations | forward time on a leaf module | worst replay error "
        "| GPU work linked to a launch | to an op |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *collector_rows(work),
        "",
        "## What-ifs against real runs",
        "",
        "Per model at a GPU-bound size (`scripts/whatif_truth.py --sizes realistic`: the cnn example at batch 256, a",
        "transformer of BERT-base size at batch 8 and sequence 512, ResNet-50 on 224x224 images at batch 64), the fp32",
        "baseline (`--optim loop`) traced once with the torch backend; each what-if predicted from that trace; each",
        "variant (`--amp bf16`, `--optim fused`, `--cuda-graphs`, twice the batch, `--checkpoint`, `--compile`) run and",
        "traced for real; measured = the median of its recorded iterations. The Daydream paper's bar: AMP and fused",
        "optimizers within 13%.",
        "",
        whatif.read_text() if whatif.exists() else "(the what-if comparison did not run)",
    ]) + "\n"
    print(text)
    options.out.write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu-validation.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
