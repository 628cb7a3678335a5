"""GPU time per iteration at twice the batch: predicted from each H200 baseline against the real run at twice the batch.

    python scripts/batch_gpu_time.py [--folder examples/h200]

These examples are host-bound on an H200, so their iteration time at twice the batch says little about the model of
the GPU work (both runs wait on the host, at whatever speed it ran that day). The GPU's own time does: per example,
the kernels' time per iteration summed, as `batch-size:factor=2` predicts it from the fp32 baseline's trace and as the
real run at twice the batch recorded it (`EXAMPLE-baseline.json.gz`, `EXAMPLE-batch-x2.json.gz`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("mlp", "cnn", "transformer")


def gpu_time(folder: Path, example: str) -> tuple[float, float, float]:
    """(baseline, predicted at twice the batch, real at twice the batch) kernel time per iteration, ns."""
    sys.path.insert(0, str(REPO))
    import numpy as np

    from daydream.graph import build_graph
    from daydream.graph.model import KERNELS
    from daydream.mapping import find_iterations
    from daydream.simulate.whatif import transform
    from daydream.trace import EventKind, read_job

    baseline = read_job(folder / f"{example}-baseline.json.gz").traces[0]
    real = read_job(folder / f"{example}-batch-x2.json.gz").traces[0]
    graph = build_graph(baseline)
    kernels = np.flatnonzero(np.isin(graph.tasks["kind"], [int(k) for k in KERNELS]))
    before = float(graph.tasks["duration_ns"][kernels].sum()) / len(find_iterations(baseline))
    transform(graph, baseline, ["batch-size:factor=2"])
    predicted = float(graph.tasks["duration_ns"][kernels].sum()) / len(find_iterations(baseline))
    measured = float(real.dur_ns[real.indices(EventKind.KERNEL)].sum()) / len(find_iterations(real))
    return before, predicted, measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=REPO / "examples" / "h200")
    options = parser.parse_args()
    print("| example | baseline GPU time | predicted at ×2 | real at ×2 | error |")
    print("|---|---:|---:|---:|---:|")
    for example in EXAMPLES:
        before, predicted, measured = gpu_time(options.folder, example)
        print(f"| {example} | {before / 1e6:.3f} ms | {predicted / 1e6:.3f} ms | {measured / 1e6:.3f} ms | "
              f"{(predicted / measured - 1) * 100:+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
