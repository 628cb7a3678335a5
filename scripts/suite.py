"""The training benchmark suite: trace every examples/suite model, analyse it, check the what-ifs a CPU run can.

    python scripts/suite.py                 # regenerates docs/suite.md and docs/suite.png (CPU: a few minutes)
    python scripts/suite.py --device cuda   # the same on a GPU, at the models' default sizes
    python scripts/suite.py --out -         # print only

Per model (one per domain of the TBD suite): the baseline (`--optim loop`) is traced; from
it come throughput (samples/s), utilization (host busy share; on a GPU, GPU busy and the
tensor-core share), the phase split, the peak memory and its breakdown, the replay error,
and the predicted speed-up of `amp`, `fused-optimizer`, `cuda-graphs`, `batch-size:factor=2`
and `checkpoint:` over the model's repeated blocks. Each variant is then run for real
(scripts/whatif_truth.py) and its measured time set beside the prediction.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from _generated import publish  # noqa: E402
from whatif_truth import SUITE as MODELS  # noqa: E402  model -> (domain, CPU baseline arguments, layers to checkpoint, trace options)
from whatif_truth import Failed, Row, compare, daydream  # noqa: E402

SUITE = REPO / "examples" / "suite"
CPU_CHECKABLE = ("fused-optimizer", "batch-size:factor=2", "checkpoint")


def analyse(trace: Path, budget: float) -> dict[str, Any]:
    """Throughput, utilization, phases, memory and replay error of one trace, from daydream's JSON."""
    rank = json.loads(daydream(["inspect", "--json", str(trace)], budget))["ranks"][0]
    replay = json.loads(daydream(["replay", "--json", str(trace)], budget))
    memory = json.loads(daydream(["memory", "--json", str(trace)], budget))
    host = [statistics.mean(it["utilization"]["host_busy_share"].values()) for it in rank["iterations"]
            if it["utilization"]["host_busy_share"]]
    gpu = [it["utilization"]["gpu_busy_share"] for it in rank["iterations"] if it["utilization"]["gpu_busy_share"] is not None]
    tensor = [it["utilization"]["tensor_core_share"] for it in rank["iterations"]
              if it["utilization"]["tensor_core_share"] is not None]
    flops = [it["utilization"]["gemm_flop_per_s"] for it in rank["iterations"] if it["utilization"]["gemm_flop_per_s"]]
    devices = memory.get("devices", [])
    return {
        "samples_per_s": rank["samples_per_s"],
        "batch_size": rank["batch_size"],
        "iteration_ns": statistics.median(it["measured_ns"] for it in rank["iterations"]),
        "host_busy": statistics.mean(host) if host else None,
        "gpu_busy": statistics.mean(gpu) if gpu else None,
        "tensor_core": statistics.mean(tensor) if tensor else None,
        "gemm_flop_per_s": statistics.mean(flops) if flops else None,
        "phases": rank["phases"],
        "replay_error": replay["max_error"],
        "memory": devices[0] if devices else None,
        "layers": len(rank["layers"]),
    }


def _work_ratios(work: Path, name: str, truth: list[Row], budget: float) -> dict[str, float]:
    """Per what-if run for real: the variant's measured work per iteration (all phases) over the baseline's."""
    def work_per_iteration(path: Path) -> float:
        return float(sum(json.loads(daydream(["inspect", "--json", str(path)], budget))["ranks"][0]["phases"].values()))

    base = work_per_iteration(work / f"{name}-baseline.json.gz")
    ratios = {}
    for index, row in enumerate(truth, start=1):
        variant = work / f"{name}-{index}.json.gz"
        if row.measured_ns is not None and variant.exists() and base:
            ratios[row.whatif] = work_per_iteration(variant) / base
    return ratios


def predicted_speedups(trace: Path, checkpoint: str, budget: float) -> dict[str, float | str]:
    found: dict[str, float | str] = {}
    for label, spec in (("amp", "amp"), ("fused-optimizer", "fused-optimizer"), ("cuda-graphs", "cuda-graphs"),
                        ("batch-size:factor=2", "batch-size:factor=2"), ("checkpoint", f"checkpoint:layers={checkpoint}")):
        try:
            found[label] = float(json.loads(daydream(["whatif", str(trace), "--opt", spec, "--json"], budget))["speedup"])
        except Failed as exc:
            found[label] = str(exc)
    return found


def page(results: dict[str, dict[str, Any]], device: str, figure: str | None) -> str:
    lines = [
        "# The training benchmark suite",
        "",
        f"`python scripts/suite.py --device {device}` on {date.today().isoformat()}: one model per domain of the TBD suite",
        "(`examples/suite/`), each traced with `daydream trace` (torch backend) at its default size, baseline `--optim loop`.",
        "",
        "## Throughput and utilization",
        "",
        "| model | domain | batch | iteration | samples/s | host busy | GPU busy | tensor-core share | GEMM GFLOP/s | replay error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        a = result["analysis"]
        lines.append(f"| {name} | {MODELS[name][0]} | {a['batch_size']} | {a['iteration_ns'] / 1e6:.1f} ms | "
                     f"{a['samples_per_s']:,.0f} | {_share(a['host_busy'])} | {_share(a['gpu_busy'])} | {_share(a['tensor_core'])} | "
                     f"{_giga(a['gemm_flop_per_s'])} | {a['replay_error'] * 100:.2f}% |")
    lines += ["", "GPU busy and the tensor-core share are for GPU traces (— on the CPU). GEMM GFLOP/s: the FLOPs of the",
              "matrix multiplies (mm, addmm, bmm, baddbmm, from their recorded shapes) per second of iteration;",
              "convolutions, recurrent cells and attention are not counted yet (— where a model has no such GEMM).", "",
              "## Where an iteration's time goes", "",
              "| model | forward | backward | optimizer | other | peak memory | weights | gradients | optimizer state | activations |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, result in results.items():
        a = result["analysis"]
        total = sum(a["phases"].values()) or 1
        phases = " | ".join(f"{a['phases'].get(p, 0) / total:.0%}" for p in ("forward", "backward", "optimizer", "other"))
        memory = a["memory"] or {}
        parts = memory.get("categories") or {}
        cells = " | ".join(_mib(parts.get(c)) for c in ("weights", "gradients", "optimizer state", "activations"))
        lines.append(f"| {name} | {phases} | {_mib(memory.get('peak_allocated_bytes'))} | {cells} |")
    lines += ["", "Memory as recorded inside the traced iterations (weights and optimizer state allocated before the",
              "trace are not in these figures yet).", "", "## Predicted speed-ups, and the CPU's measured truth", "",
              "Predicted speed-up (simulated baseline / predicted) from the baseline trace. Where a CPU run can check the",
              "what-if, the variant was run for real: measured time beside the predicted one, and the error.", "",
              "| model | amp | fused-optimizer | cuda-graphs | batch-size ×2 | checkpoint |", "|---|---:|---:|---:|---:|---:|"]
    for name, result in results.items():
        speedups = result["speedups"]
        lines.append(f"| {name} | " + " | ".join(_speedup(speedups.get(k)) for k in
                                                ("amp", "fused-optimizer", "cuda-graphs", "batch-size:factor=2", "checkpoint")) + " |")
    lines += ["", "| model | what-if | predicted | measured | error | measured work per iteration, variant / baseline |",
              "|---|---|---:|---:|---:|---:|"]
    for name, result in results.items():
        for row in result["truth"]:
            label = "checkpoint" if row.whatif.startswith("checkpoint") else row.whatif
            if label not in CPU_CHECKABLE and device == "cpu":
                continue
            outcome = f"{row.error * 100:+.1f}%" if row.error is not None else (row.problem or "—")
            ratio = result["work_ratio"].get(row.whatif)
            lines.append(f"| {name} | `{label}` | {_ms(row.predicted_ns)} | {_ms(row.measured_ns)} | {outcome} | "
                         f"{f'{ratio:.2f}x' if ratio else '—'} |")
    judged = [abs(row.error) for r in results.values() for row in r["truth"] if row.error is not None
              and ("checkpoint" if row.whatif.startswith("checkpoint") else row.whatif) in ("batch-size:factor=2", "checkpoint")]
    if judged:
        lines += ["", f"Batch size and checkpointing: mean |error| {statistics.mean(judged) * 100:.1f}%, worst "
                      f"{max(judged) * 100:.1f}% over {len(judged)} runs (target: within 10%). The last column is the measured",
                  "cause where a row misses: how much the work per iteration (all CPU ops, from `inspect`) really grew. At",
                  "twice the batch, work that grows much less than 2x is made of ops too small for their size to matter",
                  "(per-op overhead on the host), which `batch-size:` scales by the batch all the same beyond its fixed cost.",
                  "Under checkpointing, work that grows by more than one recomputed forward is the checkpoint machinery's",
                  "own: measured on a2c (`--optim loop`, 4 iterations), backward self time per iteration went from 4.1 to",
                  "11.3 ms while only 544 more CPU ops ran (the recomputed Linear/Tanh and their detaches; forward was 2.8 ms",
                  "in all), so most of the growth is time inside backward outside any recomputed op: the unpack hooks that",
                  "trigger recomputation, in Python. `checkpoint:` models the recomputed ops only; the gap is largest where",
                  "checkpointed blocks are small and called many times per step (a2c's rollout)."]
    if figure:
        lines += ["", f"![predicted speed-ups per model]({figure})"]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ("amp", "fused-optimizer", "cuda-graphs", "batch-size:factor=2", "checkpoint")
    names = list(results)
    figure, axis = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(labels)
    for index, label in enumerate(labels):
        values = [results[n]["speedups"].get(label) for n in names]
        axis.bar([i + index * width for i in range(len(names))], [v if isinstance(v, float) else 0 for v in values],
                 width, label=label)
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
    axis.set_ylabel("predicted speed-up")
    axis.set_ylim(0, 1.3)
    axis.legend(fontsize=8, ncols=5, loc="upper center")
    axis.set_title("daydream's predicted speed-up per what-if, per suite model", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _giga(value: float | None) -> str:
    return f"{value / 1e9:.1f}" if value else "—"


def _share(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "—"


def _mib(value: Any) -> str:
    return f"{value / 2**20:.1f} MiB" if isinstance(value, (int, float)) else "—"


def _ms(ns: float | None) -> str:
    return f"{ns / 1e6:.1f} ms" if ns is not None else "—"


def _speedup(value: float | str | None) -> str:
    return f"{value:.2f}x" if isinstance(value, float) else ("—" if value is None else "n/a")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--budget", type=float, default=180.0, help="seconds per trace or prediction")
    parser.add_argument("--out", default=str(REPO / "docs" / "suite.md"), help="markdown file to write, or - for none")
    options = parser.parse_args()
    options.backend = "torch"
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="daydream-suite-") as scratch:
        work = Path(scratch)
        os.environ.setdefault("DAYDREAM_CACHE_DIR", str(work / "cache"))
        for name in options.models.split(","):
            domain, arguments, checkpoint, trace_options = MODELS[name]
            print(f"suite: {name} ({domain})", file=sys.stderr)
            truth: list[Row] = compare(name, options, work, SUITE / f"{name}.py", arguments, f"checkpoint:layers={checkpoint}",
                                       trace_options)
            baseline = work / f"{name}-baseline.json.gz"
            if not baseline.exists():
                print(f"suite: {name}: {truth[0].problem}", file=sys.stderr)
                continue
            results[name] = {"analysis": analyse(baseline, options.budget),
                             "speedups": predicted_speedups(baseline, checkpoint, options.budget), "truth": truth,
                             "work_ratio": _work_ratios(work, name, truth, options.budget)}
    figure = None
    if options.out != "-":
        figure_path = Path(options.out).with_suffix(".png")
        plot(results, figure_path)
        figure = figure_path.name
    text = page(results, options.device, figure)
    if options.out == "-":
        print(text)
    else:
        publish(text, options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
