"""The examples' `--ddp` mode: two gloo ranks on the CPU train one model on different data.

Each rank runs `examples/mlp.py --ddp` under a small wrapper that records, at the first
step, the model's weights and the batch it saw and, before the optimizer steps, the
gradients. The check is independent of DDP: the gradients every rank ends up with must
be the mean of the gradients a plain model computes on each rank's batch.
"""

from __future__ import annotations

import os
import runpy
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

if os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch")

WORLD = 2
RANK_TIMEOUT_S = 120

WRAPPER = """
import runpy
import sys

import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_pre_hook

script, out = sys.argv[1], sys.argv[2]
seen = {}


def first_inputs(module, args):
    kind = type(module).__name__
    if kind == "DistributedDataParallel" and "features" not in seen:
        seen["features"] = args[0].clone()
        seen["weights"] = {k: v.clone() for k, v in module.module.state_dict().items()}
    if kind == "CrossEntropyLoss" and "labels" not in seen:
        seen["labels"] = args[1].clone()


def first_step(optimizer, args, kwargs):
    if "gradients" not in seen:
        seen["gradients"] = [p.grad.clone() for group in optimizer.param_groups for p in group["params"]]


register_module_forward_pre_hook(first_inputs)
register_optimizer_step_pre_hook(first_step)
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
torch.save(seen, out)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_ranks(tmp_path: Path, *script_args: str) -> list[tuple[subprocess.CompletedProcess[str], Path]]:
    wrapper = tmp_path / "record_first_step.py"
    wrapper.write_text(textwrap.dedent(WRAPPER))
    port = _free_port()
    outs = [tmp_path / f"rank{rank}.pt" for rank in range(WORLD)]
    processes = []
    for rank, out in enumerate(outs):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""}
        command = [sys.executable, str(wrapper), str(REPO / "examples" / "mlp.py"), str(out), *script_args]
        processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results = []
    try:
        for process, out in zip(processes, outs):
            stdout, stderr = process.communicate(timeout=RANK_TIMEOUT_S)
            results.append((subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), out))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return results


def _local_gradients(record: dict[str, Any]) -> list[Any]:
    """The gradients a plain (non-distributed) MLP computes from the recorded weights and batch."""
    example = runpy.run_path(str(REPO / "examples" / "mlp.py"))
    model = example["MLP"]()
    model.load_state_dict(record["weights"])
    loss = torch.nn.CrossEntropyLoss()(model(record["features"]), record["labels"])
    loss.backward()
    return [p.grad for p in model.parameters()]


def test_two_gloo_ranks_average_gradients_of_different_batches(tmp_path: Path) -> None:
    ranks = _run_ranks(tmp_path, "--ddp", "--threads", "1", "--steps", "2", "--batch-size", "8")
    for done, _ in ranks:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "step 0 loss" in done.stdout
    records = [torch.load(out) for _, out in ranks]
    # Different data on each rank, the same starting weights (rank 0's, broadcast by DDP).
    assert not torch.equal(records[0]["features"], records[1]["features"])
    for name, weight in records[0]["weights"].items():
        assert torch.equal(weight, records[1]["weights"][name]), name
    local = [_local_gradients(record) for record in records]
    for index, (first, second) in enumerate(zip(records[0]["gradients"], records[1]["gradients"])):
        expected = (local[0][index] + local[1][index]) / WORLD
        assert torch.allclose(first, second, rtol=0, atol=0), index
        assert torch.allclose(first, expected, rtol=1e-5, atol=1e-7), index
        assert not torch.allclose(local[0][index], local[1][index]), index  # so the average is not either rank's own


def test_ddp_without_a_distributed_environment_says_how_to_launch() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "mlp.py"), "--ddp", "--steps", "1"],
                          capture_output=True, text=True, env=env, timeout=RANK_TIMEOUT_S)
    assert done.returncode != 0
    assert "torchrun" in done.stderr and "MASTER_ADDR" in done.stderr
