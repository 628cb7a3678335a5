#!/usr/bin/env python3
"""Validate what-if predictions against real runs, on the CPU, and write docs/validation.md.

    python scripts/validate.py                # about 2-3 minutes on 2 cores
    python scripts/validate.py --out -        # print only

For each example model: trace a baseline (`--optim loop`), predict
`batch-size:factor=2`, `checkpoint:layers=blocks\\.\\d+$` and `fused-optimizer` from it,
then trace each variant for real (`--batch-size 2x`, `--checkpoint`, `--optim
foreach`) under the same tracer and compare the predicted with the measured iteration time
(medians over the recorded iterations). Target: error at most 10% per row.

It also predicts `amp` on the fp32 GPU training traces of ../shared/traces and checks that
the predicted speed-up lies between 1 and the device's tensor-core ratio.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _generated import page_options, publish, scratch_cache  # noqa: E402

from daydream.api import open_job  # noqa: E402
from daydream.devices import find_device  # noqa: E402
from daydream.mapping import attribute, find_iterations  # noqa: E402
from daydream.memory import analyze_memory  # noqa: E402
from daydream.memory.whatif import current_optimizer_of, predict_memory  # noqa: E402
from daydream.simulate.whatif import predict  # noqa: E402
from daydream.transforms import parse_spec  # noqa: E402

EXAMPLES = {"mlp": 64, "cnn": 32, "transformer": 8}  # example -> its default batch size
WARMUP, ITERATIONS, STEPS = 3, 6, 12
REPEATS = 4  # each configuration is traced this many times, interleaved; the least-disturbed run of each is compared
CHECKPOINT = r"checkpoint:layers=blocks\.\d+$"
DDP_LINK = ("Every what-if on the CPU over interleaved rounds, medians (the current model, amp included): "
            "[validation-whatif-cpu.md](validation-whatif-cpu.md), from `scripts/whatif_truth.py --device cpu --rounds 5`. "
            "Data parallelism (the `ddp` what-if against real 2-process gloo runs): "
            "[Data parallelism on the CPU (gloo)](validation-ddp-cpu.md), from `scripts/validate_ddp_cpu.py`. "
            "Against real 2-GPU DDP ranks (`no-comm`, then `ddp:world=2`): "
            "[validation-distributed.md](validation-distributed.md), from `scripts/validate_distributed.py`."
            " Another GPU (`gpu:target=`, the same model traced on an H100 and an MI300X): "
            "[validation-cross-gpu.md](validation-cross-gpu.md), from `scripts/validate_cross_gpu.py`. "
            "On a GPU (an H200) against real runs: [gpu-validation.md](gpu-validation.md), from `scripts/gpu_check.sh`."
            " Memory against the real process (the whole run profiled from its first line): "
            "[validation-memory.md](validation-memory.md), from `scripts/validate_memory.py`.")
AMP_TRACES = [
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "param/et_replay_inputs/resnet_kineto.json.gz",
]


def trace(example: str, out: Path, *script_args: str) -> Path:
    command = [sys.executable, "-m", "daydream", "trace", "--backend", "torch", "--warmup", str(WARMUP),
               "--iterations", str(ITERATIONS), "-o", str(out), str(REPO / "examples" / f"{example}.py"), "--",
               "--steps", str(STEPS), *script_args]
    # One intra-op thread: on a small shared machine, thread scheduling noise is larger than the effects measured.
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return out


def measured_median(path: Path) -> int:
    trace_ = open_job(path, cache=False).traces[0]
    return int(statistics.median(it.measured_ns for it in find_iterations(trace_)))


def predicted_median(path: Path, spec: str) -> int:
    prediction = predict(open_job(path, cache=False).traces[0], [spec])
    return int(statistics.median(it["predicted_ns"] for it in prediction.per_iteration))


def example_rows(work: Path) -> list[dict[str, object]]:
    rows = []
    for example, batch in EXAMPLES.items():
        variants = {
            "batch-size:factor=2": ("--optim", "loop", "--batch-size", str(2 * batch)),
            CHECKPOINT: ("--optim", "loop", "--checkpoint"),
            "fused-optimizer": ("--optim", "foreach"),
        }
        baselines, measured = [], {spec: [] for spec in variants}
        for repeat in range(REPEATS):  # interleaved, so that slow phases of the machine hit every configuration
            baselines.append(trace(example, work / f"{example}-base-{repeat}.json.gz", "--optim", "loop"))
            for index, (spec, args) in enumerate(variants.items()):
                real = trace(example, work / f"{example}-{index}-{repeat}.json.gz", *args)
                measured[spec].append(measured_median(real))
        # On a shared machine, runs differ by tens of percent from slow phases of the host; the fastest
        # run of a configuration is the least disturbed one (best of N), for the baseline and the variants alike.
        best_baseline = min(baselines, key=measured_median)
        base_ms = measured_median(best_baseline) / 1e6
        for spec in variants:
            predicted = predicted_median(best_baseline, spec)
            real_ns = min(measured[spec])
            rows.append({"example": example, "what-if": spec, "baseline_ms": base_ms, "predicted_ms": predicted / 1e6,
                         "measured_ms": real_ns / 1e6, "error": (predicted - real_ns) / real_ns})
    return rows


def memory_rows(work: Path) -> list[dict[str, object]]:
    """Predicted vs measured peak allocated memory (CPU), from one baseline trace per example."""
    rows = []
    for example, batch in EXAMPLES.items():
        baseline = open_job(trace(example, work / f"{example}-mem-base.json.gz"), cache=False).traces[0]
        memory = analyze_memory(baseline)[0]
        layers = attribute(baseline).layers
        for spec, args in (("batch-size:factor=2", ("--batch-size", str(2 * batch))), (CHECKPOINT, ("--checkpoint",))):
            real = open_job(trace(example, work / f"{example}-mem-{len(rows)}.json.gz", *args), cache=False).traces[0]
            measured = analyze_memory(real)[0].peak_allocated_bytes
            predicted = predict_memory(memory, [parse_spec(spec)], layers, current_optimizer_of(baseline.strings), None)
            rows.append({"example": example, "what-if": spec, "baseline": memory.peak_allocated_bytes,
                         "predicted": predicted.predicted_peak_bytes, "measured": measured,
                         "error": (predicted.predicted_peak_bytes - measured) / measured})
    return rows


def amp_rows(corpus: Path) -> list[dict[str, object]]:
    rows = []
    for name in AMP_TRACES:
        trace_ = open_job(corpus / name).traces[0]
        prediction = predict(trace_, ["amp"])
        found = find_device(trace_.gpu_names[0] if trace_.gpu_names else None)
        ratio = found.amp_compute_factor_from_fp32 if found else 3.0
        phases = {k: (v["baseline_ns"], v["predicted_ns"]) for k, v in prediction.phases.items()}
        rows.append({"trace": name, "gpu": trace_.gpu_names[0] if trace_.gpu_names else "?", "speedup": prediction.speedup,
                     "ratio": ratio, "within": 1.0 <= prediction.speedup <= ratio,
                     "forward": phases["forward"], "backward": phases["backward"], "other": phases["other"]})
    return rows


def markdown(examples: list[dict[str, object]], amp: list[dict[str, object]], memory: list[dict[str, object]]) -> str:
    worst = max(abs(float(r["error"])) for r in examples) if examples else 0.0  # type: ignore[arg-type]
    misses = [r for r in examples if abs(float(r["error"])) > 0.10]  # type: ignore[arg-type]
    lines = [
        "# What-if validation",
        "",
        f"Generated by `python scripts/validate.py` on {date.today().isoformat()} (CPU, torch.profiler backend,",
        f"`--warmup {WARMUP} --iterations {ITERATIONS}`, one intra-op thread; each configuration traced {REPEATS} times,",
        "interleaved; per run the median iteration, then the fastest run of each configuration: runs of the same",
        "configuration differ by up to ~50% on this shared 2-core machine, from slow phases of the host).",
        "",
        DDP_LINK,
        "",
        "## Predicted vs measured, on the CPU",
        "",
        "Each row: the baseline (`--optim loop`) is traced, the what-if predicted from that trace, the",
        "variant run for real under the same tracer. Target: error at most 10%.",
        f"**Largest error: {worst * 100:.1f}%**" + (f"; {len(misses)} row(s) over 10%." if misses else "; every row meets the target."),
        "",
        "| example | what-if | baseline | predicted | measured | error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in examples:
        lines.append(f"| {r['example']} | `{r['what-if']}` | {float(r['baseline_ms']):.2f} ms | {float(r['predicted_ms']):.2f} ms | "  # type: ignore[arg-type]
                     f"{float(r['measured_ms']):.2f} ms | {float(r['error']) * 100:+.1f}% |")  # type: ignore[arg-type]
    worst_memory = max(abs(float(r["error"])) for r in memory) if memory else 0.0  # type: ignore[arg-type]
    lines += [
        "",
        "## Peak memory, predicted vs measured, on the CPU",
        "",
        "Peak allocated bytes of the CPU allocator (`[memory]` events), predicted from the baseline trace and",
        f"measured on the real variant. Target: within 5%. **Largest error: {worst_memory * 100:.1f}%.**",
        "",
        "| example | what-if | baseline | predicted | measured | error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in memory:
        lines.append(f"| {r['example']} | `{r['what-if']}` | {int(r['baseline']) / 2**20:.2f} MiB | "  # type: ignore[call-overload]
                     f"{int(r['predicted']) / 2**20:.2f} MiB | {int(r['measured']) / 2**20:.2f} MiB | "  # type: ignore[call-overload]
                     f"{float(r['error']) * 100:+.1f}% |")  # type: ignore[arg-type]
    lines += ["", *amp_section(amp)]
    lines += ["", *NOTES]
    return "\n".join(lines) + "\n"


def amp_section(amp: list[dict[str, object]]) -> list[str]:
    """The page's AMP section: per fp32 GPU training trace of the corpus, the predicted speed-up and work per phase."""
    lines = [
        "## AMP on the fp32 GPU training traces",
        "",
        "The predicted speed-up must lie between 1 and the device's fp16-tensor-core / fp32 peak ratio, unless the",
        "casts autocast adds cost the host more than the GPU saves (a host-bound step). Work per phase is GPU time",
        "per iteration, baseline → predicted; the host's casts and dispatch are in the speed-up, not in these columns.",
        "",
        "| trace | GPU | predicted speed-up | bound | within | forward | backward | other |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in amp:
        def pair(values: object) -> str:
            before, after = values  # type: ignore[misc]
            return f"{before / 1e6:.1f} → {after / 1e6:.1f} ms"
        lines.append(f"| {r['trace']} | {r['gpu']} | {float(r['speedup']):.2f}x | {float(r['ratio']):.2f} | "  # type: ignore[arg-type]
                     f"{'yes' if r['within'] else 'NO'} | {pair(r['forward'])} | {pair(r['backward'])} | {pair(r['other'])} |")
    return lines


def replace_amp_section(page: str, amp: list[dict[str, object]]) -> str:
    """`page` with its AMP section and the notes after it (the page's end) as this version gives them."""
    start = page.index("## AMP on the fp32 GPU training traces")
    return page[:start] + "\n".join([*amp_section(amp), "", *NOTES]) + "\n"


NOTES = """## Where the time model misses, and why

- Checkpointing on small blocks: besides the recomputed forward, `torch.utils.checkpoint`'s own host work
  (saved-tensor hooks, recomputation under autograd) costs about as much as the recomputation for blocks this
  small. The baseline trace holds nothing of it; the model adds it per checkpointed call in host units
  measured on real runs (`scripts/host_costs.py`, `daydream/cost/host.py`).
- Batch size on the CPU: a matrix multiply twice as large does not take exactly twice as long, and
  DataLoader collation scales with the number of samples, not with op durations.
- Noise: runs of the same configuration differ by tens of percent on this shared 2-core machine (the
  optimizer phase, which no what-if here changes, varied by more than 2x between runs of one session). The
  table compares the fastest of several interleaved runs; rows of the small MLP (10-20 ms iterations) move
  the most from one invocation of this script to the next.
- AMP on a host-bound trace (`nccl_parser_config`, `df_index_resolver`, the 2021 ResNet-50 of `tb_plugin_samples`,
  `resnet_kineto`): the GPU gains are hidden behind the host and autocast's casts and dispatch add host time, so the
  prediction is a slow-down (0.92x to 1.00x), reported as is. The last three record no phase annotations: their
  forward is told by the autograd nodes (mapping/attribution.py), so autocast's casts are planned for it.""".splitlines()


def main() -> int:
    parser = page_options(__doc__.splitlines()[0], "validation.md")
    parser.add_argument("--amp-only", action="store_true",
                        help="redo only the AMP section of the page at --out (the corpus traces; no CPU runs)")
    options = parser.parse_args()
    if options.amp_only:
        page = Path(options.out).read_text()
        Path(options.out).write_text(replace_amp_section(page, amp_rows(options.corpus)))
        return 0
    with scratch_cache() as work:
        examples = example_rows(work)
        memory = memory_rows(work)
        amp = amp_rows(options.corpus) if options.corpus.is_dir() else []
    publish(markdown(examples, amp, memory), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
