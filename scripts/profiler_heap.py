"""How much the profiler's own records slow a recorded CPU step, with and without daydream trace's heap reserve.

    OMP_NUM_THREADS=1 python scripts/profiler_heap.py --script examples/own/gpt.py --rounds 3 --out FILE

Per round, one after another: the script unprofiled (its optimizer steps timed by a global step hook, nothing
else), `daydream trace --no-heap-reserve`, and `daydream trace` (the reserve on); the same warm-up and recorded
iterations each. For each: the median iteration (the unprofiled run's steps at the recorded positions; the traces'
iteration spans), the median system time and page faults per iteration (the unprofiled run's from getrusage at each
step's end, the traces' from their own counts, `host_usage`) and the heap reserved. The table: medians over the
rounds. A model whose large tensors come from fresh pages in every step unprofiled (glibc maps blocks of 32 MiB and
more afresh) pays those faults in the real run too; what the reserve takes away is what the profiler adds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Runs a script with its optimizer steps timed: prints one JSON list of the seconds between step ends.
UNPROFILED = """
import json, resource, runpy, sys, time
import torch.optim.optimizer as optimizer
ends = []
def ended(*a, **k):
    usage = resource.getrusage(resource.RUSAGE_SELF)
    ends.append((time.perf_counter(), usage.ru_minflt, usage.ru_stime))
optimizer.register_optimizer_step_post_hook(ended)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("STEPS" + json.dumps([[b[i] - a[i] for i in range(3)] for a, b in zip(ends, ends[1:])]))
"""


def unprofiled(script: Path, arguments: list[str], warmup: int, iterations: int) -> dict[str, float]:
    """The median step of the recorded positions (after `warmup`), ms, with its system time and page faults."""
    done = subprocess.run([sys.executable, "-c", UNPROFILED, str(script), *arguments], capture_output=True,
                          text=True, check=True, cwd=REPO)
    steps = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("STEPS"))[5:])
    # steps[i] is the (i + 2)-th step: the recorded ones are steps warmup + 1 .. warmup + iterations (1-based)
    chosen = steps[warmup - 1:warmup - 1 + iterations]
    return {"iteration_ms": statistics.median(s[0] for s in chosen) * 1e3,
            "system_ms": statistics.median(s[2] for s in chosen) * 1e3,
            "faults": statistics.median(s[1] for s in chosen)}


def traced(script: Path, arguments: list[str], warmup: int, iterations: int, reserve: bool) -> dict[str, float]:
    """The median iteration span of a `daydream trace` recording, ms, and its host_usage medians."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run.json.gz"
        subprocess.run([sys.executable, "-m", "daydream", "-q", "trace", "--backend", "torch",
                        *([] if reserve else ["--no-heap-reserve"]), "--warmup", str(warmup), "-n", str(iterations),
                        "-o", str(out), str(script), "--", *arguments], check=True, capture_output=True, cwd=REPO)
        with gzip.open(out, "rt") as handle:
            document = json.load(handle)
    spans = [e["dur"] / 1e3 for e in document["traceEvents"]
             if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    usage = document["daydream"]["host_usage"]
    return {"iteration_ms": statistics.median(spans),
            "system_ms": statistics.median(it["system_ns"] for it in usage["iterations"]) / 1e6,
            "faults": statistics.median(it["minor_faults"] for it in usage["iterations"]),
            "reserve_mib": usage["heap_reserve_bytes"] / 2**20}


def table(rows: dict[str, list[dict[str, float]]]) -> str:
    """The rounds' medians as a markdown table."""
    lines = ["| run | iteration (median) | system time per iteration | page faults per iteration | heap reserved |",
             "|---|---:|---:|---:|---:|"]
    def med(rounds: list[dict[str, float]], key: str) -> float:
        values = [r[key] for r in rounds if key in r]
        return statistics.median(values) if values else float("nan")

    for name, rounds in rows.items():
        reserve = "" if name == "unprofiled" else f"{med(rounds, 'reserve_mib'):,.0f} MiB"
        lines.append(f"| {name} | {med(rounds, 'iteration_ms'):.1f} ms | {med(rounds, 'system_ms'):.1f} ms | "
                     f"{med(rounds, 'faults'):,.0f} | {reserve} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, default=REPO / "examples" / "own" / "gpt.py")
    parser.add_argument("--script-args", default="", help="the script's arguments (its --steps is set here)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="-", help="where the table goes (- for stdout)")
    options = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != "1":
        print("profiler_heap.py: run with OMP_NUM_THREADS=1 (one thread, as the truth runs are)", file=sys.stderr)
    arguments = [*options.script_args.split(), "--steps", str(options.warmup + options.iterations + 2)]
    rows: dict[str, list[dict[str, float]]] = {"unprofiled": [], "daydream trace --no-heap-reserve": [],
                                               "daydream trace": []}
    for number in range(1, options.rounds + 1):
        rows["unprofiled"].append(unprofiled(options.script, arguments, options.warmup, options.iterations))
        rows["daydream trace --no-heap-reserve"].append(traced(options.script, arguments, options.warmup,
                                                               options.iterations, reserve=False))
        rows["daydream trace"].append(traced(options.script, arguments, options.warmup, options.iterations,
                                             reserve=True))
        print(f"round {number}: " + ", ".join(f"{name} {runs[-1]['iteration_ms']:.1f} ms"
                                              for name, runs in rows.items()), file=sys.stderr)
    text = table(rows)
    if options.out == "-":
        sys.stdout.write(text)
    else:
        Path(options.out).write_text(text)


if __name__ == "__main__":
    main()
