#!/usr/bin/env python3
"""`overlap-data-loading` against real DataLoader runs with worker processes, on this machine's CPU.

    OMP_NUM_THREADS=1 python scripts/validate_data_loading.py --rounds 5 --keep /tmp/loading --doc
    python scripts/validate_data_loading.py --recorded /tmp/loading       # predict again from kept traces

Per example and round: the example traced with `--loader-workers 0` (its batches made by a DataLoader in the training
process, each sample prepared as an image pipeline would: examples/training.py) and with `--loader-workers N` for each
N asked for, in turns (baseline, then each variant); `overlap-data-loading:workers=N` predicted from that round's
baseline; measured = the median of each run's recorded iterations. The table gives, per example and N, the medians
over rounds of the baseline, the prediction and the real run, and the median of the rounds' errors. `--doc` writes it
into docs/validation-data-loading.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from whatif_truth import Failed, trace  # noqa: E402

from daydream.api import predict_job, replay_job  # noqa: E402
from daydream.cost import CostOptions  # noqa: E402

PAGE = REPO / "docs" / "validation-data-loading.md"
#: Per example, the script arguments of every run (the batch is what the loader makes).
EXAMPLES = {"cnn": ["--batch-size", "32"], "mlp": ["--batch-size", "64"]}


def run_round(example: str, workers: list[int], folder: Path, options: argparse.Namespace) -> dict[int, tuple]:
    """{N: (baseline ns, predicted ns, measured ns)} of one round, its traces kept in `folder`."""
    script = REPO / "examples" / f"{example}.py"
    for count in (0, *workers):
        trace(script, folder / f"{example}-workers-{count}.json.gz",
              [*EXAMPLES[example], "--loader-workers", str(count), "--threads", "1"], options)
    return recorded_round(example, workers, folder)


def recorded_round(example: str, workers: list[int], folder: Path) -> dict[int, tuple]:
    """{N: (baseline ns, predicted ns, measured ns)} from a round's traces, predicted with this version of daydream."""
    base = folder / f"{example}-workers-0.json.gz"
    baseline = measured_ns(base)
    return {count: (baseline, predict_job(base, [f"overlap-data-loading:workers={count}"],
                                          cost_options=CostOptions(measure=False))[0].predicted_ns,
                    measured_ns(folder / f"{example}-workers-{count}.json.gz")) for count in workers}


def measured_ns(path: Path) -> float:
    """The median recorded iteration, ns."""
    return float(statistics.median(it.measured_ns for it in replay_job(path)[0].iterations))


def table(results: dict[tuple[str, int], list[tuple]]) -> str:
    lines = ["| example | what-if | rounds | baseline (measured) | predicted | measured | error (median of rounds) "
             "| rounds' errors |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for (example, count), rounds in results.items():
        errors = [100 * (p / m - 1) for _, p, m in rounds]
        lines.append(f"| {example} | `overlap-data-loading:workers={count}` | {len(rounds)} "
                     f"| {statistics.median(r[0] for r in rounds) / 1e6:.2f} ms "
                     f"| {statistics.median(r[1] for r in rounds) / 1e6:.2f} ms "
                     f"| {statistics.median(r[2] for r in rounds) / 1e6:.2f} ms | {statistics.median(errors):+.1f}% "
                     f"| {', '.join(f'{e:+.1f}%' for e in errors)} |")
    return "\n".join(lines)


def figures(folder: Path, examples: list[str], workers: list[int]) -> str:
    """The table of every round kept in `folder` (round-N folders), predicted with this version of daydream."""
    results: dict[tuple[str, int], list[tuple]] = {(e, n): [] for e in examples for n in workers}
    for round_folder in sorted(folder.glob("round-*")):
        for example in examples:
            for count, found in recorded_round(example, workers, round_folder).items():
                results[(example, count)].append(found)
    return table({key: rounds for key, rounds in results.items() if rounds})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default="cnn,mlp")
    parser.add_argument("--workers", default="1,2", help="the worker counts to run and predict")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="keep each round's traces in DIR/round-N")
    parser.add_argument("--recorded", type=Path, help="predict again from the rounds kept in DIR (no runs)")
    parser.add_argument("--doc", action="store_true", help=f"write the table into {PAGE.relative_to(REPO)}")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds one trace or prediction may take")
    options = parser.parse_args()
    options.backend, options.device = "torch", "cpu"
    examples, workers = options.examples.split(","), [int(n) for n in options.workers.split(",")]
    results: dict[tuple[str, int], list[tuple]] = {(e, n): [] for e in examples for n in workers}
    rounds = sorted(options.recorded.glob("round-*")) if options.recorded else range(1, options.rounds + 1)
    for number in rounds:
        for example in examples:
            try:
                if options.recorded:
                    found = recorded_round(example, workers, Path(number))
                else:
                    keep = options.keep / f"round-{number}" if options.keep else Path(tempfile.mkdtemp(prefix="loading-"))
                    keep.mkdir(parents=True, exist_ok=True)
                    found = run_round(example, workers, keep, options)
            except Failed as problem:
                print(f"{example}, round {number}: {problem}", file=sys.stderr)
                continue
            for count, figures in found.items():
                results[(example, count)].append(figures)
        print(f"round {number} done", file=sys.stderr)
    results = {key: rounds for key, rounds in results.items() if rounds}
    text = table(results)
    print(text)
    if options.doc:
        _write_page(text)
    return 0


def _write_page(text: str) -> None:
    page = PAGE.read_text() if PAGE.exists() else ""
    begin, end = "<!-- table: begin -->", "<!-- table: end -->"
    if begin in page and end in page:
        page = page[:page.index(begin) + len(begin)] + "\n" + text + "\n" + page[page.index(end):]
    else:
        page = f"{page}\n{begin}\n{text}\n{end}\n"
    PAGE.write_text(page)


if __name__ == "__main__":
    sys.exit(main())
