"""DAYDREAM_MAX_MEMORY: past the soft limit a command stops itself with one line (exit 2) before the kernel kills it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daydream import _memory
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"


def _daydream(tmp_path: Path, limit: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DAYDREAM_MAX_MEMORY": limit, "DAYDREAM_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "daydream", *args], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_a_command_past_the_limit_stops_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = _daydream(tmp_path, "60MiB", "report", str(EXAMPLE), "--no-cache", "-o", str(out / "report.html"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("daydream: error: stopped at ") and "limit 60 MiB, DAYDREAM_MAX_MEMORY" in lines[0]
    assert list(out.iterdir()) == []


def test_off_and_a_bad_value(tmp_path: Path) -> None:
    assert _daydream(tmp_path, "off", "inspect", str(EXAMPLE), "--no-cache").returncode == 0
    bad = _daydream(tmp_path, "plenty", "inspect", str(EXAMPLE))
    assert bad.returncode == 2 and bad.stderr.strip() == \
        "daydream: error: DAYDREAM_MAX_MEMORY='plenty' is not a size — write e.g. 64GB or 500MB"


def test_the_watch_removes_the_outputs_being_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    half = tmp_path / ".tmp-half.html"
    half.write_text("<html>")
    monkeypatch.setattr(_memory, "PENDING", {str(half)})
    monkeypatch.setattr(_memory, "_stage", "simulating")

    def exit_now(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exit_now)
    with pytest.raises(SystemExit) as stopped:
        _memory._stopped(3 * 2**30, 2 * 2**30)
    assert stopped.value.code == 2 and not half.exists()
    assert capsys.readouterr().err == ("daydream: error: stopped at 3.0 GiB resident while simulating (limit 2.0 GiB, "
                                       "DAYDREAM_MAX_MEMORY) — raise it if the machine has the memory, e.g. "
                                       "DAYDREAM_MAX_MEMORY=5GiB, or read fewer ranks at once\n")


def test_the_default_is_a_share_of_what_the_machine_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYDREAM_MAX_MEMORY", raising=False)
    monkeypatch.setattr(_memory, "available_bytes", lambda: 10 * 2**30)
    assert _memory.limit_bytes() == int(8 * 2**30)
    monkeypatch.setenv("DAYDREAM_MAX_MEMORY", "3GiB")
    assert _memory.limit_bytes() == 3 * 2**30
