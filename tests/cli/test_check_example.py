"""examples/ci: the workflow is valid and runs `daydream check` on the expectations file, which passes here.

The example traces examples/mlp.py on the CPU (a few seconds), so torch is needed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from daydream.check import load_expectations
from daydream.cli import main
from tests.conftest import REPO

CI = REPO / "examples" / "ci"

if os.environ.get("CI") == "true":
    import torch  # noqa: F401  (in CI the test extras install torch; its absence is a failure)
else:
    pytest.importorskip("torch")


def _steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load((CI / "daydream.yml").read_text())
    assert isinstance(workflow, dict) and workflow["jobs"]
    (job,) = workflow["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _check_command() -> list[str]:
    commands = [shlex.split(step["run"]) for step in _steps() if "run" in step and "daydream check" in step["run"]]
    assert len(commands) == 1
    return commands[0]


def test_the_workflow_installs_python_torch_and_daydream_and_uploads_the_report() -> None:
    steps = _steps()
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    (python,) = [step for step in steps if step.get("uses", "").startswith("actions/setup-python@")]
    assert str(python["with"]["python-version"]) == "3.11"
    runs = [step["run"] for step in steps if "run" in step]
    assert any("torch==2.13.0" in run and "download.pytorch.org/whl/cpu" in run for run in runs)
    assert any(shlex.split(run)[:3] == ["pip", "install", "."] for run in runs)
    command = _check_command()
    assert command[:3] == ["daydream", "check", "examples/ci/expectations.yaml"]
    junit = command[command.index("--junit") + 1]
    (upload,) = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == junit and upload["if"] == "always()"


def test_the_expectations_pass_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workflow's own command, run from a copy of the repository's examples (the check's
    # command writes its trace beside the expectations file).
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("daydream-traces"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # this `daydream`
    command = _check_command()
    expectations = load_expectations(tmp_path / command[2])
    assert any(check.command for check in expectations.checks)  # the example traces on the runner
    assert main(command[1:]) == 0
    junit = ET.parse(tmp_path / command[command.index("--junit") + 1]).getroot()
    cases = junit.findall("testsuite/testcase")
    assert len(cases) == sum(len(check.bounds) for check in expectations.checks)
    assert not junit.findall("testsuite/testcase/failure")
