"""Predicted against measured: trace an example once, predict each what-if, run each variant for real.

    python scripts/whatif_truth.py --device cuda --out table.md           # the GPU section of gpu_check.sh
    python scripts/whatif_truth.py --device cpu --examples mlp --out -    # the same comparison on the CPU
    python scripts/whatif_truth.py --recorded examples/h200              # again from the H200 traces kept here
    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --rounds 5 --out docs/whatif-cpu.md   # CPU truth
    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --examples suite --rounds 5   # the suite's six models
    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script train.py --script-args "--batch-size 8" \\
        --checkpoint-layers 'encoder\\.layers\\.\\d+$' --rounds 5 --keep DIR   # a training script of your own

Per example, the baseline (fp32, `--optim loop`) is traced once; from that trace daydream
predicts `amp`, `fused-optimizer`, `cuda-graphs`, `batch-size:factor=2`,
`checkpoint:layers=blocks\\.\\d+$` and `fuse-elementwise`; each variant (`--amp`, `--optim fused` — `foreach` on
the CPU, `--cuda-graphs`, twice the batch, `--checkpoint`, `--compile`: torch.compile) is then traced for real, and the
predicted iteration time is compared with the variant's measured one (the median of its
recorded iterations). A part that fails or runs past its time budget becomes a row that
says why; the table is written either way.

Each part runs `daydream` in its own process, with a time limit (`--budget` seconds per
trace or prediction). With `--rounds N` the whole comparison runs N times, baseline and variants interleaved in
each round (each round predicts from its own baseline); a row gives the medians over the rounds and the median of
the rounds' errors, with their range. With `--paired`, each variant after the first is predicted from a baseline of
its own, traced just before it in odd rounds and just after it in even ones (kept as EXAMPLE-baseline-SLUG.json.gz,
which `--recorded` pairs again): on a machine whose speed moves from one run to the next, each comparison is then of
two runs made one after the other, not of a variant with a baseline traced minutes before.

A script of your own (`--script`) takes the flags the examples take: `--device cpu|cuda`, `--steps N`,
`--batch-size N`, `--optim loop|foreach|fused` (a per-parameter loop, multi-tensor, fused), `--amp` (bf16 autocast),
`--checkpoint` (each block recomputed in backward: the modules `--checkpoint-layers` names), `--compile`
(torch.compile), `--cuda-graphs`; a variant whose flag it does not take fails as its own row. Its name in the table and
in the kept files is the script's stem; `--recorded DIR --script PATH` compares the kept traces again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = r"checkpoint:layers=blocks\.\d+$"
STEP_FUNCTION = "training:train_step"  # what ends an iteration under --cuda-graphs (examples/training.py)

#: example -> (script arguments of the baseline) per device: GPU-sized on a GPU, seconds on the CPU
CONFIGURATIONS = {
    "cuda": {"mlp": ["--batch-size", "2048"], "cnn": ["--batch-size", "256"],
             "transformer": ["--batch-size", "32", "--context", "256"]},
    "cpu": {"mlp": ["--batch-size", "64", "--width", "512"], "cnn": ["--batch-size", "16"],
            "transformer": ["--batch-size", "4", "--width", "256"]},
}
#: example -> script arguments at GPU-bound, realistic sizes (--sizes realistic, scripts/gpu_check.sh on a lent GPU):
#: ResNet-50 on 224x224 images, batch 64; a transformer of BERT-base size (12 blocks, width 768, sequence 512, batch 8)
REALISTIC = {
    "resnet": ["--batch-size", "64", "--width", "64", "--image-size", "224", "--layers", "50"],
    "transformer": ["--batch-size", "8", "--context", "512", "--depth", "12", "--width", "768"],
}
#: the training benchmark suite (examples/suite, one model per domain of the TBD suite): model -> (domain, baseline
#: arguments, the layers to checkpoint, daydream trace options); `--examples suite` names all six
SUITE: dict[str, tuple[str, list[str], str, tuple[str, ...]]] = {
    "resnet": ("image classification", ["--batch-size", "16", "--width", "16"], r"blocks\.\d+$", ()),
    "translation": ("machine translation", ["--batch-size", "16"], r"(encoder|decoder)\.\d+$", ()),
    "speech": ("speech recognition", ["--batch-size", "8"], r"blocks\.\d+$", ()),
    "detection": ("object detection", ["--batch-size", "8"], r"blocks\.\d+$", ()),
    "dcgan": ("adversarial network", ["--batch-size", "16", "--width", "32"], r"blocks\.\d+$", ()),
    # an RL "sample" is one environment step: 64 environments x 16 rollout steps per iteration
    "a2c": ("reinforcement learning", ["--batch-size", "64"], r"blocks\.\d+$", ("--batch-size", "1024")),
}


@dataclass(frozen=True)
class Variant:
    whatif: str           # the --opt spec predicted from the baseline
    arguments: list[str]  # what the real variant adds to the baseline's script arguments
    slug: str             # names the variant's trace: EXAMPLE-SLUG.json.gz
    needs_gpu: bool = False
    step_fn: str | None = None
    untouched: str | None = None  # a phase the variant leaves alone: how much the host itself drifted between runs


#: The what-ifs to compare (--whatifs: their first words, e.g. "compile,amp"); empty: all of them.
CHOSEN: set[str] = set()


def variants(device: str, baseline: list[str], checkpoint: str = CHECKPOINT) -> list[Variant]:
    every = _variants(device, baseline, checkpoint)
    return [v for v in every if not CHOSEN or v.whatif.split(":")[0] in CHOSEN]


def chosen_whatifs(text: str) -> set[str]:
    """The first words of --whatifs (a whole spec such as batch-size:factor=2 names its first word); SystemExit naming
    a word that is no what-if here."""
    known = {v.whatif.split(":")[0] for device in ("cpu", "cuda") for v in _variants(device, ["--batch-size", "1", "--width", "1"])}
    words = {w.strip().split(":")[0] for w in text.split(",") if w.strip()}
    unknown = sorted(words - known)
    if unknown:
        raise SystemExit(f"whatif_truth.py: --whatifs {','.join(unknown)}: no such what-if here; "
                         f"choose from {','.join(sorted(known))}")
    return words


def gpu_variants() -> list[Variant]:
    """Every variant run on a GPU, as its kept trace names it (EXAMPLE-SLUG) and with the what-if predicted for it (the
    batch size a variant doubles does not enter its what-if)."""
    return _variants("cuda", ["--batch-size", "1"])


def _variants(device: str, baseline: list[str], checkpoint: str = CHECKPOINT) -> list[Variant]:
    batch = int(baseline[baseline.index("--batch-size") + 1])
    return [
        Variant("amp", ["--amp", "bf16"], "amp", untouched="optimizer"),
        Variant("fused-optimizer", ["--optim", "fused" if device == "cuda" else "foreach"], "fused-optimizer",
                untouched="forward"),
        Variant("cuda-graphs", ["--cuda-graphs"], "cuda-graphs", needs_gpu=True, step_fn=STEP_FUNCTION),
        Variant("batch-size:factor=2", ["--batch-size", str(2 * batch)], "batch-x2", untouched="optimizer"),
        Variant(checkpoint, ["--checkpoint"], "checkpoint", untouched="optimizer"),
        # torch.compile (inductor): on a CPU trace the compile what-if, on a GPU one what it does to chains of pointwise
        # kernels
        Variant("compile" if device == "cpu" else "fuse-elementwise", ["--compile"], "compile", untouched="optimizer"),
        # each block's saved activations in pinned host memory (save_on_cpu: copies on the compute stream, fetched
        # when backward needs them)
        Variant(f"offload:layers={checkpoint.partition('layers=')[2]},prefetch=0,stream=compute", ["--offload"],
                "offload", needs_gpu=True, untouched="optimizer"),
        # twice as wide, where the baseline names its width (--width N: the examples' hidden size, the suite ResNet's
        # first channels): the layers the checkpoint what-if names make the hidden sizes
        *([Variant(f"width:layers={checkpoint.partition('layers=')[2]},factor=2",
                   ["--width", str(2 * int(baseline[baseline.index("--width") + 1]))], "width-x2")]
          if "--width" in baseline[:-1] else []),
    ]


@dataclass
class Row:
    example: str
    whatif: str
    baseline_ns: float | None = None
    predicted_ns: float | None = None
    measured_ns: float | None = None
    problem: str = ""
    round_errors: list[float] | None = None  # each round's error, where the row combines several
    drift: tuple[str, float] | None = None  # (a phase the variant leaves alone, its time in the variant / the baseline)
    tiers: str = ""  # how the cost stage timed the changed work ("12 measured, 30 modelled"), from the prediction
    # on a GPU, peak allocated device memory, bytes: predicted (daydream whatif --memory) and as the runs' allocator
    # counted it (torch.cuda.max_memory_allocated), the baseline's and the variant's
    predicted_peak: int | None = None
    baseline_peak: int | None = None
    real_peak: int | None = None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured; over several rounds, the median of the rounds' errors."""
        if self.round_errors:
            return statistics.median(self.round_errors)
        if self.predicted_ns is None or not self.measured_ns:
            return None
        return (self.predicted_ns - self.measured_ns) / self.measured_ns


def combined(rounds: list[list[Row]]) -> list[Row]:
    """One row per (example, what-if) from its rows in the rounds that have it (a round cut off part-way has
    fewer), in the order they first appear: medians of the times and of the errors."""
    by_key: dict[tuple[str, str], list[Row]] = {}
    for this_round in rounds:
        for row in this_round:
            by_key.setdefault((row.example, row.whatif), []).append(row)
    rows = []
    for same in by_key.values():
        measured = [r for r in same if r.error is not None]
        first = same[0]
        if not measured:
            rows.append(Row(first.example, first.whatif, first.baseline_ns, problem=first.problem))
            continue
        drifts = [r.drift[1] for r in measured if r.drift]
        peaked = next((r for r in same if r.real_peak), first)  # the round that kept the allocator's peaks
        rows.append(Row(first.example, first.whatif,
                        statistics.median(r.baseline_ns for r in measured if r.baseline_ns is not None),
                        statistics.median(r.predicted_ns for r in measured if r.predicted_ns is not None),
                        statistics.median(r.measured_ns for r in measured if r.measured_ns is not None),
                        round_errors=[r.error for r in measured if r.error is not None],
                        drift=(first.drift[0], statistics.median(drifts)) if first.drift and drifts else None,
                        tiers=first.tiers, predicted_peak=peaked.predicted_peak,
                        baseline_peak=peaked.baseline_peak, real_peak=peaked.real_peak))
    return rows


class Failed(Exception):
    """A part did not produce its number; the message says why, in one line."""


#: --heap keep-freed: glibc keeps freed memory in every process this script starts (traced runs and predictions
#: alike), so that how much of a step comes as fresh pages does not move from process to process
#: (scripts/allocator_effect.py); empty: the default heap, as a user's run has it.
HEAP_ENV: dict[str, str] = {}
KEEP_FREED = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(64 * 2**20)}


def keep_freed() -> dict[str, str]:
    """HEAP_ENV for --heap keep-freed: the heap's settings, and a cache folder of its own (the measured tier's times
    under this heap must not mix with those under the default one)."""
    sys.path.insert(0, str(REPO))
    from daydream.trace.store import cache_dir

    return {**KEEP_FREED, "DAYDREAM_CACHE_DIR": str(cache_dir() / "heap-keep-freed")}


def daydream(arguments: list[str], budget: float, env: dict[str, str] | None = None) -> str:
    """Run `python -m daydream ARGUMENTS` (with `env`, and the heap's settings, added to the environment); its stdout,
    or Failed with its last line of stderr."""
    try:
        done = subprocess.run([sys.executable, "-m", "daydream", *arguments], capture_output=True, text=True,
                              timeout=budget, cwd=REPO, check=False, env={**os.environ, **HEAP_ENV, **(env or {})})
    except subprocess.TimeoutExpired:
        raise Failed(f"ran past its {budget:.0f} s budget") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise Failed(lines[-1][:160] if lines else f"exit code {done.returncode}")
    return done.stdout


def trace(script: Path, out: Path, script_arguments: list[str], options: argparse.Namespace,
          step_fn: str | None = None, daydream_options: tuple[str, ...] = ()) -> float:
    """Trace one configuration of `script`; the median of its recorded iterations, ns."""
    extra = ["--step-fn", step_fn] if step_fn else []
    peak = peak_file(out)
    peak.unlink(missing_ok=True)
    daydream(["trace", "--backend", options.backend, "--warmup", str(options.warmup), "--iterations", str(options.iterations),
              *extra, *daydream_options, "-o", str(out), str(script), "--", "--device", options.device,
              "--steps", str(options.warmup + options.iterations + 2), *script_arguments], options.budget,
             env=_trace_environment(peak, options.device, step_fn))
    return measured_ns(out, options.budget)


def _trace_environment(peak: Path, device: str, step_fn: str | None) -> dict[str, str]:
    """What a traced run adds to the environment: on a GPU, where to write its allocator's peak; with a step function,
    examples/ on the path (its module, training, lives there, also for the suite's scripts one folder down)."""
    env = {"DAYDREAM_PEAK_FILE": str(peak)} if device == "cuda" else {}
    if step_fn:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "examples"), os.environ.get("PYTHONPATH")) if p)
    return env


def peak_file(trace_path: Path) -> Path:
    """Where the run traced into `trace_path` writes its allocator's peak (examples/training.py, on a GPU)."""
    return trace_path.with_name(trace_path.name.removesuffix(".json.gz").removesuffix(".json.xz") + ".peak")


def real_peak(trace_path: Path) -> int | None:
    """The peak allocated device memory of the run traced into `trace_path`, bytes; None where it wrote none."""
    path = peak_file(trace_path)
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


def measured_ns(path: Path, budget: float) -> float:
    """The median recorded iteration, each to its completion (its GPU work done: docs/replay-model.md)."""
    document = json.loads(daydream(["replay", "--json", str(path)], budget))
    return float(statistics.median(it["measured_ns"] for it in document["ranks"][0]["iterations"]))


def phase_ns(path: Path, phase: str) -> float:
    """The median per iteration of the host time a phase's annotations (daydream.phase::PHASE) span in a daydream
    recording, ns."""
    sys.path.insert(0, str(REPO))
    from daydream.api import open_trace
    from daydream.trace import EventKind, discover

    trace = open_trace(discover(path)[0])
    rows = trace.indices(EventKind.ANNOTATION)
    names = [trace.name_of(r) for r in rows]
    steps = [r for r, n in zip(rows, names) if n.startswith("ProfilerStep#")]
    chosen = [r for r, n in zip(rows, names) if n == f"daydream.phase::{phase}"]
    per_step = [sum(int(trace.dur_ns[r]) for r in chosen if trace.ts_ns[s] <= trace.ts_ns[r] < trace.end_ns[s]) for s in steps]
    return float(statistics.median(per_step)) if per_step else float("nan")


def drift(variant: Variant, measured: Path, base: Path) -> tuple[str, float] | None:
    """(the phase `variant` leaves alone, its time in the variant's run / in the baseline's), or None for none."""
    if not variant.untouched:
        return None
    before, after = phase_ns(base, variant.untouched), phase_ns(measured, variant.untouched)
    if not before > 0 or not after > 0:  # a script that records no such phase (an update loop written by hand)
        return None
    return variant.untouched, after / before


def predicted_ns(path: Path, whatif: str, budget: float, memory: bool = False) -> tuple[float, str, int | None]:
    """The predicted iteration, ns; how the cost stage timed the changed work ("" where it timed none); with `memory`,
    the predicted peak allocated memory of the trace's GPU, bytes (None without one)."""
    document = json.loads(daydream(["whatif", str(path), "--opt", whatif, "--json", *(["--memory"] if memory else [])],
                                   budget))
    prefix = "cost stage: changed work timed "
    tiers = [n[len(prefix):] for n in document["ranks"][0].get("notes", []) if n.startswith(prefix)]
    peaks = [int(m["predicted_peak_bytes"]) for m in document.get("memory") or []
             if str(m.get("device", "")).startswith("cuda") and m.get("predicted_peak_bytes") is not None]
    return float(document["iteration_ns"]["predicted"]), tiers[0] if tiers else "", max(peaks) if peaks else None


@dataclass(frozen=True)
class Setup:
    script: Path
    arguments: list[str]            # the baseline's script arguments (they name --batch-size), before --optim loop
    checkpoint: str = CHECKPOINT    # the checkpoint what-if
    daydream_options: tuple[str, ...] = ()


#: --script: the script's stem -> how it runs
SCRIPTS: dict[str, Setup] = {}


def own_script(path: Path, arguments: str, layers: str) -> str:
    """Register a training script of the user's (see the module's docstring) under its stem; SystemExit naming what is
    wrong with it."""
    if not path.is_file():
        raise SystemExit(f"whatif_truth.py: --script {path}: no such file")
    split = arguments.split()
    if "--batch-size" not in split or split.index("--batch-size") + 1 >= len(split):
        raise SystemExit(f"whatif_truth.py: --script-args {arguments!r}: name the baseline's batch (--batch-size N); "
                         "the batch-size variant doubles it")
    SCRIPTS[path.stem] = Setup(path.resolve(), split, f"checkpoint:layers={layers}")
    return path.stem


def setup(example: str, device: str, sizes: str = "default") -> Setup:
    """How `example` runs: a script given by --script, one of examples/ (mlp, cnn, transformer) or a model of the suite
    (examples/suite); with `sizes` "realistic", at the REALISTIC size where it has one."""
    if example in SCRIPTS:
        return SCRIPTS[example]
    realistic = REALISTIC.get(example) if sizes == "realistic" else None
    if example in SUITE:
        _, arguments, layers, trace_options = SUITE[example]
        return Setup(REPO / "examples" / "suite" / f"{example}.py", realistic or arguments, f"checkpoint:layers={layers}",
                     trace_options)
    if example not in CONFIGURATIONS[device]:
        raise SystemExit(f"whatif_truth: no example {example!r}; the examples are "
                         f"{', '.join([*CONFIGURATIONS[device], *SUITE])} (or suite, all)")
    return Setup(REPO / "examples" / f"{example}.py", realistic or CONFIGURATIONS[device][example])


def chosen_examples(names: str, device: str) -> list[str]:
    """`--examples`: comma-separated names, `suite` for the six suite models, `all` for the examples and the suite."""
    expanded: list[str] = []
    for name in names.split(","):
        group = {"suite": list(SUITE), "all": [*CONFIGURATIONS[device], *SUITE]}.get(name, [name])
        expanded += [n for n in group if n not in expanded]
    for name in expanded:
        setup(name, device)  # an unknown name stops here, before anything runs
    return expanded


def compare(example: str, options: argparse.Namespace, work: Path, script: Path | None = None,
            arguments: list[str] | None = None, checkpoint: str | None = None,
            daydream_options: tuple[str, ...] | None = None) -> list[Row]:
    """Rows of `example` (as `setup` says, or `script` with baseline `arguments`, which name --batch-size)."""
    known = setup(example, options.device, getattr(options, "sizes", "default")) if script is None or arguments is None else None
    script = script or known.script
    configuration = arguments if arguments is not None else known.arguments
    checkpoint = checkpoint or (known.checkpoint if known else CHECKPOINT)
    daydream_options = daydream_options if daydream_options is not None else (known.daydream_options if known else ())
    baseline_arguments = [*configuration, "--optim", "loop"]
    chosen = variants(options.device, configuration, checkpoint)
    base = work / f"{example}-baseline.json.gz"
    try:
        baseline_ns = trace(script, base, baseline_arguments, options, daydream_options=daydream_options)
    except Failed as exc:
        return [Row(example, v.whatif, problem=f"baseline: {exc}") for v in chosen]
    rows = []
    for number, variant in enumerate(chosen):
        row = Row(example, variant.whatif, baseline_ns=baseline_ns)
        rows.append(row)
        if variant.needs_gpu and options.device != "cuda":
            row.problem = "needs a CUDA device"
            continue
        # The variant replaces the baseline's values where it sets the same flag.
        arguments = _merged(baseline_arguments, variant.arguments)
        measured = work / f"{example}-{variant.slug}.json.gz"
        try:
            own, variant_ns = base, None
            if getattr(options, "paired", False) and number > 0:  # the first variant follows the round's baseline
                own = work / f"{example}-baseline-{variant.slug}.json.gz"
                row.baseline_ns, variant_ns = _paired(script, own, baseline_arguments, options, daydream_options,
                                                      partial(trace, script, measured, arguments, options,
                                                              variant.step_fn))
            row.predicted_ns, row.tiers, row.predicted_peak = predicted_ns(own, variant.whatif, options.budget,
                                                                           memory=options.device == "cuda")
            row.measured_ns = (variant_ns if variant_ns is not None
                               else trace(script, measured, arguments, options, variant.step_fn))
            row.baseline_peak, row.real_peak = real_peak(own), real_peak(measured)
            row.drift = drift(variant, measured, own)
        except Failed as exc:
            row.problem = str(exc)
    return rows


def _paired(script: Path, base: Path, baseline_arguments: list[str], options: argparse.Namespace,
            daydream_options: tuple[str, ...], run_variant: Callable[[], float]) -> tuple[float, float | None]:
    """--paired: a baseline of the variant's own, traced into `base` next to it: just before it in odd rounds, just
    after it in even ones (`options.round`), so that neither place in the pair is always the earlier one. Its measured
    iteration, ns, and the variant's where it ran first (None: not yet run)."""
    def run_baseline() -> float:
        try:
            return trace(script, base, baseline_arguments, options, daydream_options=daydream_options)
        except Failed as exc:
            raise Failed(f"baseline: {exc}") from None

    if getattr(options, "round", 1) % 2:
        return run_baseline(), None
    variant_ns = run_variant()
    return run_baseline(), variant_ns


def recorded(example: str, folder: Path, options: argparse.Namespace, checkpoint: str = CHECKPOINT) -> list[Row]:
    """Rows of `example` from traces recorded earlier (--keep; each EXAMPLE-SLUG.json.gz, or .json.xz as kept in the
    repository): no run, so no GPU needed to redo the comparison. Where the runs' allocator peaks were kept
    (EXAMPLE-SLUG.peak), each what-if's predicted peak too."""
    base = kept(folder, f"{example}-baseline")
    known = setup(example, options.device, getattr(options, "sizes", "default"))
    chosen = variants(options.device, known.arguments, checkpoint if checkpoint != CHECKPOINT else known.checkpoint)
    if not base.exists():  # the variants that run kept, each without its baseline
        return [Row(example, v.whatif, problem=f"no {base.name} in {folder}") for v in chosen
                if kept(folder, f"{example}-{v.slug}").exists()]
    baseline_ns = measured_ns(base, options.budget)
    shared = base
    rows = []
    for variant in chosen:
        measured = kept(folder, f"{example}-{variant.slug}")
        if not measured.exists():
            continue  # a variant that run did not include (torch.compile, in examples/h200)
        own = kept(folder, f"{example}-baseline-{variant.slug}")  # --paired: the baseline traced next to it
        base = own if own.exists() else shared
        row = Row(example, variant.whatif, baseline_ns=measured_ns(base, options.budget) if own.exists() else baseline_ns)
        row.baseline_peak, row.real_peak = real_peak(base), real_peak(measured)
        rows.append(row)
        try:
            row.predicted_ns, row.tiers, row.predicted_peak = predicted_ns(base, variant.whatif, options.budget,
                                                                           memory=row.real_peak is not None)
            row.measured_ns = measured_ns(measured, options.budget)
            row.drift = drift(variant, measured, base)
        except Failed as exc:
            row.problem = str(exc)
    return rows


def kept(folder: Path, stem: str) -> Path:
    """folder/STEM.json.gz, or folder/STEM.json.xz where only that is there."""
    xz = folder / f"{stem}.json.xz"
    return xz if xz.exists() and not (folder / f"{stem}.json.gz").exists() else folder / f"{stem}.json.gz"


def _merged(base: list[str], changes: list[str]) -> list[str]:
    merged = list(base)
    index = 0
    while index < len(changes):
        flag = changes[index]
        value = changes[index + 1] if index + 1 < len(changes) and not changes[index + 1].startswith("--") else None
        if flag in merged:
            at = merged.index(flag)
            has_value = at + 1 < len(merged) and not merged[at + 1].startswith("--")
            del merged[at: at + (2 if has_value else 1)]
        merged += [flag] + ([value] if value is not None else [])
        index += 2 if value is not None else 1
    return merged


#: CPU flags of native bf16 arithmetic: where none is there, bf16 autocast runs on a slow path (amp slows the step)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def machine() -> str:
    """One line naming the CPU that ran the comparison and whether it has native bf16 arithmetic (what `amp` on a CPU
    turns on), from /proc/cpuinfo where there is one."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform
        return f"Run on {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs.\n\n"
    fields = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in info.splitlines() if ":" in line)}
    model = fields.get("model name", "an unnamed CPU")
    flags = set(fields.get("flags", "").split())
    native = [flag for flag in BF16_FLAGS if flag in flags]
    bf16 = f"native bf16 arithmetic ({', '.join(native)})" if native else "no native bf16 arithmetic (neither " \
        + " nor ".join(BF16_FLAGS) + ")"
    return f"Run on {model}, {os.cpu_count()} logical CPUs, {bf16}.\n\n"


def table(rows: list[Row]) -> str:
    """The markdown table of `rows`: predicted and measured per what-if, with the error (and, over rounds, its range)."""
    ranged = any(r.round_errors for r in rows)
    drifted = any(r.drift for r in rows)
    tiered = any(r.tiers for r in rows)
    header = "| example | what-if | baseline (measured) | predicted | measured | error |"
    header += " rounds (range) |" if ranged else ""
    header += " host drift (untouched phase, variant / baseline) |" if drifted else ""
    header += " changed work timed by (cost stage tiers) |" if tiered else ""
    lines = [header, "|---|---|---:|---:|---:|---:|" + ("---:|" if ranged else "") + ("---|" if drifted else "")
             + ("---|" if tiered else "")]
    for row in rows:
        cells = [_ms(row.baseline_ns), _ms(row.predicted_ns), _ms(row.measured_ns)]
        error = row.error
        outcome = f"{error * 100:+.1f}%" if error is not None else (row.problem or "—")
        extra = ""
        if ranged:
            errors = row.round_errors or []
            extra = (f" {len(errors)} ({min(errors) * 100:+.1f}% to {max(errors) * 100:+.1f}%) |" if errors else " — |")
        if drifted:
            extra += f" {row.drift[0]} ×{row.drift[1]:.2f} |" if row.drift else " — |"
        if tiered:
            extra += f" {row.tiers or '—'} |"
        lines.append(f"| {row.example} | `{row.whatif}` | {' | '.join(cells)} | {outcome} |{extra}")
    judged = [abs(r.error) for r in rows if r.error is not None]
    if judged:
        lines += ["", f"{len(judged)} of {len(rows)} what-ifs measured; mean |error| {statistics.mean(judged) * 100:.1f}%, "
                      f"median {statistics.median(judged) * 100:.1f}%, worst {max(judged) * 100:.1f}%."]
    # A row the cost stage timed nothing for and whose prediction is its baseline has no model on that device
    # (fuse-elementwise on the CPU): the others are summarized apart.
    unmodelled = [r for r in rows if r.error is not None and not r.tiers and r.predicted_ns == r.baseline_ns]
    modelled = [abs(r.error) for r in rows if r.error is not None and r not in unmodelled]
    if tiered and unmodelled and modelled:
        lines[-1] += (f" The {len(modelled)} with a model here (the others predict their baseline): "
                      f"mean {statistics.mean(modelled) * 100:.1f}%, median {statistics.median(modelled) * 100:.1f}%, "
                      f"worst {max(modelled) * 100:.1f}%, {sum(e <= 0.10 for e in modelled)} within 10%.")
    return "\n".join(lines) + "\n"


def memory_table(rows: list[Row]) -> str:
    """The markdown table of the peak allocated memory each what-if predicts against its real run's allocator
    (torch.cuda.max_memory_allocated); "" where no row has a real peak (the CPU, or traces kept without one)."""
    real = [r for r in rows if r.real_peak]
    if not real:
        return ""
    lines = ["", "Peak allocated device memory: `daydream whatif --memory` from the baseline's trace against the real run's",
             "`torch.cuda.max_memory_allocated` (over all its steps).", "",
             "| example | what-if | baseline (allocator) | predicted | real (allocator) | peak error |", "|---|---|---:|---:|---:|---:|"]
    errors = []
    for row in real:
        error = (row.predicted_peak - row.real_peak) / row.real_peak if row.predicted_peak is not None else None
        errors += [abs(error)] if error is not None else []
        lines.append(f"| {row.example} | `{row.whatif}` | {_mib(row.baseline_peak)} | {_mib(row.predicted_peak)} | "
                     f"{_mib(row.real_peak)} | {f'{error * 100:+.1f}%' if error is not None else '—'} |")
    if errors:
        lines += ["", f"{len(errors)} peaks compared; mean |error| {statistics.mean(errors) * 100:.1f}%, "
                      f"median {statistics.median(errors) * 100:.1f}%, worst {max(errors) * 100:.1f}%."]
    return "\n".join(lines) + "\n"


def _mib(size: int | None) -> str:
    return f"{size / 2**20:,.0f} MiB" if size is not None else "—"


def _ms(ns: float | None) -> str:
    return f"{ns / 1e6:.2f} ms" if ns is not None else "—"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--whatifs", default="", help="comma-separated what-ifs to compare (amp, compile, ...; "
                                                       "default: all)")
    parser.add_argument("--examples", default="mlp,cnn,transformer",
                        help="comma-separated: mlp, cnn, transformer, the suite's models (resnet, ...), suite, all")
    parser.add_argument("--backend", default="torch", choices=("torch", "cupti", "auto"))
    parser.add_argument("--sizes", choices=("default", "realistic"), default="default",
                        help="realistic: ResNet-50 at 224x224 and a BERT-base-sized transformer (for a GPU)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per trace or prediction")
    parser.add_argument("--out", default="-", help="markdown file to write, or - for stdout")
    parser.add_argument("--keep", metavar="DIR", help="keep every trace (baseline and variants) in DIR (DIR/round-N with "
                                                      "--rounds); --recorded DIR compares them again")
    parser.add_argument("--rounds", type=int, default=1, help="run the whole comparison this many times, interleaved")
    parser.add_argument("--paired", action="store_true",
                        help="trace a baseline of its own next to each variant (before it in odd rounds, after it in "
                             "even ones) and predict the variant from it: on a machine whose speed moves between runs, "
                             "each comparison is of two runs made one after the other")
    parser.add_argument("--recorded", metavar="DIR", type=Path,
                        help="compare the traces kept earlier in DIR (e.g. examples/h200; its round-N folders combined "
                             "as rounds) instead of running anything")
    parser.add_argument("--script", type=Path, help="a training script of your own instead of --examples (it takes the "
                                                    "examples' flags: see this script's docstring)")
    parser.add_argument("--script-args", default="", help="the script's baseline arguments; they name --batch-size N")
    parser.add_argument("--checkpoint-layers", default=CHECKPOINT.partition("layers=")[2],
                        help="with --script: the modules the checkpoint variant recomputes (a regex of module names)")
    parser.add_argument("--heap", choices=("default", "keep-freed"), default="default",
                        help="keep-freed: every process started keeps freed memory (glibc's mmap threshold at 32 MiB, trim "
                             "threshold 64 MiB), so the heap's spread between processes leaves the comparison")
    options = parser.parse_args()
    CHOSEN.update(chosen_whatifs(options.whatifs))
    if options.heap == "keep-freed":
        HEAP_ENV.update(keep_freed())
    if options.script is not None:
        options.examples = own_script(options.script, options.script_args, options.checkpoint_layers)
    rows: list[Row] = []
    if options.recorded:
        examples = chosen_examples(options.examples, options.device)
        folders = sorted(options.recorded.glob("round-*"), key=lambda f: int(f.name.split("-")[1])) \
            if any(options.recorded.glob("round-*")) else [options.recorded]  # --keep with --rounds: one per round
        per_round = [[row for example in examples for row in recorded(example, folder, options)] for folder in folders]
        rows = combined(per_round) if len(per_round) > 1 else per_round[0]
        text = table(rows) + memory_table(rows)
        print(text, end="") if options.out == "-" else Path(options.out).write_text(text)
        return 0
    intro = machine() if options.device == "cpu" else ""
    if HEAP_ENV:
        intro += f"Every process ran with {' '.join(f'{k}={v}' for k, v in HEAP_ENV.items())} (--heap keep-freed).\n\n"
    with tempfile.TemporaryDirectory(prefix="daydream-truth-") as scratch:
        work = Path(options.keep or scratch)
        work.mkdir(parents=True, exist_ok=True)
        rounds: list[list[Row]] = []
        for number in range(1, max(1, options.rounds) + 1):
            options.round = number
            this_round: list[Row] = []
            folder = work / f"round-{number}" if options.keep and options.rounds > 1 else work
            folder.mkdir(parents=True, exist_ok=True)
            for example in chosen_examples(options.examples, options.device):
                this_round += compare(example, options, folder)
                if options.out != "-":  # each example as it ends: a run cut off by a deadline keeps what it did
                    so_far = combined([*rounds, this_round]) if rounds else this_round
                    Path(options.out).write_text(intro + table(so_far) + memory_table(so_far))
            rounds.append(this_round)
            rows = combined(rounds) if len(rounds) > 1 else this_round
            if options.out != "-":
                Path(options.out).write_text(intro + table(rows) + memory_table(rows))  # so far, in case a later part is cut off
    if options.out == "-":
        print(intro + table(rows) + memory_table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
