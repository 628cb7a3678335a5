#!/usr/bin/env python3
"""How often a prediction's interval holds the real run: its coverage and width, on every comparison the repository
can redo from kept traces.

    python scripts/interval_coverage.py                  # writes docs/intervals.md
    python scripts/interval_coverage.py --out -          # prints it

The rows (no run, no GPU: every prediction made again from recorded traces with this version of daydream):

- the H200 what-ifs (docs/gpu-validation.md), the small examples' run (`examples/h200`) and each round at realistic
  sizes (`examples/h200/realistic/round-N`): each what-if predicted from that run's fp32 baseline against the
  variant's recorded run, the median of its iterations to their completion (scripts/whatif_truth.py);
- the data-loading rounds of `examples/loading` (docs/validation-data-loading.md): each round's loader without
  workers predicting `overlap-data-loading:workers=N` against that round's run with N workers;
- the compile calibration rounds of `examples/compile` (docs/validation-compile-cpu.md): each round's eager trace
  predicting `compile` against that round's torch.compile'd run (the measured tier off, as everywhere here);
- the other-GPU pairs of the corpus (docs/validation-cross-gpu.md): each trace predicted on the other's GPU with
  `gpu:target=` against the other's measured iteration;
- the replay of every trace of the corpus (`../shared/traces`): each rank's replayed headline against its measured
  one.

A row is covered when the measured time lies within the interval of the predicted iteration time. These are the
rows the validated errors come from (daydream/data/validated_errors.json): the coverage is in-sample.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _generated import CORPUS, page_options, publish  # noqa: E402
from validate_cross_gpu import PAIRS, corpus_archived_pairs  # noqa: E402
from validate_data_loading import measured_ns  # noqa: E402  (the median recorded iteration)
from whatif_truth import gpu_variants, kept  # noqa: E402

from daydream.api import open_job, predict_job  # noqa: E402
from daydream.cost import CostOptions  # noqa: E402
from daydream.simulate.whatif import Prediction, predict_traces, recorded_device  # noqa: E402

H200 = REPO / "examples" / "h200"
LOADING = REPO / "examples" / "loading"
COMPILED = REPO / "examples" / "compile"
REALISTIC = H200 / "realistic"
#: the variants scripts/whatif_truth.py runs on a GPU: each names its trace (EXAMPLE-SLUG) and the what-if predicted
H200_VARIANTS = gpu_variants()
NO_MEASURING = CostOptions(measure=False)

Row = tuple[str, str, int, int, int, int]  # (where, what, predicted, low, high, measured), ns


def _row(where: str, what: str, prediction: Prediction, measured: int) -> Row:
    assert prediction.interval is not None
    return (where, what, prediction.predicted_ns, prediction.interval.low_ns, prediction.interval.high_ns, measured)


def h200_rows() -> list[Row]:
    """Every what-if of docs/gpu-validation.md: the small examples' run (examples/h200) and each round at realistic
    sizes (examples/h200/realistic/round-N), each round's baseline predicting that round's variants."""
    rows = []
    for folder in [H200, *sorted(REALISTIC.glob("round-*"))]:
        where = folder.relative_to(REPO).as_posix()
        for base in sorted([*folder.glob("*-baseline.json.gz"), *folder.glob("*-baseline.json.xz")]):
            example = base.name.partition("-baseline.")[0]
            for variant in H200_VARIANTS:
                measured = kept(folder, f"{example}-{variant.slug}")
                if measured.exists():
                    (prediction,) = predict_job(base, [variant.whatif], cost_options=NO_MEASURING)
                    rows.append(_row(f"{where} {example}", variant.whatif, prediction, int(measured_ns(measured))))
    return rows


def loading_rows() -> list[Row]:
    rows = []
    for folder in sorted(LOADING.glob("round-*")):
        for base in sorted(folder.glob("*-workers-0.json.gz")):
            example = base.name.removesuffix("-workers-0.json.gz")
            for variant in sorted(folder.glob(f"{example}-workers-[1-9]*.json.gz")):
                workers = variant.name.removesuffix(".json.gz").rpartition("-")[2]
                spec = f"overlap-data-loading:workers={workers}"
                (prediction,) = predict_job(base, [spec], cost_options=NO_MEASURING)
                rows.append(_row(f"examples/loading/{folder.name} {example}", spec, prediction, int(measured_ns(variant))))
    return rows


def compile_rows() -> list[Row]:
    rows = []
    for folder in sorted(COMPILED.glob("round-*")):
        for base in sorted(folder.glob("*-baseline.json.gz")):
            example = base.name.removesuffix("-baseline.json.gz")
            variant = folder / f"{example}-compile.json.gz"
            if variant.exists():
                (prediction,) = predict_job(base, ["compile"], cost_options=NO_MEASURING)
                rows.append(_row(f"examples/compile/{folder.name} {example}", "compile", prediction,
                                 int(measured_ns(variant))))
    return rows


def cross_gpu_rows(corpus: Path) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        pairs = [(corpus / a, corpus / b) for a, b in PAIRS]
        pairs += corpus_archived_pairs(corpus, Path(scratch))
        for a, b in pairs:
            for source, other in ((a, b), (b, a)):
                target, _ = recorded_device(open_job(other).traces[0])
                assert target is not None, other
                spec = f"gpu:target={target.key}"
                (prediction,) = predict_job(source, [spec], cost_options=NO_MEASURING)
                (measured,) = predict_job(other, [], cost_options=NO_MEASURING)
                rows.append(_row(f"{source.parent.name}/{source.name}", spec, prediction, measured.measured_ns))
    return rows


def replay_rows(corpus: Path) -> list[Row]:
    rows = []
    for path in sorted(corpus.glob("**/*.gz")):
        traces = open_job(path).traces
        for trace, prediction in zip(traces, predict_traces(traces, [])):
            rank = "" if trace.meta.rank is None else f" rank {trace.meta.rank}"
            rows.append(_row(f"{path.relative_to(corpus)}{rank}", "replay", prediction, prediction.measured_ns))
    return rows


def all_groups(corpus: Path) -> dict[str, list[Row]]:
    """Every row of the page, by group."""
    return {"H200 what-ifs": h200_rows(), "data-loading rounds": loading_rows(), "compile rounds": compile_rows(),
            "other-GPU pairs": cross_gpu_rows(corpus), "corpus replays": replay_rows(corpus)}


def page(groups: dict[str, list[Row]]) -> str:
    lines = ["# Intervals: how often the real run falls inside", "",
             "Generated by `python scripts/interval_coverage.py` from kept traces (no run, no GPU). Every prediction",
             "carries an interval (daydream/simulate/interval.py): the steady iterations' spread, the validated error",
             "of its optimizations on traces of its kind (daydream/data/validated_errors.json, read off the validation",
             "pages by scripts/validated_errors.py) and the share of its critical path the trace cannot explain, added",
             "in quadrature. A row is covered when the measured time lies inside. The validated errors come from these",
             "same comparisons, so the coverage is in-sample: traces from elsewhere will be held to it.", "",
             "| rows | covered | coverage | median width (of the prediction) |", "|---|---:|---:|---:|"]
    everything = [row for rows in groups.values() for row in rows]
    for name, rows in [*groups.items(), ("all", everything)]:
        covered = sum(1 for row in rows if row[3] <= row[5] <= row[4])
        width = statistics.median((row[4] - row[3]) / row[2] for row in rows) if rows else 0.0
        label = f"**{name}**" if name == "all" else name
        lines.append(f"| {label} | {covered} of {len(rows)} | {covered / len(rows) * 100 if rows else 0:.0f}% | "
                     f"{width * 100:.1f}% |")
    lines += ["", "The CPU what-if rows of docs/validation-whatif-cpu.md are not here: most of their traces are not kept (each",
              "a run of several minutes), and the `amp` rounds that are (examples/cpu-avx2) are timed by the measured tier",
              "on a CPU of their kind, which a page made on any machine cannot redo; their errors are in the intervals all",
              "the same. The widths are what the validation pages say about each what-if: a what-if validated on three",
              "noisy runs gets a wide interval, and a replay of an untouched trace a narrow one.",
              "", "## The what-if rows", "", "| trace | what-if | predicted | interval | measured | inside |",
              "|---|---|---:|---:|---:|---|"]
    for name in ("H200 what-ifs", "data-loading rounds", "compile rounds", "other-GPU pairs"):
        for where, what, predicted, low, high, measured in groups.get(name, []):
            lines.append(f"| {where} | `{what}` | {predicted / 1e6:.2f} ms | {low / 1e6:.2f}–{high / 1e6:.2f} ms | "
                         f"{measured / 1e6:.2f} ms | {'yes' if low <= measured <= high else '**no**'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    options = page_options(__doc__.splitlines()[0], "intervals.md").parse_args()
    corpus = getattr(options, "corpus", CORPUS)
    publish(page(all_groups(corpus)), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
