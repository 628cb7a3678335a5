#!/usr/bin/env python3
"""Op by op, what `amp` on a CPU trace predicts against a real bf16 run: each matrix multiply, convolution and
attention signature's recorded fp32 time, its time in the real bf16 run, its times measured alone in both types (the
measured tier, in turns, from an empty cache), and the two ways of turning them into a prediction.

    OMP_NUM_THREADS=1 python scripts/amp_ops.py examples/cpu-avx2/round-1/cnn-baseline.json.gz \\
        examples/cpu-avx2/round-1/cnn-amp.json.gz

Ops are matched between the two traces by name, input shapes and memory order (their types differ); each row gives the medians over
the ops of that signature, µs, and how many there are. `scaled` is recorded x bf16 / fp32 (both measured alone);
`added` is what amp predicts (`daydream/transforms/amp.py:reduced_ns`). The last line sums each column over every op.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daydream.api import open_trace  # noqa: E402
from daydream.cost.measure import Measurer  # noqa: E402
from daydream.cost.shapes import OpShapes  # noqa: E402
from daydream.trace import EventKind, discover  # noqa: E402
from daydream.transforms.amp import BACKWARD_GEMMS, RETIMED_ON_CPU, _measured_pair, reduced_ns  # noqa: E402


def signatures(path: Path, names: set[str]) -> dict[tuple[str, str], tuple[list[int], Any, Any]]:
    """(name, shapes) -> (the recorded times of its ops, ns; one op's tensor inputs; its arguments)."""
    trace = open_trace(discover(path)[0], cache=False)
    shapes = OpShapes(trace)
    found: dict[tuple[str, str], tuple[list[int], Any, Any]] = {}
    for row in trace.indices(EventKind.CPU_OP).tolist():
        name = trace.name_of(row)
        tensors = shapes.tensors(row) if name in names else None
        if not tensors:
            continue
        arguments = shapes.arguments(row)
        listed = ([(a[1], *a[3:4]) if a[0] == "tensor" else a for a in arguments] if arguments is not None
                  else [t[0] if t else None for t in tensors])
        key = (name, json.dumps(listed, default=str))
        found.setdefault(key, ([], tensors, arguments))[0].append(int(trace.dur_ns[row]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="the fp32 run's trace")
    parser.add_argument("amp", type=Path, help="the same model's bf16 autocast run's trace")
    parser.add_argument("--reduced", default="c10::BFloat16", help="the reduced type, as traces name it")
    options = parser.parse_args()
    names = set(RETIMED_ON_CPU) | set(BACKWARD_GEMMS)
    base, real = signatures(options.baseline, names), signatures(options.amp, names)
    measurer = Measurer(threads=1, budget_s=3600.0, folder=Path(tempfile.mkdtemp()))
    totals: collections.Counter[str] = collections.Counter()
    print(f"{'op':28s} {'ops':>4s} {'recorded':>9s} {'bf16 run':>9s} {'fp32':>9s} {'bf16':>9s} {'scaled':>9s} "
          f"{'added':>9s}   (µs; fp32 and bf16 measured alone)")
    for key, (times, tensors, arguments) in base.items():
        if key not in real:
            continue
        pair = _measured_pair(measurer, key[0], tensors, options.reduced, arguments)
        if pair is None:
            continue
        recorded, ran = statistics.median(times), statistics.median(real[key][0])
        scaled, added = recorded * pair[0] / pair[1], reduced_ns(int(recorded), *pair)
        for column, value in (("recorded", recorded), ("run", ran), ("scaled", scaled), ("added", added)):
            totals[column] += value * len(times)
        print(f"{key[0][:28]:28s} {len(times):4d} {recorded / 1e3:9.1f} {ran / 1e3:9.1f} {pair[1] / 1e3:9.1f} "
              f"{pair[0] / 1e3:9.1f} {scaled / 1e3:9.1f} {added / 1e3:9.1f}")
    print("total over the ops, ms: " + ", ".join(f"{column} {value / 1e6:.1f}" for column, value in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
