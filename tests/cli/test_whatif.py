"""`daydream whatif`: the JSON contract, the default trace, the list, and its errors."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from daydream.cli import main
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"


def test_json_contract(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "predicted.json.gz"
    assert main(["whatif", str(EXAMPLE), "--opt", "amp", "--opt", "fused-adam", "--json", "--timeline", str(out)]) == 0
    document = json.loads(capsys.readouterr().out)
    times = document["iteration_ns"]
    assert {"measured", "simulated", "predicted"} <= times.keys()
    assert all(isinstance(times[k], int) for k in ("measured", "simulated", "predicted"))
    assert document["speedup"] == pytest.approx(times["simulated"] / times["predicted"])
    assert document["optimizations"] == ["amp", "fused-adam"]
    assert document["speedup"] > 1.2  # a GPU-bound V100 trace gains from tensor cores
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    assert any(e["cat"] == "kernel" for e in events)


def test_default_trace_is_the_newest_in_daydream_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["whatif", "--opt", "amp"]) == 2
    assert "daydream trace" in capsys.readouterr().err
    folder = tmp_path / "daydream-traces"
    folder.mkdir()
    shutil.copy(REPO / "examples" / "traces" / "ddp_a100_rank0.json.gz", folder / "old.json.gz")
    shutil.copy(EXAMPLE, folder / "new.json.gz")
    os.utime(folder / "old.json.gz", (1, 1))
    assert main(["whatif", "--opt", "faster-gpu:factor=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].endswith("new.json.gz")


def test_list_shows_every_optimization(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--list", "--json"]) == 0
    names = {entry["name"] for entry in json.loads(capsys.readouterr().out)}
    assert {"amp", "fused-optimizer", "cuda-graphs", "fuse-elementwise", "batch-size", "checkpoint", "faster-host",
            "no-host-overhead", "faster-gpu"} <= names


@pytest.mark.parametrize("args, message", [
    (["--opt", "warp-drive"], "unknown optimization"),
    (["--opt", "amp:speed=2"], "no parameter"),
    ([], "--opt"),
    (["--opt", "checkpoint:layers=nothing_matches_this"], "no layer matches"),
    (["--opt", "amp", "--device", "Voodoo5"], "unknown device"),
])
def test_errors_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(EXAMPLE), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
