"""Hostile input at scale: mutate corpus traces, run every daydream command on them, count what broke.

    python scripts/fuzz.py --cases 3000 --seed 1

Every case must end with exit 0 or 2 (never 1, an internal error), one line on stderr
when it fails, within --timeout seconds and --max-rss MB. The mutation classes and the
runner are in tests/hostile.py (the suite runs a few hundred of the same cases).
Prints one line per violation and a table of figures per mutation class; exits 1 if any
case broke the contract.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.hostile import Seeds, cases, run, violation  # noqa: E402

CORPUS = REPO.parent / "shared" / "traces"
SEED_TRACES = (
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--max-rss", type=float, default=2048.0, help="MB per case")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--keep", type=Path, default=None, help="copy the inputs of broken cases into this folder")
    parser.add_argument("--traces", type=Path, nargs="*", default=None, help="traces to mutate instead of the default seeds")
    options = parser.parse_args()
    seeds = Seeds(options.traces or [options.corpus / p for p in SEED_TRACES] + [REPO / "examples/traces/ddp_a100_rank0.json.gz"])
    rng = random.Random(options.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="daydream-fuzz-") as scratch:
        folder = Path(scratch)
        import os

        os.environ["DAYDREAM_CACHE_DIR"] = str(folder / "cache")
        todo = cases(seeds, rng, options.cases, folder / "cases")
        from daydream.cli import main as daydream

        with contextlib.redirect_stdout(io.StringIO()):
            daydream(["replay", str(seeds.paths[0]), "--no-cache"])  # compile the simulator once, before forking
        with ThreadPoolExecutor(options.jobs) as pool:
            outcomes = list(pool.map(lambda c: run(c, options.timeout, folder), todo))
        if options.keep:
            _keep(outcomes, options, folder)
    per_class: dict[str, list] = defaultdict(list)
    broken = 0
    for outcome in outcomes:
        per_class[outcome.case.mutation].append(outcome)
        why = violation(outcome, options.timeout, options.max_rss)
        if why:
            broken += 1
            print(f"BROKEN {outcome.case.mutation}: daydream {' '.join(outcome.case.argv)[:200]}: {why}")
    print(f"\n{len(outcomes)} cases in {time.monotonic() - started:.0f} s, {broken} broke the contract\n")
    print(f"{'class':34} {'cases':>6} {'exit 0':>7} {'exit 2':>7} {'broken':>7} {'max s':>7} {'max RSS MB':>11}")
    for name, group in sorted(per_class.items()):
        bad = sum(1 for o in group if violation(o, options.timeout, options.max_rss))
        print(f"{name:34} {len(group):6d} {sum(o.code == 0 for o in group):7d} {sum(o.code == 2 for o in group):7d} "
              f"{bad:7d} {max(o.seconds for o in group):7.1f} {max(o.peak_rss_mb for o in group):11.0f}")
    return 1 if broken else 0


def _keep(outcomes: list, options: argparse.Namespace, folder: Path) -> None:
    import shutil

    options.keep.mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:
        if violation(outcome, options.timeout, options.max_rss):
            for part in outcome.case.argv:
                if part.startswith(str(folder)) and Path(part).is_file():
                    shutil.copy(part, options.keep / Path(part).name)


if __name__ == "__main__":
    sys.exit(main())
