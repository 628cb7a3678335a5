"""A hand-written optimizer (an update loop over the parameters after backward) is what fused-optimizer replaces."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daydream.api import open_trace, predict_job
from daydream.cli import main
from daydream.simulate.whatif import update_loop_of
from daydream.trace import discover
from tests.builders import load_raw

if os.environ.get("CI") == "true":
    import torch  # noqa: F401
else:
    pytest.importorskip("torch")

SCRIPT = '''
import torch
from torch import nn

def step(model, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.01)

torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(6)])
x, y = torch.randn(16, 32), torch.randn(16, 32)
for _ in range(8):
    step(model, x, y)
'''


def test_a_hand_written_update_loop_is_found_and_fused(tmp_path: Path) -> None:
    script = tmp_path / "manual.py"
    script.write_text(SCRIPT)
    out = tmp_path / "manual.json.gz"
    assert main(["trace", "--warmup", "1", "--iterations", "3", "--step-fn", "step", "-o", str(out), str(script)]) == 0
    # From the file: per ProfilerStep, the aten::add_ ops that start after its last backward op — one per parameter.
    events = [e for e in load_raw(out)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    backward = [e for e in events if e.get("cat") == "cpu_op" and "Backward" in e["name"]]
    updates = 0
    for s in steps:
        end = s["ts"] + s["dur"]
        last_backward = max(b["ts"] + b["dur"] for b in backward if s["ts"] <= b["ts"] < end)
        updates += sum(1 for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::add_"
                       and last_backward <= e["ts"] < end)
    assert updates == 12 * len(steps)  # six weights and six biases
    trace = open_trace(discover(out)[0])
    assert update_loop_of(trace).size == updates
    prediction = predict_job(str(out), ["fused-optimizer"])[0]
    assert any("hand-written update loop" in note for note in prediction.notes)
    # Twelve updates per iteration become the default four multi-tensor ones: eight ops, and their host work, go.
    assert prediction.graph is not None
    remaining = sum(1 for t in range(prediction.graph.task_count) if prediction.graph.task_name(t) == "aten::add_"
                    and prediction.graph.tasks["iteration"][t] >= 0)
    assert remaining <= 4 * len(steps)
    assert prediction.predicted_ns < prediction.simulated_ns
