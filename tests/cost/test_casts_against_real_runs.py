"""The casts `amp` plans from an fp32 trace, against the casts the real bf16 run of the same script made.

examples/h200 keeps, per example, the fp32 baseline and the bf16 autocast run traced on an H200. The real run's
extra `aten::_to_copy` calls per iteration (read from the JSON with the standard library) are the casts autocast
made, forward and backward; the plan from the baseline must count the same within two.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daydream.api import open_trace
from daydream.simulate.whatif import forward_ops_of
from daydream.trace import discover
from daydream.transforms.autocast import plan_casts
from tests.builders import copies_per_step

H200 = Path(__file__).resolve().parents[2] / "examples" / "h200"


@pytest.mark.parametrize("example", ["mlp", "cnn", "transformer", "realistic/round-3/cnn", "realistic/round-3/transformer",
                                     "realistic/round-3/resnet"])
def test_planned_casts_match_the_real_bf16_run(example: str) -> None:
    # the realistic transformer (BERT-base size) has twelve pre-norm blocks whose residual adds run in fp32, and its
    # loss, computed outside the model's modules, casts the logits up (and its gradient back): 270 casts a step
    suffix = ".json.xz" if example.startswith("realistic") else ".json.gz"
    real = copies_per_step(H200 / f"{example}-amp{suffix}") - copies_per_step(H200 / f"{example}-baseline{suffix}")
    trace = open_trace(discover(H200 / f"{example}-baseline{suffix}")[0])
    ops, _ = forward_ops_of(trace, between=True)
    planned = [plan_casts(forward, "cuda") for forward in ops.values()]
    per_iteration = sum(sum(c.forward for c in casts) + sum(c.backward for c in casts) for casts in planned) / len(planned)
    assert real > 5
    assert per_iteration == real, (per_iteration, real)


def test_the_planned_casts_script_prints_each_pair(tmp_path: Path) -> None:
    # scripts/planned_casts.py, which the validation pages quote, over the three small examples' pairs: one row each,
    # planned as the real run's added copies counted here
    script = Path(__file__).resolve().parents[2] / "scripts" / "planned_casts.py"
    run = subprocess.run([sys.executable, str(script), str(H200)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[4:6] for line in run.stdout.splitlines()[2:]}
    assert sorted(rows) == ["cnn", "mlp", "transformer"]
    for example, (planned, real) in rows.items():
        counted = copies_per_step(H200 / f"{example}-amp.json.gz") - copies_per_step(H200 / f"{example}-baseline.json.gz")
        assert float(planned) == float(real) == counted
    # a folder without pairs: one line, a non-zero exit
    empty = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, check=False)
    assert empty.returncode == 2 and len(empty.stderr.splitlines()) == 1 and "no EXAMPLE-baseline" in empty.stderr
