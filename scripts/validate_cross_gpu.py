#!/usr/bin/env python3
"""Another GPU, predicted against measured: the same model traced on two GPUs, each predicted from the other.

    python scripts/validate_cross_gpu.py                     # the same-model pairs of the corpus -> docs/validation-cross-gpu.md
    python scripts/validate_cross_gpu.py --pair A.json.gz B.json.gz --out -

For each pair (A, B) and each direction, `whatif A --opt gpu:target=<B's GPU>` is compared with
B's measured iteration (to its completion, docs/replay-model.md), and the GPU time per kernel
class of the prediction with B's own per class: where the error comes from.
"""

from __future__ import annotations

import sys
import tarfile
from datetime import date
from pathlib import Path

import numpy as np
from _generated import CORPUS, corpus_missing, page_options, publish, scratch_cache

from daydream.api import open_job, predict_job
from daydream.graph import Graph, build_graph
from daydream.graph.model import GPU_WORK
from daydream.mapping.classes import CLASSES
from daydream.simulate.whatif import recorded_device
from daydream.transforms.kernels import kernel_classes
from daydream.transforms.target import HOST_BOUND_SHARE, gpu_busy_share

#: The same model and script recorded on two GPUs (set 2, ../shared/traces/SOURCES.md).
PAIRS = [
    ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"),
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
]
#: Archives holding one recording per GPU of the same step: (archive, the folder of each recording inside it).
ARCHIVED_PAIRS = [
    ("tracelens/semantic_purity/semantic_purity_qwen3_30b_a3b.tar.gz", "B300", "MI300"),
]
GPU_KINDS = [int(k) for k in GPU_WORK]


def per_class(graph: Graph, iterations: int) -> dict[str, float]:
    """GPU time per kernel class and iteration, ns."""
    work = np.flatnonzero(np.isin(graph.tasks["kind"], GPU_KINDS) & (graph.tasks["iteration"] >= 0))
    classes = kernel_classes(graph, work)
    durations = graph.tasks["duration_ns"][work]
    return {CLASSES[c]: float(durations[classes == c].sum()) / max(iterations, 1) for c in np.unique(classes).tolist()}


def unpack(archive: Path, folders: tuple[str, str], into: Path) -> tuple[Path, Path]:
    """The one trace under each of `folders` in `archive`, extracted under `into`."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    found = [sorted(into.rglob(f"{folder}/*.json*")) for folder in folders]
    if any(len(traces) != 1 for traces in found):
        raise SystemExit(f"validate_cross_gpu.py: {archive}: expected one trace under each of {folders}, found {found}")
    return found[0][0], found[1][0]


def model_name(path: Path) -> str:
    """The model a trace recorded, for the per-class table: its file name before `__`, or its archive's folder."""
    return path.name.split("__")[0] if "__" in path.name else path.parent.parent.name


def direction(source: Path, other: Path) -> tuple[list[str], list[str]]:
    """(the summary row, the per-class rows) of predicting `other` from `source`."""
    source_trace = open_job(source).traces[0]
    target, target_name = recorded_device(open_job(other).traces[0])
    origin, origin_name = recorded_device(source_trace)
    if target is None or origin is None:
        return [f"| {source.name} | {origin_name} | {target_name} | — | — | — | — | a GPU not in the device table | — |"], []
    [prediction] = predict_job(source, [f"gpu:target={target.key}"])
    [measured] = predict_job(other, [])  # B replayed untouched: its measured iterations, to completion
    [by_peaks] = predict_job(source, [f"gpu:target={target.key},peaks=1"])
    error = (prediction.predicted_ns - measured.measured_ns) / measured.measured_ns
    peaks_error = (by_peaks.predicted_ns - measured.measured_ns) / measured.measured_ns
    assert prediction.graph is not None and measured.graph is not None
    predicted_classes = per_class(prediction.graph, len(prediction.per_iteration))
    measured_classes = per_class(measured.graph, len(measured.per_iteration))
    source_graph = build_graph(source_trace)
    source_classes = per_class(source_graph, len(prediction.per_iteration))
    busy = gpu_busy_share(source_graph) or 0.0  # what the prediction's note judges a host-bound step by
    summary = (f"| {source.parent.name}/{source.name} | {origin.key} | {target.key} | {prediction.measured_ns / 1e6:.2f} ms | "
               f"{busy:.0%} | {prediction.predicted_ns / 1e6:.2f} ms | {measured.measured_ns / 1e6:.2f} ms | "
               f"{error * 100:+.1f}% | {peaks_error * 100:+.1f}% |")
    rows = []
    for name in CLASSES:
        a, p, m = source_classes.get(name, 0.0), predicted_classes.get(name, 0.0), measured_classes.get(name, 0.0)
        if max(a, p, m) < 1_000:
            continue
        rows.append(f"| {origin.key} → {target.key} | {model_name(source)} | {name} | {a / 1e6:.3f} ms | "
                    f"{p / 1e6:.3f} ms | {m / 1e6:.3f} ms | {(p - m) / 1e6:+.3f} ms |")
    return [summary], rows


def corpus_archived_pairs(corpus: Path, scratch: Path) -> list[tuple[Path, Path]]:
    """ARCHIVED_PAIRS unpacked under `scratch`."""
    return [unpack(corpus / archive, (a, b), scratch / Path(archive).stem) for archive, a, b in ARCHIVED_PAIRS]


def page(pairs: list[tuple[Path, Path]], day: str | None = None) -> str:
    """The page for `pairs`, both directions of each, dated `day` (today by default)."""
    day = day or date.today().isoformat()
    summary, classes = [], []
    for a, b in pairs:
        for source, other in ((a, b), (b, a)):
            rows, per = direction(source, other)
            summary += rows
            classes += per
    rows = [row.split("|") for row in summary if row.rstrip().endswith("% |")]
    errors = [float(cells[-3].strip().rstrip("%")) for cells in rows]
    bound = [error for error, cells in zip(errors, rows) if float(cells[5].strip().rstrip("%")) >= 100 * HOST_BOUND_SHARE]
    text = "\n".join([
        "# Another GPU: predicted against measured",
        "",
        f"Generated by `python scripts/validate_cross_gpu.py` on {day}. The same model and script",
        "recorded on two GPUs (set 2 of the corpus, `../shared/traces/SOURCES.md`); each trace predicted on the other",
        "trace's GPU with `--opt gpu:target=` (docs/devices.md, `daydream/transforms/target.py`) and compared with the",
        "other trace's measured iteration (to its completion). Target: each within 10%, mean at most 6%. Compute-bound",
        "kernels move by each GPU's achievable matrix throughput (dense peak × measured matmul efficiency,",
        "docs/devices.md); GEMMs whose tile or grid bounds them below both GPUs' ridge points move by bandwidth",
        "(`bandwidth_bound` in `daydream/transforms/target.py`); the last column is the same prediction by the",
        "datasheet peaks alone (`peaks=1`). *GPU busy* is the source trace's GPU work over its recorded iterations",
        "(`gpu_busy_share`): under half, the step is bound by the host, and the other machine's host speed is not in",
        "the trace (the prediction's note says so; `host=F` sets it).",
        f"**Mean |error| {np.mean(np.abs(errors)):.1f}%, worst {max(np.abs(errors)):.1f}%;** on the {len(bound)} rows whose "
        f"GPU is busy at least half the step: mean {np.mean(np.abs(bound)):.1f}%, worst {max(np.abs(bound)):.1f}%."
        if errors and bound else "",
        "",
        "| trace | its GPU | predicted on | its step | GPU busy | predicted | measured there | error | by peaks alone |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
        *summary,
        "",
        "## Where the error comes from: GPU time per kernel class and iteration",
        "",
        "| direction | model | class | on its own GPU | predicted | measured there | predicted − measured |",
        "|---|---|---|---:|---:|---:|---:|",
        *classes,
        "",
    ])
    return text


def main() -> int:
    parser = page_options(__doc__.splitlines()[0], "validation-cross-gpu.md")
    parser.add_argument("--pair", nargs=2, action="append", metavar=("A", "B"), help="two traces of one model on two GPUs")
    options = parser.parse_args()
    pairs = [(Path(a), Path(b)) for a, b in options.pair] if options.pair else None
    if pairs is None:
        if corpus_missing("validate_cross_gpu.py", options.corpus):
            return 2
        pairs = [(options.corpus / a, options.corpus / b) for a, b in PAIRS]
    with scratch_cache() as scratch:
        if not options.pair:
            pairs += corpus_archived_pairs(options.corpus, scratch)
        text = page(pairs)
    publish(text, options.out)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(CORPUS.parent.parent))
    sys.exit(main())
