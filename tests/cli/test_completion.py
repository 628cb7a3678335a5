"""Shell completion of --opt, --sweep and --device, through click's completion protocol as bash asks for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from daydream.devices import DEVICES
from daydream.transforms import OPTIMIZATIONS
from tests.conftest import REPO


def _complete(*words: str) -> list[str]:
    env = {**os.environ, "_DAYDREAM_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(["daydream", *words]),
           "COMP_CWORD": str(len(words))}
    done = subprocess.run([sys.executable, "-m", "daydream"], env=env, capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=True)
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


@pytest.mark.parametrize(("words", "expected"), [
    (("whatif", "--opt", "overlap"), ["overlap-data-loading"]),
    (("whatif", "--opt", "batch-size:"), [f"batch-size:{key}=" for key in OPTIMIZATIONS["batch-size"].parameters]),
    (("whatif", "--opt", "ddp:world=8,inter"), ["ddp:world=8,interconnect="]),
    (("whatif", "--opt", "examples/optimizations/fa"), ["examples/optimizations/faster-gemm.yaml"]),
    (("report", "--opt", "fused-"), ["fused-optimizer", "fused-adam"]),
])
def test_opt_completes_names_parameters_and_pipelines(words: tuple[str, ...], expected: list[str]) -> None:
    assert _complete(*words) == expected


def test_sweep_completes_the_parameters_of_the_optimizations_given() -> None:
    assert _complete("whatif", "--opt", "ddp", "--sweep", "wor") == ["world="]
    assert "target=" in _complete("whatif", "--opt", "gpu", "--sweep", "")
    assert "target=" not in _complete("whatif", "--opt", "ddp", "--sweep", "")


def test_device_completes_the_device_table() -> None:
    assert _complete("whatif", "--device", "H100") == [name for name in DEVICES if name.lower().startswith("h100")]
